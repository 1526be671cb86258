"""The `evolm rubric` and `evolm judge` commands, end to end on the tiny model, and their errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evolm.cli import main


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_rubric_then_judge_every_mode(tiny_model_dir: Path, tmp_path: Path) -> None:
    prompts = _write(tmp_path / "p.jsonl", [json.dumps({"prompt": f"What is {i} + {i}?", "id": i}) for i in range(5)])
    out = tmp_path / "r.jsonl"
    assert main(["rubric", "--model", str(tiny_model_dir), "--input", str(prompts), "--output", str(out),
                 "--max-new-tokens", "8", "--device", "cpu"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 5
    assert [r["id"] for r in rows] == list(range(5))  # input fields kept, order kept
    for r in rows:
        assert r["rubric_valid"] in (0.0, 1.0) and "rubric" in r and isinstance(r["rubric_text"], str)

    answers = [{"prompt": "What is 2 + 2?", "response": "4",
                "rubric": {"criteria": [{"criterion": "Says 4", "weight": 0.7}, {"criterion": "Short", "weight": 0.3}]}},
               {"prompt": "What is 2 + 2?", "response": "5", "rubric": json.dumps({"criteria": [{"criterion": "Says 4"}]})},
               {"prompt": "Name a colour.", "response": "Blue."}]
    inp = _write(tmp_path / "a.jsonl", [json.dumps(a) for a in answers])
    for mode in ("prob", "yesno", "generative"):
        scored = tmp_path / f"s-{mode}.jsonl"
        assert main(["judge", "--judge", str(tiny_model_dir), "--input", str(inp), "--output", str(scored),
                     "--mode", mode, "--device", "cpu"]) == 0
        got = [json.loads(x) for x in scored.read_text().splitlines()]
        assert len(got) == 3
        for g in got:
            if mode == "generative":
                assert g["score"] is None or 0.0 <= g["score"] <= 1.0
            else:  # probability modes always give a score
                assert isinstance(g["score"], float) and 0.0 <= g["score"] <= 1.0


@pytest.mark.parametrize(
    ("lines", "args_extra", "message"),
    [
        (None, [], "no such file"),
        (['{"prompt": "a", "response": "b"}', '{"prompt": "a", "response": '], [], ":2: malformed JSON"),
        (['{"prompt": "a", "response": "b"}', '{"prompt": "c"}'], [], ":2: missing field 'response'"),
        (['{"prompt": "a", "response": "b"}'], ["--judge", "no/such/model/dir"], "unknown model"),
    ],
)
def test_bad_input_is_one_line_and_no_output(tmp_path: Path, tiny_model_dir: Path, lines, args_extra, message) -> None:
    inp = tmp_path / "in.jsonl"
    if lines is not None:
        _write(inp, lines)
    out = tmp_path / "out.jsonl"
    judge = args_extra[1] if args_extra else str(tiny_model_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "evolm.cli", "judge", "--judge", judge, "--input", str(inp), "--output", str(out),
         "--device", "cpu"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2
    err = [x for x in proc.stderr.strip().splitlines() if x.startswith("evolm")]
    assert len(err) == 1 and message in err[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl.*"))  # nothing that looks complete


def test_stdin_stdout(tiny_model_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "evolm.cli", "judge", "--judge", str(tiny_model_dir), "--input", "-", "--output", "-",
         "--device", "cpu"],
        input=json.dumps({"prompt": "q", "response": "r"}) + "\n", capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert 0.0 <= json.loads(proc.stdout.strip().splitlines()[-1])["score"] <= 1.0


def test_help_at_every_level() -> None:
    for argv in (["--help"], ["rubric", "--help"], ["judge", "--help"], ["train", "--help"], ["eval", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
