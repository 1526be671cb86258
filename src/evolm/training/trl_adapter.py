"""The one door between evolm and TRL: the only module that knows TRL beyond its public API.

Contract (checked by ``check_trl`` at launch and when the trainer is built; a mismatch is a one-line ``RunError``)
-----------------------------------------------------------------------------------------------------------------
Tested with TRL ``TESTED_TRL`` (the pin in pyproject.toml). evolm relies on, in the order they run
at every optimizer step:

1. ``GRPOTrainer.training_step(model, inputs, num_items_in_batch)`` (public, from transformers'
   ``Trainer``) receives, at the first micro-batch of an optimizer step, this process's rows of the
   step's generation batch, and TRL generates from exactly those rows (``_prepare_inputs`` calls
   ``_generate_and_score_completions`` when its micro-step counter is a multiple of
   ``steps_per_generation``). evolm overrides ``training_step`` to *materialise* those rows (fill the
   role's prompt, rubric or pair with the current weights: ``TrainingSteps.materialise``) before calling the
   parent. Its settings
   (``grpo_config.evolm_grpo_settings``) make one generation batch exactly one optimizer step
   (``steps_per_generation == gradient_accumulation_steps``, ``num_iterations == 1``), and the plan
   dataset is read in order (``shuffle_dataset=False``), so row ``i`` is slot ``i % P`` of step ``i // P``.
   The reward function refuses rows evolm did not fill, so a TRL that generated at another moment
   fails loudly instead of training on placeholders.
2. The reward function (public contract), the run's ``step.TrainingSteps`` itself: called on every process
   with this process's rows as keyword columns plus ``completions``, ``completion_ids``, ``trainer_state`` and
   ``log_metric``; returns one float per row. evolm gathers all processes' rows itself (accelerate's
   ``gather_object``, a collective every process reaches because TRL calls reward functions on all
   of them), fills missing rewards with their group's mean (so TRL never sees ``None``), updates
   the replay buffer identically everywhere, and returns this process's slice.
3. Callbacks (public): ``on_train_begin`` hands the steps the built trainer (``TrainingSteps.begin``: the judges,
   the engine); ``on_log`` takes ``loss`` and ``kl`` if TRL logged them (optional columns);
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
from pathlib import Path
from typing import Any

from accelerate.utils import is_peft_model  # TRL's own test: a model that carries an adapter trains it as it is
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from evolm.backends.loading import base_model_name
from evolm.config import RunConfig, to_dict
from evolm.errors import RunError
from evolm.training import vllm_cpu
from evolm.training.step import TrainingSteps
from evolm.training.trl_generation import VLLMCounts, constrained_generation, count_vllm_calls, rubric_grammar

TESTED_TRL = ("1.16",)  # minor versions this adapter was tested with (keep in step with pyproject.toml)
PLACEHOLDER = [{"role": "user", "content": "(filled in by evolm at the step)"}]

# name -> the parameters evolm relies on (checked against the installed TRL at build time)
_HOOKED = {
    "GRPOTrainer.training_step": ("self", "model", "inputs", "num_items_in_batch"),
    "VLLMGeneration.generate": ("self", "prompts", "images", "num_generations"),
    "VLLMGeneration.sync_weights": ("self",),
}


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


def reported_to(value: Any) -> list[str]:
    """``grpo.report_to`` (or ``TrainingArguments.report_to``) as a list of logger names."""
    return [value] if isinstance(value, str) else list(value or [])


# ============================================================================= the trainer


class EvolmGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer for one run: its dataset is the plan (one placeholder row per slot), its reward function the
    run's ``TrainingSteps``, which at the first micro-batch of each optimizer step materialise the rows TRL generates
    from.

    ``args`` is ``run.training_args(cfg)``, built before ``model`` loaded. The steps get the trainer at
    ``on_train_begin`` (``_StepCallbacks``), once TRL has loaded the checkpoint: their judges may read TRL's reference
    model.
    """

    def __init__(self, cfg: RunConfig, args: Any, model: Any, tokenizer: Any, steps: TrainingSteps) -> None:
        import datasets
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        n_rows = cfg.total_steps * cfg.schedule.prompts_per_step
        plan_rows = datasets.Dataset.from_dict({"prompt": [PLACEHOLDER] * n_rows, "plan_index": list(range(n_rows))})
        with vllm_cpu.keep_linear_weights() if vllm_cpu.needed(args) else contextlib.nullcontext():  # TRL builds it
            super().__init__(model=model, reward_funcs=[steps], args=args, train_dataset=plan_rows,
                             processing_class=tokenizer,
                             peft_config=None if is_peft_model(model) else _peft_config(cfg))
        self._evolm_steps, self._evolm_step = steps, -1
        self._evolm_base = base_model_name(cfg.model.name)  # the base model as the config names it (model.name)
        self._evolm_grammar = rubric_grammar(cfg, self)  # rubric.constrained: TRL's rubric samples (contract item 5)
        if args.use_vllm and not hasattr(self, "_last_loaded_step"):
            raise RunError(f"trl {check_trl()}: GRPOTrainer has no _last_loaded_step; the adapter needs updating")
        counts = VLLMCounts() if args.use_vllm else None
        if counts is not None:
            count_vllm_calls(self.vllm_generation, counts)
        memory = GpuMemory(_cuda_if_used(args))
        self.remove_callback(PrinterCallback)
        self.remove_callback(ProgressCallback)
        self.add_callback(memory)
        self.add_callback(_StepCallbacks(steps, self, to_dict(cfg), memory, counts))

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):  # noqa: ANN001, ANN202
        super().create_model_card(model_name, dataset_name, tags)
        if self.is_world_process_zero():
            name_base_model(Path(self.args.output_dir) / "README.md", self._evolm_base,
                            f"checkpoint-{self.state.global_step}")

    def training_step(self, model, inputs, num_items_in_batch=None):  # type: ignore[override]
        step = self.state.global_step
        if self._evolm_step != step:  # first micro-batch of this optimizer step: TRL generates from it
            self._evolm_step = step
            inputs = self._evolm_steps.materialise(inputs, step)
            with constrained_generation(self, inputs, self._evolm_grammar):
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
    from evolm.backends.builtin import BUILTIN_MODELS

    text = card.read_text(encoding="utf-8")
    if base in BUILTIN_MODELS:
        named = f"`{base}` (evolm's built-in model)"
    elif Path(base).expanduser().exists() or "/" not in base:
        named = f"`{base}` (a local model)"
    else:
        named = f"[{base}](https://huggingface.co/{base})"
    text = text.replace("[None](https://huggingface.co/None)", named).replace('model="None"', f'model="{checkpoint}"')
    card.write_text(text, encoding="utf-8")


