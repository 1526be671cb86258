"""The machine a measurement ran on: CPU model, cores, torch threads, GPU, library versions and the load when it
started. A number without its machine means little (STYLE §3): every benchmark table (``bench/``) and study result
(``studies/``) names it, as the notebook's entries do (dev/)."""

from __future__ import annotations

import os
import platform
from typing import Any


def load_average() -> float | None:
    """The 1-minute load average now (``None`` where the system has none): above the core count, another job shares
    the CPU, and absolute times (not so much side-by-side ratios) are inflated. Take it before the work measured."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def machine(load_at_start: float | None = None) -> dict[str, Any]:
    """CPU model, cores, torch threads, GPU, torch, transformers and TRL versions, and ``load_at_start`` (the
    ``load_average`` taken before the work measured) when given."""
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    if load_at_start is not None:
        info["load_avg_1m_at_start"] = load_at_start
    try:
        import trl

        info["trl"] = trl.__version__
    except ImportError:
        pass
    return info
