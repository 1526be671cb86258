"""JSONL reading with line-numbered errors, and atomic writing."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from evolm.errors import InputError
from evolm.jsonl import atomic_writer, read_jsonl, read_records, write_jsonl


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
