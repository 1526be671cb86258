"""JSONL reading with line-numbered errors, and atomic writing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evolm.errors import InputError
from evolm.jsonl import atomic_writer, iter_jsonl_lenient, read_jsonl, write_jsonl


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


def test_lenient_reader_skips_a_torn_last_line(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "rew')
    assert [r["step"] for r in iter_jsonl_lenient(p)] == [1, 2]
