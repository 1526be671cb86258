"""The memory estimate per training GPU and the judge's time budget (evolm.training.memory), against sums done by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolm.cli import main
from evolm.config import load_config
from evolm.errors import InputError
from evolm.training.memory import (
    GIB,
    Setup,
    Sharding,
    counts_in,
    estimate,
    judge_budget,
    read_sharding,
    refusal,
    setup_for,
)
from evolm.training.model_shape import KNOWN_MODELS, model_facts

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
QWEN3_8B = KNOWN_MODELS["Qwen/Qwen3-8B"]
PAPER = [str(CONFIGS / "paper-qwen3-8b.yaml"), "data.prompts=builtin:demo"]  # no Tulu prompts file needed here


def test_parameter_counts_by_hand() -> None:
    # Qwen3-8B: embeddings 151936 x 4096 = 622,329,856, and as many in the untied head.
    # One layer: q 4096 x 4096 = 16,777,216; k, v 4096 x 1024 = 4,194,304 each; o 16,777,216;
    # MLP 3 x 4096 x 12288 = 150,994,944; norms 2 x 4096 + q/k norms 2 x 128 = 8,448 -> 192,946,432.
    # 36 layers = 6,946,071,552; + 2 x 622,329,856 + final norm 4096 = 8,190,735,360 (the model card's 8.19B).
    assert QWEN3_8B.layer_parameters() == 192_946_432
    assert QWEN3_8B.parameters() == 8_190_735_360
    # SmolLM2-135M: 49152 x 576 = 28,311,552 tied; a layer 576*576*2 + 2*576*192 + 3*576*1536 + 2*576 = 3,540,096;
    # 30 layers = 106,202,880; + 28,311,552 + 576 = 134,515,008.
    assert KNOWN_MODELS["smollm2-135m-instruct"].parameters() == 134_515_008
    # LoRA rank 16 on all seven linear layers: 16 x (8192 + 5120 + 5120 + 8192 + 16384 + 16384 + 16384) = 1,212,416
    # per layer, x 36 = 43,646,976; only q_proj and v_proj: 16 x (8192 + 5120) x 36 = 7,667,712.
    assert QWEN3_8B.lora_parameters(16, ["all-linear"]) == 43_646_976
    assert QWEN3_8B.lora_parameters(16, ["q_proj", "v_proj"]) == 7_667_712


def test_the_paper_launch_term_by_term() -> None:
    """Qwen3-8B, 4 processes under ZeRO-3, micro-batch 1 of 1024 + 16384 tokens, checkpointing, reference model,
    colocated vLLM at 0.35 of 80 GiB with sleep mode."""
    e = estimate(QWEN3_8B, Setup(4, Sharding(True, 3), 80.0, 1, 1024, 16384, vllm_share=0.35, vllm_sleep=True))
    got = {t.name: round(t.gib * GIB) for t in e.terms}
    n = 8_190_735_360
    assert got["weights"] == got["gradients"] == got["reference model"] == n * 2 // 4 == 4_095_367_680
    assert got["optimizer (Adam)"] == n * 12 // 4 == 24_572_206_080  # fp32 master + 2 moments, sharded
    assert got["CUDA context, NCCL"] == round(1.5 * GIB)  # outside torch's allocator
    assert got["ZeRO-3 gathered parameters"] == 622_329_856 * 2  # the head (151936 x 4096) beats 2 layers
    # per token and layer: 16 x 4096 + 16 x 4096 + 14 x 1024 + 8 x 12288 = 243,712 bytes; 17,408 tokens;
    # checkpointed: (36 layers x 4096 x 2 bytes + 2 x 243,712 + final norm 6 x 4096) x 17,408 = 806,912 x 17,408
    assert got["activations"] == 806_912 * 17_408 == 14_046_724_096
    # head: 16384 x 4096 x (4 + 2) + tile 4096 x 32768 x 2 + fp32 head gradient 151936 x 4096 x 4
    assert got["output head (log-probs)"] == 402_653_184 + 268_435_456 + 2_489_319_424
    allocated = 3 * 4_095_367_680 + 24_572_206_080  # 36,858,309,120 in torch's allocator in every phase
    context, share = 1.5 * GIB, 0.35 * 80 * GIB  # neither in torch's allocator (vLLM has its own pool)
    # each phase: what torch allocates, + 10% of it (the allocator's reserve), + the context, + vLLM's
    assert e.generation_gib * GIB == pytest.approx(allocated * 1.1 + context + share)  # 72,219,523,840 = 67.3 GiB
    training = allocated + 1_244_659_712 + 14_046_724_096 + 3_160_408_064  # + gathered head, activations, head
    assert e.training_gib * GIB == pytest.approx(training * 1.1 + context + GIB)  # vLLM asleep: 1 GiB
    assert round(e.peak_gib, 1) == 67.3 and round(e.training_gib, 1) == 59.2
    assert [round(t.gib * GIB) for t in e.terms if t.name.startswith("allocator reserve")][:2] == [
        round(allocated * 0.1), round(training * 0.1)]
    # vLLM: 30,064,771,072 - weights 16,381,470,720 - 1.5 GiB = 12,072,687,616 for KV; a 40,960-token context
    # costs 40,960 x 2 x 36 x 1024 x 2 = 6,039,797,760: room for 2.0 sequences
    assert e.vllm_sequences == pytest.approx(12_072_687_616 / 6_039_797_760)
    assert refusal(e, Setup(4, Sharding(True, 3), 79.6, 1, 1024, 16384), 79.6) is None


def test_deepspeeds_optimizer_step_is_a_phase_of_its_own(tmp_path: Path) -> None:
    """DeepSpeed steps Adam on an fp32 copy of the gradients, made from a flat bf16 copy (stage3.py
    _prepare_fp32_grad_for_sub_group; stage_1_and_2.py step): 6 bytes per stepped parameter, one sub-group of at most
    10^9 parameters (plus the parameter that closes it, at most the largest) at a time under ZeRO-3, the whole
    partition under ZeRO-1/2; after the activations are freed. The launch measured on an H200 (docs/GPU.md):
    Qwen3-1.7B's shape, one process, ZeRO-3, transformers generation of 8 rows; its peak is the step, 41.3 GiB
    (nvidia-smi read 40.3; torch's allocator held 35.45 GiB at most while training and stepping, reserved 38.99)."""
    qwen3_1b7 = KNOWN_MODELS["Qwen/Qwen3-1.7B"]
    p = qwen3_1b7.parameters()  # 1,720,574,976
    measured = Setup(1, Sharding(True, 3), 139.8, 2, 1024, 32, vllm_mode=None, rows_per_process=8)
    e = estimate(qwen3_1b7, measured)
    got = {t.name: t for t in e.terms}
    sub_group = 10**9 + 151_936 * 2048  # the embedding (tied head) is the largest parameter
    assert round(got["optimizer step (fp32 gradients)"].gib * GIB) == 6 * sub_group and got[
        "optimizer step (fp32 gradients)"].phase == "step"
    allocated = (2 + 2 + 12 + 2) * p + 6 * sub_group  # weights, gradients, Adam, reference; the step's copy
    assert e.step_gib * GIB == pytest.approx(allocated * 1.1 + 1.5 * GIB)
    assert e.peak_phase == "step" and round(e.peak_gib, 1) == 41.3 and e.step_gib > e.generation_gib
    # measured: nvidia-smi's peak, and torch's allocated peak while training and stepping (its terms in the allocator)
    assert e.peak_gib >= 40.3
    assert 35.45 <= sum(t.gib for t in e.terms if t.allocated and counts_in(t, "step")) <= 35.45 * 1.05
    line = refusal(e, measured, 37.0)
    assert line is not None and "41.3 GiB per training GPU (step)" in line
    # ZeRO-2 on 2 processes: the whole partition of 860M parameters; offloaded or LoRA: no fp32 copy on the GPU
    z2 = {t.name: t.gib for t in estimate(qwen3_1b7, Setup(2, Sharding(True, 2), 80.0, 1, 1024, 32)).terms}
    assert round(z2["optimizer step (fp32 gradients)"] * GIB) == 6 * p // 2
    for setup in (Setup(1, Sharding(True, 3, offload_optimizer=True), 80.0, 1, 1024, 32),
                  Setup(1, Sharding(True, 3), 80.0, 1, 1024, 32, lora_rank=16), Setup(1, Sharding(False, 0), 80.0,
                                                                                     1, 1024, 32)):
        e = estimate(qwen3_1b7, setup)
        assert e.step_gib == 0.0 and all(t.phase != "step" for t in e.terms)
    # a DeepSpeed JSON's smaller sub-group: 10^8 + the embedding
    ds_json = tmp_path / "ds.json"
    ds_json.write_text(json.dumps({"zero_optimization": {"stage": 3, "sub_group_size": 1e8}}), encoding="utf-8")
    small = estimate(qwen3_1b7, Setup(1, read_sharding(ds_json), 80.0, 1, 1024, 32, vllm_mode=None))
    assert round(next(t.gib for t in small.terms if t.phase == "step") * GIB) == 6 * (10**8 + 151_936 * 2048)
    ds_json.write_text(json.dumps({"zero_optimization": {"stage": 3, "sub_group_size": "many"}}), encoding="utf-8")
    with pytest.raises(InputError, match="sub_group_size 'many' is not a number"):
        read_sharding(ds_json)
    # the paper launch: a sub-group of 10^9 + 622M / 4 of its 2.05B parameters per GPU; the peak stays generation's
    paper = estimate(KNOWN_MODELS["Qwen/Qwen3-8B"], Setup(4, Sharding(True, 3), 80.0, 1, 1024, 16384,
                                                          vllm_share=0.35, vllm_sleep=True))
    assert round(paper.step_gib, 1) == 47.4 and paper.peak_phase == "generation" and round(paper.peak_gib, 1) == 67.3


def test_without_sleep_mode_vllm_stays_and_the_launch_does_not_fit() -> None:
    s = Setup(4, Sharding(True, 3), 80.0, 1, 1024, 16384, vllm_share=0.35, vllm_sleep=False)
    e = estimate(QWEN3_8B, s)
    # training: the sleep mode's 1 GiB becomes the whole 28 GiB share: 59.2 - 1 + 28 = 86.2 GiB
    with_sleep = estimate(QWEN3_8B, Setup(4, Sharding(True, 3), 80.0, 1, 1024, 16384, vllm_share=0.35,
                                          vllm_sleep=True))
    assert e.training_gib * GIB == pytest.approx(with_sleep.training_gib * GIB - GIB + 0.35 * 80 * GIB)
    line = refusal(e, s, 79.6)
    assert line is not None and "\n" not in line and "86.2 GiB" in line and "(training)" in line
    assert "vLLM (colocated) (28.0 GiB)" in line and "grpo.vllm_enable_sleep_mode=true" in line


def test_no_deepspeed_bf16_adam_and_transformers_generation() -> None:
    # SmolLM2-135M on 1 process, no DeepSpeed, no reference (beta 0), no vLLM: weights and gradients 2 bytes, torch
    # AdamW's two bf16 moments 4 bytes per parameter; generation holds 8 rows x 1504 tokens of KV cache at
    # 2 x 30 layers x 192 x 2 bytes = 23,040 bytes per token.
    facts = KNOWN_MODELS["smollm2-135m-instruct"]
    e = estimate(facts, Setup(1, Sharding(), 80.0, 1, 1024, 480, reference_model=False, vllm_mode=None,
                              rows_per_process=8))
    got = {t.name: round(t.gib * GIB) for t in e.terms}
    assert got["weights"] == got["gradients"] == 134_515_008 * 2
    assert got["optimizer (Adam)"] == 134_515_008 * 4
    assert "reference model" not in got and "ZeRO-3 gathered parameters" not in got
    assert got["generation KV cache (transformers)"] == 8 * 1504 * 23_040


def test_zero_stages_shard_what_they_should_and_offload_moves_the_optimizer() -> None:
    def terms(sh: Sharding) -> dict[str, int]:
        e = estimate(QWEN3_8B, Setup(8, sh, 80.0, 1, 1024, 1024, vllm_mode="server"))
        return {t.name: round(t.gib * GIB) for t in e.terms}

    n = 8_190_735_360
    z1, z2 = terms(Sharding(True, 1)), terms(Sharding(True, 2))
    assert (z1["weights"], z1["gradients"], z1["optimizer (Adam)"], z1["reference model"]) == (2 * n, 2 * n,
                                                                                               12 * n // 8, 2 * n)
    assert z2["gradients"] == 2 * n // 8 and z2["weights"] == 2 * n
    off = terms(Sharding(True, 3, offload_optimizer=True))
    assert off["optimizer (Adam)"] == 0 and off["weights"] == 2 * n // 8


def test_lora_trains_an_fp32_adapter_without_a_reference() -> None:
    cfg = load_config(PAPER[0], [*PAPER[1:], "model.lora.r=16", "model.lora.alpha=32"])
    s = setup_for(cfg, QWEN3_8B, 4, Sharding(True, 3), 80.0)
    assert not s.reference_model and s.lora_rank == 16
    got = {t.name: round(t.gib * GIB) for t in estimate(QWEN3_8B, s).terms}
    assert got["gradients"] == 43_646_976 * 4 // 4 and got["optimizer (Adam)"] == 43_646_976 * 8 // 4
    assert got["LoRA merge for vLLM"] == 8_190_735_360 * 2  # TRL gathers the whole model to merge the adapter


def test_model_facts_from_a_local_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 400, "tie_word_embeddings": True}))
    f = model_facts(str(tmp_path))
    assert f is not None and (f.head_dim, f.kv_dim, f.tied_embeddings) == (8, 16, True)
    # a layer: 32 x 32 + 2 x 32 x 16 + 32 x 32 + 3 x 32 x 64 + 2 x 32 = 9,280; x 2 + 400 x 32 + 32 = 31,392
    assert f.parameters() == 31_392
    assert model_facts("someone/unknown-model") is None
    adapter = tmp_path / "adapter"  # a LoRA adapter (a warm start): its base model's shape
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path)}))
    assert model_facts(str(adapter)) == f
    assert model_facts("studies/constraints/results/adapters/warm-start") == KNOWN_MODELS["smollm2-135m-instruct"]


