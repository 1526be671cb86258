"""JSONL reading with line-numbered errors, and atomic writing."""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from evolm.errors import InputError
from evolm.runs.files import atomic_writer, check_outputs_differ, is_write_through
from evolm.runs.jsonl import read_jsonl, read_records, write_jsonl
from evolm.runs.resumable import resumable_jsonl


def test_errors_name_the_line(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text('{"prompt": "a"}\n\n[1, 2]\n')
    with pytest.raises(InputError, match=r"x.jsonl:3: expected a JSON object"):
        read_jsonl(p)
    p.write_text('{"prompt": "a"}\n{"other": 1}\n')
    with pytest.raises(InputError, match=r"x.jsonl:2: missing field 'prompt'"):
        read_jsonl(p, required=["prompt"])
    with pytest.raises(InputError, match="no such file"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_read_records_json_list_or_json_lines_gz_too(tmp_path: Path) -> None:
    rows = [{"a": 1}, {"a": 2}]
    (tmp_path / "list.json").write_text(json.dumps(rows))
    (tmp_path / "lines.json").write_text("".join(json.dumps(r) + "\n" for r in rows))  # JSON Lines under .json
    (tmp_path / "lines.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    (tmp_path / "one.jsonl").write_text(json.dumps(rows) + "\n")  # .jsonl is always JSON Lines: a list line is an error
    for name in ("list.json", "lines.json", "lines.jsonl.gz"):
        assert read_records(tmp_path / name) == rows
    assert read_jsonl(tmp_path / "lines.jsonl.gz") == rows
    with pytest.raises(InputError, match=r"one.jsonl:1: expected a JSON object"):
        read_records(tmp_path / "one.jsonl")
    (tmp_path / "ints.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="expected a JSON list of objects"):
        read_records(tmp_path / "ints.json")
    (tmp_path / "bad.json.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="bad.json.gz: cannot read"):
        read_records(tmp_path / "bad.json.gz")
    with pytest.raises(InputError, match="no such file"):
        read_records(tmp_path / "missing.json")


def test_atomic_write_leaves_nothing_on_failure_and_normal_permissions(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError), atomic_writer(target) as f:
        f.write("partial\n")
        raise RuntimeError("crash")
    assert list(tmp_path.iterdir()) == []
    write_jsonl(target, [{"a": 1}])
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert os.stat(target).st_mode & 0o777 == os.stat(plain).st_mode & 0o777
    assert read_jsonl(target) == [{"a": 1}]


# ----------------------------------------------------------------------------- output safety


def test_a_symlink_is_written_through_to_its_target(tmp_path: Path) -> None:
    real = tmp_path / "data" / "real.jsonl"
    real.parent.mkdir()
    real.write_text("old\n")
    os.chmod(real, 0o640)
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    write_jsonl(link, [{"a": 1}])
    assert link.is_symlink() and os.readlink(link) == str(real)  # the link survives
    assert read_jsonl(real) == [{"a": 1}]
    assert os.stat(real).st_mode & 0o777 == 0o640  # the replaced file keeps its permissions
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.jsonl"]


def test_fifos_devices_and_std_streams_are_written_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_jsonl(fifo, [{"a": 1}])
    reader.join(timeout=10)
    assert got == ['{"a": 1}\n'] and stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO, not a replaced file
    write_jsonl("/dev/null", [{"a": 1}])
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    write_jsonl("/dev/stdout", [{"b": 2}])
    write_jsonl("-", [{"c": 3}])
    assert capsys.readouterr().out == '{"b": 2}\n{"c": 3}\n'
    assert is_write_through("-") and is_write_through(fifo) and not is_write_through(tmp_path / "x.jsonl")


def test_temp_file_is_fsynced_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    write_jsonl(tmp_path / "x.jsonl", [{"a": 1}])
    assert events[:2] == ["fsync", "replace"]


def test_stale_part_files_are_removed_on_the_next_write(tmp_path: Path) -> None:
    from evolm.runs.files import _HOST

    dead = subprocess.Popen(["true"])
    dead.wait()
    target = tmp_path / "out.jsonl"
    stale_pid = tmp_path / f".out.jsonl.{dead.pid}@{_HOST}.abc123.part"  # its writer is gone
    old = tmp_path / ".out.jsonl.xyz.part"  # an old-style name, untouched for two hours
    live = tmp_path / f".out.jsonl.{os.getppid()}@{_HOST}.def456.part"  # a live writer's: kept
    other = tmp_path / ".other.jsonl.1@x.part"  # another target's: kept
    for p in (stale_pid, old, live, other):
        p.write_text("partial\n")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    write_jsonl(target, [{"a": 1}])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, live.name, other.name])


def test_check_outputs_differ(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text("{}\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(inp)
    hard = tmp_path / "hard.jsonl"
    os.link(inp, hard)
    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    (run / "samples" / "phase-001-rubric.jsonl").write_text("{}\n")
    for out, ins in [(inp, [inp]), (str(inp), [tmp_path / "." / "in.jsonl"]), (link, [inp]), (hard, [inp]),
                     (run / "samples" / "phase-001-rubric.jsonl", [run])]:
        with pytest.raises(InputError, match="the output is also an input"):
            check_outputs_differ([out], [None, "-", *ins])
    with pytest.raises(InputError, match="two different outputs"):
        check_outputs_differ([tmp_path / "a.json", link, tmp_path / "a.json"], [])
    check_outputs_differ([tmp_path / "out.jsonl", None, "-", "/dev/stdout", run / "report.html"], [inp, run, "-"])


# ----------------------------------------------------------------------------- rows written as they come


def test_resumable_jsonl_keeps_rows_of_a_crash_and_resumes_them(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"old": true}\n')
    partial = tmp_path / "out.jsonl.partial"
    with pytest.raises(RuntimeError), resumable_jsonl(out) as w:
        w.write([{"i": 0}, {"i": 1}])
        assert read_jsonl(partial) == [{"i": 0}, {"i": 1}]  # on disk already
        raise RuntimeError("killed")
    assert read_jsonl(out) == [{"old": True}]  # the old output is untouched until a run finishes
    with partial.open("a") as f:
        f.write('{"i": 2, "cut')  # a line torn by a kill
    with pytest.raises(InputError, match="interrupted run; resume it, or delete it"):
        with resumable_jsonl(out):
            pass
    with resumable_jsonl(out, resume=True) as w:
        assert w.done == [{"i": 0}, {"i": 1}]
        w.write([{"i": 2}])
    assert read_jsonl(out) == [{"i": 0}, {"i": 1}, {"i": 2}] and not partial.exists()
    with resumable_jsonl(out, resume=True) as w:  # a complete output resumes too (e.g. the input grew)
        assert len(w.done) == 3
        w.write([{"i": 3}])
    assert len(read_jsonl(out)) == 4
    with resumable_jsonl(out) as w:  # without resume: replaced at the end
        w.write([{"new": 1}])
    assert read_jsonl(out) == [{"new": 1}]
    with pytest.raises(RuntimeError), resumable_jsonl(out) as w:
        raise RuntimeError("nothing written")
    assert not partial.exists()  # an empty partial file is not left behind


def test_resumable_jsonl_refuses_a_second_writer_and_resuming_a_stream(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with resumable_jsonl(out) as w:
        w.write([{"i": 0}])
        with pytest.raises(InputError, match="another process is writing"):
            with resumable_jsonl(out, resume=True):
                pass
        assert (tmp_path / "out.jsonl.partial").exists()  # the refused writer did not remove the first one's file
    assert read_jsonl(out) == [{"i": 0}]
    with pytest.raises(InputError, match="cannot resume"):
        with resumable_jsonl("-", resume=True):
            pass


def test_hostile_json_lines_are_one_line_errors(tmp_path: Path) -> None:
    from evolm.errors import InputError

    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"a": ' + "[" * 100000 + "]" * 100000 + "}\n")
    big = tmp_path / "big.jsonl"
    big.write_text('{"prompt": ' + "9" * 5000 + "}\n")
    for path, message in ((deep, "nested too deeply"), (big, "unreadable JSON")):
        with pytest.raises(InputError, match=message) as e:
            read_jsonl(path)
        assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- one line discipline: \n ends a line

BREAKS = "a\u2028b\u2029c\x85d\re\r\nf\x0bg\x0ch\x1ci\x1dj\x1ek\nl"
"""Every character ``str.splitlines()`` breaks on, inside one string."""


def _raw(rows: list[dict]) -> str:
    """Rows as older evolm (and other tools) wrote them: ``json.dumps(ensure_ascii=False)``, U+2028 and kin raw."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def test_dumps_line_escapes_every_line_break_and_split_lines_splits_on_newline_only() -> None:
    from evolm.runs.jsonl import dumps_line, split_lines

    line = dumps_line({"text": BREAKS, "nested": [{"k": BREAKS}]})
    assert line.endswith("\n") and line.splitlines() == [line[:-1]]  # one line to any reader, splitlines too
    assert json.loads(line) == {"text": BREAKS, "nested": [{"k": BREAKS}]}
    assert split_lines('{"a": "x\u2028y"}\n{"b": 1}\r\n{"c": 2}') == ['{"a": "x\u2028y"}', '{"b": 1}\r', '{"c": 2}']
    assert split_lines("") == [] and split_lines("\n") == [""]


def test_every_record_type_reads_back_with_line_breaks_inside_strings(tmp_path: Path, monkeypatch) -> None:
    """Each writer of evolm's JSONL files and its reader, with all of ``BREAKS`` in every string; each reader also
    on the same file written raw (U+2028, U+2029, U+0085 unescaped), as evolm wrote it before."""
    import io
    import sys

    from evolm.eval.rb2 import read_scores, write_scores
    from evolm.eval.rb2_scoring import ScoredRow
    from evolm.eval.rubric_source import read_rubric_table
    from evolm.runs.jsonl import append_jsonl
    from evolm.runs.records import SampleRecord, StepRecord, append_records, read_lenient, read_metrics
    from evolm.runs.rundir import append_frozen_rubrics, read_frozen_rubrics
    from evolm.training.contrast import ReplayBuffer

    rows = [{"prompt": f"Q{i} {BREAKS}", "response": BREAKS, "n": i} for i in range(3)]
    for raw in (False, True):
        d = tmp_path / ("raw" if raw else "evolm")
        d.mkdir()
        write = (lambda p, rs: p.write_text(_raw(rs), encoding="utf-8")) if raw else write_jsonl

        write(d / "rows.jsonl", rows)  # evolm rubric / judge outputs, eval files, held-out items
        assert read_jsonl(d / "rows.jsonl") == rows and read_records(d / "rows.jsonl") == rows
        (d / "rows.json").write_bytes((d / "rows.jsonl").read_bytes())  # JSON Lines under a .json name
        assert read_records(d / "rows.json") == rows
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((d / "rows.jsonl").read_bytes())))
        assert read_jsonl("-") == rows

        if not raw:
            append_jsonl(d / "log.jsonl", rows[:2])
            append_jsonl(d / "log.jsonl", rows[2:])
            assert read_jsonl(d / "log.jsonl") == rows

        # an interrupted output and its resume (OUTPUT.partial)
        if raw:
            (d / "out.jsonl.partial").write_text(_raw(rows[:2]), encoding="utf-8")
        else:
            with pytest.raises(KeyboardInterrupt), resumable_jsonl(d / "out.jsonl") as out:
                out.write(rows[:2])
                raise KeyboardInterrupt
        with resumable_jsonl(d / "out.jsonl", resume=True) as out:
            assert out.done == rows[:2]
            out.write(rows[2:])
        assert read_jsonl(d / "out.jsonl") == rows

        # metrics and samples (records), frozen rubrics, the replay buffer
        steps = [StepRecord(step=s, role="policy") for s in (1, 2, 3)]
        samples = [SampleRecord(step=s, role="policy", slot=0, question=BREAKS, completion=BREAKS + str(s),
                                rubric_text=BREAKS) for s in (1, 2, 3)]
        if raw:
            (d / "metrics.jsonl").write_text(_raw([r.to_json() for r in steps]), encoding="utf-8")
            (d / "samples.jsonl").write_text(_raw([r.to_json() for r in samples]), encoding="utf-8")
            (d / "frozen_rubrics.jsonl").write_text(_raw([{"question": BREAKS, "text": BREAKS}]), encoding="utf-8")
        else:
            append_records(d / "metrics.jsonl", steps)
            append_records(d / "samples.jsonl", samples)
            append_frozen_rubrics(d, {BREAKS: BREAKS})
        assert [r.step for r in read_metrics(d)] == [1, 2, 3]
        read = read_lenient(d / "samples.jsonl")
        assert (read.skipped, [SampleRecord.from_json(r) for r in read.rows]) == (0, samples)
        assert read_frozen_rubrics(d) == {BREAKS: BREAKS}

        buffer = ReplayBuffer(8)
        for s in range(3):
            buffer.add(s, BREAKS, f"answer {s} {BREAKS}")
        if raw:
            (d / "buffer.jsonl").write_text(_raw([{"step": e.step, "question": e.question, "answer": e.answer}
                                                  for e in buffer.entries]), encoding="utf-8")
        else:
            buffer.save(d / "buffer.jsonl")
        assert list(ReplayBuffer.load(d / "buffer.jsonl", 8).entries) == list(buffer.entries)

        # RewardBench 2 scores, rubric tables
        scored = [ScoredRow(f"id{BREAKS}{i}", "Factuality", 1, (0.5, 0.25)) for i in range(2)]
        write(d / "scores.jsonl", [r.to_dict() for r in scored]) if raw else write_scores(d / "scores.jsonl", scored)
        assert read_scores(d / "scores.jsonl") == scored
        rubric = {"criteria": [{"criterion": BREAKS, "weight": 1.0, "scoring_levels": {"1.0": "y", "0.0": "n"}}]}
        write(d / "rubrics.jsonl", [{"prompt": BREAKS, "rubric": rubric}])
        assert read_rubric_table(d / "rubrics.jsonl").by_prompt[BREAKS] is not None

        if not raw:  # what evolm writes reads as whole lines even to a str.splitlines() reader
            for f in d.glob("*.jsonl"):
                text = f.read_text(encoding="utf-8")
                assert text.splitlines() == text.split("\n")[:-1], f.name


def test_writers_write_strict_json_a_non_finite_number_as_null(tmp_path: Path) -> None:
    from evolm.cli._common import write_result
    from evolm.runs.jsonl import dumps_line, write_jsonl

    nan, inf = float("nan"), float("inf")
    line = dumps_line({"score": nan, "xs": [inf, -inf, 0.5], "nested": {"s": (nan,)}})
    assert json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} is not JSON")) == \
        {"score": None, "xs": [None, None, 0.5], "nested": {"s": [None]}}
    write_jsonl(tmp_path / "rows.jsonl", [{"score": nan}])
    write_result(str(tmp_path / "result.json"), {"accuracy": nan, "n": 3}, "table")
    for name in ("rows.jsonl", "result.json"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert "NaN" not in text and json.loads(text.strip())["accuracy" if name == "result.json" else "score"] is None
