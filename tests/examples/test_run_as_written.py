"""The scripts in examples/ run as written (they use the real SmolLM2-135M-Instruct)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fake_gpu import fake_nvidia_smi

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path) -> None:
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip(), "an example prints what it computed"


# ----------------------------------------------------------------------------- scripts/gpu_check.sh without a GPU

GPU_CHECK = Path(__file__).parents[2] / "scripts" / "gpu_check.sh"
def _gpu_check(path: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PATH": path, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(GPU_CHECK)], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.slow
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a machine without a usable GPU")
def test_gpu_check_without_a_gpu_exits_0_and_with_gpus_torch_cannot_use_exits_1(tmp_path: Path) -> None:
    import os
    import shutil

    plain = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    assert shutil.which("nvidia-smi", path=plain) is None
    proc = _gpu_check(plain)
    assert proc.returncode == 0 and "no GPU here" in proc.stdout and "nothing was run" in proc.stdout
    proc = _gpu_check(f"{fake_nvidia_smi(tmp_path)}{os.pathsep}{plain}")
    assert proc.returncode == 1
    assert "nvidia-smi lists 2 GPU(s)" in proc.stderr and "CUDA Version: 12.4" in proc.stderr
    assert "docs/GPU.md" in proc.stderr and "\n" not in proc.stderr.strip()
