"""The demo config shrunk to the tiny random model (tests/conftest.py): what every tiny training run starts from."""

from __future__ import annotations

from pathlib import Path

from evolm.config import RunConfig, load_config

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "configs" / "demo-cpu.yaml"
P, G = 2, 2  # questions per step, samples per question


def tiny_overrides(model_dir: Path, out: Path, *extra: str) -> list[str]:
    """The demo config shrunk to the tiny model (two cycles of two steps per phase, two questions x two samples)."""
    return [
        f"model.name={model_dir}", f"judge.model={model_dir}", f"output_dir={out}",
        f"schedule.prompts_per_step={P}", f"schedule.samples_per_prompt={G}", "schedule.samples_logged_per_step=0",
        f"grpo.per_device_train_batch_size={P * G}", "grpo.max_completion_length=8",
        "rubric.max_new_tokens=8", "contrast.max_new_tokens=8", "grpo.report_to=[]", "rubric.constrained=false",
        # the schedule these tests were written for (the demo's sizes before it was made smaller)
        "schedule.cycles=2", "schedule.steps_per_phase=2", "schedule.save_every=2", "contrast.min_age=1",
        "contrast.max_age=4", "grpo.save_total_limit=2", "grpo.gradient_checkpointing=false",
        "model.lora.r=0",  # full fine-tuning (the demo trains a LoRA adapter; tests/training/test_lora.py covers LoRA)
        *extra,
    ]


def tiny_config(model_dir: Path, out: Path, *extra: str) -> RunConfig:
    return load_config(DEMO, tiny_overrides(model_dir, out, *extra))


def row_rewards(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201
    """The rows' rewards alone (``evolm.training.judging.judge_rows`` without its cost)."""
    from evolm.training.judging import judge_rows

    return judge_rows(*args, **kwargs)[0]