def test_sharding_is_read_from_accelerate_and_deepspeed_configs(tmp_path: Path) -> None:
    shipped = read_sharding(CONFIGS / "accelerate-zero3.yaml")
    assert (shipped.deepspeed, shipped.zero_stage, shipped.offload_optimizer) == (True, 3, False)
    assert shipped.save_16bit  # zero3_save_16bit_model: true, the checkpoints hold a 16-bit copy too
    (tmp_path / "gather.json").write_text(json.dumps({"zero_optimization": {
        "stage": 3, "stage3_gather_16bit_weights_on_model_save": True}}))
    assert read_sharding(tmp_path / "gather.json").save_16bit is True
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2, "offload_optimizer":
                                                                         {"device": "cpu"}}}))
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n")
    s = read_sharding(tmp_path / "acc.yaml")
    assert (s.deepspeed, s.zero_stage, s.offload_optimizer) == (True, 2, True)
    (tmp_path / "ddp.yaml").write_text("distributed_type: MULTI_GPU\nnum_processes: 2\n")
    assert read_sharding(tmp_path / "ddp.yaml").deepspeed is False


def test_judge_budget_by_hand() -> None:
    cfg = load_config(PAPER[0], PAPER[1:])
    b = judge_budget(cfg, 4, tokens_per_second=50)
    # 16,384 tokens / 50 per s = 327.68 s; 512 rows / 4 processes = 128, a rubric step judges 2 answers per row:
    # 256 requests in waves of judge.max_concurrency 61 to its one URL = 5 waves x 327.68 = 1,638.4 s
    assert b.seconds == pytest.approx(327.68) and b.step_seconds == pytest.approx(1638.4)
    # two URLs: 61 in flight to each, 122 a wave: 3 waves
    two = load_config(PAPER[0], [*PAPER[1:], "judge.base_url=http://a:8001/v1,http://b:8001/v1"])
    assert judge_budget(two, 4, 50).step_seconds == pytest.approx(3 * 327.68)
    assert b.fits and b.timeout == cfg.judge.timeout and b.ddp_timeout > b.step_seconds  # the config is set for it
    short = judge_budget(load_config(PAPER[0], [*PAPER[1:], "judge.timeout=120"]), 4, 50)
    assert not short.fits
    assert judge_budget(load_config(PAPER[0], [*PAPER[1:], "judge.mode=prob"]), 4, 50).reply_tokens == 1


