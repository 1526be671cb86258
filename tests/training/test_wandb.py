"""W&B (``grpo.report_to: wandb``, offline): the run directory holds evolm's metrics, its config and the samples table
(the tiny run ``lora_run`` of tests/training/conftest.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from evolm.training.run import run

pytest.importorskip("wandb")


def _offline_run(lora_run: Path) -> Path:
    runs = sorted((lora_run.parent / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs  # one W&B run for one evolm run, ended with it
    return runs[0]


def test_wandb_offline_run_holds_evolm_metrics_config_and_samples(lora_run: Path) -> None:
    offline = _offline_run(lora_run)
    data = next(offline.glob("run-*.wandb")).read_bytes()  # the run's records, as wandb sync would upload them
    for key in (b"train/evolm/judge_p_yes", b"train/evolm/judge_pass_rate", b"train/evolm/reward/judge",
                b"train/evolm/reward/soft_overlong_punishment_reward", b"train/evolm/tied_groups"):
        assert key in data, key
    assert b'"samples_per_prompt":2' in data and b'"lora":{"r":4' in data  # evolm's config in the run's config
    tables = sorted((offline / "files" / "media" / "table").glob("completions_*.table.json"))
    assert tables
    table: dict[str, Any] = json.loads(tables[-1].read_text())
    columns = {"prompt", "completion", "role", "rubric", "a_pos", "a_neg", "score", "s_pos", "s_neg"}
    assert columns <= set(table["columns"])
    assert {row[table["columns"].index("role")] for t in tables for row in json.loads(t.read_text())["data"]} == \
        {"policy", "rubric"}


def test_wandb_missing_is_refused_before_any_model_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from evolm.config import load_config
    from evolm.errors import InputError

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name, *a))
    cfg = load_config(None, [f"output_dir={tmp_path / 'r'}", "model.name=/nonexistent/model", "grpo.report_to=wandb"])
    with pytest.raises(InputError, match=re.escape("grpo.report_to=wandb needs wandb: pip install 'evolm[wandb]'")):
        run(cfg)
    assert not (tmp_path / "r").exists()
