"""The GPU plan of `evolm train --dry-run` (training/gpu_plan.py) on the paper config, against sums done by hand."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from evolm.cli import main
from evolm.config import load_config
from evolm.training import gpu_plan, memory
from evolm.training.model_shape import KNOWN_MODELS

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PAPER = load_config(CONFIGS / "paper-qwen3-8b.yaml", ["data.prompts=builtin:demo"])
QWEN3_8B = KNOWN_MODELS["Qwen/Qwen3-8B"]
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


def test_tokens_per_step_are_the_steps_own_calls_in_the_training_processes() -> None:
    """generate_calls.step_calls: each call's sequences x its budget, but a served model's."""
    def rubric_step(*overrides: str) -> gpu_plan.RoleTokens:
        return gpu_plan.step_tokens(load_config(CONFIGS / "paper-qwen3-8b.yaml", ["data.prompts=builtin:demo",
                                                                                 *overrides]), PROMPT)[1]

    # inferred_question: per question an answer, the question guessed from it and an answer to that guess
    inferred = rubric_step("contrast.pairs=inferred_question")
    assert inferred.generated == (3 * 64 + 512) * 16384 and inferred.prompts == (3 * 64 + 512) * PROMPT
    # rubric_conditioned: 64 rubrics, then 64 answers with them and 64 without
    assert rubric_step("contrast.pairs=rubric_conditioned").generated == (64 + 128 + 512) * 16384
    served = rubric_step("contrast.answerer=Qwen/Qwen3-0.6B", "contrast.answerer_backend=openai",
                         "contrast.answerer_base_url=http://127.0.0.1:8002/v1")
    assert served.generated == 512 * 16384  # the fresh answers come from a server: no GPU time here


def test_checkpoint_disk_by_hand() -> None:
    n, bytes_of = 8_190_735_360, lambda sharding: gpu_plan.checkpoint_bytes(PAPER, QWEN3_8B, sharding)
    # ZeRO-3 (global_stepN/): 12 bytes a parameter of fp32 master weights and Adam's two fp32 moments; with
    # zero3_save_16bit_model, Trainer.save_model also writes the gathered bf16 weights: 2 more, 114.7 GB
    assert bytes_of(memory.Sharding(True, 3, save_16bit=True)) == n * 14
    assert bytes_of(ZERO3) == n * 12  # DeepSpeed's default: no 16-bit copy
    # ZeRO-2: the module's bf16 weights in DeepSpeed's model states and in model.safetensors, beside the 12
    assert bytes_of(memory.Sharding(True, 2)) == n * 16
    assert bytes_of(memory.Sharding()) == n * 6  # no DeepSpeed: bf16 weights + 2 bf16 moments
    lora = load_config(CONFIGS / "paper-qwen3-8b.yaml", ["data.prompts=builtin:demo", "model.lora.r=16"])
    assert gpu_plan.checkpoint_bytes(lora, QWEN3_8B, ZERO3) == QWEN3_8B.lora_parameters(16, ["all-linear"]) * 12


def disk_with(free: float):  # noqa: ANN201 - a stand-in for shutil.disk_usage
    return lambda path: shutil._ntuple_diskusage(10**13, 10**13 - free, free)


def test_the_checkpoint_disk_counts_the_one_written_before_the_oldest_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "not" / "yet" / "run"
    cfg = load_config(CONFIGS / "paper-qwen3-8b.yaml", ["data.prompts=builtin:demo", f"output_dir={out}"])
    zero3, one = memory.Sharding(True, 3, save_16bit=True), 8_190_735_360 * 14
    monkeypatch.setattr("shutil.disk_usage", disk_with(4 * one))
    disk = gpu_plan.checkpoint_disk(cfg, QWEN3_8B, zero3)
    assert (disk.count, disk.measured, disk.fits, disk.warning()) == (4, tmp_path, True, None)  # 3 kept + 1
    assert disk.text().startswith("4 x 115 GB = 459 GB at most (grpo.save_total_limit 3, and the next one")
    assert "98 GB of ZeRO state" in disk.text() and "16 GB of 16-bit weights" in disk.text()
    smoke = out.with_name("run-smoke") / "checkpoints" / "checkpoint-2"  # a smoke run's, beside it
    smoke.mkdir(parents=True)
    (smoke / "model.safetensors").write_bytes(b"x" * 1000)
    monkeypatch.setattr("shutil.disk_usage", disk_with(4 * one - 1))
    short = gpu_plan.checkpoint_disk(cfg, QWEN3_8B, zero3)
    assert short.measured == out.parent and not short.fits and short.smoke == 1000
    assert short.warning().startswith("evolm: warning: the checkpoints need up to 459 GB")
    assert "lower grpo.save_total_limit (1: 229 GB at a save)" in short.warning()
    every = load_config(CONFIGS / "paper-qwen3-8b.yaml",
                        ["data.prompts=builtin:demo", "grpo.save_total_limit=null"])
    assert gpu_plan.checkpoint_disk(every, QWEN3_8B, ZERO3).count == 40  # steps 25, 50, ..., 1000


def test_the_judge_in_flight_is_what_the_processes_send_up_to_the_servers_room() -> None:
    def paper(concurrency: int):  # noqa: ANN202 - RunConfig
        return load_config(CONFIGS / "paper-qwen3-8b.yaml",
                           ["data.prompts=builtin:demo", f"judge.max_concurrency={concurrency}"])

    four = gpu_plan.Layout(4, 4)  # one `vllm serve --data-parallel-size 4` URL
    assert gpu_plan.judge_server_room(PAPER, four, GPU, 2048) == 244
    assert PAPER.judge.max_concurrency == 61 and gpu_plan.judge_room(PAPER, four, GPU, 2048) == 244  # 4 x 61
    assert gpu_plan.judge_room(paper(32), four, GPU, 2048) == 4 * 32
    assert gpu_plan.judge_row(paper(32), four, GPU, 2048).endswith("judge.max_concurrency=61 fills it")
    assert gpu_plan.judge_room(paper(100), four, GPU, 2048) == 244
    assert "wait in the servers' queues" in gpu_plan.judge_row(paper(100), four, GPU, 2048)
    beside = gpu_plan.Layout(8, 0, 0.3)  # a server on each training GPU: 8 URLs per process
    room = gpu_plan.judge_server_room(PAPER, beside, GPU, 2048)
    assert gpu_plan.judge_room(paper(1), beside, GPU, 2048) == min(8 * 8 * 1, room)


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


def test_the_dry_run_prints_the_plan(capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # rich's tables unwrapped
    monkeypatch.setattr("shutil.disk_usage", disk_with(69 * 10**9))
    assert main(["train", "--config", str(CONFIGS / "paper-qwen3-8b.yaml"), "--dry-run", "--num-processes", "4",
                 "--accelerate-config", str(CONFIGS / "accelerate-zero3.yaml"), "--gpu-memory", "79.6",
                 "--prompt-tokens", "1024", "data.prompts=builtin:demo"]) == 0
    out = capsys.readouterr()
    for text in ("vLLM KV-cache room", "sequences of the configured length", "tokens per policy step",
                 "tokens per rubric step", "a rubric step, estimated", "assumed", "checkpoint disk",
                 "4 x 115 GB = 459 GB at most", "16-bit weights (zero3_save_16bit_model)", "judge in flight",
                 "layouts of 8 GPUs"):
        assert text in out.out, text
    assert "layout with no GPU serving the judge alone: 8 training" in out.err and "vllm serve" in out.err
    warning = next(line for line in out.err.splitlines() if "checkpoints need" in line)
    assert warning.startswith("evolm: warning: the checkpoints need up to 459 GB in "
                              "runs/paper-qwen3-8b/checkpoints (4 x 115 GB) and its disk (")
    assert ") has 69 GB free: the run would fail at a save" in warning
