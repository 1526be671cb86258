"""The step file (evolm.training.step): TRL calls ``TrainingSteps``' methods in the order its docstring lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evolm.config import load_config
from evolm.training import step as step_module
from evolm.training.run import run
from evolm.training.step import TrainingSteps

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo-cpu.yaml"


def listed_hooks() -> list[str]:
    """The method names of the step file's hook table, in its order (``    name   the TRL hook: what it does``)."""
    doc = step_module.__doc__ or ""
    table = doc.split("in this order", 1)[1].split("\n\n", 2)[1]
    return [m.group(1) for line in table.splitlines() if (m := re.match(r"    (\w+)\s{2,}\S", line))]


def test_the_step_file_lists_every_hook_in_the_order_it_defines_them() -> None:
    hooks = listed_hooks()
    assert hooks == ["begin", "materialise", "score", "finish", "is_phase_end", "end_step", "save"]
    methods = [n for n in vars(TrainingSteps) if n in [*hooks, "__call__"]]
    assert methods == [*hooks[:2], "__call__", *hooks[2:]]  # the file reads in the order a step happens: the reward
    # function (``__call__``, TRL's reward function is the steps object) runs the judging and the rewards


@pytest.mark.slow
def test_trl_calls_the_hooks_in_the_listed_order(tiny_model_dir: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A real two-step run on TRL (a policy phase then a rubric phase, a checkpoint after each step): the calls, in
    the order they came, follow the step file's table step by step."""
    hooks = listed_hooks()
    calls: list[str] = []
    for name in [*hooks, "step_rows"]:  # step_rows: inside materialise
        original = getattr(TrainingSteps, name)

        def recorded(self, *args, _original=original, _name=name, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(TrainingSteps, name, recorded)
    cfg = load_config(DEMO, [
        f"model.name={tiny_model_dir}", f"judge.model={tiny_model_dir}", f"output_dir={tmp_path / 'run'}",
        "schedule.cycles=1", "schedule.steps_per_phase=1", "schedule.save_every=1", "schedule.prompts_per_step=2",
        "schedule.samples_per_prompt=2", "grpo.per_device_train_batch_size=4", "grpo.max_completion_length=8",
        "rubric.max_new_tokens=8", "contrast.max_new_tokens=8", "rubric.constrained=false", "grpo.report_to=[]",
        "contrast.min_age=0", "model.lora.r=0", "grpo.gradient_checkpointing=false"])
    run(cfg)
    assert calls[0] == "begin" and calls.count("begin") == 1
    steps: list[list[str]] = []
    for name in calls[1:]:
        if name == "materialise":
            steps.append([])
        steps[-1].append(name)
    assert len(steps) == 2  # one policy step, one rubric step
    for seen in steps:
        assert seen[:2] == ["materialise", "step_rows"], calls  # the rows, made inside materialise
        assert list(dict.fromkeys(n for n in seen if n != "step_rows")) == hooks[1:], calls  # every hook once per
        # step, in the table's order
