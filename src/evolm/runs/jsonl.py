r"""Reading and writing JSON Lines (and reading JSON-list data files), with errors that name the file and line.

Outputs are written to a temporary file beside the target, fsynced and renamed into place only when
complete, so that an interrupted command never leaves a file that looks finished; streams, FIFOs and
devices are written through, and a symlink's target is replaced (``atomic_writer``). Long commands
write rows as they go and can resume (``resumable_jsonl``). ``check_outputs_differ`` refuses an
output that is also an input, ``check_writable`` one that cannot be written; write failures (a full
disk, a non-directory) are one-line ``InputError``s naming the output.

One line discipline for every JSONL file evolm writes or reads: a line is what ends in ``\n``,
nothing else. ``str.splitlines()`` also splits on ``\r``, ``\v``, ``\f``, ``\x1c``-``\x1e``,
U+0085, U+2028 and U+2029, which JSON strings may hold raw: an answer with U+2028 would cut its
record in two. So readers split with ``split_lines`` (``\n`` only; a ``\r`` before it is JSON
whitespace), and writers go through ``dumps_line``: ``json.dumps`` escapes ``\n``, ``\r`` and the
other control characters, and U+0085, U+2028 and U+2029 are escaped too, so that other tools that
split on them read evolm's files whole as well.

Every writer writes strict JSON: Python's ``json`` writes a non-finite float as ``NaN`` or ``Infinity``,
which is not JSON and which other readers (``jq``, JavaScript, Go) refuse. ``dumps_line`` and ``dumps``
write ``null`` for it instead (``finite_json``): a reading that is not a number is a missing one.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import io
import json
import math
import os
import re
import socket
import stat
import sys
import tempfile
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from evolm.errors import InputError

LINE_END = "\n"
"""What ends a JSONL line, and the only thing that does."""
_UNSAFE_RAW = {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}  # line breaks to splitlines()


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
    r"""``row`` as one JSONL line of strict JSON (``dumps``: NaN written ``null``), ``\n`` included; nothing inside
    it is a line break to any reader.

    >>> dumps_line({"score": float("nan")})
    '{"score": null}\n'
    """
    text = dumps(row, ensure_ascii=False)
    if any(c in text for c in _UNSAFE_RAW):  # only inside strings: JSON allows them nowhere else
        for raw, escaped in _UNSAFE_RAW.items():
            text = text.replace(raw, escaped)
    return text + LINE_END


def split_lines(text: str) -> list[str]:
    r"""The lines of JSONL text: split on ``\n`` only (never ``str.splitlines``); a last line without one counts."""
    lines = text.split(LINE_END)
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

    Data sets ship both ways, and JSON Lines often under a ``.json`` name, so the content decides:
    a ``.jsonl`` file is JSON Lines; any other is one JSON list if it parses as one, else JSON
    Lines. ``InputError`` names the file (and the line) otherwise.
    """
    text = _file_text(path)
    if not Path(path).name.removesuffix(".gz").endswith(".jsonl"):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            value = None  # not one JSON document: read it as JSON Lines below (which names the bad line)
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


# Names of the temporary files ``atomic_writer`` writes beside a target: ``.<name>.<pid>@<host>.<random>.part``.
_STALE_PART_SECONDS = 3600  # a .part file untouched this long is left over from a killed write
_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"
_STREAMS = {"-": "stdout", "/dev/stdout": "stdout", "/dev/stderr": "stderr"}


def is_write_through(path: str | Path) -> bool:
    """Whether ``path`` is written to directly rather than replaced: ``-``, ``/dev/...``, a FIFO or a device."""
    if str(path) in _STREAMS or str(path).startswith("/dev/"):
        return True
    try:
        mode = os.stat(path).st_mode  # follows symlinks: a link to a FIFO is a FIFO
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode)


def replace_target(path: str | Path) -> Path:
    """The regular file that writing ``path`` replaces: a symlink's final target, so that the link survives."""
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise InputError(f"{path}: is a directory")
    return target


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, under another user
        return True
    return True


