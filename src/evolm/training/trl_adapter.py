"""The one door between evolm and TRL: the only module that knows TRL beyond its public API.

Contract (checked by ``check_trl`` when a trainer is built; a mismatch is a one-line ``RunError``)
-------------------------------------------------------------------------------------------------
Tested with TRL ``TESTED_TRL`` (the pin in pyproject.toml). evolm relies on, in the order they run
at every optimizer step:

1. ``GRPOTrainer.training_step(model, inputs, num_items_in_batch)`` (public, from transformers'
   ``Trainer``) receives, at the first micro-batch of an optimizer step, this process's rows of the
   step's generation batch, and TRL generates from exactly those rows (``_prepare_inputs`` calls
   ``_generate_and_score_completions`` when its micro-step counter is a multiple of
   ``steps_per_generation``). evolm overrides ``training_step`` to *materialise* those rows (fill the
   role's prompt, rubric or pair with the current weights) before calling the parent. Its settings
   (``grpo_config.evolm_grpo_settings``) make one generation batch exactly one optimizer step
   (``steps_per_generation == gradient_accumulation_steps``, ``num_iterations == 1``), and the plan
   dataset is read in order (``shuffle_dataset=False``), so row ``i`` is slot ``i % P`` of step ``i // P``.
   The reward function refuses rows evolm did not fill, so a TRL that generated at another moment
   fails loudly instead of training on placeholders.
2. The reward function (public contract): called on every process with this process's rows as
   keyword columns plus ``completions``, ``completion_ids``, ``trainer_state`` and ``log_metric``;
   returns one float per row. evolm gathers all processes' rows itself (accelerate's
   ``gather_object``, a collective every process reaches because TRL calls reward functions on all
   of them), fills missing rewards with their group's mean (so TRL never sees ``None``), updates
   the replay buffer identically everywhere, and returns this process's slice.
3. Callbacks (public): ``on_log`` takes ``loss`` and ``kl`` if TRL logged them (optional columns);
   ``on_step_end`` forces a save at phase ends; ``on_save`` writes the replay buffer and the
   completeness marker into ``checkpoint-<global_step>`` after TRL saved it.
4. Extra text (rubrics, fresh a+ answers) is generated on the trainer's own engine:
   - vLLM (colocate or server): ``trainer.vllm_generation.generate(prompts=token_ids, images=None,
     num_generations=1)`` (``trl.generation.vllm_generation.VLLMGeneration``: it wakes a sleeping
     engine, gathers prompts across a tensor-parallel group or to the server, and returns this
     process's completion ids), with its ``temperature`` / ``top_p`` / ``max_completion_length``
     attributes set for the call and restored after. Weights are synced first, exactly as TRL
     does it: ``vllm_generation.sync_weights()`` when ``trainer.state.global_step !=
     trainer._last_loaded_step``, then ``_last_loaded_step`` is set (the one private attribute
     used: it keeps TRL from syncing the same weights twice in a step). ``generate`` is a
     collective in server and TP modes, so every process calls it with equally long lists.
   - Colocated vLLM in sleep mode (level 2 discards the weights): TRL's ``generate`` re-pushes every weight whenever
     ``_llm_weights_sleeping`` (private) is set and puts the engine back to sleep after each call, so each of evolm's
     calls in a step would cost a full weight sync. While a step's rows are materialised, evolm instead wakes the
     engine once (``sync_weights`` if its weights sleep, then vLLM's public ``LLM.wake_up(tags=["kv_cache"])`` when
     ``llm.llm_engine.is_sleeping()``) and runs its calls with ``enable_sleep_mode`` off for the call (no wake, no
     sleep). TRL's own ``generate`` of the step then finds the weights current (no sync), wakes an awake KV cache
     (vLLM's executor ignores it, with a warning evolm filters out) and puts the engine to sleep before the update:
     one weight sync per step. ``sync_weights`` and ``generate`` are wrapped (instance attributes) to count both
     per step (``evolm/vllm_weight_syncs``, ``evolm/vllm_generate_calls``; metrics.jsonl).
   - transformers: ``trl.models.unwrap_model_for_generation`` (gathers ZeRO-3 shards for the call).
   Both honour ``SamplingParams.json_schema`` (vLLM: ``structured_outputs`` in ``generation_kwargs``,
   as below; transformers: ``HFBackend``'s xgrammar processor).
5. Constrained rubric steps (``rubric.constrained``; policy steps are never constrained): TRL samples
   the rubrics itself, so for the first micro-batch of a rubric step (the one TRL generates in) the
   adapter constrains TRL's own generation and undoes it when ``training_step`` returns:
   - transformers: TRL calls ``generate(**inputs, generation_config=...)`` on
     ``accelerator.unwrap_model(trainer.model_wrapped)`` (``_generate_single_turn``); that object's
     ``generate`` is shadowed by an instance attribute that adds one fresh xgrammar logits processor
     per call (``evolm.backends.hf.grammar_generate``), then removed. The continuous-batching path
     (``use_transformers_continuous_batching``, ``generate_batch``) takes no logits processor: refused.
   - vLLM: ``VLLMGeneration.generation_kwargs`` (public attribute, read at every ``generate``; the
     colocate engine turns a ``structured_outputs`` dict into ``StructuredOutputsParams``, server
     mode sends it) gets ``structured_outputs`` for the step and is restored. A
     ``grpo.vllm_structured_outputs_regex`` would take precedence: refused with constrained rubrics.

6. LoRA (``model.lora.r > 0``): ``GRPOTrainer(peft_config=peft.LoraConfig(...))`` (public). TRL wraps the model
   with ``get_peft_model`` and, with ``beta != 0``, builds no reference model: ``is_peft_model(model)`` sets
   ``ref_model = None`` and the reference log-probs are computed under ``use_adapter(model, None)``, i.e. with the
   adapter disabled: the frozen base (``grpo_trainer.py``: "Reference model", and ``_generate_and_score_completions``
   "When training a PEFT adapter"). A ``model.name`` that is itself a LoRA adapter (a warm start, ``evolm
   sft-rubrics --keep-adapter``) loads as a trainable ``PeftModel`` and TRL gets no ``peft_config``: the run trains
   that adapter on, and TRL's reference is a frozen copy of it as loaded (the ``"ref"`` adapter, which checkpoints
   also hold under ``ref/``), i.e. the warm start, not the bare base (``grpo_trainer.py``: "If the model is a PEFT
   model with a pretrained adapter"). Both roles train the one adapter; transformers' ``Trainer._save`` calls
   ``PeftModel.save_pretrained``, so a checkpoint holds ``adapter_model.safetensors`` + ``adapter_config.json``
   (its ``base_model_name_or_path`` an absolute local path for a local base), and ``resume_from_checkpoint``
   loads the adapter back (``Trainer._load_from_checkpoint``). Extra text and TRL's own generation run on the
   ``PeftModel`` (adapter on); with vLLM, ``VLLMGeneration.sync_weights`` merges the adapter into the weights it
   sends and unmerges it after.
7. Logging (public): ``log_metric`` (above) carries evolm's step numbers (``evolm/...``, judge P(Yes) and pass rate,
   each reward term) to every logger in ``grpo.report_to`` (TensorBoard, W&B through transformers'
   ``WandbCallback``); ``log_extra`` adds evolm's columns (role, rubric, pair, judge scores) to TRL's completions
   table, which TRL logs as a W&B table with ``grpo.log_completions``. The W&B run gets evolm's config, and
   ends with the run.

Upgrading TRL: read the diff of ``GRPOTrainer.training_step``, ``_prepare_inputs``,
``_generate_single_turn``, ``_calculate_rewards`` (the reward kwargs) and ``VLLMGeneration.generate`` /
``sync_weights`` (and its ``_llm_weights_sleeping``); run
``pytest tests/training/test_trl_adapter.py tests/training/test_run.py tests/backends/test_constrained.py``; add the
version to ``TESTED_TRL`` and widen the pin in pyproject.toml.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from accelerate.utils import is_peft_model  # TRL's own test: a model that carries an adapter trains it as it is
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from evolm.backends.loading import adapter_rank, base_model_name
from evolm.config import RunConfig, to_dict
from evolm.errors import InputError, RunError
from evolm.training import vllm_cpu
from evolm.training.extra_rewards import ExtraReward, extra_rewards
from evolm.training.grpo_config import batch_error, evolm_grpo_settings, grpo_errors
from evolm.training.rewards import completion_text, score_extra
from evolm.training.step import StepState
from evolm.training.trl_generation import (
    TrainerGenerate,
    VLLMCounts,
    constrained_generation,
    constrained_rubric_schema,
    count_vllm_calls,
)

TESTED_TRL = ("1.16",)  # minor versions this adapter was tested with (keep in step with pyproject.toml)
PLACEHOLDER = [{"role": "user", "content": "(filled in by evolm at the step)"}]

# name -> the parameters evolm relies on (checked against the installed TRL at build time)
_HOOKED = {
    "GRPOTrainer.training_step": ("self", "model", "inputs", "num_items_in_batch"),
    "VLLMGeneration.generate": ("self", "prompts", "images", "num_generations"),
    "VLLMGeneration.sync_weights": ("self",),
}


class StepHooks(Protocol):
    """What a run gives the adapter: ``evolm.training.step.TrainingSteps``, whose docstring lists which TRL hook calls
    which method, in the order TRL calls them (the one place that order is written)."""

    state: StepState

    def begin(self, is_main: bool) -> None: ...

    def step_rows(self, step: int, generate: Any) -> Sequence[Mapping[str, Any]]: ...

    def score(self, rows: list[dict[str, Any]], completions: list[str]) -> tuple[list[Any], Any]: ...

    def finish(self, rows: list[dict[str, Any]], completions: list[str], scored: list[Any], lengths: list[int],
               is_main: bool, costs: Sequence[Any] = ()) -> tuple[list[float], dict[str, float]]: ...

    def is_phase_end(self, step: int) -> bool: ...

    def end_step(self, step: int, trl_logs: dict[str, Any], is_main: bool) -> None: ...

    def save(self, checkpoint: Path, step: int) -> None: ...


# ============================================================================= the contract check


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def check_trl() -> str:
    """The installed TRL version, if this adapter was tested with it and its hooks look as expected."""
    import trl
    from trl import GRPOTrainer
    from trl.generation.vllm_generation import VLLMGeneration

    version = getattr(trl, "__version__", "unknown")
    if _minor(version) not in TESTED_TRL:
        raise RunError(f"evolm's TRL adapter was tested with trl {', '.join(TESTED_TRL)}.x, not {version}: "
                       f"install a tested version (pip install 'trl~={TESTED_TRL[-1]}.0')")
    owners = {"GRPOTrainer": GRPOTrainer, "VLLMGeneration": VLLMGeneration}
    for name, expected in _HOOKED.items():
        cls, meth = name.split(".")
        fn = getattr(owners[cls], meth, None)
        params = tuple(inspect.signature(fn).parameters)[: len(expected)] if fn else ()
        if params != expected:
            raise RunError(f"trl {version}: {name} takes {params}, evolm's adapter expects {expected}")
    return version


# ============================================================================= building and running


def check_launch(cfg: RunConfig) -> None:
    """Everything about the launch that can be refused before a model loads (one-line errors)."""
    from evolm.dist import world_size

    check_trl()
    err = batch_error(cfg, world_size())  # the launcher's world: no process group before TrainingArguments
    if err:
        raise InputError(err)
    if errors := grpo_errors(cfg.grpo):  # unknown keys, wrong value types: the dry run checks the same
        raise InputError(errors[0])
    if cfg.rubric.constrained:
        _check_constrained(cfg.grpo)
    _check_optional(cfg)
    extra_rewards(cfg.rewards.extra)  # rewards.extra imported (and factories called) before a model loads


def _check_optional(cfg: RunConfig) -> None:
    """LoRA needs peft, ``report_to: wandb`` needs wandb: one-line errors before a model loads (contract items 6, 7)."""
    import importlib.util

    if cfg.model.lora.r > 0:
        if importlib.util.find_spec("peft") is None:
            raise InputError("model.lora needs peft: pip install 'evolm[lora]'")
        if (rank := adapter_rank(cfg.model.name)) and rank != cfg.model.lora.r:
            raise InputError(f"model.name {cfg.model.name} is a LoRA adapter of rank {rank}, which the run trains on; "
                             f"model.lora.r says {cfg.model.lora.r}: set them equal")
        if cfg.grpo.get("sync_ref_model"):
            raise InputError("model.lora's KL reference is frozen (the base with the adapter off, or a warm-start "
                             "adapter's frozen copy); grpo.sync_ref_model has no reference model to sync: unset it")
    if "wandb" in _report_to_list(cfg.grpo.get("report_to")) and importlib.util.find_spec("wandb") is None:
        raise InputError("grpo.report_to=wandb needs wandb: pip install 'evolm[wandb]'")


def _report_to_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def _check_constrained(grpo: dict[str, Any]) -> None:
    """``rubric.constrained`` needs xgrammar and a TRL generation path the adapter can constrain (item 5)."""
    from evolm.backends.constrained import require_xgrammar

    require_xgrammar()
    if grpo.get("use_vllm") and grpo.get("vllm_structured_outputs_regex") is not None:
        raise InputError("rubric.constrained and grpo.vllm_structured_outputs_regex both constrain TRL's "
                         "generation: set one")
    if not grpo.get("use_vllm") and grpo.get("use_transformers_continuous_batching"):
        raise InputError("rubric.constrained needs TRL's plain transformers generation: unset "
                         "grpo.use_transformers_continuous_batching (generate_batch takes no logits processor)")


def _checkpointing_by_new_name(grpo: dict[str, Any], config_class: Any) -> None:
    """Hand ``gradient_checkpointing[_kwargs]`` to TrainingArguments as ``activation_checkpointing[_kwargs]``.

    transformers 5 renamed them and warns (FutureWarning) whenever only the old name is set, which TRL's
    GRPOConfig does by default (``gradient_checkpointing=True``): a warning on every run, about a name the user
    may never have written. The old names then mirror the new ones, so TRL reads the same values. TRL's own calls
    of the renamed model methods (``unwrap_model_for_generation``) warn too: those warnings only are ignored.
    """
    import dataclasses
    import warnings

    fields = {f.name: f for f in dataclasses.fields(config_class)}
    for old, new in (("gradient_checkpointing", "activation_checkpointing"),
                     ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs")):
        if new in fields and old in fields and new not in grpo:
            value = grpo.pop(old, None if fields[old].default is dataclasses.MISSING else fields[old].default)
            if value is not None:
                grpo[new] = value
    warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated",
                            category=FutureWarning, module=r"transformers\.modeling_utils")


def training_args(cfg: RunConfig) -> Any:
    """The run's ``GRPOConfig``, built before the policy loads (``run.run``).

    Under DeepSpeed ZeRO-3 it registers its config with transformers, so the policy's ``from_pretrained`` that follows
    builds the model under ``deepspeed.zero.Init``: each process holds its shard of the weights, not the whole model
    (at 8B, 16 GB per GPU and as much host memory per process, while colocated vLLM wants its share free). It also
    creates the process group (with ``grpo.ddp_timeout``). The caller has passed ``check_launch(cfg)``.
    """
    from trl import GRPOConfig

    from evolm.dist import world_size

    world = world_size()  # the launcher's; TrainingArguments creates the process group (with grpo.ddp_timeout)
    grpo = dict(cfg.grpo)
    grpo.setdefault("report_to", _report_to())
    grpo.setdefault("run_name", Path(cfg.output_dir).name)  # the W&B run's name
    # Every trainable weight of a causal LM gets a gradient each step; transformers' default (True unless
    # checkpointing, always for a LoRA model) has DDP search for unused ones and warn at every launch that none were.
    grpo.setdefault("ddp_find_unused_parameters", False)
    _checkpointing_by_new_name(grpo, GRPOConfig)
    try:
        args = GRPOConfig(**{**grpo, **evolm_grpo_settings(cfg, world)})  # RunConfig refused overlaps
    except ValueError as e:  # transformers' and TRL's checks of the settings, e.g. bf16 on a machine without it
        raise RunError(f"trl.GRPOConfig refused the run's grpo settings: {e}".splitlines()[0]) from None
    if args.world_size != world:  # the state TRL trains with: the plan's accumulation must be computed for it
        raise RunError(f"the launcher says {world} process(es) (WORLD_SIZE) but transformers set up {args.world_size}: "
                       "launch with torchrun or `accelerate launch` with a config that starts every process")
    return args


def build_trainer(cfg: RunConfig, args: Any, model: Any, tokenizer: Any,
                  make_hooks: Callable[[Any], StepHooks]) -> Any:
    """One ``GRPOTrainer`` for the whole run; its dataset is the plan (one placeholder row per slot).

    ``args`` is ``training_args(cfg)``, built before ``model`` loaded. ``make_hooks(trainer)`` makes the step's
    hooks once the trainer exists (their judges may read TRL's reference model, ``reference_model``); the reward
    function, handed to TRL before that, reaches them through ``_Deferred``.
    """
    import datasets

    n_rows = cfg.total_steps * cfg.schedule.prompts_per_step
    dataset = datasets.Dataset.from_dict({"prompt": [PLACEHOLDER] * n_rows, "plan_index": list(range(n_rows))})
    counts = VLLMCounts() if args.use_vllm else None
    deferred = _Deferred()
    memory = GpuMemory(_cuda_if_used(args))
    with vllm_cpu.keep_linear_weights() if vllm_cpu.needed(args) else contextlib.nullcontext():  # TRL builds it here
        trainer = EvolmGRPOTrainer(model=model, reward_funcs=[_reward_function(
            deferred, extra_rewards(cfg.rewards.extra), counts, memory)], args=args, train_dataset=dataset,
            processing_class=tokenizer, peft_config=None if is_peft_model(model) else _peft_config(cfg))
    trainer.evolm_hooks = deferred.hooks = hooks = make_hooks(trainer)
    trainer.evolm_slots = cfg.schedule.prompts_per_step
    trainer.evolm_base = base_model_name(cfg.model.name)
    trainer.evolm_rubric_schema = constrained_rubric_schema(cfg, args, trainer)
    if args.use_vllm and not hasattr(trainer, "_last_loaded_step"):
        raise RunError(f"trl {check_trl()}: GRPOTrainer has no _last_loaded_step; the adapter needs updating")
    if counts is not None:
        count_vllm_calls(trainer.vllm_generation, counts)
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(memory)
    trainer.add_callback(_Recorder(hooks, to_dict(cfg), memory))
    return trainer


class _Deferred:
    """The step's hooks for a reward function made before them (``build_trainer``): every call goes to ``hooks``."""

    hooks: StepHooks | None = None

    def __getattr__(self, name: str) -> Any:
        if self.hooks is None:
            raise RunError("TRL called the reward function before evolm's hooks were made")
        return getattr(self.hooks, name)


def reference_model(trainer: Any, cfg: RunConfig, judge_model: str) -> Any:
    """TRL's reference model when a judge of ``judge_model`` can read it instead of loading another copy, else None.

    It can when they are the same frozen weights: the judge is the run's initial model (same resolved path, no
    adapter, same dtype, transformers backend) and TRL built a reference that never moves (``beta != 0``, no PEFT,
    no ``sync_ref_model``) whole on one process (no DeepSpeed / FSDP shards). TRL's fused LM head leaves the
    model's plain forward as it was (``add_fused_lm_head``: only ``fused_lm_head=True`` changes it).
    """
    from evolm.backends.loading import adapter_base, resolve_model_path

    ref, j = getattr(trainer, "ref_model", None), cfg.judge
    if ref is None or j.backend != "hf" or j.mode == "reward_model" or j.dtype not in ("auto", cfg.model.dtype) \
            or getattr(trainer.args, "sync_ref_model", False) or trainer.accelerator.num_processes != 1 \
            or getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        return None
    path = resolve_model_path(cfg.model.name)
    same = resolve_model_path(judge_model) == path and getattr(ref.config, "_name_or_path", None) == path
    return ref if same and adapter_base(path) is None else None


def stop_after(trainer: Any, step: int, only: bool = False) -> None:
    """Make ``trainer`` stop after optimizer step ``step``, with a checkpoint there (``evolm train
    --stop-after-step``); with ``only`` none before it (``evolm train --smoke``, ``training.smoke``)."""
    trainer.add_callback(_StopAfter(step, only))


def train(trainer: Any, checkpoint: Path | None) -> None:
    """Run the plan; a W&B run started for it (``grpo.report_to: wandb``) ends with it (a sequential run's
    stages are two W&B runs)."""
    import sys

    before = getattr(sys.modules.get("wandb"), "run", None)
    try:
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        wandb = sys.modules.get("wandb")
        if wandb is not None and wandb.run is not None and wandb.run is not before and \
                "wandb" in _report_to_list(trainer.args.report_to):
            wandb.finish()


def _peft_config(cfg: RunConfig) -> Any:
    """``peft.LoraConfig`` for ``model.lora`` (``None``: off, every weight trains). Contract item 6."""
    lora = cfg.model.lora
    if lora.r <= 0:
        return None
    from peft import LoraConfig

    modules = lora.target_modules
    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, task_type="CAUSAL_LM",
                      target_modules="all-linear" if list(modules) == ["all-linear"] else list(modules))


