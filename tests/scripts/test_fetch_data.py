"""scripts/fetch_data.py: the data sets the docs name, put into data/ (here from a local copy: tests never download)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fetch_data.py"


def _fetch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_fetch_data_copies_a_set_says_where_it_came_from_and_warns_on_a_different_file(tmp_path: Path) -> None:
    copy = tmp_path / "copy" / "ifeval"
    copy.mkdir(parents=True)
    (copy / "input_data.jsonl").write_text('{"key": 1, "prompt": "Write a haiku."}\n', encoding="utf-8")
    done = _fetch("--dest", str(tmp_path / "data"), "--from", str(tmp_path / "copy"), "ifeval")
    assert done.returncode == 0, done.stderr
    got = tmp_path / "data" / "ifeval"
    assert (got / "input_data.jsonl").read_text(encoding="utf-8") == '{"key": 1, "prompt": "Write a haiku."}\n'
    source = (got / "SOURCE.md").read_text(encoding="utf-8")
    assert "google-research/google-research" in source and "Apache-2.0" in source and "19638399cc9e" in source
    assert "differs from the copy docs/ measured on" in done.stderr  # not the pinned file: kept, with a warning
    assert not list(got.glob("*.part"))


def test_fetch_data_names_what_is_missing(tmp_path: Path) -> None:
    done = _fetch("--dest", str(tmp_path / "data"), "--from", str(tmp_path), "gsm8k")
    assert done.returncode != 0 and f"{tmp_path}/gsm8k/train.jsonl not found" in done.stderr
    done = _fetch("--dest", str(tmp_path / "data"), "bogus")
    assert done.returncode == 2 and "unknown set 'bogus'" in done.stderr


def test_policy_evaluation_reads_the_fetched_data_by_default(tmp_path: Path) -> None:
    """`evolm eval policy` looks in ./data (this script's output) first, then ../shared/data (development)."""
    from evolm.eval.policy_inputs import default_data_dir

    (tmp_path / "repo").mkdir()
    assert default_data_dir(tmp_path / "repo") is None
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert default_data_dir(tmp_path / "repo") == (tmp_path / "shared" / "data").resolve()
    (tmp_path / "repo" / "data").mkdir()
    assert default_data_dir(tmp_path / "repo") == (tmp_path / "repo" / "data").resolve()


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures"  # tulu3/mixture.jsonl: six rows in the mixture's schema


def test_tulu3_writes_the_paper_configs_prompt_file_first_user_turns_deduplicated(tmp_path: Path) -> None:
    """docs/GPU.md's data step: the paper config's data.prompts from Tulu 3 rows {id, messages, source}."""
    import json

    done = _fetch("--dest", str(tmp_path / "data"), "--from", str(FIXTURE), "tulu3")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "data" / "tulu3_prompts.jsonl").open(encoding="utf-8")]
    # the first user turn, stripped (a system turn before it and later turns are not the prompt); a prompt seen before
    # (here with other whitespace, from another source) is dropped, the first occurrence kept; no user turn: dropped
    assert rows == [
        {"prompt": "Explain what a hash table is.", "source": "ai2-adapt-dev/oasst1_converted", "id": "oasst1_1"},
        {"prompt": "Convert 2 hours into minutes.", "source": "allenai/tulu-3-sft-personas-math",
         "id": "personas_math_7"},
        {"prompt": "Write a haiku about rain.", "source": "ai2-adapt-dev/tulu_v3.9_wildchat_100k", "id": "wildchat_9"},
    ]
    assert "6 conversations: 3 prompts kept, 2 duplicates and 1 without a user turn dropped" in done.stdout
    source = (tmp_path / "data" / "tulu3" / "SOURCE.md").read_text(encoding="utf-8")
    assert "allenai/tulu-3-sft-mixture" in source and "ODC-BY-1.0" in source and "duplicates" in source


def test_tulu3_file_is_what_the_paper_config_trains_on(tmp_path: Path) -> None:
    from evolm.config import load_config
    from evolm.training.prompts import load_prompts

    assert _fetch("--dest", str(tmp_path / "data"), "--from", str(FIXTURE), "tulu3").returncode == 0
    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "paper-qwen3-8b.yaml")
    assert cfg.data.prompts == "data/tulu3_prompts.jsonl"
    assert load_prompts(str(tmp_path / cfg.data.prompts)) == [
        "Explain what a hash table is.", "Convert 2 hours into minutes.", "Write a haiku about rain."]


def test_tulu3_without_the_mixture_says_what_is_missing(tmp_path: Path) -> None:
    done = _fetch("--dest", str(tmp_path / "data"), "--from", str(tmp_path), "tulu3")
    assert done.returncode != 0 and "no *.jsonl or *.parquet files in" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_the_paper_config_without_its_prompt_file_names_the_command_that_writes_it(tmp_path: Path) -> None:
    """A fresh clone: the paper config's dry run stops in one line that says how to make data/tulu3_prompts.jsonl."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "evolm.cli", "train", "--config",
                           str(root / "configs" / "paper-qwen3-8b.yaml"), "--dry-run"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "data/tulu3_prompts.jsonl: no such file; `python scripts/fetch_data.py tulu3` writes" in done.stderr
