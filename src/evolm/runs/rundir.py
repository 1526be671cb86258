"""The run directory: start a fresh one, or find where to resume and cut the logs back to it.

The layout and the record types are in ``evolm.runs.records``. A checkpoint is complete when it holds
TRL's ``trainer_state.json`` and evolm's ``CheckpointState`` (written last, atomically). Resuming
validates the newest complete checkpoint (its state, its replay buffer, every file: weights finite,
TRL's optimizer / scheduler / RNG files whole archives, its JSON readable), falls back to an older one when it
does not validate, and cuts the logs back only once the trainer has loaded the checkpoint, so a
corrupt checkpoint costs no log lines. One process at a time trains in a run directory (``run_lock``).
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from evolm.config import RunConfig, load_config, to_dict
from evolm.dist import is_main
from evolm.errors import RunError
from evolm.runs.files import atomic_writer
from evolm.runs.jsonl import dumps, write_jsonl
from evolm.runs.records import (
    BUFFER_FILE,
    CHECKPOINTS_DIR,
    FROZEN_RUBRICS_FILE,
    METRICS_FILE,
    SAMPLES_DIR,
    SEQUENTIAL_STAGES,
    SMOKE_MARKER,
    STATE_FILE,
    CheckpointState,
    append_records,
    iter_lenient,
    read_buffer_file,
)

CONFIG_HISTORY_FILE = "config_history.jsonl"  # the settings a resume changed, one line per such resume
LOCK_FILE = ".evolm.lock"  # held (flock) by the process training in the directory; holds its PID


def save_config(cfg: RunConfig, path: str | Path) -> None:
    """Write ``cfg`` as YAML, atomically (a resume rewrites a run's config.yaml when its overrides change it)."""
    with atomic_writer(path) as f:
        f.write(yaml.safe_dump(to_dict(cfg), sort_keys=False))


@contextmanager
def run_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory for one training process: a second one is refused in one line naming the holder.

    An exclusive ``flock`` on ``RUN/.evolm.lock`` (created with the directory if need be), held until
    the block ends; the kernel drops it when the process dies, so a killed run never leaves the
    directory locked. Under torchrun the ranks of one job share the directory: only rank 0 (``RANK``)
    takes the lock. The lock file is removed on release (after a check that it is still the file
    that was locked), and a directory created only to hold it is removed too.
    """
    if not is_main():
        yield
        return
    import fcntl

    run_dir = Path(run_dir)
    created = not run_dir.exists()
    if run_dir.exists() and not run_dir.is_dir():
        raise RunError(f"output_dir {run_dir} is a file, not a directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    for _ in range(100):  # the holder may remove the file between our open and our flock: open it again
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RunError(f"{run_dir} is in use by another evolm process (PID {holder}); wait for it to end, "
                           "or choose another output_dir") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    else:
        raise RunError(f"{run_dir}: could not lock {LOCK_FILE}")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        yield
    finally:
        try:
            path.unlink(missing_ok=True)
            if created:
                run_dir.rmdir()  # only if nothing else was written there
        except OSError:
            pass
        os.close(fd)


@dataclass
class RunStart:
    """Where a run starts: its directory, the checkpoint to resume from, and what was passed over."""

    run_dir: Path
    checkpoint: Path | None = None
    skipped: list[str] = field(default_factory=list)  # newer checkpoints that failed validation, with why
    prompts_skipped: str | None = None  # prompt_length.PromptFit.note(): those over data.max_prompt_tokens

    @property
    def step(self) -> int:
        return checkpoint_state(self.checkpoint).step if self.checkpoint else 0


def open_run(cfg: RunConfig, resume: bool) -> RunStart:
    """A fresh run directory, or the newest checkpoint that validates (state, replay buffer, every file:
    ``_check_files``).

    On resume no log is changed: the logs are cut back to the checkpoint by ``cut_logs_back`` once
    the trainer has loaded it; only settings the resume's overrides change are written
    (``record_config``). A newer checkpoint that does not validate is passed over (and reported in
    ``skipped``) in favour of the one before it.
    """
    run_dir = Path(cfg.output_dir)
    if not resume and not is_main():  # another process of this launch: rank 0 checks and prepares the directory
        run_dir.mkdir(parents=True, exist_ok=True)
        return RunStart(run_dir)
    if not resume:
        if (run_dir / METRICS_FILE).exists() or (run_dir / CHECKPOINTS_DIR).exists():
            raise RunError(f"{run_dir} already holds a run: resume it with `evolm train --resume {run_dir}` "
                           "or choose another output_dir")
        if run_dir.exists() and not run_dir.is_dir():
            raise RunError(f"output_dir {run_dir} is a file, not a directory")
        own = {LOCK_FILE, SMOKE_MARKER, *SEQUENTIAL_STAGES}  # the lock, a smoke run's marker, a sequential run's stages
        others = sorted(p.name for p in run_dir.iterdir() if p.name not in own and not
                        (p.name == "config.yaml" and _resolved_config(p, cfg))) if run_dir.is_dir() else []
        if others:  # a config.yaml that is not a whole resolved config is someone's, not a run's that failed to start
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise RunError(f"output_dir {run_dir} holds files that are not a run's ({shown}); a new run needs a new "
                           "or empty directory")
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
        return RunStart(run_dir)
    ckpts = complete_checkpoints(run_dir)
    if not ckpts:
        raise RunError(f"{run_dir}: no complete checkpoint to resume from (a run saves every "
                       f"schedule.save_every steps and at each phase end); to start over, delete {run_dir}")
    skipped: list[str] = []
    for ckpt in reversed(ckpts):
        try:
            checkpoint_state(ckpt)
            read_buffer_file(ckpt / BUFFER_FILE)
            _check_files(ckpt)
        except RunError as e:
            skipped.append(str(e))
            continue
        start = RunStart(run_dir, ckpt, skipped)
        record_config(run_dir, cfg, start.step)
        return start
    raise RunError(f"{run_dir}: no checkpoint validates; the newest: {skipped[0]}")


def _resolved_config(path: Path, cfg: RunConfig) -> bool:
    """Whether ``path`` is a config.yaml as a run writes it (every setting, resolved): left by a run that stopped
    before its first step, so a new run may replace it. A config someone wrote names only some settings."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return False
    if not isinstance(data, dict):
        return False
    keys = {k for k in _flat(data) if not k.startswith("grpo.")}  # the grpo mapping holds only what was set
    return keys == {k for k in _flat(to_dict(cfg)) if not k.startswith("grpo.")}


def record_config(run_dir: Path, cfg: RunConfig, step: int | None) -> dict[str, dict]:
    """Make ``cfg`` the run's config.yaml when a resume changed settings, and say so in config_history.jsonl.

    One line per resume that changed something: the step it resumed after, the time, and each changed
    setting (dotted key) with its value before and after. A later resume without overrides keeps the
    changed settings. Returns the changes (``{}``: none, nothing written). Only the main process writes
    (``evolm.dist.is_main``): the other processes of a launch return ``{}``.
    """
    if not is_main():
        return {}
    path = run_dir / "config.yaml"
    if not path.is_file():  # no saved config to differ from (`evolm train --resume` refuses such a directory)
        return {}
    before, after = _flat(to_dict(load_config(path))), _flat(to_dict(cfg))
    before.pop("output_dir", None)  # where the run lives, not a setting: a moved run directory is no change
    after.pop("output_dir", None)
    changed = {k: {"from": before.get(k), "to": after.get(k)} for k in sorted(set(before) | set(after))
               if before.get(k) != after.get(k)}
    if changed:
        import time

        append_records(run_dir / CONFIG_HISTORY_FILE, [{"step": step, "time": time.time(), "changed": changed}])
        save_config(cfg, path)
    return changed


def _flat(d: dict, prefix: str = "") -> dict:
    """A config dict as ``{"judge.mode": "prob", ...}``; the grpo mapping is flattened too, lists are values."""
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "combined_weights":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def cut_logs_back(run_dir: Path, step: int) -> None:
    """Keep only the records of steps <= ``step`` in metrics.jsonl and samples/ (a resumed run writes the rest)."""
    _truncate_after(run_dir / METRICS_FILE, step)
    for f in (run_dir / SAMPLES_DIR).glob("*.jsonl"):
        _truncate_after(f, step)


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoints with both TRL's state and evolm's marker (written last), oldest first."""
    ckpts = [p for p in (run_dir / CHECKPOINTS_DIR).glob("checkpoint-*")
             if p.name.split("-")[-1].isdigit() and (p / STATE_FILE).is_file() and (p / "trainer_state.json").is_file()]
    return sorted(ckpts, key=lambda p: int(p.name.split("-")[-1]))


def checkpoint_state(ckpt: Path) -> CheckpointState:
    try:
        d = json.loads((ckpt / STATE_FILE).read_text(encoding="utf-8"))
        state = CheckpointState.from_json(d)
        if not isinstance(d, dict) or not isinstance(d.get("step"), int):
            raise ValueError("no step")
    except (OSError, ValueError, AttributeError) as e:
        raise RunError(f"{ckpt}: corrupt checkpoint state ({e.__class__.__name__})") from None
    return state


def write_checkpoint_state(ckpt: Path, state: CheckpointState) -> None:
    """Write evolm's state into a checkpoint, last (after TRL's files and the buffer): the completeness marker."""
    with atomic_writer(ckpt / STATE_FILE) as f:
        f.write(dumps(state.to_json()))


def _check_files(ckpt: Path) -> None:
    """Refuse a checkpoint any file of which would fail, or poison, the resume.

    Model weights (``*.safetensors``; a LoRA run's checkpoint holds the adapter alone, which counts):
    every tensor readable and every float finite. TRL's torch files (``optimizer.pt``, ``scheduler.pt``,
    ``rng_state*.pth``, ``training_args.bin``, DeepSpeed's shards): whole zip archives (a torn, truncated
    or overwritten save fails here, not after the logs are cut).
    ``trainer_state.json`` and every other JSON file: parses, ``trainer_state.json`` as an object.
    """
    weights = sorted(ckpt.glob("*.safetensors"))
    if not weights:
        raise RunError(f"{ckpt}: checkpoint has no model weights (*.safetensors)")
    for f in weights:
        _check_safetensors(f)
    for f in sorted(ckpt.rglob("*")):
        if f.suffix in (".pt", ".pth", ".bin") and f.is_file():
            _check_torch_file(f)
        elif f.suffix == ".json" and f.is_file():
            try:
                value = json.loads(f.read_bytes())
            except (ValueError, RecursionError, OSError) as e:
                raise RunError(f"{f}: unreadable ({e.__class__.__name__}); delete this checkpoint to resume from "
                               "an earlier one") from None
            if f.name == "trainer_state.json" and not isinstance(value, dict):
                raise RunError(f"{f}: not TRL's trainer state (a JSON object)")


def _check_safetensors(f: Path) -> None:
    import torch
    from safetensors import safe_open

    try:
        with safe_open(str(f), framework="pt") as st:
            for key in st.keys():  # noqa: SIM118 - safe_open has keys(), no iteration
                t = st.get_tensor(key)
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    raise RunError(f"{f}: weight {key} holds NaN or infinite values; delete this checkpoint to "
                                   "resume from an earlier one")
    except RunError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for a bad header or short file
        raise RunError(f"{f}: unreadable model weights ({e.__class__.__name__}); delete this checkpoint "
                       "to resume from an earlier one") from None


def _check_torch_file(f: Path) -> None:
    """A ``torch.save`` file is a zip archive: its directory must read, every member must lie inside the file, and
    the small members (the pickled structure, versions) must match their CRC-32. Tensor data is not read (a
    resume loads it next; reading it twice would double the cost of resuming a large run)."""
    try:
        size = f.stat().st_size
        with zipfile.ZipFile(f) as z:
            for info in z.infolist():
                if info.header_offset + info.compress_size > size:
                    raise zipfile.BadZipFile("a member runs past the end")
                with z.open(info) as member:  # reads the member's local header
                    if info.file_size <= 1 << 20 and info.CRC:
                        member.read()  # to the end: checks the CRC
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, zlib.error) as e:
        raise RunError(f"{f}: unreadable ({e.__class__.__name__}: a torn or corrupt save); delete this checkpoint "
                       "to resume from an earlier one") from None


def _truncate_after(path: Path, step: int) -> None:
    """Keep only the records of steps <= ``step`` (a resumed run writes the later ones again)."""
    if path.is_file():
        write_jsonl(path, [r for r in iter_lenient(path) if isinstance(r.get("step"), int) and r["step"] <= step])


def resume_config(run_dir: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """The saved config of a run directory (overrides may change e.g. judge endpoints, not the schedule)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise RunError(f"{run_dir}: not a run directory (no config.yaml)")
    cfg = load_config(path, overrides)
    cfg.output_dir = str(run_dir)
    saved = load_config(path)
    if to_dict(cfg)["schedule"] != to_dict(saved)["schedule"] or cfg.seed != saved.seed:
        raise RunError("the schedule and seed of a run cannot change on resume")
    if cfg.model.lora != saved.model.lora:  # a LoRA checkpoint holds an adapter, a full one every weight
        raise RunError("model.lora of a run cannot change on resume (its checkpoints hold "
                       + ("a LoRA adapter)" if saved.model.lora.r > 0 else "full weights)"))
    return cfg


# ----------------------------------------------------------------------------- a fixed writer's rubrics


def read_frozen_rubrics(run_dir: Path) -> dict[str, str]:
    """question -> rubric text written by the fixed writer of a sequential / frozen_rubric run."""
    return {str(r["question"]): str(r["text"]) for r in iter_lenient(run_dir / FROZEN_RUBRICS_FILE)
            if "question" in r and "text" in r}


def append_frozen_rubrics(run_dir: Path, written: dict[str, str]) -> None:
    """Keep a fixed writer's new rubrics (question -> text), in one write."""
    append_records(run_dir / FROZEN_RUBRICS_FILE, [{"question": q, "text": t} for q, t in written.items()])