def _report_to() -> list[str]:
    import importlib.util

    return ["tensorboard"] if importlib.util.find_spec("tensorboard") else []


class EvolmGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer; at the first micro-batch of each optimizer step the rows are materialised."""

    evolm_hooks: StepHooks
    evolm_slots: int
    evolm_base: str = ""  # the base model as the config names it (model.name)
    _evolm_step: int = -1

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):  # noqa: ANN001, ANN202
        super().create_model_card(model_name, dataset_name, tags)
        if self.is_world_process_zero():
            name_base_model(Path(self.args.output_dir) / "README.md", self.evolm_base,
                            f"checkpoint-{self.state.global_step}")

    def training_step(self, model, inputs, num_items_in_batch=None):  # type: ignore[override]
        step = self.state.global_step
        if self._evolm_step != step:  # first micro-batch of this optimizer step: TRL generates from it
            self._evolm_step = step
            inputs = _materialise(self, inputs, step)
            with constrained_generation(self, inputs):
                return super().training_step(model, inputs, num_items_in_batch)
        return super().training_step(model, inputs, num_items_in_batch)


def name_base_model(card: Path, base: str, checkpoint: str) -> None:
    """Name the base model in the model card TRL writes beside the checkpoints (``GRPOTrainer.create_model_card``).

    TRL names it only when it is a hub id; for a local directory, the built-in model's included, the card said
    "a fine-tuned version of [None]" and its quick start loaded ``model="None"``. The card then names ``base`` as
    the run's config does (a hub id keeps its link) and loads ``checkpoint``, the checkpoint being saved.
    """
    if not base or not card.is_file():
        return
    from evolm.backends.loading import BUILTIN_MODELS

    text = card.read_text(encoding="utf-8")
    if base in BUILTIN_MODELS:
        named = f"`{base}` (evolm's built-in model)"
    elif Path(base).expanduser().exists() or "/" not in base:
        named = f"`{base}` (a local model)"
    else:
        named = f"[{base}](https://huggingface.co/{base})"
    text = text.replace("[None](https://huggingface.co/None)", named).replace('model="None"', f'model="{checkpoint}"')
    card.write_text(text, encoding="utf-8")


def _materialise(trainer: Any, inputs: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    slots = trainer.evolm_slots
    for r in inputs:
        if int(r["plan_index"]) // slots != step:
            raise RunError(f"TRL handed row {r['plan_index']} to optimizer step {step}: the plan is read out of "
                           f"order (trl {check_trl()}); the adapter's contract is broken")
    hooks = trainer.evolm_hooks
    hooks.state.materialising = True  # colocated vLLM stays awake until TRL's generation (contract item 4)
    try:
        full = [dict(row) for row in hooks.step_rows(step, TrainerGenerate(trainer))]  # TRL's columns
    finally:
        hooks.state.materialising = False
    _check_same_rows(trainer.accelerator, step, full)
    return [{**r, **full[int(r["plan_index"]) % slots]} for r in inputs]


def plan_digest(rows: list[dict[str, Any]]) -> str:
    """A fingerprint of a step's rows (every column, in order): equal on every process, or the step is refused."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _check_same_rows(accelerator: Any, step: int, rows: list[dict[str, Any]]) -> None:
    """Every process must materialise the same rows for a step (each trains on its slice of them, and the rewards
    are computed over all of them): one gathered digest per step, a ``RunError`` naming the step when they differ
    (e.g. a server-side writer or answerer that sampled differently on two processes)."""
    if accelerator.num_processes == 1:
        return
    from accelerate.utils import gather_object

    digests = gather_object([plan_digest(rows)])
    if len(set(digests)) != 1:
        raise RunError(f"step {step + 1}: the processes planned different rows (digests {', '.join(digests)}); "
                       "every process must write the same rubrics and pairs")


