"""``evolm eval policy``: lm-eval's IFEval and GSM8K on local files, offline, on a tiny model.

The model is built so that its answer is known in advance: every token embeds to the same
vector, the attention and MLP outputs are zeroed, and the output head has a single non-zero row,
so it writes " 18" at every step whatever the prompt (and whatever the sampling temperature).
The expected scores below follow by hand from that answer.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from evolm.cli import main  # noqa: E402
from evolm.errors import InputError  # noqa: E402
from evolm.eval import policy  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Answer " 18 18 ... 18" (16 tokens): no comma, 16 words, last number 18, no "The final answer is".
IFEVAL_ROWS = [
    # no comma: followed -> prompt passes
    {"key": 1, "prompt": "Describe a sunny day. Do not use any commas.", "instruction_id_list": ["punctuation:no_comma"],
     "kwargs": [{}]},
    # at least 50 words: not followed; no comma: followed -> prompt fails, 1 of 2 instructions
    {"key": 2, "prompt": "Describe a rainy day in at least 50 words, without commas.",
     "instruction_id_list": ["length_constraints:number_words", "punctuation:no_comma"],
     "kwargs": [{"relation": "at least", "num_words": 50}, {}]},
    # beyond --limit 2: never read
    {"key": 3, "prompt": "Say hi.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
]
GSM8K_ROWS = [
    {"question": "Tom has 10 apples and buys 8 more. How many apples does he have now?", "answer": "10 + 8 = 18\n#### 18"},
    {"question": "Ann had 5 pens and lost 2. How many pens are left?", "answer": "5 - 2 = 3\n#### 3"},
    {"question": "What is 2 + 2?", "answer": "#### 4"},
]


def _build_constant_model(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(["The final answer is 18 18 18."] * 10, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token="<|endoftext|>", chat_template=CHATML,
    )
    (answer_id,) = tok.encode(" 18", add_special_tokens=False)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight.fill_(1.0)  # every position holds the same vector...
        for layer in model.model.layers:  # ...which no layer changes
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        model.lm_head.weight[answer_id] = 1.0  # logit 32 for " 18", 0 for the rest
    model.save_pretrained(out)
    tok.save_pretrained(out)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory whose checkpoint is the constant model."""
    run = tmp_path_factory.mktemp("run")
    _build_constant_model(run / "checkpoints" / "checkpoint-3")
    return run


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    for name, rows in (("ifeval/input_data.jsonl", IFEVAL_ROWS), ("gsm8k/test.jsonl", GSM8K_ROWS)):
        path = tmp_path / "data" / name
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return tmp_path / "data"


