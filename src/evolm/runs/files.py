"""Where outputs go, safely: an atomic write (a temporary file beside the target, fsynced, then ``os.replace``),
streams, FIFOs and devices written through, a symlink's target replaced, and the checks a command makes before it
computes anything: an output that is also an input (``check_outputs_differ``), one that cannot be written
(``check_writable``). Failures are one-line ``InputError``s naming the output."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from evolm.errors import InputError

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


def fsync_dir(directory: Path) -> None:
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
    make_parent(target, path)
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
        os.chmod(tmp, new_file_mode(target))  # mkstemp creates 0600; keep the target's, or what open() would give
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            f.close()  # flushing what a failed write left in the buffer fails again: the first error is the one
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


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
        make_parent(target, out)
        try:
            with tempfile.NamedTemporaryFile(prefix=f".{target.name}.", suffix=".check", dir=target.parent):
                pass
        except OSError as e:
            raise InputError(f"{out}: cannot write there ({e.strerror or e})") from None


def make_parent(target: Path, given: str | Path) -> None:
    """Create the folder an output goes to; ``InputError`` naming ``given`` when that cannot be done."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where a folder should be
        raise InputError(f"{given}: cannot write there ({target.parent} is not a directory)") from None
    except OSError as e:
        raise InputError(f"{given}: cannot write there ({e.strerror or e})") from None


def new_file_mode(target: Path) -> int:
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
