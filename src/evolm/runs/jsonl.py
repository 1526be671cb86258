r"""JSON Lines: one strict JSON object per line, read with errors that name the file and line.

A line is what ends in ``\n``, nothing else: ``str.splitlines()`` also splits on ``\r``, U+0085, U+2028, U+2029 and
other characters that JSON strings may hold raw, which would cut a record in two. Writers use ``json.dumps``'
default ``ensure_ascii``, so a written line holds no character but ASCII and no tool splits it; readers split on
``\n`` alone (``split_lines``), so files that other tools wrote with those characters raw read whole too.

Every writer writes strict JSON: a non-finite float becomes ``null`` (``finite_json``), never ``NaN`` or
``Infinity``, which ``jq``, JavaScript and Go refuse. Whole files are written atomically (``runs/files.py``).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import sys
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evolm.errors import InputError
from evolm.runs.files import atomic_writer


def finite_json(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, +-inf) inside it, at any depth, replaced by ``None``.

    >>> finite_json({"score": float("nan"), "xs": [1.0, float("inf")], "n": 2})
    {'score': None, 'xs': [1.0, None], 'n': 2}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that writes strict JSON: a non-finite float becomes ``null`` (``finite_json``), never ``NaN``."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError as e:  # a NaN or an infinity somewhere (a circular reference stays an error)
        if "Circular" in str(e):
            raise
        return json.dumps(finite_json(value), allow_nan=False, **kwargs)


def dumps_line(row: Any) -> str:
    r"""``row`` as one line of strict ASCII JSON, ``\n`` included: nothing inside it is a line break to any reader.

    >>> dumps_line({"score": float("nan"), "text": "a\u2028b"})
    '{"score": null, "text": "a\\u2028b"}\n'
    """
    return dumps(row) + "\n"


def split_lines(text: str) -> list[str]:
    r"""The lines of JSONL text: split on ``\n`` only (never ``str.splitlines``); a last line without one counts.

    >>> split_lines('{"a": "x\u2028y"}\r\n{"b": 1}')
    ['{"a": "x\u2028y"}\r', '{"b": 1}']
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_jsonl(path: str | Path, required: Iterable[str] = ()) -> list[dict[str, Any]]:
    """All objects of a JSONL file (``-`` reads stdin, ``.gz`` is decompressed), checking the ``required`` fields.

    Raises ``InputError`` naming the line for malformed JSON, a non-object line or a missing field.
    Blank lines are skipped.
    """
    if str(path) == "-":
        # The bytes, decoded strictly here: Python's own stdin decoding may be lenient (surrogateescape
        # under a C or POSIX locale), which would pass undecodable bytes on to fail when written.
        buffer = getattr(sys.stdin, "buffer", None)
        try:
            text = buffer.read().decode("utf-8") if buffer is not None else sys.stdin.read()
        except UnicodeDecodeError as e:
            raise InputError(f"<stdin>: not UTF-8 text ({e.reason})") from None
        return parse_jsonl_lines(split_lines(text), "<stdin>", required)
    return parse_jsonl_lines(split_lines(_file_text(path)), str(path), required)


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The objects of a file holding either a JSON list of objects or JSON Lines (``.gz`` too).

    Data sets ship both ways, and JSON Lines often under a ``.json`` name, so the content decides: a ``.jsonl``
    file is JSON Lines; any other is one JSON list if it parses as one, else JSON Lines.
    """
    text = _file_text(path)
    if not Path(path).name.removesuffix(".gz").endswith(".jsonl"):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # not one JSON document: JSON Lines below names the bad line
            value = None
        if isinstance(value, list):
            if not all(isinstance(v, dict) for v in value):
                raise InputError(f"{path}: expected a JSON list of objects")
            if "\\ud" in text or "\\uD" in text:
                check_text(value, str(path))
            return value
    return parse_jsonl_lines(split_lines(text), str(path))


def _file_text(path: str | Path) -> str:
    """The UTF-8 text of a file, decompressed first when its name ends in ``.gz``."""
    p = Path(path)
    if not p.is_file():
        what = ("is a directory, not a file" if p.is_dir() else
                "is not a regular file (a FIFO, a device such as /dev/null, a socket): give a file" if p.exists() else
                "no such file")
        raise InputError(f"{path}: {what}")
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
        except RecursionError:
            raise InputError(f"{name}:{lineno}: JSON nested too deeply") from None
        except ValueError as e:  # e.g. an integer beyond Python's 4300-digit conversion limit
            raise InputError(f"{name}:{lineno}: unreadable JSON ({str(e).splitlines()[0][:120]})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{name}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        if "\\ud" in line or "\\uD" in line:
            check_text(obj, f"{name}:{lineno}")
        for key in required:
            if key not in obj:
                raise InputError(f"{name}:{lineno}: missing field '{key}'")
        rows.append(obj)
    return rows


def check_text(obj: Any, where: str) -> None:
    """Refuse a JSON value holding a lone surrogate (``"\\ud800"``): JSON can escape one, but it is no text and
    fails later, when written as UTF-8 or tokenized. An escaped pair is one character and passes."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{where}: a lone surrogate escape (\\ud800-\\udfff without its pair) is not text") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write all rows atomically (``files.atomic_writer``)."""
    with atomic_writer(path) as f:
        for row in rows:
            f.write(dumps_line(row))


def append_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append rows and flush them to disk once (for logs that must survive a crash)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(dumps_line(row) for row in rows))
        f.flush()
        os.fsync(f.fileno())