@pytest.fixture()
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Any attempt to resolve a host or open a connection is recorded and refused."""
    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", lambda self, *a, **k: refuse(*a))
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


def test_cli_scores_both_tasks_offline_into_the_run_dir(
    run_dir: Path, data_dir: Path, no_network: list[object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = tmp_path / "samples.jsonl"
    rc = main([
        "eval", "policy", "--model", str(run_dir / "checkpoints" / "checkpoint-3"), "--data-dir", str(data_dir),
        "--limit", "2", "--max-gen-toks", "16", "--device", "cpu", "--samples", str(samples),
    ])
    assert rc == 0
    assert no_network == []

    out = json.loads((run_dir / "eval" / "policy-checkpoint-3.json").read_text())
    assert out["protocol"] == "lm-eval protocol"
    assert out["decoding"] == {"greedy": False, "temperature": 0.6, "top_p": 0.95, "max_gen_toks": 16, "seed": 0,
                               "max_gen_toks_requested": 16}
    ifeval, gsm8k = out["tasks"]["ifeval"], out["tasks"]["gsm8k"]
    assert (ifeval["n"], gsm8k["n"]) == (2, 2)
    assert ifeval["primary_metric"] == "prompt_level_loose_acc,none"
    # prompt level: 1 of 2 prompts; instruction level: 2 of 3 instructions
    assert ifeval["metrics"] == pytest.approx({
        "prompt_level_loose_acc,none": 0.5, "prompt_level_strict_acc,none": 0.5,
        "inst_level_loose_acc,none": 2 / 3, "inst_level_strict_acc,none": 2 / 3,
    })
    # last number 18 matches the first answer only; nobody wrote "The final answer is"
    assert gsm8k["metrics"] == {"exact_match,flexible-extract": 0.5, "exact_match,strict-match": 0.0}
    for task in (ifeval, gsm8k):
        assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in task["metrics"].values())

    table = capsys.readouterr().out
    assert "lm-eval protocol" in table and "prompt_level_loose_acc *" in table and "0.6667" in table

    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [(r["task"], r["doc_id"]) for r in rows] == [("ifeval", 0), ("ifeval", 1), ("gsm8k", 0), ("gsm8k", 1)]
    assert {r["response"] for r in rows} == {" 18" * 16}
    assert rows[0]["prompt"].startswith("<|im_start|>user\nDescribe a sunny day.")  # chat template applied
    assert rows[2]["extracted"] == {"strict-match": "[invalid]", "flexible-extract": "18"}


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="shared/data (IFEval, GSM8K files) is not on this machine")
def test_real_data_files_greedy(run_dir: Path, no_network: list[object]) -> None:
    from evolm.models import load_model

    files = policy.resolve_data_files(["ifeval", "gsm8k"], SHARED_DATA)
    model, tok = load_model(str(run_dir / "checkpoints" / "checkpoint-3"), device="cpu", dtype="float32")
    result = policy.evaluate_policy(
        model, tok, files, decoding=policy.Decoding(greedy=True, max_gen_toks=16), limit=2, batch_size=2
    )
    assert no_network == []
    by_task = {t.task: t for t in result.tasks}
    assert by_task["ifeval"].n == by_task["gsm8k"].n == 2
    # IFEval key 1000: no comma (kept), 3 highlights and 300+ words (not); key 1001: no comma (kept).
    assert by_task["ifeval"].metrics["prompt_level_strict_acc,none"] == 0.5
    assert by_task["ifeval"].metrics["inst_level_strict_acc,none"] == 0.5
    # GSM8K test 0 (Janet's ducks) is 18; test 1 (robe) is 3.
    assert by_task["gsm8k"].metrics["exact_match,flexible-extract"] == 0.5
    assert result.decoding["greedy"] is True


def test_missing_data_file_is_a_one_line_cli_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    rc = main(["eval", "policy", "--model", "unused", "--tasks", "gsm8k", "--gsm8k-data", str(missing)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and f"gsm8k data file not found: {missing}" in err


def test_unknown_task_and_bad_rows_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown policy task 'mmlu'"):
        policy.parse_tasks("ifeval,mmlu")
    assert policy.parse_tasks(" gsm8k, ifeval,gsm8k") == ["gsm8k", "ifeval"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:1: missing field 'answer'"):
        policy.resolve_data_files(["gsm8k"], None, {"gsm8k": bad})


def test_default_output_only_for_run_checkpoints(run_dir: Path, tmp_path: Path) -> None:
    ckpt = run_dir / "checkpoints" / "checkpoint-3"
    assert policy.default_output_path(str(ckpt)) == run_dir / "eval" / "policy-checkpoint-3.json"
    assert policy.default_output_path(str(tmp_path)) is None
    assert policy.default_output_path("smollm2-135m-instruct") is None


def test_generation_budget_leaves_room_for_the_prompt() -> None:
    assert policy.effective_max_gen_toks(16384, 8192) == 7168  # SPEC's 16k on SmolLM2's 8k context
    assert policy.effective_max_gen_toks(256, 8192) == 256
    assert policy.effective_max_gen_toks(16384, 512) == 256  # the test model


def test_hub_offline_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    before = (huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE)
    with policy.hub_offline():
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        assert huggingface_hub.constants.HF_HUB_OFFLINE is True and datasets.config.HF_HUB_OFFLINE is True
    assert "HF_HUB_OFFLINE" not in os.environ
    assert (huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE) == before


def test_punkt_tab_is_found_offline() -> None:
    import nltk

    found = policy.ensure_punkt_tab()
    assert found.rstrip("/").endswith("tokenizers/punkt_tab/english")
    sentences = nltk.tokenize.sent_tokenize("Mr. Smith arrived. He sat down.")
    assert sentences == ["Mr. Smith arrived.", "He sat down."]
