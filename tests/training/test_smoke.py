"""`evolm train --smoke` (training/smoke.py): every role, a checkpoint and a resume from it, in a directory of its own,
and the one-screen verdict; driven on the demo config with the tiny random model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolm.cli import main
from evolm.config import load_config
from evolm.errors import InputError
from evolm.runs.rundir import checkpoint_state, complete_checkpoints
from evolm.training import smoke

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo-cpu.yaml"
PAPER = REPO / "configs" / "paper-qwen3-8b.yaml"


def tiny(model_dir: Path, out: Path) -> list[str]:
    return [f"model.name={model_dir}", f"judge.model={model_dir}", f"output_dir={out}",
            "schedule.prompts_per_step=2", "schedule.samples_per_prompt=2", "grpo.per_device_train_batch_size=4",
            "grpo.max_completion_length=8", "rubric.max_new_tokens=8", "contrast.max_new_tokens=8",
            "grpo.report_to=[]", "rubric.constrained=false", "model.lora.r=0"]


def test_smoke_runs_each_role_checkpoints_resumes_and_prints_a_verdict(tiny_model_dir: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["train", "--config", str(DEMO), "--smoke", *tiny(tiny_model_dir, out)]) == 0
    assert not out.exists()  # never the real run's directory
    run_dir = tmp_path / "run-smoke"
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["role"]) for r in rows] == [(1, "policy"), (2, "rubric"), (3, "policy")]
    assert all(r["reward_mean"] is not None for r in rows)
    assert rows[1]["pairs"] and rows[1]["pair_judgements"]  # temporal pairs from the policy step's answers
    assert [checkpoint_state(c).step for c in complete_checkpoints(run_dir)] == [2, 3]  # 2 written, 3 after resume
    saved = load_config(run_dir / "config.yaml")
    assert saved.contrast.min_age == 0 and saved.schedule.steps_per_phase == 1
    screen = capsys.readouterr().out
    assert ": PASS" in screen
    for line in ("step 1: policy", "step 2: rubric", "step 3: policy (after the resume)", "resumed from checkpoint 2",
                 "judge failures", "0 of ", "peak GPU memory", "vLLM", "a full rubric step, extrapolated",
                 "the whole run, extrapolated"):
        assert line in screen, line
    # a second smoke run replaces the first (one process: nothing else can be using it)
    assert main(["train", "--config", str(DEMO), "--smoke", *tiny(tiny_model_dir, out)]) == 0
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 3


def test_smoke_shrinks_the_paper_schedule_and_keeps_its_models() -> None:
    cfg = load_config(PAPER)
    overrides = smoke.smoke_overrides(cfg, 4)
    s = load_config(PAPER, overrides)
    assert s.output_dir == "runs/paper-qwen3-8b-smoke"
    assert (s.schedule.prompts_per_step, s.schedule.samples_per_prompt) == (1, 8)  # 8 rows over 4 x 1 micro-batches
    assert s.contrast.min_age == 0 and s.contrast.pairs == "temporal"
    assert (s.model, s.judge, s.grpo, s.contrast.max_new_tokens) == (cfg.model, cfg.judge, cfg.grpo,
                                                                       cfg.contrast.max_new_tokens)
    assert smoke.smoke_questions(cfg, 16) == 2  # 16 rows for 16 processes
    with pytest.raises(InputError, match="sequential"):
        smoke.smoke_overrides(load_config(PAPER, ["schedule.regime=sequential"]), 4)


def test_smoke_reads_vllms_room_from_its_start_line() -> None:
    room = smoke.VLLMRoom()
    room.read("INFO 12-06 [kv_cache_utils.py:1087] GPU KV cache size: 93,472 tokens, Maximum concurrency for "
              "40,960 tokens per request: 2.28x")
    assert room.found == (40960, 2.28)
