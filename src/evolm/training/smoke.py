"""``evolm train --smoke``: the chosen config's own models, backends and parallelism on a shrunk schedule, so that
the first half hour of a launch goes through every part of the run that otherwise shows only hours in.

The paper config's first checkpoint comes at step 25 and its first rubric step at step 51 (8 to 20 hours in). The
smoke run takes, in its own directory beside ``output_dir`` (``OUTPUT_DIR-smoke``, never the real run's):

1. a policy step and a rubric step with temporal pairs (``contrast.min_age=0``: the answers the policy step just
   stored are old enough), then stops with a checkpoint at step 2 (``SmokeLeg``: ``stop_after``);
2. a resume from that checkpoint which takes one more step (a policy step), and saves again.

Shrunk: the schedule (2 cycles of 1 step per phase, only the first three steps run), the questions per step (the
fewest whose rows divide evenly over the processes' micro-batches), and held-out evaluation (off). Kept: the models,
the judge and its endpoints, the token budgets, the sampling, vLLM and its memory share, DeepSpeed, the processes.

On a GPU each leg runs in a process of its own (``leg_command``), because colocated vLLM and DeepSpeed cannot be
torn down and built again in one process; on the CPU (``grpo.use_cpu``, or no CUDA) both legs run in this one.
A leg's processes meet in a rendezvous of their own (``LegRendezvous``), not the launcher's, which holds the
keys of the leg before.

``verdict`` reads the smoke directory back: each role done, seconds per step, peak GPU memory, vLLM's room for
sequences (its start log), judge failures, and the measured step times extrapolated to the whole configured run.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from evolm.config import RunConfig, grpo_setting
from evolm.errors import InputError
from evolm.runs.records import CHECKPOINTS_DIR, METRICS_FILE, SMOKE_MARKER, StepRecord, read_metrics
from evolm.runs.rundir import checkpoint_state, complete_checkpoints

SUFFIX = "-smoke"
MARKER = SMOKE_MARKER  # in the smoke directory: a later smoke run may replace it (it is no real run)
VLLM_ROOM = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


@dataclass(frozen=True)
class SmokeLeg:
    """One leg of the smoke run: stop after optimizer step ``stop_after`` (a checkpoint there)."""

    number: int
    stop_after: int
    resume: bool


LEGS = (SmokeLeg(1, 2, resume=False), SmokeLeg(2, 3, resume=True))


def smoke_dir(cfg: RunConfig) -> Path:
    """Where the smoke run of ``cfg`` writes: beside ``output_dir``, with ``SUFFIX``."""
    out = Path(cfg.output_dir)
    return out.with_name(out.name + SUFFIX)


def smoke_questions(cfg: RunConfig, processes: int) -> int:
    """The fewest questions per step whose rows (x ``samples_per_prompt``) divide over ``processes`` x
    ``grpo.per_device_train_batch_size``, and no more than the config's.

    >>> from evolm.config import load_config
    >>> smoke_questions(load_config("configs/paper-qwen3-8b.yaml"), 4), smoke_questions(load_config(None), 8)
    (1, 8)
    """
    per_step = processes * int(grpo_setting(cfg.grpo, "per_device_train_batch_size"))
    p = per_step // math.gcd(per_step, cfg.schedule.samples_per_prompt)
    return min(p, cfg.schedule.prompts_per_step)


def smoke_overrides(cfg: RunConfig, processes: int) -> list[str]:
    """The overrides that turn ``cfg`` into its smoke run (``load_config(config, overrides + these)``)."""
    if cfg.schedule.regime == "sequential":
        raise InputError("--smoke runs one training run; a sequential run is two: smoke each stage with "
                         "schedule.regime=rubric_only, then schedule.regime=frozen_rubric")
    single_role = cfg.schedule.regime != "coevolve"
    return [f"output_dir={smoke_dir(cfg)}", f"schedule.cycles={3 if single_role else 2}",
            "schedule.steps_per_phase=1", "schedule.save_every=1000000",
            f"schedule.prompts_per_step={smoke_questions(cfg, processes)}", "contrast.min_age=0",
            f"contrast.max_age={max(1, cfg.contrast.max_age)}", "eval.pairs=null", "eval.questions=null",
            *(["grpo.save_total_limit=2"] if isinstance(limit := grpo_setting(cfg.grpo, "save_total_limit"), int)
              and limit < 2 else [])]  # checkpoint 2 stays beside the resume's


def prepare(run_dir: Path, processes: int) -> None:
    """Clear a previous smoke run from ``run_dir`` (one process only: several would race) or refuse; mark it."""
    import json

    used = (run_dir / METRICS_FILE).exists() or (run_dir / CHECKPOINTS_DIR).exists()
    if used and processes == 1 and (run_dir / MARKER).is_file():
        shutil.rmtree(run_dir)
    elif used:
        raise InputError(f"{run_dir} holds an earlier smoke run (or another run): delete it first")
    run_dir.mkdir(parents=True, exist_ok=True)
    if processes == 1:
        (run_dir / MARKER).write_text(json.dumps({"what": "evolm train --smoke"}) + "\n", encoding="utf-8")


def leg_command(leg: SmokeLeg, config: str | None, overrides: list[str], run_dir: Path) -> list[str]:
    """The command of one leg in a process of its own (``evolm train --smoke-leg N``), with this launch's
    environment (RANK, WORLD_SIZE, MASTER_ADDR: each launched process starts its own child)."""
    import sys

    head = [sys.executable, "-m", "evolm.cli", "train"]
    where = ["--resume", str(run_dir)] if leg.resume else ["--config", str(config), *overrides]
    return [*head, *where, "--smoke-leg", str(leg.number)]


def run_leg_process(command: list[str], seen: Callable[[str], None],
                    env: dict[str, str] | None = None) -> int:
    """Run a leg's command in ``env`` (None: this process's), its output passed through to stderr line by line
    (``seen`` reads each); its exit code."""
    import subprocess
    import sys

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stderr.write(line)
        seen(line)
    return proc.wait()


# ----------------------------------------------------------------------------- a fresh rendezvous per leg

# what torchrun's agent tells its workers of its own rendezvous (local_elastic_agent.py), beside every
# TORCHELASTIC_* variable; a leg keeps RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and MASTER_ADDR
LAUNCHER_RENDEZVOUS = ("GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE")


def leg_environment(port: int, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a leg's process: torchrun's elastic variables (``TORCHELASTIC_*``, the group and role
    ranks) left out and ``MASTER_PORT`` set to ``port``; the rest kept (ranks, ``MASTER_ADDR``, CUDA's and
    accelerate's).

    Why: with ``TORCHELASTIC_USE_AGENT_STORE=True`` every rank of a process group joins the agent's store at
    MASTER_ADDR:MASTER_PORT, which outlives the legs. The second leg would read the keys the first leg's group
    left there (gloo's addresses, NCCL's unique id, barrier counts) and connect to processes that have exited:
    a connection refused, or a hang. Without them each leg's rank 0 hosts a store of its own on ``port``.

    >>> env = leg_environment(29617, {"RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
    ...                               "TORCHELASTIC_USE_AGENT_STORE": "True", "GROUP_RANK": "0"})
    >>> sorted(env.items())
    [('MASTER_ADDR', '127.0.0.1'), ('MASTER_PORT', '29617'), ('RANK', '1')]
    """
    env = {k: v for k, v in environ.items()
           if not k.startswith("TORCHELASTIC_") and k not in LAUNCHER_RENDEZVOUS}
    env["MASTER_PORT"] = str(port)
    return env