def test_the_paper_dry_run_prints_the_estimate_and_fits_80_gb(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", *PAPER[:1], "--dry-run", "--num-processes", "4", "--accelerate-config",
                 str(CONFIGS / "accelerate-zero3.yaml"), "--gpu-memory", "79.6", *PAPER[1:]]) == 0
    out = capsys.readouterr()
    assert "memory per training GPU" in out.out and "peak while generating" in out.out
    # judge.timeout and grpo.ddp_timeout fit the judge's budget (the disk of this machine may not hold the
    # checkpoints: that warning is test_gpu_plan's)
    assert not [line for line in out.err.splitlines() if "warning" in line and "checkpoints need" not in line]


def test_gpu_memory_40_refuses_the_paper_launch_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", *PAPER[:1], "--dry-run", "--num-processes", "4", "--accelerate-config",
                 str(CONFIGS / "accelerate-zero3.yaml"), "--gpu-memory", "40", *PAPER[1:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "exceeds --gpu-memory 40" in err and "offload_optimizer_device: cpu" in err


def test_dry_run_refuses_an_unknown_grpo_key_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", str(CONFIGS / "demo-cpu.yaml"), "--dry-run", "grpo.vllm_modee=server"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "grpo.vllm_modee is not a TRL GRPOConfig setting" in err and "grpo.vllm_mode?" in err
    assert main(["train", "--config", str(CONFIGS / "demo-cpu.yaml"), "--dry-run", "grpo.use_vllm=maybe"]) == 2
    assert "grpo.use_vllm must be true or false" in capsys.readouterr().err


def test_dry_run_plans_what_the_real_launch_computes(capsys: pytest.CaptureFixture[str]) -> None:
    """The real launch hands evolm_grpo_settings the launcher's WORLD_SIZE; the dry run uses the same function."""
    from evolm.training.grpo_config import evolm_grpo_settings

    cfg = load_config(CONFIGS / "demo-cpu.yaml", ["grpo.per_device_train_batch_size=2", "schedule.prompts_per_step=2"])
    assert main(["train", "--config", str(CONFIGS / "demo-cpu.yaml"), "--dry-run", "--num-processes", "2",
                 "grpo.per_device_train_batch_size=2", "schedule.prompts_per_step=2"]) == 0
    out = capsys.readouterr().out
    accum = evolm_grpo_settings(cfg, 2)["gradient_accumulation_steps"]
    assert accum == 2  # 2 questions x 4 samples = 8 rows = 2 processes x 2 rows x 2 micro-batches
    assert f"4 per step: {accum} micro-batches of 2" in out


def test_the_accelerate_config_agrees_with_the_gpu_doc_launch() -> None:
    """docs/GPU.md puts the judge on GPUs 4-7 and trains on 4 processes: the shipped accelerate config says 4 too."""
    import re

    import yaml

    readme = (CONFIGS.parent / "docs" / "GPU.md").read_text(encoding="utf-8")
    launch = re.search(r"accelerate launch --config_file configs/accelerate-zero3.yaml --num_processes (\d+)", readme)
    shipped = yaml.safe_load((CONFIGS / "accelerate-zero3.yaml").read_text(encoding="utf-8"))
    assert launch is not None and shipped["num_processes"] == int(launch.group(1)) == 4
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve" in readme


def test_without_deepspeed_the_refusal_points_at_zero3(capsys: pytest.CaptureFixture[str]) -> None:
    # plain data parallel: 15.3 GiB each of weights, gradients and reference, 30.5 GiB of bf16 Adam moments
    assert main(["train", "--config", *PAPER[:1], "--dry-run", "--num-processes", "4", "--gpu-memory", "79.6",
                 *PAPER[1:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "optimizer (Adam) (30.5 GiB)" in err and "DeepSpeed ZeRO-3 (configs/accelerate-zero3.yaml" in err


def _rows(config: str) -> dict[str, float]:
    cfg = load_config(str(CONFIGS / "baselines" / config), ["data.prompts=builtin:demo"])
    setup = setup_for(cfg, QWEN3_8B, 4, read_sharding(CONFIGS / "accelerate-zero3.yaml"), 80.0)
    return {t.name: round(t.gib, 1) for t in estimate(QWEN3_8B, setup).terms}


def test_models_loaded_in_the_training_processes_are_counted_whole_under_zero3() -> None:
    # Skywork-Reward (Llama-3.1-8B, vocabulary 128,257, a 4096 x 1 score head): 128257 x 4096 = 525,340,672
    # embeddings; a layer 2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336 + 2 x 4096 = 218,112,000, x 32 =
    # 6,979,584,000; + final norm 4096 + head 4096 = 7,504,932,864 -> x 2 B = 14.0 GiB on every GPU, not / 4.
    assert KNOWN_MODELS["Skywork/Skywork-Reward-V2-Llama-3.1-8B-40M"].parameters() == 7_504_932_864
    assert _rows("skywork-rm.yaml")["reward model (in process)"] == 14.0
    # sequential: the writer stage's fixed answerer is the base Qwen3-8B, whole: 8,190,735,360 x 2 B = 15.3 GiB,
    # and its generation's KV cache: 8 rows x (1,024 + 16,384) tokens x 147,456 B (36 layers x 2 x 1024 x 2 B)
    rows = _rows("sequential.yaml")
    assert rows["fixed answerer (in process)"] == 15.3
    assert rows["fixed answerer's KV cache (transformers)"] == round(8 * 17_408 * 147_456 / GIB, 1)
    assert "fixed answerer (in process)" not in _rows("base-rubrics.yaml")  # a served or absent fixed model: no row
    # an hf judge loads in float32 unless judge.dtype says otherwise (backends.devices.judge_dtype): 4 bytes a weight
    cfg = load_config(str(CONFIGS / "paper-qwen3-8b.yaml"), ["data.prompts=builtin:demo", "judge.backend=hf",
                                                             "judge.base_url=null"])
    setup = setup_for(cfg, QWEN3_8B, 4, read_sharding(CONFIGS / "accelerate-zero3.yaml"), 80.0)
    judge = {t.name: t.gib for t in estimate(QWEN3_8B, setup).terms}["judge (in process)"]
    assert judge == pytest.approx(KNOWN_MODELS["Qwen/Qwen3-1.7B"].parameters() * 4 / GIB)


def test_advice_never_names_a_setting_already_set_nor_expandable_segments_with_sleep_mode() -> None:
    # colocated vLLM in sleep mode holding most of a 40 GB GPU: vLLM's share is the largest term while generating
    setup = Setup(4, Sharding(True, 3), 40.0, 1, 1024, 16384, vllm_share=0.9, vllm_sleep=True)
    e = estimate(QWEN3_8B, setup)
    line = refusal(e, setup, 40.0)
    assert line is not None and "vLLM (colocated)" in line and "grpo.vllm_gpu_memory_utilization" in line
    assert "vllm_enable_sleep_mode" not in line  # already on
    # vLLM's sleep-mode allocator refuses PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True at start
    assert not any("expandable_segments" in t.knob for t in e.terms)
    # without sleep mode both are advice
    awake = Setup(4, Sharding(True, 3), 40.0, 1, 1024, 16384, vllm_share=0.9, vllm_sleep=False)
    knobs = " ".join(t.knob for t in estimate(QWEN3_8B, awake).terms)
    assert "grpo.vllm_enable_sleep_mode=true" in knobs and "expandable_segments:True" in knobs
    # a KV cache without room for one sequence names the length setting the launch has not set, or lowers the one set
    tight = Setup(4, Sharding(True, 3), 80.0, 1, 1024, 16384, vllm_share=0.22, vllm_sleep=True,
                  vllm_max_model_length=40960)
    line = refusal(estimate(QWEN3_8B, tight), tight, 80.0)
    assert line is not None and "a lower grpo.vllm_max_model_length" in line and "above 1" in line
