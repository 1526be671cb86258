"""scripts/fetch_data.py: the data sets the docs name, put into data/ (here from a local copy: tests never download)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    from evolm.eval.policy import default_data_dir

    (tmp_path / "repo").mkdir()
    assert default_data_dir(tmp_path / "repo") is None
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert default_data_dir(tmp_path / "repo") == (tmp_path / "shared" / "data").resolve()
    (tmp_path / "repo" / "data").mkdir()
    assert default_data_dir(tmp_path / "repo") == (tmp_path / "repo" / "data").resolve()
