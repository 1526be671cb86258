"""A JSONL output whose rows survive a crash (``resumable_jsonl``): rows are appended to ``<name>.partial`` and
fsynced as they come, the file replaces the output at the end, and ``--resume-output`` continues it."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from evolm.errors import InputError
from evolm.runs.files import atomic_writer, fsync_dir, is_write_through, make_parent, new_file_mode, replace_target
from evolm.runs.jsonl import dumps_line, parse_jsonl_lines, split_lines


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
    make_parent(target, path)
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
        os.chmod(partial, new_file_mode(target))
        os.replace(partial, target)
        fsync_dir(target.parent)
    finally:
        _close_partial(writer._f, partial)


def _close_partial(f: Any, partial: Path) -> None:
    """Close a ``.partial`` file (still locked: so removing it is safe), removing it if it holds nothing."""
    with contextlib.suppress(OSError):
        if partial.exists() and os.fstat(f.fileno()).st_size == 0 and os.path.samefile(partial, f.fileno()):
            partial.unlink()
    with contextlib.suppress(OSError):  # after a failed write the buffer cannot be flushed: the first error stands
        f.close()
