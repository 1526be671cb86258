"""Model and device resolution."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_devices_that_do_not_exist_are_one_line_errors() -> None:
    import torch

    from evolm.backends.devices import resolve_device
    from evolm.errors import ModelError

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


def _fake_chunks(root, package: str, blobs: list[bytes]):  # noqa: ANN001, ANN202
    """Chunk packages ``{package}1..N`` under ``root``, each holding ``data/partNN.bin``, as the Qwen judges ship."""
    from evolm.backends.builtin import _chunked

    for n, blob in enumerate(blobs, 1):
        data = root / f"{package}{n}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("")
        (data / f"part{n:02d}.bin").write_bytes(blob)
    return _chunked(package, len(blobs))


def test_a_chunked_builtin_model_joins_its_parts_in_order_and_checks_the_pinned_sha256(
    tmp_path, monkeypatch: pytest.MonkeyPatch  # noqa: ANN001
) -> None:
    import hashlib

    from evolm.backends.builtin import BuiltinModel, assemble_gguf
    from evolm.errors import ModelError

    blobs = [b"GGUF" + bytes(range(200)), b"second" * 1000, b"tail"]
    whole = b"".join(blobs)
    parts = _fake_chunks(tmp_path / "site", "fake_judge_part", blobs)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    good = BuiltinModel(parts, "pip install fake-judge", hashlib.sha256(whole).hexdigest(), len(whole))
    out = tmp_path / "out"
    out.mkdir()
    assert assemble_gguf("fake", good, out).read_bytes() == whole  # parts 1, 2, 3 in that order, not 1, 10, 2
    (out / "fake.gguf").unlink()

    wrong = BuiltinModel(parts, "pip install fake-judge", hashlib.sha256(whole[::-1]).hexdigest(), len(whole))
    with pytest.raises(ModelError, match=r"sha256 .* not the pinned .* reinstall with pip install fake-judge"):
        assemble_gguf("fake", wrong, out)
    assert list(out.iterdir()) == []  # nothing that failed its check is left to be read
    short = BuiltinModel(parts, "pip install fake-judge", good.sha256, len(whole) + 1)
    with pytest.raises(ModelError, match="not the pinned"):
        assemble_gguf("fake", short, out)


def test_a_builtin_model_whose_packages_are_missing_names_its_install_command_and_writes_nothing(
    tmp_path, monkeypatch: pytest.MonkeyPatch  # noqa: ANN001
) -> None:
    from evolm.backends.builtin import BUILTIN_MODELS, builtin_model_dir
    from evolm.errors import ModelError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"):
        model = BUILTIN_MODELS[name]
        monkeypatch.setattr("importlib.util.find_spec", lambda package: None)
        with pytest.raises(ModelError) as err:
            builtin_model_dir(name)
        assert str(err.value) == f"built-in model '{name}' is not installed: {model.install}"
        assert "evolm[qwen-coder-" in model.install
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.gguf"))


def test_the_builtin_judges_extras_pin_every_chunk_the_registry_reads() -> None:
    """pyproject's extras install exactly the packages ``BUILTIN_MODELS`` joins, at pinned versions."""
    import re
    import tomllib
    from pathlib import Path

    from evolm.backends.builtin import BUILTIN_MODELS

    extras = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for name, extra in (("qwen2.5-coder-1.5b-instruct", "qwen-coder-1b5"), ("qwen2.5-coder-0.5b-instruct",
                                                                               "qwen-coder-0b5")):
        pins = extras[extra]
        assert all(re.fullmatch(r"[a-z0-9-]+==[0-9.]+", p) for p in pins), pins
        assert [p.split("==")[0].replace("-", "_") for p in pins] == [pkg for pkg, _ in BUILTIN_MODELS[name].parts]
        assert BUILTIN_MODELS[name].install == f"pip install 'evolm[{extra}]'"


# ----------------------------------------------------------------------------- in-process models under ZeRO-3


class _Zero3Config:
    """What transformers reads of TrainingArguments' DeepSpeed config under a ZeRO-3 launch."""

    config: dict = {"zero_optimization": {"stage": 3}}

    def is_zero3(self) -> bool:
        return True


@pytest.fixture
def rm_dir(tiny_model_dir: Path, tmp_path: Path) -> Path:
    from training.test_baselines import _tiny_reward_model

    return _tiny_reward_model(tiny_model_dir, tmp_path / "rm")


@pytest.fixture
def zero3(monkeypatch: pytest.MonkeyPatch) -> None:
    """``is_deepspeed_zero3_enabled()`` true, as while a ZeRO-3 ``GRPOConfig`` is alive, and ``deepspeed.zero.Init``
    stubbed: a model built under it fails at once, naming it (DeepSpeed is not installed here)."""
    import sys
    import types
    import weakref
    from contextlib import contextmanager

    from transformers.integrations import deepspeed as hf_deepspeed
    from transformers.modeling_utils import is_deepspeed_zero3_enabled

    @contextmanager
    def init(config_dict_or_path=None):  # noqa: ANN001, ANN202
        raise AssertionError("deepspeed.zero.Init entered: this model would be sharded, and nothing gathers it")
        yield

    stub = types.ModuleType("deepspeed")
    stub.zero = types.SimpleNamespace(Init=init)  # type: ignore[attr-defined]
    partition = types.SimpleNamespace(zero_wrapper_for_fp_tensor_constructor=None, _orig_torch_arange=None)
    monkeypatch.setitem(sys.modules, "deepspeed", stub)
    monkeypatch.setitem(sys.modules, "deepspeed.runtime", types.SimpleNamespace(zero=None))
    monkeypatch.setitem(sys.modules, "deepspeed.runtime.zero", types.SimpleNamespace(partition_parameters=partition))
    config = _Zero3Config()
    monkeypatch.setattr(hf_deepspeed, "_hf_deepspeed_config_weak_ref", weakref.ref(config))
    monkeypatch.setattr(sys.modules[__name__], "_zero3_alive", config, raising=False)  # keep the referent alive
    assert is_deepspeed_zero3_enabled()  # what from_pretrained asks