def _peft_config(cfg: RunConfig) -> Any:
    """``peft.LoraConfig`` for ``model.lora`` (``None``: off, every weight trains). Contract item 6."""
    lora = cfg.model.lora
    if lora.r <= 0:
        return None
    from peft import LoraConfig

    modules = lora.target_modules
    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, task_type="CAUSAL_LM",
                      target_modules="all-linear" if list(modules) == ["all-linear"] else list(modules))


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
    """Stop training after optimizer step ``step`` with a checkpoint there (added after ``_StepCallbacks``); with
    ``only`` that checkpoint alone, the phase-end saves before it overridden. Every process stops at the same step."""

    def __init__(self, step: int, only: bool) -> None:
        self.step, self.only = step, only

    def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
        if state.global_step == self.step:
            control.should_save = True
        elif self.only:
            control.should_save = False
        if state.global_step >= self.step:
            control.should_training_stop = True


class _StepCallbacks(TrainerCallback):
    """TRL's moments handed to the run's ``TrainingSteps`` (the order: ``step.py``'s table)."""

    def __init__(self, steps: TrainingSteps, trainer: Any, config: dict[str, Any] | None = None,
                 memory: GpuMemory | None = None, vllm_counts: VLLMCounts | None = None) -> None:
        self.steps, self.trainer, self.config = steps, trainer, config
        self.memory, self.vllm_counts = memory, vllm_counts
        self.logged = -1

    def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001
        import sys

        wandb = sys.modules.get("wandb")  # transformers' WandbCallback (before this one) has started its run
        if self.config and state.is_world_process_zero and getattr(wandb, "run", None) is not None \
                and "wandb" in reported_to(args.report_to):
            wandb.run.config.update({"evolm": self.config}, allow_val_change=True)
        self.steps.begin(self.trainer, self.memory, self.vllm_counts)

    def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
        if self.steps.is_phase_end(state.global_step):
            control.should_save = True

    def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
        self._record(state, logs or {})

    def on_save(self, args, state, control, **kw):  # noqa: ANN001
        self._record(state, {})  # the step record comes before the checkpoint marker
        if state.is_world_process_zero:
            self.steps.save(Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}", state.global_step)

    def on_train_end(self, args, state, control, **kw):  # noqa: ANN001
        self._record(state, {})

    def _record(self, state, logs: dict) -> None:  # noqa: ANN001
        if self.logged != state.global_step and state.global_step > 0:
            self.logged = state.global_step
            memory = self.memory.values if self.memory is not None else {}
            self.steps.end_step(state.global_step, {**logs, **memory}, state.is_world_process_zero)


# ============================================================================= running


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
                "wandb" in reported_to(trainer.args.report_to):
            wandb.finish()
