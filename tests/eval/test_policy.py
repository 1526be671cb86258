"""``evolm eval policy``: lm-eval's IFEval and GSM8K on local files, offline, on a tiny model;
the olmo3_adapt group and the decoding protocols without running a model.

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
from evolm.errors import BackendError, InputError  # noqa: E402
from evolm.eval import offline, policy, policy_decoding, policy_inputs, policy_tasks  # noqa: E402

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


@pytest.mark.slow
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
    assert (out["protocol"], out["label"]) == ("lm-eval", "lm-eval protocol")
    # the shared --temperature/--top-p defaults (the paper's) are not applied when not given
    assert out["decoding"] == {"protocol": "lm-eval", "greedy": False, "temperature": None, "top_p": None,
                               "max_gen_toks": 16, "seed": 0}
    ifeval, gsm8k = out["tasks"]["ifeval"], out["tasks"]["gsm8k"]
    # each task decodes with its own lm-eval settings (greedy, its stop sequences), budget from --max-gen-toks
    assert ifeval["generation_kwargs"] == {"until": [], "do_sample": False, "temperature": 0.0, "max_gen_toks": 16}
    assert gsm8k["generation_kwargs"]["do_sample"] is False and gsm8k["generation_kwargs"]["max_gen_toks"] == 16
    assert "<|im_end|>" in gsm8k["generation_kwargs"]["until"]
    assert (ifeval["olmes_task"], gsm8k["paper_metric"]) == ("ifeval::olmo3:adapt", "exact match")
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

    captured = capsys.readouterr()
    table = captured.out
    assert "lm-eval protocol" in table and "prompt_level_loose_acc *" in table and "0.6667" in table
    assert "ifeval greedy, max_gen_toks 16; gsm8k greedy, max_gen_toks 16" in table
    # per-task progress on stderr: a line when each task starts and one when it ends
    assert "[1/2] ifeval (lm-eval ifeval, 2 docs): greedy, max_gen_toks 16" in captured.err
    assert "[2/2] gsm8k: exact_match,flexible-extract 0.5000 (n=2," in captured.err

    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [(r["task"], r["doc_id"]) for r in rows] == [("ifeval", 0), ("ifeval", 1), ("gsm8k", 0), ("gsm8k", 1)]
    assert {r["response"] for r in rows} == {" 18" * 16}
    assert rows[0]["prompt"].startswith("<|im_start|>user\nDescribe a sunny day.")  # chat template applied
    assert rows[2]["extracted"] == {"strict-match": "[invalid]", "flexible-extract": "18"}


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="shared/data (IFEval, GSM8K files) is not on this machine")
def test_real_data_files_greedy(run_dir: Path, no_network: list[object]) -> None:
    from evolm.backends.loading import load_model

    files = policy_inputs.resolve_data_files(["ifeval", "gsm8k"], SHARED_DATA)
    model, tok = load_model(str(run_dir / "checkpoints" / "checkpoint-3"), device="cpu", dtype="float32")
    result = policy.evaluate_policy(
        model, tok, files, decoding=policy_decoding.resolve_decoding(greedy=True, max_gen_toks=16), limit=2, batch_size=2
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
    assert by_task["ifeval"].generation_kwargs["do_sample"] is False


def test_missing_data_file_is_a_one_line_cli_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    rc = main(["eval", "policy", "--model", "unused", "--tasks", "gsm8k", "--gsm8k-data", str(missing)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and f"gsm8k data file not found: {missing}" in err


def test_unknown_task_and_bad_rows_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown policy task 'mmlu' \\(known: olmo3_adapt, mmlu_cot"):
        policy_tasks.parse_tasks("ifeval,mmlu")
    assert policy_tasks.parse_tasks(" gsm8k, ifeval,gsm8k") == ["gsm8k", "ifeval"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:1: missing field 'answer'"):
        policy_inputs.resolve_data_files(["gsm8k"], None, {"gsm8k": bad})


def test_default_output_only_for_run_checkpoints(run_dir: Path, tmp_path: Path) -> None:
    ckpt = run_dir / "checkpoints" / "checkpoint-3"
    assert policy_inputs.default_output_path(str(ckpt)) == run_dir / "eval" / "policy-checkpoint-3.json"
    assert policy_inputs.default_output_path(str(tmp_path)) is None
    assert policy_inputs.default_output_path("smollm2-135m-instruct") is None


def test_generation_budget_leaves_room_for_the_prompt() -> None:
    assert policy_decoding.effective_max_gen_toks(16384, 8192) == 7168  # the paper's 16k on SmolLM2's 8k context
    assert policy_decoding.effective_max_gen_toks(256, 8192) == 256
    assert policy_decoding.effective_max_gen_toks(16384, 512) == 256  # the test model


def test_hub_offline_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    before = (huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE)
    with offline.hub_offline():
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        assert huggingface_hub.constants.HF_HUB_OFFLINE is True and datasets.config.HF_HUB_OFFLINE is True
    assert "HF_HUB_OFFLINE" not in os.environ
    assert (huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE) == before


def test_punkt_tab_is_found_offline() -> None:
    import nltk

    found = offline.ensure_punkt_tab()
    assert found.rstrip("/").endswith("tokenizers/punkt_tab/english")
    sentences = nltk.tokenize.sent_tokenize("Mr. Smith arrived. He sat down.")
    assert sentences == ["Mr. Smith arrived.", "He sat down."]


# ----------------------------------------------------------------------------- olmo3_adapt group and protocols

# docs/METHOD.md §3.2: the 17 tasks of OLMES olmo3:adapt.
OLMO3_ADAPT_OLMES = {
    "mmlu:cot", "popqa", "simpleqa", "bbh:cot", "gpqa", "zebralogic", "agi_eval_english", "minerva_math", "gsm8k",
    "omega", "aime:2024", "aime:2025", "codex_humanevalplus", "mbppplus", "livecodebench_codegeneration",
    "alpaca_eval_v3", "ifeval",
}


def test_olmo3_adapt_group_resolves_to_installed_lm_eval_tasks() -> None:
    """Every member names a task or group that the installed lm-eval defines; with the tasks that lm-eval
    lacks, the group covers the paper's 17 tasks exactly once."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    names = policy_tasks.parse_tasks("olmo3_adapt")
    assert names == list(policy_tasks.TASK_GROUPS["olmo3_adapt"])
    assert policy_tasks.parse_tasks("ifeval,olmo3_adapt")[0] == "ifeval"
    assert len(policy_tasks.parse_tasks("olmo3_adapt,gsm8k")) == 11
    root = Path(lm_eval.__file__).parent / "tasks"
    for name in names:
        task = policy_tasks.POLICY_TASKS[name]
        manager = TaskManager(include_defaults=False, include_path=[str(root / d) for d in task.lm_eval_dirs])
        assert task.lm_eval_task in manager.all_tasks, name
        assert task.metrics and task.olmes_task.endswith("::olmo3:adapt") and task.paper_metric, name
    groups = {"mmlu_cot", "bbh_cot", "agieval_en", "minerva_math"}
    for name in groups:
        task = policy_tasks.POLICY_TASKS[name]
        manager = TaskManager(include_defaults=False, include_path=[str(root / d) for d in task.lm_eval_dirs])
        assert task.lm_eval_task in manager.all_groups, name
    covered = [policy_tasks.POLICY_TASKS[n].olmes_task for n in names] + list(policy_tasks.OLMO3_ADAPT_NOT_IN_LM_EVAL)
    assert sorted(t.removesuffix("::olmo3:adapt") for t in covered) == sorted(OLMO3_ADAPT_OLMES)
    # only the two tasks with local data run offline; the code tasks run the model's code
    assert [n for n in names if policy_tasks.POLICY_TASKS[n].local] == ["gsm8k", "ifeval"]
    assert [n for n in names if policy_tasks.POLICY_TASKS[n].runs_code] == ["humaneval_plus", "mbpp_plus"]