def remove_stale_parts(target: Path, max_age: float = _STALE_PART_SECONDS) -> list[Path]:
    """Remove ``.<name>.*.part`` siblings of ``target`` left by killed writes; return what was removed.

    A file is stale when its writer (``<pid>@<host>`` in its name, this host) is no longer running, or
    when nobody has written to it for ``max_age`` seconds. Files of live writers are left alone.
    """
    removed = []
    prefix = f".{target.name}."
    try:
        candidates = [p for p in target.parent.iterdir() if p.name.startswith(prefix) and p.name.endswith(".part")]
    except OSError:
        return removed
    now = time.time()
    for p in candidates:
        owner = p.name[len(prefix) :].split(".", 1)[0]
        pid, _, host = owner.partition("@")
        try:
            st = p.lstat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        dead = host == _HOST and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid))
        if dead or now - st.st_mtime > max_age:
            with contextlib.suppress(OSError):
                p.unlink()
                removed.append(p)
    return removed


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: not every platform can open a directory)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: str | Path) -> Iterator[TextIO]:
    """A text stream that becomes ``path`` only if the block finishes.

    ``-``, ``/dev/stdout`` and ``/dev/stderr`` write to the process's streams; other ``/dev/`` paths,
    FIFOs and devices are written through (opened for appending) since they cannot be replaced. A
    symlink is written through to its target: the target is replaced, the link stays. Anything else
    is written to ``.<name>.<pid>@<host>.<random>.part`` beside the target, fsynced, and renamed over
    it; stale ``.part`` files of killed writes are removed first (``remove_stale_parts``).
    """
    if str(path) in _STREAMS:
        stream = getattr(sys, _STREAMS[str(path)])
        if stream is None:  # the process started with that descriptor closed
            raise InputError(f"{path}: {_STREAMS[str(path)]} is closed; write to a file instead")
        yield stream
        stream.flush()
        return
    if is_write_through(path):
        try:
            f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as e:
            raise InputError(f"{path}: cannot write ({e.strerror})") from None
        try:
            yield f
        except BaseException as e:
            with contextlib.suppress(OSError):  # a failed write left bytes in the buffer: keep the first error
                f.close()
            if isinstance(e, OSError):  # a full disk, a device that takes nothing (/dev/full): name the path
                raise InputError(f"{path}: cannot write ({e.strerror or e})") from None
            raise
        try:
            f.close()
        except OSError as e:
            raise InputError(f"{path}: cannot write ({e.strerror or e})") from None
        return
    target = replace_target(path)
    _make_parent(target, path)
    try:
        remove_stale_parts(target)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}@{_HOST}.", suffix=".part", dir=target.parent)
    except OSError as e:
        raise InputError(f"{path}: cannot write there ({e.strerror or e})") from None
    f = os.fdopen(fd, "w", encoding="utf-8")
    try:
        try:
            yield f
            f.flush()
            os.fsync(f.fileno())
            f.close()
        except OSError as e:  # a full disk, a quota, while writing or flushing: one line naming the path
            raise InputError(f"{path}: cannot write ({e.strerror or e})") from None
        os.chmod(tmp, _new_file_mode(target))  # mkstemp creates 0600; keep the target's, or what open() would give
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            f.close()  # flushing what a failed write left in the buffer fails again: the first error is the one
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def check_writable(outputs: Iterable[str | Path | None]) -> None:
    """``InputError`` for an output that cannot be written: its folder cannot be made, or no file can be created in it.

    Run before a command loads a model or computes anything, so that a non-directory, read-only or
    missing location costs nothing. A temporary file is created and removed beside each output (a
    permission check would not see a read-only mount, nor root's rights); streams, FIFOs and devices
    are skipped (a full device shows only when written to: then the first write fails, one line).
    """
    for out in outputs:
        if out is not None and str(out) in _STREAMS and getattr(sys, _STREAMS[str(out)]) is None:
            raise InputError(f"{out}: {_STREAMS[str(out)]} is closed; write to a file instead")
        if out is None or is_write_through(out):
            continue
        target = replace_target(out)
        _make_parent(target, out)
        try:
            with tempfile.NamedTemporaryFile(prefix=f".{target.name}.", suffix=".check", dir=target.parent):
                pass
        except OSError as e:
            raise InputError(f"{out}: cannot write there ({e.strerror or e})") from None


def _make_parent(target: Path, given: str | Path) -> None:
    """Create the folder an output goes to; ``InputError`` naming ``given`` when that cannot be done."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where a folder should be
        raise InputError(f"{given}: cannot write there ({target.parent} is not a directory)") from None
    except OSError as e:
        raise InputError(f"{given}: cannot write there ({e.strerror or e})") from None


def _new_file_mode(target: Path) -> int:
    """The permissions of the file replacing ``target``: its own if it exists, else those ``open()`` gives."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(os.stat(target).st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def check_outputs_differ(outputs: Iterable[str | Path | None], inputs: Iterable[str | Path | None]) -> None:
    """``InputError`` if an output is one of the inputs (or another output): writing it would destroy it.

    Paths are compared as files (``os.path.samefile``: symlinks and hard links too) and by resolved
    path; an input directory stands for every file under it. ``-``, ``/dev/...``, FIFOs, devices
    and ``None`` are skipped: they are streams, not files that an output replaces. An output's
    ``.partial`` file (``resumable_jsonl``: appended to, then renamed over the output) counts as
    the output: an input there would be moved away.
    """
    outs = [Path(o) for o in outputs if o is not None and not is_write_through(o)]
    ins: list[Path] = []
    for i in inputs:
        if i is None or is_write_through(i):
            continue
        p = Path(i)
        ins += [f for f in sorted(p.rglob("*")) if f.is_file()] if p.is_dir() else [p]
    for n, out in enumerate(outs):
        real = Path(os.path.realpath(out))
        partial = real.with_name(real.name + ".partial")
        for i in ins:
            if _same_file(out, i):
                raise InputError(f"{out}: the output is also an input ({i}); refusing to overwrite it")
            if _same_file(partial, i):
                raise InputError(f"{i}: the input is the partial file of the output {out}; refusing to move it "
                                 "(copy it elsewhere first)")
        for other in outs[:n]:
            if _same_file(out, other):
                raise InputError(f"{out}: given as two different outputs ({other} too)")


