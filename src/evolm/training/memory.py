"""Memory per training GPU and the judge's time budget, estimated from sizes alone (``evolm train --dry-run``).

Nothing here loads a model or touches a GPU: the estimate is arithmetic over the model's shape (``model_shape``: a
local ``config.json``, or ``KNOWN_MODELS`` for a few hub ids) and the run's settings, TRL's defaults where ``grpo:``
sets none (``config.grpo_setting``). It is meant to tell a launch that
cannot fit from one that may, and which setting to turn; it is not a measurement. docs/PERFORMANCE.md ("Memory per
training GPU") derives each term and lists the assumptions, which are, in short:

- Weights and gradients in the model's dtype (bfloat16: 2 bytes per parameter). Adam under DeepSpeed (any ZeRO
  stage) keeps an fp32 master copy and two fp32 moments: 12 bytes per trainable parameter. Without DeepSpeed,
  torch's AdamW keeps its two moments in the parameters' dtype and no master copy (4 bytes in bfloat16). A LoRA
  adapter is trained in fp32 (PEFT upcasts it): 16 bytes per adapter parameter, the base frozen.
- ZeRO shards over the training processes: stage 1 the optimizer state, stage 2 also the gradients, stage 3 also
  the weights (and TRL's reference model); ``offload_*_device: cpu`` moves that state off the GPU. Under stage 3
  each GPU also holds the parameters being used, gathered: the larger of two decoder layers and the output head.
- TRL loads a reference model when ``grpo.beta`` is not 0 and no LoRA adapter is trained (the adapter off is the
  reference); a full copy per GPU below stage 3.
- Activations of one micro-batch (``grpo.per_device_train_batch_size`` rows of prompt + ``max_completion_length``
  tokens), flash/SDPA attention (no sequence-squared term), per token and decoder layer the tensors autograd keeps
  for a Llama/Qwen3 layer: ``16 h + 16 q + 14 kv + 8 I`` bytes in bfloat16 (h hidden, q and kv the query and
  key/value widths, I the MLP width; the RMSNorms keep fp32 copies of their inputs). With gradient checkpointing
  only each layer's input (``2 h`` bytes) is kept, plus one layer recomputed and its gradients (twice a layer).
- The output head: TRL 1.16 never builds the (rows, tokens, vocabulary) logits; its chunked log-prob kernel keeps
  the completion's hidden states, an fp32 gradient for them and for the head's weight (vocabulary x h x 4 bytes),
  and one (4096 x 32768) tile.
- Colocated vLLM holds ``grpo.vllm_gpu_memory_utilization`` x GPU memory while it generates: a copy of the weights
  (split over ``vllm_tensor_parallel_size``), about 1.5 GiB of its own buffers, the rest KV cache. Without sleep mode
  it holds that share throughout; with ``grpo.vllm_enable_sleep_mode`` TRL puts it to sleep (level 2: weights and
  KV cache released) after each generation, and 1 GiB is assumed to stay (CUDA graphs, buffers outside its pools).
  The peak is then the largest of generation (resident state + vLLM), training (resident state + activations) and,
  under DeepSpeed, the optimizer step (below).
- Generation by transformers (no vLLM) keeps a KV cache for all of a process's rows of a step at full length, and
  under ZeRO-3 gathers the whole model for it (TRL's ``ds3_gather_for_generation``).
- DeepSpeed's optimizer step (ZeRO 1-3, bf16 weights with fp32 master copies, not offloaded) makes an fp32 copy of
  the gradients it steps, from a flat bf16 copy: 6 bytes per parameter at the moment of the copy, for one optimizer
  sub-group at a time under ZeRO-3, for the whole partition under ZeRO-1/2 (``stage3.py``/``stage_1_and_2.py``,
  DeepSpeed 0.19). A ZeRO-3 sub-group closes at the first parameter that takes it to
  ``zero_optimization.sub_group_size`` (10^9 by default), so it holds at most that plus the largest parameter's
  partition. The activations are freed by then, so this is a third phase: resident state + the step.
- Per process, 1.5 GiB outside torch's allocator (the CUDA context, NCCL), and in each phase the caching allocator's
  reserve above what is allocated: 10% of the phase's other terms but vLLM's (its own pool). Both measured on an
  H200 with the per-phase peaks evolm records (``gpu_*_gib`` in metrics.jsonl): nvidia-smi 1.3 GiB above torch's
  reserved memory, reserved 10% above the allocated peak (docs/PERFORMANCE.md, "Measured").

GiB here is 2**30 bytes; an "80 GB" A100/H100 has about 79.6 GiB (``torch.cuda.mem_get_info()[1] / 2**30``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evolm.config import WRITER_REGIMES, RunConfig, endpoint_urls, grpo_setting
from evolm.errors import InputError
from evolm.judge.judge import GENERATIVE_MODES
from evolm.training import generate_calls
from evolm.training.model_shape import KNOWN_MODELS, ModelFacts, model_facts  # noqa: F401 - KNOWN_MODELS: estimate's doctest

GIB = 2**30
CONTEXT_GIB = 1.5  # CUDA context and NCCL, outside torch's allocator, per process (1.3 measured on an H200)
ALLOCATOR_RESERVE = 0.10  # the caching allocator's reserve over a phase's allocated peak (10% measured on an H200)
DS_SUB_GROUP = 10**9  # DeepSpeed's default zero_optimization.sub_group_size: parameters ZeRO-3 steps at once
VLLM_BUFFERS_GIB = 1.5  # vLLM's own activations (max_num_batched_tokens=4096, as TRL sets) and CUDA graphs (assumed)
VLLM_ASLEEP_GIB = 1.0  # what a sleeping colocated vLLM keeps (assumed)
HEAD_TOKEN_CHUNK, HEAD_VOCAB_CHUNK = 4096, 32768  # trl/kernels/chunked_logprob.py (TRL 1.16)
PROMPT_TOKENS = 1024  # prompt length assumed for a training row (a question, or the rubric-writing instructions)
JUDGE_TOKENS_PER_SECOND = 50.0  # decode speed assumed for one judge request on a busy server


# ----------------------------------------------------------------------------- the launch's sharding


@dataclass(frozen=True)
class Sharding:
    """How the training processes share the model's state: DeepSpeed or not, the ZeRO stage, CPU offload, and
    whether a ZeRO-3 checkpoint also holds the gathered 16-bit weights (DeepSpeed's default: no)."""

    deepspeed: bool = False
    zero_stage: int = 0
    offload_optimizer: bool = False
    offload_params: bool = False
    source: str = "no --accelerate-config: plain data parallel, no ZeRO"
    sub_group_size: int = DS_SUB_GROUP  # parameters ZeRO-3 steps at once (a DeepSpeed JSON's zero_optimization)
    save_16bit: bool = False  # zero3_save_16bit_model / stage3_gather_16bit_weights_on_model_save


def read_sharding(path: str | Path) -> Sharding:
    """The sharding an accelerate config (YAML) or a DeepSpeed config (JSON) asks for.

    An accelerate config with ``distributed_type: DEEPSPEED`` states ``deepspeed_config.zero_stage`` and the offload
    devices (and ``zero3_save_16bit_model``), or names a DeepSpeed JSON in ``deepspeed_config_file``; a
    DeepSpeed JSON states ``zero_optimization.stage``, ``offload_optimizer`` / ``offload_param`` devices (and
    ``stage3_gather_16bit_weights_on_model_save``). Any other accelerate config (multi-GPU, FSDP is not
    estimated) reads as plain data parallel.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such accelerate or DeepSpeed config")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}  # YAML reads JSON too
    except yaml.YAMLError as e:
        raise InputError(f"{p}: not valid YAML or JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{p}: not an accelerate or DeepSpeed config (a mapping)")
    if "zero_optimization" in data:
        return _deepspeed_json(data, str(p))
    if str(data.get("distributed_type", "")).upper() != "DEEPSPEED":
        return Sharding(source=f"{p.name}: distributed_type {data.get('distributed_type', 'unset')} (no ZeRO)")
    ds = data.get("deepspeed_config") or {}
    if ds.get("deepspeed_config_file"):
        return read_sharding(p.parent / ds["deepspeed_config_file"] if not Path(ds["deepspeed_config_file"])
                             .is_absolute() else ds["deepspeed_config_file"])
    return Sharding(True, int(ds.get("zero_stage", 0) or 0), ds.get("offload_optimizer_device", "none") == "cpu",
                    ds.get("offload_param_device", "none") == "cpu",
                    f"{p.name}: ZeRO stage {ds.get('zero_stage', 0)}",
                    save_16bit=str(ds.get("zero3_save_16bit_model", False)).lower() == "true")


def _deepspeed_json(data: dict[str, Any], source: str) -> Sharding:
    zero = data.get("zero_optimization") or {}
    stage = zero.get("stage", 0)
    stage = 0 if stage == "auto" else int(stage)
    device = lambda key: (zero.get(key) or {}).get("device", "none") == "cpu"  # noqa: E731
    try:
        sub_group = int(float(zero.get("sub_group_size", DS_SUB_GROUP)))
    except (TypeError, ValueError):
        raise InputError(f"{Path(source).name}: zero_optimization.sub_group_size "
                         f"{zero.get('sub_group_size')!r} is not a number") from None
    gather = zero.get("stage3_gather_16bit_weights_on_model_save",
                      zero.get("stage3_gather_fp16_weights_on_model_save"))  # its older name
    return Sharding(True, stage, device("offload_optimizer"), device("offload_param"),
                    f"{Path(source).name}: ZeRO stage {stage}", sub_group, str(gather).lower() == "true")


def sharding_for(cfg: RunConfig, accelerate_config: str | None, zero_stage: int | None) -> Sharding:
    """The sharding of a launch: ``--zero-stage`` if given, else the accelerate config, else ``grpo.deepspeed``
    (TrainingArguments' DeepSpeed JSON or mapping), else plain data parallel."""
    if zero_stage is not None:
        if not 0 <= zero_stage <= 3:
            raise InputError(f"--zero-stage must be 0, 1, 2 or 3, not {zero_stage}")
        return Sharding(True, zero_stage, source=f"--zero-stage {zero_stage} (DeepSpeed)")
    if accelerate_config:
        return read_sharding(accelerate_config)
    ds = grpo_setting(cfg.grpo, "deepspeed")
    if isinstance(ds, dict):
        return _deepspeed_json(ds, "grpo.deepspeed")
    if isinstance(ds, str) and ds:
        return read_sharding(ds)
    return Sharding()


# ----------------------------------------------------------------------------- the estimate


@dataclass(frozen=True)
class Setup:
    """Everything the estimate reads about one training process of a launch (``setup_for`` fills it from a config)."""

    processes: int
    sharding: Sharding
    gpu_gib: float
    micro_batch: int
    prompt_tokens: int
    completion_tokens: int
    gradient_checkpointing: bool = True
    dtype_bytes: int = 2  # bfloat16 weights (4: float32)
    reference_model: bool = True
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ("all-linear",)
    vllm_mode: str | None = "colocate"  # None: transformers generation; "server": generation on other GPUs
    vllm_share: float = 0.3
    vllm_sleep: bool = False
    vllm_tensor_parallel: int = 1
    vllm_max_model_length: int | None = None
    rows_per_process: int = 1  # a step's rows on one process (transformers generation holds all of them at once)
    cast_lm_head_to_fp32: bool = False
    judge_parameters: int = 0  # a judge loaded in the training process (judge.backend hf, another model)
    judge_name: str = "judge (in process)"  # its row: the judge, or the reward model (judge.mode reward_model)
    judge_dtype_bytes: int = 2  # its weights: judge.dtype auto is float32 for a judge (models.judge_dtype), the
    # policy's dtype for a reward model
    fixed_role: str = ""  # a fixed rubric writer or answerer loaded in the training process (backend hf): its role
    fixed_parameters: int = 0  # ... its weights, whole on each training GPU
    fixed_kv_tokens: int = 0  # ... tokens its generation keeps in the KV cache at once (a batch at full length)
    fixed_kv_bytes_per_token: int = 0


@dataclass(frozen=True)
class Term:
    name: str
    gib: float
    note: str = ""
    phase: str = "resident"  # resident (always), generation, training
    knob: str = ""  # what to turn when this term is the one that does not fit
    allocated: bool = True  # held in torch's caching allocator (not vLLM's pool or the CUDA context)


@dataclass(frozen=True)
class Estimate:
    """The terms of one training process's GPU memory, its phases (generation, training, DeepSpeed's optimizer step)
    and its peak (GiB)."""

    terms: list[Term]
    generation_gib: float
    training_gib: float
    vllm_sequences: float | None = None  # full-length sequences a colocated vLLM's KV cache holds at once
    notes: list[str] = field(default_factory=list)
    step_gib: float = 0.0  # DeepSpeed's optimizer step (resident + its fp32 gradient copy); 0 without one

    @property
    def peak_gib(self) -> float:
        return max(self.generation_gib, self.training_gib, self.step_gib)

    @property
    def peak_phase(self) -> str:
        return max(("generation", self.generation_gib), ("training", self.training_gib), ("step", self.step_gib),
                   key=lambda kv: kv[1])[0]

    def largest(self, phase: str) -> Term:
        """The largest term that counts in ``phase`` (resident terms count in every phase)."""
        return max((t for t in self.terms if counts_in(t, phase)), key=lambda t: t.gib)


def counts_in(t: Term, phase: str) -> bool:
    """Whether term ``t`` is held in ``phase``: resident terms always, a colocated vLLM's share between its
    generations (phase "outside generation") while training and while the optimizer steps."""
    return t.phase in ("resident", phase) or (t.phase == "outside generation" and phase != "generation")


def estimate(facts: ModelFacts, s: Setup) -> Estimate:
    """GPU memory of one training process, term by term (see the module docstring for every assumption).

    >>> e = estimate(KNOWN_MODELS["Qwen/Qwen3-8B"], Setup(4, Sharding(True, 3), 80.0, 1, 1024, 16384,
    ...              vllm_share=0.35, vllm_sleep=True))
    >>> round(e.peak_gib, 1), round(e.training_gib, 1)
    (67.3, 59.2)
    """
    n, sh, wb = s.processes, s.sharding, s.dtype_bytes
    z = sh.zero_stage if sh.deepspeed else 0
    params = facts.parameters()
    lora = s.lora_rank > 0
    trainable = facts.lora_parameters(s.lora_rank, list(s.lora_targets)) if lora else params
    tokens = s.micro_batch * (s.prompt_tokens + s.completion_tokens)
    terms: list[Term] = []

    def add(name: str, nbytes: float, note: str = "", phase: str = "resident", knob: str = "",
            allocated: bool = True) -> None:
        terms.append(Term(name, nbytes / GIB, note, phase, knob, allocated))

    shard_note = lambda stage: f"/ {n} (ZeRO-{z})" if z >= stage and n > 1 else "not sharded"  # noqa: E731
    zero3 = "DeepSpeed ZeRO-3 (configs/accelerate-zero3.yaml; --accelerate-config here), or model.lora.r"
    more = "more training processes under ZeRO-3, or model.lora.r" if z == 3 else zero3
    weights_gpu = 0 if z == 3 and sh.offload_params else params * wb / (n if z == 3 else 1)
    add("weights", weights_gpu, f"{params / 1e9:.2f}B x {wb} B {shard_note(3)}"
        + (", offloaded to CPU" if z == 3 and sh.offload_params else ""), knob=more)
    grad_bytes = 4 if lora else wb  # a LoRA adapter is fp32 (PEFT upcasts it): its weight is its own master copy
    opt_bytes = 12 if sh.deepspeed and wb == 2 and not lora else 2 * grad_bytes
    add("gradients", trainable * grad_bytes / (n if z >= 2 else 1),
        f"{trainable / 1e6:,.0f}M x {grad_bytes} B {shard_note(2)}", knob=more)
    optimizer = 0 if sh.offload_optimizer and z >= 1 else trainable * opt_bytes / (n if z >= 1 else 1)
    add("optimizer (Adam)", optimizer, f"{trainable / 1e6:,.0f}M x {opt_bytes} B ("
        + ("fp32 master + 2 moments" if opt_bytes == 12 else "2 moments") + f") {shard_note(1)}"
        + (", offloaded to CPU" if optimizer == 0 else ""),
        knob="offload_optimizer_device: cpu in the accelerate config, more training processes, or model.lora.r"
        if z >= 1 else zero3)
    if s.reference_model:
        add("reference model", params * wb / (n if z == 3 else 1), f"grpo.beta != 0: {shard_note(3)}",
            knob="ZeRO-3, grpo.beta=0 (no KL term, TRL loads no reference) or model.lora.r (the adapter off is the "
            "reference)")
    whole = ", whole (outside ZeRO-3)" if z == 3 else ""
    if s.judge_parameters:
        jb = s.judge_dtype_bytes
        add(s.judge_name, s.judge_parameters * jb, f"{s.judge_parameters / 1e9:.2f}B x {jb} B on each training GPU"
            f"{whole}", knob="a judge served on its own GPUs (judge.backend=openai, judge.base_url)")
    if s.fixed_parameters:
        where = "rubric.writer" if s.fixed_role == "writer" else "contrast.answerer"
        add(f"fixed {s.fixed_role} (in process)", s.fixed_parameters * wb,
            f"{s.fixed_parameters / 1e9:.2f}B x {wb} B on each training GPU{whole}",
            knob=f"the fixed {s.fixed_role} served on its own GPUs ({where}_backend=openai, {where}_base_url)")
    add("CUDA context, NCCL", CONTEXT_GIB * GIB, "outside torch's allocator (1.3 GiB measured on an H200)",
        allocated=False)
    if z == 3:
        add("ZeRO-3 gathered parameters", max(2 * facts.layer_parameters(), facts.vocab * facts.hidden) * wb,
            "2 decoder layers or the output head", "training", knob=more)

    # ---- training: activations of one micro-batch, and the output head
    layer = facts.activation_bytes_per_token_layer() * wb / 2
    final_norm = 6 * facts.hidden * tokens
    if s.gradient_checkpointing:
        add("activations", (facts.layers * facts.hidden * wb + 2 * layer) * tokens + final_norm,
            f"{s.micro_batch} x {s.prompt_tokens + s.completion_tokens:,} tokens, checkpointed", "training",
            knob="grpo.per_device_train_batch_size or grpo.max_completion_length")
    else:
        add("activations", facts.layers * layer * tokens + final_norm,
            f"{s.micro_batch} x {s.prompt_tokens + s.completion_tokens:,} tokens, no checkpointing", "training",
            knob="grpo.gradient_checkpointing=true")
    completion = s.micro_batch * s.completion_tokens
    head_bytes = 4 if s.cast_lm_head_to_fp32 else wb
    head = (completion * facts.hidden * (4 + head_bytes) + min(completion, HEAD_TOKEN_CHUNK) * HEAD_VOCAB_CHUNK
            * head_bytes + (0 if lora else facts.vocab * facts.hidden * 4))
    add("output head (log-probs)", head, "TRL's chunked kernel, fp32 gradients" + ("" if lora else " (head incl.)"),
        "training", knob="grpo.per_device_train_batch_size or grpo.max_completion_length")

    # ---- generation
    vllm_sequences = None
    if s.vllm_mode == "colocate":
        share = s.vllm_share * s.gpu_gib * GIB
        add("vLLM (colocated)", share, f"{s.vllm_share} x {s.gpu_gib:g} GiB", "generation",
            knob=("" if s.vllm_sleep else "grpo.vllm_enable_sleep_mode=true, ")  # never a setting already set
            + "a lower grpo.vllm_gpu_memory_utilization, or grpo.vllm_mode=server", allocated=False)
        if s.vllm_sleep:
            add("vLLM asleep", VLLM_ASLEEP_GIB * GIB, "sleep mode (assumed left)", "outside generation",
                allocated=False)
        else:
            add("vLLM (colocated)", share, "held: no sleep mode", "outside generation",
                knob="grpo.vllm_enable_sleep_mode=true or a lower grpo.vllm_gpu_memory_utilization", allocated=False)
        kv_room = share - params * wb / s.vllm_tensor_parallel - VLLM_BUFFERS_GIB * GIB
        length = s.vllm_max_model_length or facts.max_positions or (s.prompt_tokens + s.completion_tokens)
        vllm_sequences = max(0.0, kv_room) / (length * facts.kv_bytes_per_token(wb) / s.vllm_tensor_parallel)
    elif s.vllm_mode is None:
        rows = s.rows_per_process * (s.prompt_tokens + s.completion_tokens)
        add("generation KV cache (transformers)", rows * facts.kv_bytes_per_token(wb),
            f"{s.rows_per_process} rows x {s.prompt_tokens + s.completion_tokens:,} tokens at once", "generation",
            knob="grpo.use_vllm=true")
        if z == 3:
            add("ZeRO-3 gather for generation", params * wb, "ds3_gather_for_generation (TRL's default)",
                "generation", knob="grpo.use_vllm=true")
    if s.fixed_kv_tokens:
        add(f"fixed {s.fixed_role}'s KV cache (transformers)", s.fixed_kv_tokens * s.fixed_kv_bytes_per_token,
            f"{s.fixed_kv_tokens:,} tokens at once (a batch of 8 at full length)", "generation",
            knob=f"the fixed {s.fixed_role} served on its own GPUs")
    if lora and z == 3 and s.vllm_mode is not None:
        add("LoRA merge for vLLM", params * wb, "TRL gathers the whole model to merge the adapter", "generation",
            knob="fewer parameters per GPU (ZeRO-3 cannot shard this gather)")

    # ---- DeepSpeed's optimizer step: a flat bf16 copy of the gradients it steps, cast to fp32 (both held a moment)
    if opt_bytes == 12 and z >= 1 and not sh.offload_optimizer:
        largest = max(facts.vocab * facts.hidden, facts.hidden * facts.intermediate, facts.q_dim * facts.hidden)
        stepped = min(trainable / n, sh.sub_group_size + largest / n) if z == 3 else trainable / n
        add("optimizer step (fp32 gradients)", stepped * 6, f"{stepped / 1e6:,.0f}M x (2 + 4) B, "
            + ("one sub-group at most (zero_optimization.sub_group_size)" if z == 3 else "the partition"), "step",
            knob="offload_optimizer_device: cpu in the accelerate config"
            + (", or a smaller zero_optimization.sub_group_size (a DeepSpeed JSON)" if z == 3 else
               ", or more training processes"))

    # ---- the caching allocator's reserve above each phase's allocated peak. Its knob, expandable segments, is
    # refused at start by vLLM's sleep-mode allocator (CuMemAllocator asserts it off): never advised with it
    sleeping_vllm = s.vllm_mode == "colocate" and s.vllm_sleep
    for phase in ("generation", "training", *(("step",) if any(t.phase == "step" for t in terms) else ())):
        held = sum(t.gib for t in terms if counts_in(t, phase) and t.allocated)
        add(f"allocator reserve ({phase})", ALLOCATOR_RESERVE * held * GIB,
            f"{ALLOCATOR_RESERVE:.0%} of the phase's {held:.1f} GiB in torch's allocator (measured on an H200)", phase,
            knob="" if sleeping_vllm else "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less fragmentation)",
            allocated=False)

    def phase_gib(phase: str) -> float:
        return sum(t.gib for t in terms if counts_in(t, phase))

    step = phase_gib("step") if any(t.phase == "step" for t in terms) else 0.0
    return Estimate(terms, phase_gib("generation"), phase_gib("training"), vllm_sequences, step_gib=step)


def setup_for(cfg: RunConfig, facts: ModelFacts, processes: int, sharding: Sharding, gpu_gib: float,
              prompt_tokens: int = PROMPT_TOKENS) -> Setup:
    """The ``Setup`` of one training process of ``cfg`` launched on ``processes`` processes."""

    def g(key: str) -> Any:  # grpo.<key>, or TRL's default
        return grpo_setting(cfg.grpo, key)

    dtype_bytes = weight_bytes(cfg)
    rows = cfg.schedule.prompts_per_step * cfg.schedule.samples_per_prompt
    judge_params = 0
    reference = float(g("beta")) != 0 and cfg.model.lora.r == 0
    # a judge of the initial model reads TRL's reference instead of a copy, on one process without DeepSpeed only
    # (step.reference_model); a judge served elsewhere (openai) costs nothing here; backend vllm is not counted
    shares_reference = cfg.judge.model == cfg.model.name and reference and processes == 1 and not sharding.deepspeed
    rm = cfg.judge.mode == "reward_model"  # a reward model always runs in process
    if (cfg.judge.backend == "hf" or rm) and not shares_reference:
        judges = [model_facts(m) for m in [cfg.judge.model, *cfg.judge.extra_models]]
        judge_params = sum(j.parameters() for j in judges if j)
    fixed = fixed_model(cfg)
    fixed_facts = (model_facts(fixed[1]) or model_facts(cfg.model.name)) if fixed else None
    fixed_tokens = 8 * (prompt_tokens + fixed[2]) if fixed_facts and fixed else 0  # load_backend's batch of 8
    return Setup(
        processes=processes, sharding=sharding, gpu_gib=gpu_gib, micro_batch=int(g("per_device_train_batch_size")),
        prompt_tokens=prompt_tokens, completion_tokens=cfg.policy_tokens,
        gradient_checkpointing=bool(g("gradient_checkpointing")), dtype_bytes=dtype_bytes, reference_model=reference,
        lora_rank=cfg.model.lora.r, lora_targets=tuple(cfg.model.lora.target_modules),
        vllm_mode=g("vllm_mode") if g("use_vllm") else None,
        vllm_share=float(g("vllm_gpu_memory_utilization")), vllm_sleep=bool(g("vllm_enable_sleep_mode")),
        vllm_tensor_parallel=int(g("vllm_tensor_parallel_size")), vllm_max_model_length=g("vllm_max_model_length"),
        rows_per_process=max(1, rows // processes), cast_lm_head_to_fp32=bool(g("cast_lm_head_to_fp32")),
        judge_parameters=judge_params, judge_name="reward model (in process)" if rm else "judge (in process)",
        judge_dtype_bytes=_dtype_bytes(cfg.judge.dtype, cfg.model.dtype if rm else "float32", dtype_bytes),
        fixed_role=fixed[0] if fixed else "", fixed_parameters=fixed_facts.parameters() if fixed_facts else 0,
        fixed_kv_tokens=fixed_tokens, fixed_kv_bytes_per_token=fixed_facts.kv_bytes_per_token() if fixed_facts else 0)


def weight_bytes(cfg: RunConfig) -> int:
    """Bytes per weight of the trained model: 4 in float32 (``model.dtype``, or a CPU run), else 2."""
    return 4 if cfg.model.dtype == "float32" or grpo_setting(cfg.grpo, "use_cpu") else 2


def _dtype_bytes(dtype: str, auto: str, auto_bytes: int) -> int:
    """Bytes per weight of a model loaded in ``dtype`` (``auto``: what ``auto`` resolves to for it)."""
    name = auto if dtype == "auto" else dtype
    return 4 if name == "float32" else auto_bytes if name == "auto" else 2


def fixed_model(cfg: RunConfig) -> tuple[str, str, int] | None:
    """The fixed rubric writer or answerer a run loads in its training processes (backend hf), as ``(role, model,
    max_new_tokens)``, or None (served elsewhere, or none): ``generate_calls.fixed_model``'s, where it runs here.

    ``sequential`` holds one per stage (``plan.sequential_stages``): the base model answering in the writer stage,
    then the writer stage's checkpoint writing in the policy stage, both of the model's shape; the answerer is named.
    """
    regime = cfg.schedule.regime
    answerer, writer = generate_calls.fixed_model(cfg, "answerer"), generate_calls.fixed_model(cfg, "writer")
    if answerer and cfg.contrast.answerer_backend == "hf" and regime in WRITER_REGIMES:
        return "answerer", answerer, cfg.pair_answer_tokens
    if writer and (regime == "sequential" or cfg.rubric.writer_backend == "hf"):
        return "writer", writer, cfg.rubric.max_new_tokens
    return None


def refusal(e: Estimate, s: Setup, gpu_gib: float) -> str | None:
    """One line when the estimate does not fit ``gpu_gib`` GiB, naming the phase, its largest term and its knob."""
    if e.peak_gib > gpu_gib:
        phase = e.peak_phase
        big = max((t for t in e.terms if counts_in(t, phase) and t.knob), key=lambda t: t.gib, default=None)
        top = e.largest(phase)
        turn = f"; turn {big.knob}" + (f" ({big.name}, {big.gib:.1f} GiB)" if big is not top else "") if big else \
            ": no setting of the estimate lowers it; more training processes or a larger GPU"
        return (f"estimated {e.peak_gib:.1f} GiB per training GPU ({phase}) exceeds --gpu-memory {gpu_gib:g}: the "
                f"largest term is {top.name} ({top.gib:.1f} GiB){turn}")
    if s.vllm_mode == "colocate" and e.vllm_sequences is not None and e.vllm_sequences < 1:
        length = ("a lower grpo.vllm_max_model_length" if s.vllm_max_model_length else
                  "grpo.vllm_max_model_length (the prompt and completion budget)")
        return (f"colocated vLLM's share ({s.vllm_share} x {gpu_gib:g} GiB) leaves no room for one full-length "
                f"sequence's KV cache after the weights: raise grpo.vllm_gpu_memory_utilization, or set {length} "
                f"or a grpo.vllm_tensor_parallel_size above {s.vllm_tensor_parallel}")
    return None


# ----------------------------------------------------------------------------- the judge's time budget


@dataclass(frozen=True)
class JudgeBudget:
    """How long the judge's longest reply takes at an assumed decode speed, against ``judge.timeout``."""

    reply_tokens: int
    seconds: float  # one request at the assumed speed
    timeout: float | None  # judge.timeout (None: no deadline, an in-process judge)
    step_seconds: float  # judging one step on one process at worst: its requests in waves of max_concurrency
    ddp_timeout: float  # grpo.ddp_timeout: how long the other processes wait in a collective

    @property
    def fits(self) -> bool:
        return self.timeout is None or self.seconds <= self.timeout


def judge_budget(cfg: RunConfig, processes: int, tokens_per_second: float = JUDGE_TOKENS_PER_SECOND) -> JudgeBudget:
    """The judge's longest reply in seconds, and the worst judging time of one step on one process.

    A sampled judge mode (``GENERATIVE_MODES``) may write ``judge.max_new_tokens``; the probability modes read one
    token. A rubric step judges two answers per rubric sample, a policy step one per answer: at worst
    ``2 x rows per process`` requests in waves of ``judge.max_concurrency`` per URL of ``judge.base_url``
    (``judge.batch_size`` in process), each a full reply. The other processes wait that long in a collective,
    so ``grpo.ddp_timeout`` (TRL's default: TrainingArguments' 1800 s) should exceed it plus generation.
    """
    j = cfg.judge
    reply = j.max_new_tokens if j.mode in GENERATIVE_MODES else 1
    seconds = reply / tokens_per_second
    rows = cfg.schedule.prompts_per_step * cfg.schedule.samples_per_prompt // max(1, processes)
    at_once = j.max_concurrency * len(endpoint_urls(j.base_url)) if j.backend == "openai" else j.batch_size
    waves = math.ceil(2 * rows / at_once)
    return JudgeBudget(reply, seconds, j.timeout if j.backend == "openai" else None, waves * seconds,
                       float(grpo_setting(cfg.grpo, "ddp_timeout")))
