"""docs/CONFIG.md is generated from the config models (scripts/config_doc.py), and CI fails when it is stale."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field, create_model

from evolm.config import load_config, to_dict
from evolm.config.judge_settings import JudgeConfig
from evolm.config.schema import RunConfig

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "config_doc.py"


def _config_doc():
    spec = importlib.util.spec_from_file_location("config_doc", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["config_doc"] = module  # its dataclass resolves annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_config_md_is_what_the_generator_writes_from_the_config_classes() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr  # if this fails: python scripts/config_doc.py, then commit docs/CONFIG.md


def test_config_md_lists_every_setting_with_type_default_paper_value_and_help() -> None:
    text = (ROOT / "docs" / "CONFIG.md").read_text(encoding="utf-8")
    doc = _config_doc()
    keys = [s.key for s in doc.settings(RunConfig)]
    assert {"judge.mode", "schedule.cycles", "data.prompts", "model.lora.r", "grpo"} <= set(keys)
    for key in keys:
        assert f"`{key}`" in text, key
    line = next(line for line in text.splitlines() if line.startswith("| `judge.mode` |"))
    assert line.startswith("| `judge.mode` | str | `yesno` | `generative` | yesno (default: per criterion P(Yes)")
    assert "(one of: generative, prob, yesno," in line
    ranges = {key: line for line in text.splitlines() for key in ("schedule.samples_per_prompt", "judge.top_p")
              if line.startswith(f"| `{key}` |")}  # a range, as the field declares it and its error says it
    assert ranges["schedule.samples_per_prompt"].endswith("(range: >= 2) |")
    assert ranges["judge.top_p"].endswith("(range: in (0, 1]) |")
    assert "| `grpo.per_device_train_batch_size` | `8` | `1` |" in text  # the default, then the paper config's value


def test_a_setting_added_without_regenerating_makes_the_check_fail() -> None:
    """A copy of the schema with one more judge setting renders a different page, which the check refuses."""
    doc = _config_doc()
    paper = to_dict(load_config(ROOT / "configs" / "paper-qwen3-8b.yaml"))
    judge_plus = create_model("JudgeConfig", __base__=JudgeConfig, __doc__=JudgeConfig.__doc__,
                              warmup=(int, Field(3, description="judge warm-up calls")))
    run_plus = create_model("RunConfig", __base__=RunConfig, judge=(judge_plus, Field(default_factory=judge_plus)))
    paper["judge"]["warmup"] = 3
    stale = (ROOT / "docs" / "CONFIG.md").read_text(encoding="utf-8")
    assert doc.render(RunConfig, paper) == stale
    fresh = doc.render(run_plus, paper)
    assert fresh != stale and "| `judge.warmup` | int | `3` | `3` | judge warm-up calls |" in fresh