def _same_file(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError):
        if os.path.samefile(a, b):
            return True
    return os.path.realpath(a) == os.path.realpath(b)


class ResumableJsonl:
    """JSON Lines written as they are produced; see ``resumable_jsonl``."""

    def __init__(self, path: str | Path, stream: TextIO, partial: Path | None, done: list[dict[str, Any]]) -> None:
        self.path = str(path)
        self.partial = partial  # the file the rows go to until the end (None: written straight through)
        self.done = done  # rows already there when resuming
        self.rows: list[dict[str, Any]] = list(done)  # every row of the output so far
        self._f = stream

    def write(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append rows and make them durable (flushed, and fsynced for a file)."""
        rows = list(rows)
        try:
            self._f.write("".join(dumps_line(r) for r in rows))
            self._f.flush()
            if self.partial is not None:
                os.fsync(self._f.fileno())
        except OSError as e:  # a full disk, a closed pipe
            raise InputError(f"{self.partial or self.path}: cannot write ({e.strerror or e})") from None
        self.rows += rows


@contextlib.contextmanager
def resumable_jsonl(path: str | Path, resume: bool = False) -> Iterator[ResumableJsonl]:
    """A JSONL output whose rows survive a crash: ``write`` appends and fsyncs them as they come.

    For a regular file (or a symlink to one) rows go to ``<name>.partial`` beside it, which replaces
    the file when the block finishes: an interrupted run never leaves a file that looks complete,
    and keeps its rows in the ``.partial`` file. With ``resume``, the rows of that ``.partial``
    file (else of the existing output) are read into ``done`` (a torn last line is dropped) and
    new rows are appended after them; without it a ``.partial`` file holding rows is an
    ``InputError`` (never silently thrown away). ``-``, ``/dev/...``, FIFOs and devices are written
    straight through and cannot be resumed. A second process writing the same output is refused.
    """
    if is_write_through(path):
        if resume:
            raise InputError(f"{path}: cannot resume an output that is a stream, FIFO or device")
        with atomic_writer(path) as f:
            yield ResumableJsonl(path, f, None, [])
        return
    target = replace_target(path)
    partial = target.with_name(target.name + ".partial")
    _make_parent(target, path)
    try:
        f = open(partial, "a+b")  # noqa: SIM115 - closed below
    except OSError as e:
        raise InputError(f"{path}: cannot write there ({e.strerror or e})") from None
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise InputError(f"{partial}: another process is writing this output") from None
    try:
        f.seek(0)
        data = f.read()
        done: list[dict[str, Any]] = []
        source_is_target = False
        if resume:
            source = partial
            if data.strip():
                data = data[: data.rfind(b"\n") + 1]  # a line cut by a kill was never finished
                f.truncate(len(data))
            elif target.is_file():  # no interrupted run: continue the complete output
                data, source = target.read_bytes(), target
                data += b"" if data.endswith(b"\n") or not data else b"\n"
            try:
                done = parse_jsonl_lines(split_lines(data.decode("utf-8")), str(source))
            except UnicodeDecodeError as e:
                raise InputError(f"{source}: not UTF-8 text ({e.reason})") from None
            if source == target:
                source_is_target = True
                f.truncate(0)
                f.write(data)
                f.flush()
        elif data.strip():
            raise InputError(f"{partial}: holds the rows of an interrupted run; resume it, or delete it to start again")
        else:
            f.truncate(0)
        writer = ResumableJsonl(path, io.TextIOWrapper(f, encoding="utf-8", write_through=True), partial, done)
    except BaseException:
        _close_partial(f, partial)
        raise
    try:
        try:
            yield writer
        except BaseException:
            if source_is_target and len(writer.rows) == len(done):  # only a copy of the output: nothing to keep
                f.truncate(0)
            raise
        writer._f.flush()
        os.fsync(f.fileno())
        os.chmod(partial, _new_file_mode(target))
        os.replace(partial, target)
        _fsync_dir(target.parent)
    finally:
        _close_partial(writer._f, partial)


def _close_partial(f: Any, partial: Path) -> None:
    """Close a ``.partial`` file (still locked: so removing it is safe), removing it if it holds nothing."""
    with contextlib.suppress(OSError):
        if partial.exists() and os.fstat(f.fileno()).st_size == 0 and os.path.samefile(partial, f.fileno()):
            partial.unlink()
    with contextlib.suppress(OSError):  # after a failed write the buffer cannot be flushed: the first error stands
        f.close()


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write all rows atomically (see ``atomic_writer``)."""
    with atomic_writer(path) as f:
        for row in rows:
            f.write(dumps_line(row))


def append_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append rows and flush them to disk once (for logs that must survive a crash)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(dumps_line(row) for row in rows))
        f.flush()
        os.fsync(f.fileno())
