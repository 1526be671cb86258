"""The writer's learnability check in minutes (docs/RESULTS.md; the full check with SmolLM2 and the naming reward is
``bench/learnability.py``): GRPO on rubric rows, the judge skipped, a program reward on the rubric's text. With the
reward's sign "+" the rewarded property rises over the steps; with "-" it falls; both arms start from the same
weights and seed, so their first steps write the same rubrics. A broken writer path (the reward's sign, the grouping,
the advantage on the wrong tokens, the rubric rows never reaching the optimizer) fails it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tiny_run import tiny_config

from evolm.runs.jsonl import read_jsonl

HERE = "tests.training.test_writer_learns"
STEPS = 12


def e_share(completions: list[Any], **_: Any) -> list[float]:
    """The share of a rubric's characters that are the letter e (the property the arms push up or down)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [t.count("e") / max(1, len(t)) for t in texts]


def _arm(model_dir: Path, out: Path, pairs: Path, weight: float) -> list[float]:
    from evolm.training.run import run

    run(tiny_config(model_dir, out, "schedule.regime=rubric_only", "contrast.pairs=labelled", f"data.pairs={pairs}",
                    "rewards.judge_weight=0", f"rewards.extra=[{{name: {HERE}.e_share, role: rubric, weight: {weight}}}]",
                    "schedule.cycles=1", f"schedule.steps_per_phase={STEPS}", f"schedule.save_every={STEPS}",
                    "schedule.prompts_per_step=4", "schedule.samples_per_prompt=4",
                    "grpo.per_device_train_batch_size=16", "rubric.max_new_tokens=16",
                    "grpo.max_completion_length=16", "grpo.learning_rate=0.03", "grpo.beta=0"))
    steps = read_jsonl(out / "metrics.jsonl")
    assert [s["role"] for s in steps] == ["rubric"] * STEPS
    return [s["reward_components"]["e_share"] for s in steps]


@pytest.mark.slow
def test_the_writer_learns_a_program_reward_up_and_down(tiny_model_dir: Path, tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": q, "chosen": "Good answer.", "rejected": "Bad."}) + "\n"
                             for q in ("What is 2 + 2?", "Write a haiku.", "Why is the sky blue?", "Name a colour.")))
    up = _arm(tiny_model_dir, tmp_path / "plus", pairs, 1.0)
    down = _arm(tiny_model_dir, tmp_path / "minus", pairs, -1.0)
    print({"up": [round(x, 3) for x in up], "down": [round(x, 3) for x in down]})
    assert up[0] == pytest.approx(down[0])  # the same rubrics before any update
    late = slice(STEPS - 3, STEPS)
    up_late, down_late = sum(up[late]) / 3, sum(down[late]) / 3  # at lr 0.03: about 0.16 and 0.02 from 0.06
    assert up_late > up[0] + 0.04 and down_late < down[0] - 0.02 and up_late > down_late + 0.08, (up, down)