def test_in_process_models_load_whole_outside_zero3_init(tiny_model_dir: Path, rm_dir: Path, zero3: None) -> None:
    """The judge, reward model and a fixed writer or answerer load whole on their process under ZeRO-3: transformers
    never enters ``deepspeed.zero.Init`` for them (nothing would gather the shards), and ZeRO-3 is on again after."""
    from transformers.modeling_utils import is_deepspeed_zero3_enabled

    from evolm.backends.loading import load_backend
    from evolm.config import JudgeConfig
    from evolm.judge.judge import build_judge
    from evolm.judge.reward_model import load_reward_model

    writer = load_backend(str(tiny_model_dir), backend="hf", device="cpu", dtype="float32")
    judge = build_judge(JudgeConfig(model=str(tiny_model_dir), backend="hf"), device="cpu")
    rm = load_reward_model(str(rm_dir), device="cpu", dtype="float32")
    for model in (writer.model, judge.backend.model, rm.model):
        assert all(p.numel() > 0 and not hasattr(p, "ds_id") for p in model.parameters())
    assert is_deepspeed_zero3_enabled()  # put back: the policy and TRL's reference model still shard


def test_in_process_generation_never_syncs_the_processes(tiny_backend) -> None:  # noqa: ANN001
    """``synced_gpus=False`` reaches ``generate`` for a model evolm loaded: left unset, transformers would turn it on
    under ZeRO-3 (an all_reduce per token, a deadlock when processes make different numbers of calls)."""
    from evolm.backends.base import SamplingParams

    seen: list[dict] = []
    generate = tiny_backend.model.generate

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(kwargs)
        return generate(*args, **kwargs)

    tiny_backend.model.generate = spy
    try:
        tiny_backend.generate([[{"role": "user", "content": "Say yes."}]], SamplingParams(0.0, 1.0, 2))
    finally:
        del tiny_backend.model.generate
    assert [k.get("synced_gpus", "unset") for k in seen] == [False]


@pytest.mark.slow
def test_count_generated_tokens_sees_generation_under_peft(tiny_model_dir) -> None:  # noqa: ANN001
    """`evolm train`'s bar counts the tokens the trained model decodes, whoever calls generate; PEFT's wrappers call
    the base model's forward directly, so the count hooks the input embeddings, which every forward calls."""
    from peft import LoraConfig, get_peft_model

    from evolm.backends.loading import count_generated_tokens, load_model

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


def test_the_cli_help_names_every_builtin_model() -> None:
    from evolm.backends.builtin import BUILTIN_MODELS
    from evolm.cli._common import MODEL_NAMES

    assert all(name in MODEL_NAMES for name in BUILTIN_MODELS), MODEL_NAMES


def test_a_lora_checkpoint_of_a_builtin_model_names_its_base_by_the_builtin_name(tmp_path: Path) -> None:
    import json

    from evolm.backends.builtin import builtin_model_dir
    from evolm.backends.loading import ADAPTER_CONFIG, adapter_base, name_adapter_base

    ckpt = tmp_path / "checkpoint-2"
    ckpt.mkdir()
    local = str(builtin_model_dir("smollm2-135m-instruct"))  # what PEFT writes: the folder on this machine
    (ckpt / ADAPTER_CONFIG).write_text(json.dumps({"base_model_name_or_path": local, "r": 8}))
    name_adapter_base(ckpt, "smollm2-135m-instruct")
    assert adapter_base(str(ckpt)) == "smollm2-135m-instruct"
    assert json.loads((ckpt / ADAPTER_CONFIG).read_text())["r"] == 8
    other = tmp_path / "other"
    other.mkdir()
    (other / ADAPTER_CONFIG).write_text(json.dumps({"base_model_name_or_path": "/models/mine"}))
    name_adapter_base(other, "smollm2-135m-instruct")  # another base: left as it is
    name_adapter_base(other, "/models/mine")  # not a built-in name: left as it is
    assert adapter_base(str(other)) == "/models/mine"


@pytest.mark.slow
def test_a_builtin_warm_start_trains_on_without_asking_the_hub_at_each_save(tmp_path: Path) -> None:
    import warnings

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from evolm.backends.builtin import builtin_model_dir
    from evolm.backends.loading import adapter_base, load_weights, name_adapter_base

    name = "smollm2-135m-instruct"
    base = AutoModelForCausalLM.from_pretrained(builtin_model_dir(name))
    warm = tmp_path / "warm-start"
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(warm)
    name_adapter_base(warm, name)  # as committed: the base by its built-in name
    assert adapter_base(str(warm)) == name
    model = load_weights(AutoModelForCausalLM, str(warm), device="cpu", train_adapter=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.save_pretrained(tmp_path / "checkpoint-1")  # what TRL's save calls: peft once asked the hub here
    assert not [w for w in caught if "Could not find a config file" in str(w.message)]
    name_adapter_base(tmp_path / "checkpoint-1", name)
    assert adapter_base(str(tmp_path / "checkpoint-1")) == name
