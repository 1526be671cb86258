"""The GPU plan of `evolm train --dry-run` (training/gpu_plan.py) on the paper config, against sums done by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evolm.cli import main
from evolm.config import load_config
from evolm.training import gpu_plan, memory

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PAPER = load_config(CONFIGS / "paper-qwen3-8b.yaml", ["data.prompts=builtin:demo"])
QWEN3_8B = memory.KNOWN_MODELS["Qwen/Qwen3-8B"]
ZERO3 = memory.Sharding(True, 3)
GPU = 79.6
PROMPT = 1024


def test_tokens_per_step_per_role_by_hand() -> None:
    policy, rubric = gpu_plan.step_tokens(PAPER, PROMPT)
    # policy: 64 rubrics + 64 x 8 answers, each up to 16,384 tokens; 512 judge requests; 512 rows trained
    assert (policy.role, policy.generated, policy.judge_requests) == ("policy", (64 + 512) * 16384, 512)
    assert policy.judge_generated == 512 * 16384 and policy.trained == 512 * (PROMPT + 16384)
    assert policy.prompts == (64 + 512) * PROMPT
    # rubric: 64 fresh answers + 512 rubric samples; every rubric judges a+ and a-: 1,024 requests
    assert (rubric.role, rubric.generated, rubric.judge_requests) == ("rubric", (64 + 512) * 16384, 1024)


def test_checkpoint_disk_by_hand() -> None:
    # 8,190,735,360 parameters x (2 bytes of bf16 weights + 12 of Adam's fp32 master and moments) = 114.7 GB
    assert gpu_plan.checkpoint_bytes(PAPER, QWEN3_8B, ZERO3) == 8_190_735_360 * 14
    lora = load_config(CONFIGS / "paper-qwen3-8b.yaml", ["data.prompts=builtin:demo", "model.lora.r=16"])
    assert gpu_plan.checkpoint_bytes(lora, QWEN3_8B, ZERO3) == QWEN3_8B.lora_parameters(16, ["all-linear"]) * 12


def test_kv_room_in_sequences_of_the_configured_length_by_hand() -> None:
    # colocated vLLM: 0.35 x 79.6 GiB - 16.38 GB of bf16 weights - 1.5 GiB of its buffers, at 147,456 bytes a token
    # (2 x 36 layers x 1,024 KV width x 2 bytes); sequences of 1,024 + 16,384 tokens
    kv = 0.35 * GPU * 2**30 - 8_190_735_360 * 2 - 1.5 * 2**30
    plan = gpu_plan.plan_layout(PAPER, gpu_plan.Layout(4, 4), QWEN3_8B, ZERO3, GPU, PROMPT)
    assert plan.room == pytest.approx(kv / ((PROMPT + 16384) * 147_456))
    assert 4.6 < plan.room < 4.7 and plan.fits


def test_step_time_from_the_assumed_rates_by_hand() -> None:
    rates = gpu_plan.Rates(decode=60, prefill=8000, train=3000, judge=50, mean_tokens=4096)
    plan = gpu_plan.plan_layout(PAPER, gpu_plan.Layout(4, 4), QWEN3_8B, ZERO3, GPU, PROMPT, rates)
    at_once = int(plan.room * (PROMPT + 16384) // (PROMPT + 4096))  # mean-length sequences the KV cache holds
    decode = (math.ceil(128 / at_once) + math.ceil(16 / at_once)) * 4096 / 60  # 128 answers, 16 rubrics a process
    prefill = (64 + 512) * PROMPT / 4 / 8000
    judging = math.ceil(512 / plan.judge_room) * 4096 / 50
    training = 512 * (PROMPT + 4096) / 4 / (3000 * gpu_plan.RATE_MODEL_PARAMETERS / QWEN3_8B.parameters())
    assert plan.step_seconds["policy"] == pytest.approx(decode + prefill + judging + training)
    assert plan.run_seconds == pytest.approx(500 * plan.step_seconds["policy"] + 500 * plan.step_seconds["rubric"])


def test_eight_gpus_offer_a_layout_with_no_gpu_serving_the_judge_alone() -> None:
    plans = [gpu_plan.plan_layout(PAPER, lay, QWEN3_8B, ZERO3, GPU, PROMPT)
             for lay in gpu_plan.candidate_layouts(PAPER, 8)]
    by = {(p.layout.training, p.layout.judge_gpus, p.layout.judge_share): p for p in plans}
    assert by[(4, 4, 0.0)].fits and not by[(3, 5, 0.0)].fits and "multiple of" in by[(3, 5, 0.0)].why
    assert not by[(2, 6, 0.0)].fits and "GiB per training GPU" in by[(2, 6, 0.0)].why
    shared = gpu_plan.best_layout(plans)
    assert shared is not None and shared.layout.training == 8 and shared.layout.judge_gpus == 0
    assert shared.peak_gib <= GPU  # training's peak + the judge server's share of each GPU
    lines = gpu_plan.commands(PAPER, "configs/paper-qwen3-8b.yaml", shared.layout, None)
    assert "--reasoning-parser qwen3" in lines[0] and f"--gpu-memory-utilization {shared.layout.judge_share:g}" in \
        lines[0]
    assert "--num_processes 8" in lines[1] and lines[1].count("http://127.0.0.1:") == 8


def test_the_dry_run_prints_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", str(CONFIGS / "paper-qwen3-8b.yaml"), "--dry-run", "--num-processes", "4",
                 "--accelerate-config", str(CONFIGS / "accelerate-zero3.yaml"), "--gpu-memory", "79.6",
                 "--prompt-tokens", "1024", "data.prompts=builtin:demo"]) == 0
    out = capsys.readouterr()
    for text in ("vLLM KV-cache room", "sequences of the configured length", "tokens per policy step",
                 "tokens per rubric step", "a rubric step, estimated", "assumed", "checkpoint disk",
                 "3 x 115 GB = 344 GB", "layouts of 8 GPUs"):
        assert text in out.out, text
    assert "layout with no GPU serving the judge alone: 8 training" in out.err and "vllm serve" in out.err
