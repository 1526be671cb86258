"""The run directory: start a fresh one, or find where to resume and cut the logs back to it.

The layout and the record types are in ``evolm.records``. A checkpoint is complete when it holds
TRL's ``trainer_state.json`` and evolm's ``CheckpointState`` (written last, atomically). Resuming
validates the newest complete checkpoint (its state, its replay buffer, its weight files), falls
back to an older one when it does not validate, and cuts the logs back only once the trainer has
loaded the checkpoint, so a corrupt checkpoint costs no log lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from evolm.config import RunConfig, load_config, save_config, to_dict
from evolm.contrast import ReplayBuffer
from evolm.errors import RunError
from evolm.jsonl import atomic_writer, write_jsonl
from evolm.records import (
    BUFFER_FILE,
    CHECKPOINTS_DIR,
    FROZEN_RUBRICS_FILE,
    METRICS_FILE,
    SAMPLES_DIR,
    STATE_FILE,
    CheckpointState,
    append_records,
    iter_lenient,
)


@dataclass
class RunStart:
    """Where a run starts: its directory, the checkpoint to resume from, and what was passed over."""

    run_dir: Path
    checkpoint: Path | None = None
    skipped: list[str] = field(default_factory=list)  # newer checkpoints that failed validation, with why

    @property
    def step(self) -> int:
        return checkpoint_state(self.checkpoint).step if self.checkpoint else 0


def open_run(cfg: RunConfig, resume: bool) -> RunStart:
    """A fresh run directory, or the newest checkpoint that validates (state, replay buffer, weight files).

    Nothing in the run directory is changed on resume: the logs are cut back to the checkpoint by
    ``cut_logs_back`` once the trainer has loaded it. A newer checkpoint that does not validate is
    passed over (and reported in ``skipped``) in favour of the one before it.
    """
    run_dir = Path(cfg.output_dir)
    if not resume:
        if (run_dir / METRICS_FILE).exists() or (run_dir / CHECKPOINTS_DIR).exists():
            raise RunError(f"{run_dir} already holds a run: resume it with `evolm train --resume {run_dir}` "
                           "or choose another output_dir")
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
            ReplayBuffer.load(ckpt / BUFFER_FILE, cfg.contrast.buffer_size)
            _check_weights(ckpt)
        except RunError as e:
            skipped.append(str(e))
            continue
        return RunStart(run_dir, ckpt, skipped)
    raise RunError(f"{run_dir}: no checkpoint validates; the newest: {skipped[0]}")


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


def write_checkpoint_extras(ckpt: Path, buffer: ReplayBuffer, state: CheckpointState) -> None:
    """Save the replay buffer into a checkpoint TRL has just written, then the completeness marker."""
    buffer.save(ckpt / BUFFER_FILE)
    with atomic_writer(ckpt / STATE_FILE) as f:
        f.write(json.dumps(state.to_json()))


def load_buffer(cfg: RunConfig, ckpt: Path | None) -> ReplayBuffer:
    return ReplayBuffer.load(ckpt / BUFFER_FILE, cfg.contrast.buffer_size) if ckpt else \
        ReplayBuffer(cfg.contrast.buffer_size)


def _check_weights(ckpt: Path) -> None:
    """Refuse a checkpoint whose safetensors files cannot be opened (a torn or corrupt save); a LoRA run's
    checkpoint holds the adapter alone (``adapter_model.safetensors``), which counts."""
    files = list(ckpt.glob("*.safetensors"))
    if not files:
        raise RunError(f"{ckpt}: checkpoint has no model weights (*.safetensors)")
    from safetensors import safe_open

    for f in files:
        try:
            with safe_open(str(f), framework="pt") as st:
                st.keys()
        except Exception as e:  # noqa: BLE001 - safetensors raises several types for a bad header
            raise RunError(f"{f}: unreadable model weights ({e.__class__.__name__}); delete this checkpoint "
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