# ============================================================================= rewards


def _reward_function(hooks: StepHooks, extras: Sequence[ExtraReward] = (), vllm_counts: VLLMCounts | None = None,
                     memory: GpuMemory | None = None) -> Any:
    def evolm_reward(prompts: list, completions: list, completion_ids: list | None = None,
                     log_metric: Any = None, **cols: Any) -> list[float]:
        from accelerate import PartialState
        from accelerate.utils import gather_object

        if memory is not None:  # the step's generation is done
            memory.generated()

        if "role" not in cols or any(not r for r in cols["role"]):
            raise RunError("TRL generated from rows evolm did not materialise: the adapter's contract with "
                           f"trl {check_trl()} is broken")
        keys = [k for k in cols if k not in ("trainer_state", "log_extra", "environments")]
        rows = [{k: cols[k][i] for k in keys} for i in range(len(completions))]
        texts = [completion_text(c) for c in completions]
        scored, cost = hooks.score(rows, texts)
        mine = [e for e in extras if rows and e.role == rows[0]["role"]]  # rewards.extra of this step's role
        if mine:
            kwargs = {**cols, "prompts": prompts, "completions": completions, "completion_ids": completion_ids,
                      "log_metric": log_metric}
            parts = score_extra(mine, len(texts), kwargs)
            scored = [replace(s, extras=e) for s, e in zip(scored, parts, strict=True)]
        if cols.get("log_extra") is not None:
            _log_columns(cols["log_extra"], rows, scored)
        lengths = [len(ids) for ids in completion_ids] if completion_ids is not None else [0] * len(texts)
        state = PartialState()
        local = list(zip(rows, texts, scored, lengths, strict=True))
        parts = [(local, cost)] if state.num_processes == 1 else gather_object([(local, cost)])
        everyone = [x for part, _ in parts for x in part]
        rewards, metrics = hooks.finish([x[0] for x in everyone], [x[1] for x in everyone],
                                        [x[2] for x in everyone], [x[3] for x in everyone], state.is_main_process,
                                        [c for _, c in parts])
        if vllm_counts is not None:  # TRL's generation of the step is done: the step's vLLM work, since the last
            metrics = {**metrics, **vllm_counts.take()}
        if log_metric is not None:
            for k, v in metrics.items():
                log_metric(f"evolm/{k}", v)
        start = sum(len(p) for p, _ in parts[: state.process_index]) if state.num_processes > 1 else 0
        return rewards[start : start + len(local)]

    return evolm_reward


