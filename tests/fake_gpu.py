"""A fake ``nvidia-smi`` for checks that run without a GPU."""

from __future__ import annotations

from pathlib import Path

FAKE_SMI = """#!/bin/sh
if [ "$1" = "-L" ]; then
  echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"
  echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"
  exit 0
fi
echo "| NVIDIA-SMI 550.54.15     Driver Version: 550.54.15     CUDA Version: 12.4 |"
"""


def fake_nvidia_smi(directory: Path) -> Path:
    """A directory whose ``nvidia-smi`` lists two GPUs (on a CUDA 12.4 driver) that torch here cannot see."""
    smi = directory / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    return directory
