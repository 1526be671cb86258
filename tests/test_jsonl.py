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
from evolm.jsonl import (
    atomic_writer, check_outputs_differ, is_write_through, read_jsonl, read_records, resumable_jsonl, write_jsonl,
)


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
    from evolm.jsonl import _HOST

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