def _log_columns(log_extra: Any, rows: list[dict[str, Any]], scored: list[Any]) -> None:
    """evolm's columns in TRL's completions table (a W&B table with ``grpo.log_completions``); the same columns at
    every step of either role, so TRL's per-column buffers stay aligned."""
    policy = [r["role"] == "policy" for r in rows]
    log_extra("role", [r["role"] for r in rows])
    log_extra("rubric", [str(r.get("rubric_text") or "") if p else "" for r, p in zip(rows, policy, strict=True)])
    for key in ("a_pos", "a_neg"):
        log_extra(key, [str(r.get(key) or "") for r in rows])
    for key in ("score", "s_pos", "s_neg"):
        log_extra(key, [getattr(s, key, None) for s in scored])


# ============================================================================= callbacks


class GpuMemory(TrainerCallback):
    """This process's peak GPU memory in the two parts of an optimizer step, in GiB, for the step record
    (``GPU_LOGGED``): ``gpu_gib_generating`` from the step's start to its rewards (evolm's rubrics and fresh answers,
    TRL's generation, then TRL's log-probs of the old and reference policies, computed before the rewards),
    ``gpu_gib_training`` from the rewards to the step's end (the rewards, an in-process judge included, the loss,
    backward and the optimizer step: DeepSpeed steps inside the last backward), both allocated, and
    ``gpu_reserved_gib``, the caching allocator's most reserved over the step. What ``evolm train --dry-run``
    estimates per phase, measured (``torch.cuda``'s peak statistics). Not in any window: what runs after the step's
    end (held-out evaluation, saving a checkpoint). With colocated vLLM, whether its pool shows in these statistics
    has not been checked. ``cuda`` is ``torch.cuda``, or None (no CUDA device in use: nothing is recorded)."""

    def __init__(self, cuda: Any | None) -> None:
        self.cuda = cuda
        self.values: dict[str, float] = {}

    def _peaks(self) -> tuple[float, float]:
        gib = float(1 << 30)
        return self.cuda.max_memory_allocated() / gib, self.cuda.max_memory_reserved() / gib

    def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
        self.values = {}
        if self.cuda is not None:
            self.cuda.reset_peak_memory_stats()

    def generated(self) -> None:
        """The step's rewards are being computed: its generation is over (once per step)."""
        if self.cuda is not None and "gpu_gib_generating" not in self.values:
            allocated, reserved = self._peaks()
            self.values.update(gpu_gib_generating=round(allocated, 3), gpu_reserved_gib=round(reserved, 3))
            self.cuda.reset_peak_memory_stats()

    def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
        if self.cuda is not None:
            allocated, reserved = self._peaks()
            self.values.update(gpu_gib_training=round(allocated, 3),
                               gpu_reserved_gib=round(max(reserved, self.values.get("gpu_reserved_gib", 0.0)), 3))


