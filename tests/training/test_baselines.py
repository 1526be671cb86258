"""The paper's baselines: each shipped config under configs/baselines/ passes the dry run, and each
baseline regime runs 2 real training steps on CPU with tiny models."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolm.cli import main
from evolm.config import load_config
from evolm.runs.jsonl import read_jsonl
from evolm.scores import Judgment, scores_of
from evolm.training.run import run

BASELINES = sorted((Path(__file__).resolve().parents[2] / "configs" / "baselines").glob("*.yaml"))


@pytest.mark.parametrize("config", BASELINES, ids=lambda p: p.stem)
def test_baseline_config_passes_the_dry_run(config: Path) -> None:
    # the paper's prompts file comes from `python scripts/fetch_data.py tulu3` (docs/GPU.md); the dry run refuses a missing one
    assert main(["train", "--config", str(config), "--dry-run", "--num-processes", "4", "data.prompts=builtin:demo"]) == 0


def _cpu(model_dir: Path, out: Path, *extra: str) -> list[str]:
    """A GPU config shrunk to 2 steps of a tiny model on CPU."""
    return [f"model.name={model_dir}", "model.dtype=float32", "model.chat_template_kwargs={}", f"output_dir={out}",
            f"judge.model={model_dir}", "judge.backend=hf", "judge.base_url=null", "judge.mode=prob",
            "judge.chat_template_kwargs={}", "judge.dtype=float32",
            "schedule.cycles=2", "schedule.steps_per_phase=1", "schedule.prompts_per_step=2",
            "schedule.samples_per_prompt=2", "schedule.save_every=100", "data.prompts=builtin:demo", "data.limit=8",
            "grpo.per_device_train_batch_size=4", "grpo.max_completion_length=8", "grpo.use_vllm=false",
            "grpo.bf16=false", "grpo.gradient_checkpointing=false", "grpo.use_cpu=true", "grpo.report_to=[]",
            "rubric.max_new_tokens=8", "contrast.max_new_tokens=8", "contrast.min_age=0", "contrast.buffer_size=64",
            *extra]


def _tiny_reward_model(model_dir: Path, out: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tok = AutoTokenizer.from_pretrained(model_dir)
    cfg = LlamaConfig.from_pretrained(model_dir)
    cfg.num_labels = 1
    torch.manual_seed(0)
    LlamaForSequenceClassification(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _steps(run_dir: Path) -> list[tuple[int, str]]:
    return [(r["step"], r["role"]) for r in read_jsonl(run_dir / "metrics.jsonl")]


@pytest.mark.slow
def test_frozen_base_rubrics_baseline(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = load_config(BASELINES[0].parent / "base-rubrics.yaml", _cpu(tiny_model_dir, tmp_path / "r"))
    assert _steps(run(cfg)) == [(1, "policy"), (2, "policy")]
    assert (tmp_path / "r" / "frozen_rubrics.jsonl").is_file()


@pytest.mark.slow
def test_sequential_baseline(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = load_config(BASELINES[0].parent / "sequential.yaml",
                      _cpu(tiny_model_dir, tmp_path / "r", "schedule.cycles=1"))
    out = run(cfg)
    assert _steps(out / "stage1-writer") == [(1, "rubric")] and _steps(out / "stage2-policy") == [(1, "policy")]


@pytest.mark.slow
def test_api_rubrics_baseline_against_a_local_openai_server(tiny_model_dir: Path, tmp_path: Path) -> None:
    from openai_server import serve

    with serve() as server:
        cfg = load_config(BASELINES[0].parent / "gpt41-rubrics.yaml",
                          _cpu(tiny_model_dir, tmp_path / "r", "rubric.writer=test-echo-model",
                               f"rubric.writer_base_url={server.base_url}"))
        assert _steps(run(cfg)) == [(1, "policy"), (2, "policy")]
        bodies = server.state.requests
    assert bodies and all("chat_template_kwargs" not in str(b) for b in bodies)  # not sent to an API model
    # sampled as the reference's litellm call: temperature 0, top-p 1.0, 800 tokens (not the paper config's writer)
    assert {(b["temperature"], b["top_p"], b["max_tokens"]) for b in bodies} == {(0.0, 1.0, 800)}
    written = read_jsonl(tmp_path / "r" / "frozen_rubrics.jsonl")
    assert written and all(w["text"].startswith("echo:") for w in written)  # the API model wrote the rubrics


@pytest.mark.slow
def test_api_rubrics_baseline_falls_back_to_its_second_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A writer request still failing after its retries is written by rubric.writer_fallback (the reference's
    gpt-4.1-mini), the others by the writer."""
    from openai_server import serve

    with serve() as server:
        server.state.fail_every, server.state.fail_status = 2, 500
        cfg = load_config(BASELINES[0].parent / "gpt41-rubrics.yaml",
                          _cpu(tiny_model_dir, tmp_path / "r", "rubric.writer=test-echo-model",
                               f"rubric.writer_base_url={server.base_url}", "rubric.writer_max_retries=0",
                               "schedule.cycles=1", "rubric.writer_fallback=gpt-4.1-mini"))
        assert _steps(run(cfg)) == [(1, "policy")]
        models = [b["model"] for b in server.state.requests]
    assert models.count("test-echo-model") == 2 and models.count("gpt-4.1-mini") == 1  # requests 1, 2 (failed); 3
    assert len(read_jsonl(tmp_path / "r" / "frozen_rubrics.jsonl")) == 2


