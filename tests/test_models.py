"""Model and device resolution."""

from __future__ import annotations

import pytest


def test_devices_that_do_not_exist_are_one_line_errors() -> None:
    import torch

    from evolm.errors import ModelError
    from evolm.models import resolve_device

    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ModelError, match="unknown device 'bogus'"):
        resolve_device("bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="not available here"):
            resolve_device("cuda")


def test_an_uncached_hub_id_fails_at_once_when_the_hub_is_out_of_reach(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]  # noqa: ANN001
) -> None:
    """HF_HUB_OFFLINE, or no connection to the hub: one line and exit 2 before transformers' minute of retries."""
    import time

    import huggingface_hub.constants as hub

    from evolm.cli import main

    inp = tmp_path / "in.jsonl"
    inp.write_text('{"prompt": "q", "response": "a"}\n')
    argv = ["judge", "--judge", "nobody-here/no-such-model", "--input", str(inp), "--output", str(tmp_path / "o.jsonl")]
    started = time.monotonic()
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not in the Hugging Face cache" in err and "HF_HUB_OFFLINE is set" in err, err
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: the hub is out of reach
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "127.0.0.1 cannot be reached" in err, err
    assert time.monotonic() - started < 30 and not (tmp_path / "o.jsonl").exists()


def test_count_generated_tokens_sees_generation_under_peft(tiny_model_dir) -> None:  # noqa: ANN001
    """`evolm train`'s bar counts the tokens the trained model decodes, whoever calls generate; PEFT's wrappers call
    the base model's forward directly, so the count hooks the input embeddings, which every forward calls."""
    from peft import LoraConfig, get_peft_model

    from evolm.models import count_generated_tokens, load_model

    model, tokenizer = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    told: list[int] = []
    count_generated_tokens(model, told.append)
    peft = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules="all-linear"))
    ids = tokenizer(["What is 1 + 1?", "What is 2 + 2?"], return_tensors="pt", padding=True)
    out = peft.generate(**ids, max_new_tokens=5, min_new_tokens=5, do_sample=False,
                        pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] - ids["input_ids"].shape[1] == 5
    assert sum(told) == 2 * 4  # decoding steps after the first token (from the prompt's pass): 4 per row
    peft(**ids)  # a training-style forward of whole sequences decodes nothing
    assert sum(told) == 8