def free_port() -> int:
    """A TCP port free on this machine now (the kernel's pick)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class LegRendezvous:
    """A fresh MASTER_PORT for each leg, the same in every process of the launch: rank 0 picks one free on its
    machine (where the leg's rank 0 hosts the leg's store) and hands it to the others through the launch's own
    store (``torch.distributed.rendezvous("env://")``: torchrun's agent store, else one that rank 0 hosts),
    which makes no process group. One process: no store, a free port of its own."""

    def __init__(self, timeout_s: float) -> None:
        from evolm.dist import rank, world_size

        self.rank, self.store = rank(), None
        if world_size() > 1:
            from datetime import timedelta

            from torch.distributed import rendezvous

            self.store, _, _ = next(rendezvous("env://", timeout=timedelta(seconds=timeout_s)))

    def port(self, leg: SmokeLeg) -> int:
        """The leg's MASTER_PORT; the other ranks wait for rank 0's, up to the store's timeout."""
        if self.store is None:
            return free_port()
        key = f"evolm-smoke/leg-{leg.number}/master-port"
        if self.rank == 0:
            self.store.set(key, str(free_port()))
        return int(self.store.get(key))

    def environment(self, leg: SmokeLeg) -> dict[str, str]:
        """This process's environment for ``leg`` (``leg_environment`` with the leg's port)."""
        import os

        return leg_environment(self.port(leg), os.environ)


class VLLMRoom:
    """vLLM's own start line "Maximum concurrency for N tokens per request: X.XXx", caught from its log or a leg's
    output: the sequences of its full context its KV cache holds at once."""

    def __init__(self) -> None:
        self.found: tuple[int, float] | None = None

    def read(self, line: str) -> None:
        if m := VLLM_ROOM.search(line):
            self.found = (int(m.group(1).replace(",", "")), float(m.group(2)))

    def handler(self):  # noqa: ANN201 - logging.Handler
        import logging

        room = self

        class _Catch(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                try:
                    room.read(record.getMessage())
                except Exception:  # noqa: BLE001 - a log line must never stop the run
                    pass

        return _Catch()


# ----------------------------------------------------------------------------- the verdict


@dataclass
class Verdict:
    """What the smoke run showed: ``rows`` (label, value) for one screen, and ``failed`` (empty: it passed)."""

    rows: list[tuple[str, str]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def verdict(full: RunConfig, smoke: RunConfig, processes: int, seconds: float,
            vllm: tuple[int, float] | None) -> Verdict:
    """Read the smoke directory back against what the smoke run should have done (``LEGS``)."""
    from evolm.training.plan import Plan

    run_dir = Path(smoke.output_dir)
    records = [r for r in read_metrics(run_dir) if r.role in ("policy", "rubric")]
    plan = Plan(smoke, ["q"])
    want = [plan.info(s).role for s in range(LEGS[-1].stop_after)]
    v = Verdict()
    got = [r.role for r in records]
    for i, role in enumerate(want):
        r = records[i] if i < len(got) else None
        ok = r is not None and r.role == role and r.reward_mean is not None
        detail = "not run" if r is None else _step_detail(r)
        resumed = " (after the resume)" if i + 1 > LEGS[0].stop_after else ""
        v.rows.append((f"step {i + 1}: {role}{resumed}", f"{'done' if ok else 'FAILED'}: {detail}"))
        if not ok:
            v.failed.append(f"step {i + 1} ({role})")
    checkpoints = {checkpoint_state(c).step: c for c in complete_checkpoints(run_dir)}
    for leg in LEGS:
        ok = leg.stop_after in checkpoints
        v.rows.append((f"checkpoint {leg.stop_after}", ("written" if ok else "MISSING")
                       + (f", resumed from checkpoint {LEGS[0].stop_after}" if leg.resume else "")))
        if not ok:
            v.failed.append(f"checkpoint {leg.stop_after}")
    if len(got) > len(want):
        v.failed.append(f"{len(got)} steps logged, {len(want)} expected")
    gpu = [x for r in records for x in (r.gpu_gib_generating, r.gpu_gib_training, r.gpu_reserved_gib)
           if x is not None]
    v.rows.append(("peak GPU memory (process 0)", f"{max(gpu):.1f} GiB reserved or allocated" if gpu
                   else "not measured (no CUDA device in use)"))
    sent = sum(r.judge_requests or 0 for r in records)
    failed = sum(r.judge_failures or 0 for r in records)
    v.rows.append(("judge failures", f"{failed} of {sent} requests" + (" (each a missing score)" if failed else "")))
    v.rows.append(("vLLM", _vllm_row(full, smoke, processes, vllm)))
    v.rows += _extrapolation(full, smoke, processes, records)
    v.rows.append(("smoke run", f"{seconds / 60:.1f} min in all, in {run_dir}"))
    return v


def _step_detail(r: StepRecord) -> str:
    parts = [f"{r.seconds:.0f} s" if r.seconds is not None else "- s",
             f"reward {r.reward_mean:.3f}" if r.reward_mean is not None else "no reward"]
    if r.role == "rubric":
        parts.append(f"pairs {r.pairs or 0}" + (f", pair acc. {r.pair_accuracy:.2f}" if r.pair_accuracy is not None
                                                 else ""))
    if r.rubric_validity is not None:
        parts.append(f"rubric validity {r.rubric_validity:.2f}")
    if r.missing_rewards:
        parts.append(f"missing scores {r.missing_rewards:.0%}")
    return ", ".join(parts)


def _vllm_row(full: RunConfig, smoke: RunConfig, processes: int, room: tuple[int, float] | None) -> str:
    def per_process(c: RunConfig) -> int:
        return c.schedule.prompts_per_step * c.schedule.samples_per_prompt // max(1, processes)

    if not grpo_setting(smoke.grpo, "use_vllm"):
        return "not used (grpo.use_vllm is off)"
    asked = f"a process generates {per_process(smoke)} row(s) per call here, {per_process(full)} in the full run"
    if room is None:
        return f"its KV-cache room was not in the log (vLLM's 'Maximum concurrency' line); {asked}"
    length, seqs = room
    return f"room for {seqs:.2f} sequences of {length:,} tokens at once (vLLM's start log, per engine); {asked}"


def _extrapolation(full: RunConfig, smoke: RunConfig, processes: int, records: list[StepRecord]
                   ) -> list[tuple[str, str]]:
    """A full step's time per role from the smoke's, scaled by the rows each process handles, and the whole run's:
    an assumption (time linear in the rows; vLLM batching more rows at once would make it shorter, rows waiting for
    KV-cache room longer), said as one."""
    from evolm.training.plan import Plan

    scale = (full.schedule.prompts_per_step * full.schedule.samples_per_prompt) / (
        smoke.schedule.prompts_per_step * smoke.schedule.samples_per_prompt)
    plan = Plan(full, ["q"])
    counts = {"policy": 0, "rubric": 0}
    for s in range(full.total_steps):
        counts[plan.info(s).role] += 1
    out, total, missing = [], 0.0, []
    for role, n in counts.items():
        times = [r.seconds for r in records if r.role == role and r.seconds is not None]
        if not n:
            continue
        if not times:
            missing.append(role)
            continue
        step = sum(times) / len(times) * scale
        total += step * n
        out.append((f"a full {role} step, extrapolated", f"{step / 60:,.1f} min ({sum(times) / len(times):.0f} s "
                    f"measured x {scale:g}, the rows per step {full.schedule.prompts_per_step} x "
                    f"{full.schedule.samples_per_prompt} over the smoke's {smoke.schedule.prompts_per_step} x "
                    f"{smoke.schedule.samples_per_prompt}; assumes time linear in the rows)"))
    if not missing:
        took = f"{total / 3600:,.1f} h" if total >= 3600 else f"{total / 60:,.1f} min"
        out.append(("the whole run, extrapolated", f"{took} for {full.total_steps} steps, checkpoints and model "
                    "loading not counted"))
    return out
