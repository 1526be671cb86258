"""Which process of a launch this is, read from the launcher's environment, without creating a process group.

torchrun and ``accelerate launch --multi_gpu`` (and DeepSpeed's launcher) set ``WORLD_SIZE`` and ``RANK`` for every
process they start; a plain ``python``/``evolm`` run sets neither and is one process. Nothing here initialises
``torch.distributed`` or accelerate's ``PartialState``: transformers' ``TrainingArguments`` does that once, with
``grpo.ddp_timeout`` (a state created earlier would set the collective timeout to the library default, and on CPU
report one process: accelerate sets up multi-CPU only when asked with ``cpu=True``).

``accelerate launch --cpu --num_processes N`` starts ONE process unless it runs under mpirun
(``--mpirun_hostfile``): accelerate's simple launcher sets ``ACCELERATE_USE_CPU`` and no ``WORLD_SIZE``.
``single_cpu_launch_warning`` says so in one line; the launch that works on CPU is
``torchrun --nproc_per_node N -m evolm.cli train ...`` (gloo).
"""

from __future__ import annotations

import os


def world_size() -> int:
    """Processes in this launch (``WORLD_SIZE``; 1 when no launcher set it)."""
    return max(1, _env_int("WORLD_SIZE", 1))


def rank() -> int:
    """This process's global rank (``RANK``; 0 when no launcher set it)."""
    return _env_int("RANK", 0)


def local_rank() -> int | None:
    """This process's rank on its machine (``LOCAL_RANK``), ``None`` when no launcher set it."""
    return _env_int("LOCAL_RANK", -1) if "LOCAL_RANK" in os.environ and _env_int("LOCAL_RANK", -1) >= 0 else None


def is_main() -> bool:
    """True on the process that writes files and prints (global rank 0)."""
    return rank() == 0


def single_cpu_launch_warning() -> str | None:
    """One line when ``accelerate launch --cpu`` started this as a single process (see the module docstring)."""
    if os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("true", "1", "yes") and "WORLD_SIZE" not in os.environ:
        return ("evolm: warning: `accelerate launch --cpu` runs ONE process here (accelerate's multi-CPU launch needs "
                "mpirun); for N CPU processes use `torchrun --nproc_per_node N -m evolm.cli train ...`")
    return None


def _env_int(name: str, default: int) -> int:
    """The launcher variable ``name`` as an integer (``default`` when unset or empty); ``InputError`` in one line when
    it is set to something else: a process that guessed its rank could write over rank 0's files."""
    from evolm.errors import InputError

    value = os.environ.get(name, "").strip()
    try:
        return int(value) if value else default
    except ValueError:
        raise InputError(f"{name}={value[:40]!r} is not an integer (a launcher such as torchrun sets it; unset it "
                         "to run one process)") from None