def test_tasks_lm_eval_lacks_say_what_runs_them() -> None:
    with pytest.raises(InputError, match=r"'popqa' \(popqa::olmo3:adapt\) has no lm-eval task: run it with OLMES"):
        policy_tasks.parse_tasks("ifeval,popqa")
    with pytest.raises(InputError, match="alpaca_eval_v3::olmo3:adapt.*alpaca_eval with an OpenAI API key"):
        policy_tasks.parse_tasks("alpaca_eval")


def test_hub_and_code_tasks_are_refused_in_one_line_before_any_model_loads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the model name does not exist: reaching the model loader would be a different error
    rc = main(["eval", "policy", "--model", "no-such-model", "--tasks", "olmo3_adapt"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("evolm eval: error: mmlu_cot, bbh_cot, gpqa, agieval_en, minerva_math, aime24, aime25, humaneval_plus, "
                          "mbpp_plus: data not available locally")
    assert "add --hub" in err and "--tasks gsm8k,ifeval" in err

    rc = main(["eval", "policy", "--model", "no-such-model", "--tasks", "mbpp_plus,ifeval", "--hub"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "mbpp_plus: scoring runs the model's code" in err
    assert "--allow-code-execution" in err


def test_hub_task_without_reachable_data_is_a_one_line_error(no_network: list[object]) -> None:
    """With --hub but no hub (offline, empty cache), the task that cannot get its data is named, before
    any model runs (the model here is None: reaching it would fail differently)."""
    with offline.hub_offline(), pytest.raises(BackendError) as e:
        policy.evaluate_policy(None, None, {"aime24": None}, allow_hub=True)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("aime24: could not read lm-eval's data for aime24 from the Hugging Face hub (")


def test_protocols_resolve_to_each_tasks_own_or_the_papers_decoding() -> None:
    assert policy_decoding.resolve_decoding() == policy_decoding.Decoding("lm-eval", False, None, None, None, 0)
    assert policy_decoding.resolve_decoding("olmo3-adapt") == policy_decoding.Decoding("olmo3-adapt", False, 0.6, 0.95, 16384, 0)
    # explicit settings override either protocol
    assert policy_decoding.resolve_decoding("olmo3-adapt", greedy=True, max_gen_toks=512) == policy_decoding.Decoding(
        "olmo3-adapt", True, None, None, 512, 0)
    assert policy_decoding.resolve_decoding("olmo3-adapt", temperature=1.0) == policy_decoding.Decoding(
        "olmo3-adapt", False, 1.0, 0.95, 16384, 0)
    assert policy_decoding.resolve_decoding("lm-eval", temperature=0.8, seed=3) == policy_decoding.Decoding(
        "lm-eval", False, 0.8, None, None, 3)
    for kwargs, message in (
        ({"protocol": "olmes"}, "unknown protocol 'olmes'"),
        ({"greedy": True, "temperature": 0.6}, "--greedy contradicts"),
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"top_p": 0.9}, "--top-p needs --temperature"),
        ({"protocol": "olmo3-adapt", "top_p": 1.5}, "top-p must be in"),
        ({"max_gen_toks": 0}, "max-gen-toks must be >= 1"),
    ):
        with pytest.raises(InputError, match=message):
            policy_decoding.resolve_decoding(**kwargs)


def test_task_generation_kwargs_keep_the_tasks_own_settings_unless_overridden() -> None:
    ifeval = {"until": [], "do_sample": False, "temperature": 0.0, "max_gen_toks": 1280}  # lm-eval's ifeval.yaml
    gsm8k = {"do_sample": False, "until": ["Q:", "<|im_end|>"]}  # gsm8k-cot-llama.yaml: no budget of its own

    lm_eval_protocol = policy_decoding.resolve_decoding("lm-eval")
    assert policy_decoding.task_generation_kwargs(ifeval, lm_eval_protocol, 256, 8192) == (ifeval, None)
    assert policy_decoding.task_generation_kwargs(gsm8k, lm_eval_protocol, 256, 8192) == ({**gsm8k, "max_gen_toks": 256}, None)

    paper = policy_decoding.resolve_decoding("olmo3-adapt")
    kwargs, note = policy_decoding.task_generation_kwargs(ifeval, paper, 256, 8192)
    assert kwargs == {"until": [], "do_sample": True, "temperature": 0.6, "top_p": 0.95, "max_gen_toks": 7168}
    assert note == "max_gen_toks lowered from 16384 to 7168: the model's context is 8192"
    kwargs, _ = policy_decoding.task_generation_kwargs(gsm8k, paper, 256, 8192)
    assert kwargs["until"] == ["Q:", "<|im_end|>"]  # stop sequences stay the task's

    # a task budget larger than the context (lm-eval's AIME asks 32768) is cut even under lm-eval's protocol
    kwargs, note = policy_decoding.task_generation_kwargs({"max_gen_toks": 32768}, lm_eval_protocol, 256, 8192)
    assert kwargs["max_gen_toks"] == 7168 and note is not None
    greedy = policy_decoding.task_generation_kwargs(kwargs | {"do_sample": True, "top_p": 0.9},
                                           policy_decoding.resolve_decoding(greedy=True), 256, 8192)[0]
    assert (greedy["do_sample"], greedy["temperature"], "top_p" in greedy) == (False, 0.0, False)
    assert policy_decoding.describe_generation(kwargs) == "greedy, max_gen_toks 7168"
    assert policy_decoding.describe_generation({}) == "log-likelihood (no generation)"


@pytest.mark.slow
def test_olmo3_adapt_protocol_samples_with_the_papers_settings(run_dir: Path, data_dir: Path) -> None:
    from evolm.backends.loading import load_model

    model, tok = load_model(str(run_dir / "checkpoints" / "checkpoint-3"), device="cpu", dtype="float32")
    heard: list[str] = []
    result = policy.evaluate_policy(
        model, tok, policy_inputs.resolve_data_files(["gsm8k"], data_dir), decoding=policy_decoding.resolve_decoding("olmo3-adapt"),
        limit=1, batch_size=1, progress=heard.append,
    )
    (gsm8k,) = result.tasks
    assert result.protocol == "olmo3-adapt" and result.decoding["temperature"] == 0.6
    assert {k: gsm8k.generation_kwargs[k] for k in ("do_sample", "temperature", "top_p", "max_gen_toks")} == {
        "do_sample": True, "temperature": 0.6, "top_p": 0.95, "max_gen_toks": 256}  # 16384 cut to the 512 context
    assert result.notes == ["gsm8k: max_gen_toks lowered from 16384 to 256: the model's context is 512"]
    assert gsm8k.metrics["exact_match,flexible-extract"] == 1.0  # " 18" x 256 answers Tom's apples
    assert heard[0] == "[1/1] gsm8k (lm-eval gsm8k_cot_llama, 1 docs): sampled T=0.6 top-p=0.95, max_gen_toks 256"
    assert heard[1].startswith("[1/1] gsm8k: exact_match,flexible-extract 1.0000 (n=1, ")
    table = policy.format_table(result)
    assert "--protocol olmo3-adapt: the paper's decoding on lm-eval's tasks (not OLMES)" in table
    assert "note: gsm8k: max_gen_toks lowered" in table


def test_group_results_sum_their_subtasks_and_add_the_macro_average() -> None:
    task = policy_tasks.POLICY_TASKS["bbh_cot"]
    key = "exact_match,flexible-extract"
    out = {
        "results": {
            "bbh_cot_zeroshot": {key: 0.75, "exact_match_stderr,flexible-extract": 0.2, "alias": "bbh"},
            "bbh_cot_zeroshot_navigate": {key: 1.0},
            "bbh_cot_zeroshot_snarks": {key: 0.0},
        },
        "n-samples": {"bbh_cot_zeroshot_navigate": {"effective": 3}, "bbh_cot_zeroshot_snarks": {"effective": 1}},
    }
    leaves = {"bbh_cot_zeroshot_navigate": None, "bbh_cot_zeroshot_snarks": None}
    r = policy._task_result(task, out, leaves, None, {"do_sample": False}, 1.23)
    assert (r.n, r.subtasks, r.metrics, r.stderr, r.macro_metrics) == (4, 2, {key: 0.75}, {key: 0.2}, {key: 0.5})
    assert (r.data_file, r.seconds, r.olmes_task) == (None, 1.2, "bbh:cot::olmo3:adapt")
    out["results"]["bbh_cot_zeroshot"] = {"exact_match,strict-match": 0.1}
    with pytest.raises(BackendError, match=r"no 'exact_match,flexible-extract' .* \(it gave: exact_match,strict-match;"):
        policy._task_result(task, out, leaves, None, {}, 0.0)


def test_lm_evals_git_lookup_is_quiet_outside_a_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    """lm-eval's `git describe` printed "fatal: not a git repository" outside a checkout; quiet_git_hash keeps its
    value and drops the line."""
    import shutil

    import lm_eval.evaluator as evaluator

    from evolm.eval.offline import quiet_git_hash

    if shutil.which("git") is None:
        pytest.skip("no git here: lm-eval's lookup prints nothing anyway")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no checkout above tmp_path counts
    assert evaluator.get_git_commit_hash() is None
    assert "not a git repository" in capfd.readouterr().err  # what `evolm eval policy` showed
    with quiet_git_hash():
        assert evaluator.get_git_commit_hash() is None
    assert capfd.readouterr().err == "" and evaluator.get_git_commit_hash.__name__ == "get_git_commit_hash"
