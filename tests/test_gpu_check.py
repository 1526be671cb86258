"""The GPU check (evolm/gpu_check.py, scripts/gpu_check.sh) on a CPU machine, the device faked: a GPU host without
the paper's path (vLLM, DeepSpeed) fails before anything runs, unless --lora-only."""

from __future__ import annotations

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
    monkeypatch.setattr(gpu_check, "_run_check", lambda: launched.append(1) or 0)
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
