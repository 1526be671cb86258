"""Reading and writing JSON Lines (and reading JSON-list data files), with errors that name the file and line.

Outputs are written to a temporary file beside the target and renamed into place only when
complete, so that an interrupted command never leaves a file that looks finished.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sys
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from evolm.errors import InputError


def read_jsonl(path: str | Path, required: Iterable[str] = ()) -> list[dict[str, Any]]:
    """All objects of a JSONL file (``-`` reads stdin, ``.gz`` is decompressed), checking the ``required`` fields.

    Raises ``InputError`` naming the line for malformed JSON, a non-object line or a missing field.
    Blank lines are skipped.
    """
    if str(path) == "-":
        return parse_jsonl_lines(sys.stdin.read().splitlines(), "<stdin>", required)
    return parse_jsonl_lines(_file_text(path).splitlines(), str(path), required)


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The objects of a file holding either a JSON list of objects or JSON Lines (``.gz`` too).

    Data sets ship both ways, and JSON Lines often under a ``.json`` name, so the content decides:
    a ``.jsonl`` file is JSON Lines; any other is one JSON list if it parses as one, else JSON
    Lines. ``InputError`` names the file (and the line) otherwise.
    """
    text = _file_text(path)
    if not Path(path).name.removesuffix(".gz").endswith(".jsonl"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None  # not one JSON document: read it as JSON Lines below
        if isinstance(value, list):
            if not all(isinstance(v, dict) for v in value):
                raise InputError(f"{path}: expected a JSON list of objects")
            return value
    return parse_jsonl_lines(text.splitlines(), str(path))


def _file_text(path: str | Path) -> str:
    """The UTF-8 text of a file, decompressed first when its name ends in ``.gz``."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path}: no such file")
    try:
        raw = p.read_bytes()
        return (gzip.decompress(raw) if p.name.endswith(".gz") else raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason})") from None
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read ({e})") from None


def parse_jsonl_lines(lines: Iterable[str], name: str, required: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The objects of JSONL text lines; ``InputError`` naming ``name`` and the line on any bad line."""
    required = list(required)
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{name}:{lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{name}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        for key in required:
            if key not in obj:
                raise InputError(f"{name}:{lineno}: missing field '{key}'")
        rows.append(obj)
    return rows


@contextlib.contextmanager
def atomic_writer(path: str | Path) -> Iterator[TextIO]:
    """A text stream that becomes ``path`` only if the block finishes (``-`` writes to stdout)."""
    if str(path) == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the permissions open() would
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write all rows atomically (see ``atomic_writer``)."""
    with atomic_writer(path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def append_jsonl(path: str | Path, row: dict[str, Any]) -> None:
    """Append one row and flush it to disk (for logs that must survive a crash)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