def test_gpt41_baseline_dry_run_shows_how_the_writer_samples(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["train", "--config", str(BASELINES[0].parent / "gpt41-rubrics.yaml"), "--dry-run",
                 "data.prompts=builtin:demo"]) == 0
    assert ("gpt-4.1 (openai): temperature 0, top-p 1, up to 800 tokens, 60 retries of 600 s, fallback gpt-4.1-mini"
            in capsys.readouterr().out)


@pytest.mark.slow
def test_scalar_reward_model_baseline(tiny_model_dir: Path, tmp_path: Path) -> None:
    from evolm.judge.judge import JudgeItem
    from evolm.judge.reward_model import load_reward_model

    rm_dir = _tiny_reward_model(tiny_model_dir, tmp_path / "rm")
    cfg = load_config(BASELINES[0].parent / "skywork-rm.yaml",
                      _cpu(tiny_model_dir, tmp_path / "r", f"judge.model={rm_dir}", "judge.mode=reward_model"))
    run_dir = run(cfg)
    assert _steps(run_dir) == [(1, "policy"), (2, "policy")]
    rows = read_jsonl(run_dir / "samples" / "phase-000-policy.jsonl")
    assert all(r["rubric"] is None for r in rows)  # no rubric is written or read
    rm = load_reward_model(str(rm_dir), device="cpu", dtype="float32", reading="reference")
    again = scores_of(rm.score([JudgeItem(r["question"], r["completion"]) for r in rows]))
    assert again == pytest.approx([r["score"] for r in rows], rel=1e-4, abs=1e-5)  # the reward is the RM's score
    assert cfg.judge.reward_model_reading == "reference" and all(0 < x < 10 for x in again)


def test_reward_model_reference_reading(tiny_model_dir: Path, tmp_path: Path) -> None:
    """As the authors' code: 10 x sigmoid(logit) of the response as generated, special tokens added, 4,096 tokens."""
    import math

    import torch

    from evolm.judge.judge import JudgeItem
    from evolm.judge.reward_model import load_reward_model

    rm_dir = _tiny_reward_model(tiny_model_dir, tmp_path / "rm")
    ours = load_reward_model(str(rm_dir), device="cpu", dtype="float32")
    ref = load_reward_model(str(rm_dir), device="cpu", dtype="float32", reading="reference")
    assert (ours.max_length, ref.max_length) == (8192, 4096)
    item = JudgeItem("What is 2 + 2?", "<think>add them</think>It is 4.")
    conv = [{"role": "user", "content": item.question}, {"role": "assistant", "content": item.answer}]
    text = ref.tokenizer.apply_chat_template(conv, tokenize=False)
    with torch.inference_mode():  # the authors' scoring, one chat at a time
        logit = ref.model(**ref.tokenizer(text, return_tensors="pt", truncation=True, max_length=4096)).logits[0][0]
    assert scores_of(ref.score([item])) == pytest.approx([10 / (1 + math.exp(-float(logit)))], rel=1e-4)
    assert "add them" in ref._text(item.question, item.answer) and "add them" not in ours._text(item.question, item.answer)


@pytest.mark.slow
@pytest.mark.parametrize(("config", "mode"), [("rar-explicit.yaml", "rar_explicit"), ("rar-implicit.yaml", "rar_implicit")])
def test_rar_baselines(tiny_model_dir: Path, tmp_path: Path, config: str, mode: str) -> None:
    cfg = load_config(BASELINES[0].parent / config,
                      _cpu(tiny_model_dir, tmp_path / "r", f"judge.mode={mode}", "judge.max_new_tokens=8"))
    assert cfg.judge.mode == mode and cfg.schedule.regime == "frozen_rubric"
    assert _steps(run(cfg)) == [(1, "policy"), (2, "policy")]


class _Recorder:
    """A judge that records what it is asked (duck-typed ``Judge.score``)."""

    def __init__(self) -> None:
        self.items: list = []

    def score(self, items, progress: bool = False):  # noqa: ANN001, ANN201
        self.items += list(items)
        return [Judgment(0.5)] * len(items)


def test_direct_likert_baseline_reads_reference_answers(tiny_model_dir: Path, tmp_path: Path) -> None:
    from evolm.training.contrast import ReplayBuffer
    from evolm.training.plan import Plan
    from evolm.training.prompts import load_prompt_set
    from evolm.training.step import TrainingSteps

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "What is 2 + 2?", "reference": "4"}\n{"prompt": "Name a colour."}\n')
    cfg = load_config(BASELINES[0].parent / "direct-likert.yaml",
                      _cpu(tiny_model_dir, tmp_path / "r", "judge.mode=likert", "judge.max_new_tokens=8",
                           f"data.prompts={prompts}"))
    assert cfg.judge.mode == "likert" and cfg.schedule.regime == "judge_only"
    assert _steps(run(cfg)) == [(1, "policy"), (2, "policy")]  # 2 real steps on CPU

    recorder = _Recorder()
    (tmp_path / "u").mkdir()
    plan = Plan(cfg, *load_prompt_set(str(prompts)))
    loop = TrainingSteps(cfg, plan, ReplayBuffer(4), tmp_path / "u", judges=[recorder])  # type: ignore[list-item]
    rows = loop.step_rows(0, generate=None)  # type: ignore[arg-type] - judge_only writes no rubric
    assert {r["question"]: r["reference"] for r in rows} == {"What is 2 + 2?": "4", "Name a colour.": None}
    loop.score(rows, ["four", "blue"])
    seen = {it.question: (it.rubric, it.rubric_text, it.reference) for it in recorder.items}
    assert seen == {"What is 2 + 2?": (None, None, "4"), "Name a colour.": (None, None, None)}
