"""Outputs never destroy inputs, and `evolm rubric` / `evolm judge` keep their work across a crash (--resume-output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolm.cli import judge as judge_cli
from evolm.cli import main
from evolm.scores import Judgment


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_rb2_from_scores_refuses_to_overwrite_its_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scores = _write(tmp_path / "s.jsonl", [{"id": "1", "subset": "Math", "num_correct": 1, "scores": [0.9, 0.1, 0.2, 0.3]}])
    before = scores.read_bytes()
    assert main(["eval", "rb2", "--from-scores", str(scores), "--output", str(scores)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "the output is also an input" in err
    assert scores.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]
    link = tmp_path / "link.json"
    link.symlink_to(scores)
    assert main(["eval", "rb2", "--from-scores", str(scores), "--output", str(link)]) == 2  # through a symlink too
    assert main(["eval", "rb2", "--from-scores", str(scores), "--save-scores", str(scores), "--output", "-"]) == 2
    assert scores.read_bytes() == before


def test_every_command_refuses_output_equal_to_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rubrics = _write(tmp_path / "r.jsonl", [{"prompt": "p", "response": "a", "rubric": {"criteria": [{"criterion": "x"}]}}])
    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    _write(run / "metrics.jsonl", [{"step": 1}])
    _write(run / "samples" / "phase-001-rubric.jsonl", [{"rubric": None}])
    pairs = _write(tmp_path / "pairs.jsonl", [{"prompt": "p", "chosen": "a", "rejected": "b"}])
    snapshot = {p: p.read_bytes() for p in (rubrics, run / "metrics.jsonl", run / "samples" / "phase-001-rubric.jsonl", pairs)}
    for argv in (
        ["eval", "stats", str(rubrics), "--output", str(rubrics)],
        ["eval", "stats", str(run), "--output", str(run / "samples" / "phase-001-rubric.jsonl")],
        ["report", str(run), "--output", str(run / "metrics.jsonl")],
        ["eval", "pairs", str(pairs), "--judge", "J", "--no-rubric", "--output", str(pairs)],
        ["rubric", "--model", "M", "--input", str(rubrics), "--output", str(rubrics)],
        ["judge", "--judge", "J", "--input", str(rubrics), "--output", str(rubrics)],
    ):
        assert main(argv) == 2, argv
        assert "the output is also an input" in capsys.readouterr().err, argv
    assert {p: p.read_bytes() for p in snapshot} == snapshot
    assert main(["report", str(run)]) == 0 and (run / "report.html").is_file()  # the default output is fine
    assert main(["report", str(run)]) == 0  # and replacing it again too


class _FakeJudge:
    """Scores from the answer's length; raises once ``fail_after`` calls have succeeded."""

    def __init__(self, calls: list[int], fail_after: int | None = None) -> None:
        self.calls, self.fail_after = calls, fail_after

    def score(self, items, progress: bool = False):  # noqa: ANN001
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("backend died")
        self.calls.append(len(items))
        return [Judgment(len(it.answer) / 100) for it in items]


def test_judge_crash_keeps_finished_batches_and_resume_finishes_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _write(tmp_path / "in.jsonl", [{"prompt": f"q{i}", "response": "x" * i, "id": i} for i in range(10)])
    argv = ["judge", "--judge", "J", "--input", str(inp), "--batch-size", "4"]  # on hf: written per batch of 4
    calls: list[int] = []
    monkeypatch.setattr(judge_cli, "judge_from_args", lambda *a: _FakeJudge(calls))
    assert main([*argv, "--output", str(tmp_path / "full.jsonl")]) == 0
    assert calls == [4, 4, 2]
    full = (tmp_path / "full.jsonl").read_bytes()

    out = tmp_path / "out.jsonl"
    out.write_text("an older output\n")
    calls.clear()
    monkeypatch.setattr(judge_cli, "judge_from_args", lambda *a: _FakeJudge(calls, fail_after=2))
    with pytest.raises(RuntimeError, match="backend died"):
        main([*argv, "--output", str(out)])
    partial = tmp_path / "out.jsonl.partial"
    assert [json.loads(x)["id"] for x in partial.read_text().splitlines()] == list(range(8))  # two batches kept
    assert out.read_text() == "an older output\n"  # not replaced by an unfinished run
    assert "8 of 10 rows kept" in capsys.readouterr().err
    assert main([*argv, "--output", str(out)]) == 2  # would throw the kept rows away
    assert "resume it, or delete it" in capsys.readouterr().err

    calls.clear()
    monkeypatch.setattr(judge_cli, "judge_from_args", lambda *a: _FakeJudge(calls))
    assert main([*argv, "--output", str(out), "--resume-output"]) == 0
    assert calls == [2]  # only the rows not done
    assert out.read_bytes() == full and not partial.exists()
    assert "resuming: 8 of 10" in capsys.readouterr().err


def test_resume_checks_the_rows_match_the_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(judge_cli, "judge_from_args", lambda *a: _FakeJudge([]))
    inp = _write(tmp_path / "in.jsonl", [{"prompt": f"q{i}", "response": "r"} for i in range(3)])
    out = _write(tmp_path / "out.jsonl", [{"prompt": "q0", "response": "r", "score": 0.5},
                                          {"prompt": "other", "response": "r", "score": 0.5}])
    argv = ["judge", "--judge", "J", "--input", str(inp), "--output", str(out), "--resume-output"]
    assert main(argv) == 2
    assert "row 2 does not match input row 2 (different 'prompt')" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 2 and not (tmp_path / "out.jsonl.partial").exists()  # untouched
    _write(out, [{"prompt": f"q{i}", "response": "r", "score": 0.5} for i in range(4)])
    assert main(argv) == 2 and "more than the 3 input rows" in capsys.readouterr().err
    assert main(["judge", "--judge", "J", "--input", str(inp), "--output", "-", "--resume-output"]) == 2
    assert "cannot resume" in capsys.readouterr().err


@pytest.mark.slow
def test_rubric_and_judge_resume_on_the_tiny_model(tiny_model_dir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash after one batch, then --resume-output: the same file as an uninterrupted (sampled) run."""
    from evolm import rubrics
    from evolm.judge.judge import Judge

    inp = _write(tmp_path / "p.jsonl", [{"prompt": f"What is {i} + {i}?", "response": str(2 * i)} for i in range(7)])
    common = ["--input", str(inp), "--device", "cpu", "--dtype", "float32", "--batch-size", "3"]
    rubric_argv = ["rubric", "--model", str(tiny_model_dir), "--max-new-tokens", "6", *common]
    judge_argv = ["judge", "--judge", str(tiny_model_dir), "--mode", "yesno", *common]

    for argv, module, name in ((rubric_argv, rubrics, "write_rubrics"), (judge_argv, Judge, "score")):
        full, out = tmp_path / f"full-{argv[0]}.jsonl", tmp_path / f"out-{argv[0]}.jsonl"
        assert main([*argv, "--output", str(full)]) == 0
        real, calls = getattr(module, name), []

        def crashing(*a, _real=real, _calls=calls, **kw):  # noqa: ANN002, ANN003
            if len(_calls) == 1:
                raise RuntimeError("killed")
            _calls.append(1)
            return _real(*a, **kw)

        with monkeypatch.context() as m:
            m.setattr(module, name, crashing)
            with pytest.raises(RuntimeError, match="killed"):
                main([*argv, "--output", str(out)])
        assert not out.exists() and len((tmp_path / f"{out.name}.partial").read_text().splitlines()) == 3
        assert main([*argv, "--output", str(out), "--resume-output"]) == 0
        assert out.read_bytes() == full.read_bytes(), argv[0]
