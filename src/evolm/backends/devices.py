"""Where and in what precision a model runs: the device (``auto``: this process's GPU, else the CPU), the dtype
(``auto``: bfloat16 on a GPU, float32 on a CPU) and a frozen judge's weights (float32 unless named)."""

from __future__ import annotations

import warnings
from typing import Any

from evolm.config import DTYPES
from evolm.errors import ModelError


def resolve_device(device: str = "auto") -> str:
    """``auto`` becomes ``cuda`` when a GPU is visible, else ``cpu``; an unknown or absent device is a ``ModelError``.

    Under a launcher (``LOCAL_RANK`` set: torchrun, accelerate, deepspeed) ``auto`` is this process's own GPU,
    ``cuda:LOCAL_RANK``: a model loaded before the trainer exists would otherwise land on GPU 0 in every process.

    >>> resolve_device("cpu")
    'cpu'
    """
    import torch

    if device == "auto":
        from evolm.dist import local_rank

        if not torch.cuda.is_available():
            return "cpu"
        return f"cuda:{local_rank()}" if local_rank() is not None else "cuda"
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ModelError(f"unknown device '{device}' (auto, cpu, cuda, cuda:1, mps, ...)") from None
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ModelError(f"device '{device}' is not available here (GPUs visible: {torch.cuda.device_count()})")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ModelError(f"device '{device}' is not available here")
    if dev.type == "meta":
        raise ModelError("device 'meta' holds no weights, only their shapes: choose cpu or a GPU")
    if dev.type not in ("cpu", "cuda", "mps") and not getattr(getattr(torch, dev.type, None), "is_available",
                                                               lambda: False)():
        raise ModelError(f"device '{device}' is not available here")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """``auto`` is bfloat16 on GPU and float32 on CPU (CPU bfloat16 matmuls are slow on most machines)."""
    import torch

    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype '{dtype}' (choose from {', '.join(DTYPES)})")
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype == "bfloat16" and device == "cpu" and not cpu_computes_bfloat16():
        warnings.warn(CPU_BF16_WARNING, stacklevel=2)
    return getattr(torch, dtype)


# Measured on a 2-core AMD EPYC with AVX2 only (docs/PERFORMANCE.md, "bfloat16 on a CPU without AVX512-BF16 or AMX").
CPU_BF16_WARNING = ("bfloat16 weights on a CPU without AVX512-BF16 or AMX: torch emulates bfloat16 matrix products "
                    "here, about 6x slower than float32 (SmolLM2-135M's forward pass); float32 is faster on this CPU")


def cpu_computes_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (AVX512-BF16 or AMX, by torch's own CPUID checks);
    ``True`` when torch cannot tell, so that no warning is given on a guess."""
    import torch

    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if not all(callable(c) for c in checks):
        return True
    return any(c() for c in checks)


def judge_dtype(dtype: str, device: str) -> str:
    """A frozen judge's weights for ``dtype``: ``auto`` is float32 on every device.

    In bfloat16 a score depends on which answers share its batch (padding changes the matrix shapes,
    and each layer's output is rounded to 8 bits of mantissa): SmolLM2-135M's scores moved by up to
    0.021 (prob) and 0.030 (yesno) between ``--batch-size`` 1 and 16 on a CPU with AVX512-BF16, against
    1.9e-6 in float32 (docs/PERFORMANCE.md). A reward must not depend on its neighbours, so bfloat16
    (about 1.5x faster where the hardware computes it) is a choice the user names.
    """
    return "float32" if dtype == "auto" else dtype