def _cuda_if_used(args: Any) -> Any | None:
    """``torch.cuda`` when the trainer runs on a CUDA device, else None."""
    import torch

    return torch.cuda if torch.cuda.is_available() and getattr(args.device, "type", "") == "cuda" else None


class _StopAfter(TrainerCallback):
    """Stop training after optimizer step ``step`` with a checkpoint there (added after ``_Recorder``); with ``only``
    that checkpoint alone, the phase-end saves before it overridden. Every process stops at the same step."""

    def __init__(self, step: int, only: bool) -> None:
        self.step, self.only = step, only

    def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
        if state.global_step == self.step:
            control.should_save = True
        elif self.only:
            control.should_save = False
        if state.global_step >= self.step:
            control.should_training_stop = True


class _Recorder(TrainerCallback):
    def __init__(self, hooks: StepHooks, config: dict[str, Any] | None = None, memory: GpuMemory | None = None
                 ) -> None:
        self.hooks = hooks
        self.config = config
        self.memory = memory
        self.logged = -1

    def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001
        import sys

        wandb = sys.modules.get("wandb")  # transformers' WandbCallback (before this one) has started its run
        if self.config and state.is_world_process_zero and getattr(wandb, "run", None) is not None \
                and "wandb" in _report_to_list(args.report_to):
            wandb.run.config.update({"evolm": self.config}, allow_val_change=True)
        self.hooks.begin(state.is_world_process_zero)

    def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
        if self.hooks.is_phase_end(state.global_step):
            control.should_save = True

    def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
        self._record(state, logs or {})

    def on_save(self, args, state, control, **kw):  # noqa: ANN001
        self._record(state, {})  # the step record comes before the checkpoint marker
        if state.is_world_process_zero:
            self.hooks.save(Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}",
                            state.global_step)

    def on_train_end(self, args, state, control, **kw):  # noqa: ANN001
        self._record(state, {})

    def _record(self, state, logs: dict) -> None:  # noqa: ANN001
        if self.logged != state.global_step and state.global_step > 0:
            self.logged = state.global_step
            memory = self.memory.values if self.memory is not None else {}
            self.hooks.end_step(state.global_step, {**logs, **memory}, state.is_world_process_zero)
