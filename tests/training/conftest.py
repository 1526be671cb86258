"""The tiny LoRA run that tests/training/test_lora.py, test_wandb.py and test_extra_rewards.py read (run once)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_run import tiny_config

from evolm.training.run import run

SOFT = ("rewards.extra=[{name: trl.rewards.get_soft_overlong_punishment, "
        "kwargs: {max_completion_len: 8, soft_punish_cache: 4}, weight: 0.5}]")


@pytest.fixture(scope="package")
def lora_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One co-evolving run (1 policy + 1 rubric step, 2 questions x 2 samples, 8 new tokens) with a rank-4 adapter,
    TRL's soft overlong punishment added to the policy reward, and an offline W&B run."""
    pytest.importorskip("peft")
    pytest.importorskip("wandb")
    top = tmp_path_factory.mktemp("lora")
    env = pytest.MonkeyPatch()
    for key, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(top), "WANDB_CONSOLE": "off", "WANDB_SILENT": "true",
                       "WANDB_PROJECT": "evolm-test"}.items():
        env.setenv(key, value)
    try:
        cfg = tiny_config(tiny_model_dir, top / "run", "schedule.cycles=1", "schedule.steps_per_phase=1",
                          "schedule.save_every=100", "grpo.learning_rate=1e-2", "model.lora.r=4", "model.lora.alpha=8",
                          "grpo.report_to=[wandb]", "grpo.log_completions=true", "grpo.num_completions_to_print=1",
                          SOFT)
        assert run(cfg) == top / "run"
    finally:
        env.undo()
    return top / "run"
