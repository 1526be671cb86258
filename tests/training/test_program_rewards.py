"""Program rewards in either role (``rewards.extra`` with ``role``), the judge skipped (``rewards.judge_weight: 0``),
and constraint checks that fail on an answer without ending the run: tiny runs, read back from their step records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tiny_run import tiny_config

from evolm.config import load_config
from evolm.errors import InputError
from evolm.eval.constraints import constraints_json
from evolm.runs.jsonl import read_jsonl
from evolm.training import step
from evolm.training.contrast import ReplayBuffer
from evolm.training.extra_rewards import ExtraReward, extra_rewards
from evolm.training.judging import JudgeCost, RowReward, step_rewards
from evolm.training.plan import Plan
from evolm.training.step import TrainingSteps

HERE = "tests.training.test_program_rewards"


def rubric_length(completions: list[Any], a_pos: list[str], **_: Any) -> list[float]:
    """A rubric-row reward as TRL calls one: the written rubric's length in characters / 100 (it reads a_pos)."""
    assert all(isinstance(a, str) for a in a_pos)  # rubric rows carry their pair
    return [len(c[-1]["content"] if isinstance(c, list) else c) / 100 for c in completions]


def answer_length(completions: list[Any], **_: Any) -> list[float]:
    return [len(c[-1]["content"] if isinstance(c, list) else c) / 100 for c in completions]


class _Steps(TrainingSteps):
    """The run's steps as TRL's reward function, every row judged 0.5 and the step's rewards alone."""

    def score(self, rows: list[dict], completions: list[str]) -> tuple[list[RowReward], JudgeCost]:
        return [RowReward(0.5, score=0.5) for _ in rows], JudgeCost()

    def finish(self, rows, completions, scored, lengths, is_main, costs=()):  # noqa: ANN001, ANN201
        result = step_rewards([r["role"] for r in rows], scored, [r["slot"] for r in rows])
        return result.rewards, result.metrics()


def _call(reward_fn: Any, role: str, texts: list[str]) -> list[float]:
    n = len(texts)
    return reward_fn(prompts=[[{"role": "user", "content": "q"}]] * n,
                     completions=[[{"role": "assistant", "content": t}] for t in texts],
                     completion_ids=[[1] * len(t) for t in texts], role=[role] * n, slot=[0] * n, question=["q"] * n,
                     rubric_text=[""] * n, a_pos=["good"] * n, a_neg=["bad"] * n)


def test_an_extra_reward_adds_to_the_role_it_names_only(tmp_path: Path) -> None:
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    reward_fn = _Steps(cfg, Plan(cfg, ["q"]), ReplayBuffer(4), tmp_path, judges=[])
    reward_fn.extras = [ExtraReward("rubric_length", 1.0, rubric_length, "rubric"),
                        ExtraReward("len", 2.0, answer_length)]
    assert _call(reward_fn, "rubric", ["x" * 10, "x" * 30]) == pytest.approx([0.5 + 0.1, 0.5 + 0.3])
    assert _call(reward_fn, "policy", ["x" * 10, "x" * 30]) == pytest.approx([0.5 + 0.2, 0.5 + 0.6])


def test_role_is_checked_when_the_config_loads_and_kept_when_resolved() -> None:
    with pytest.raises(InputError, match=r"rewards.extra\[0\]: role must be one of policy, rubric, not 'judge'"):
        load_config(None, [f"rewards.extra=[{{name: {HERE}.answer_length, role: judge}}]"])
    cfg = load_config(None, [f"rewards.extra=[{{name: {HERE}.rubric_length, role: rubric}}]"])
    assert [e.role for e in extra_rewards(cfg.rewards.extra)] == ["rubric"]


def test_a_judge_weight_of_zero_needs_a_program_reward_for_each_trained_role() -> None:
    with pytest.raises(InputError, match="rewards.judge_weight is 0 and no rewards.extra entry has role rubric"):
        load_config(None, ["rewards.judge_weight=0", f"rewards.extra=[{{name: {HERE}.answer_length}}]"])
    load_config(None, ["rewards.judge_weight=0", "schedule.regime=judge_only",
                       f"rewards.extra=[{{name: {HERE}.answer_length}}]"])  # policy steps only: enough


@pytest.mark.slow
def test_a_run_on_program_rewards_alone_asks_no_judge(tiny_model_dir: Path, tmp_path: Path) -> None:
    from evolm.training.run import run

    extra = (f"rewards.extra=[{{name: {HERE}.answer_length}}, "
             f"{{name: {HERE}.rubric_length, role: rubric, weight: 2.0}}]")
    out = run(tiny_config(tiny_model_dir, tmp_path / "run", "rewards.judge_weight=0", extra, "schedule.cycles=1",
                          "schedule.steps_per_phase=1", "contrast.min_age=0"))
    steps = read_jsonl(out / "metrics.jsonl")
    assert [s["role"] for s in steps] == ["policy", "rubric"]
    for s in steps:
        assert s.get("judge_requests") is None and s.get("judge_tokens") is None  # no judge was asked
        assert s["reward_components"]["judge"] == 0.0 and s["missing_rewards"] == 0.0
    assert steps[0]["reward_components"]["answer_length"] > 0 and "rubric_length" not in steps[0]["reward_components"]
    assert steps[1]["reward_components"]["rubric_length"] > 0 and "answer_length" not in steps[1]["reward_components"]
    assert steps[1]["pair_accuracy"] is None and steps[1]["rubric_validity"] is not None
    assert steps[1]["reward_mean"] == pytest.approx(2.0 * steps[1]["reward_components"]["rubric_length"])


@pytest.mark.slow
def test_an_answer_that_crashes_a_checker_is_counted_and_the_run_goes_on(tiny_model_dir: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every completion reads as ``"[" * 1000`` (lm-eval's json check raises RecursionError on it): the run ends,
    and each step records its failed checks."""
    prompts = tmp_path / "prompts.jsonl"
    cs = json.loads(constraints_json([{"id": "detectable_format:json_format", "kwargs": {}}]))
    prompts.write_text("".join(json.dumps({"prompt": f"Give {i} in JSON.", "constraints": cs}) + "\n"
                               for i in range(4)))
    monkeypatch.setattr(step, "completion_text", lambda completion: "[" * 1000)
    from evolm.training.run import run

    out = run(tiny_config(tiny_model_dir, tmp_path / "run", f"data.prompts={prompts}", "schedule.cycles=1",
                          "schedule.steps_per_phase=1", "contrast.min_age=0",
                          "rewards.extra=[{name: evolm.eval.constraints.constraint_reward}]"))
    steps = read_jsonl(out / "metrics.jsonl")
    assert [s["role"] for s in steps] == ["policy", "rubric"]
    print({s["role"]: s.get("checker_failures") for s in steps})
    assert steps[0]["checker_failures"] == 4  # the policy step's four answers (2 questions x 2 samples)
    assert steps[0]["reward_components"]["constraint_reward"] == 0.0  # not followed
    assert steps[1]["checker_failures"] >= 1  # its pairs hold the stored answers
