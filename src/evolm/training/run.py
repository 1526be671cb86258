"""The EvoLM loop: one model, two roles, trained in alternation with TRL's GRPO (docs/FIDELITY.md).

Algorithm (co-evolving regime)::

    for cycle in 1..C:
        K policy steps:  for each question, the model (rubric role, T=0.6) writes one rubric shared
                         by the question's G sampled answers; reward = judge(question, rubric, answer);
                         one answer per question goes into the replay buffer.
        K rubric steps:  for each buffer entry picked in the age window, a+ = a fresh policy answer
                         (T=1.0), a- = the stored one; the model samples G rubrics for the question;
                         reward = f(judge(q, rubric, a+), judge(q, rubric, a-)) (binary / margin_format /
                         separation).

Baselines: ``sequential`` trains the writer with the policy frozen, then the policy from the base
weights with that writer frozen (two runs, two weight sets); ``frozen_rubric`` trains the policy
on a fixed writer's rubrics; ``judge_only`` on the judge (or a reward model) without rubrics.

One ``GRPOTrainer`` serves the whole run (at 8B scale a trainer with DeepSpeed, a reference model
and a vLLM engine costs minutes to build), so TRL owns ``for step in range(total_steps)`` and this
file gives it the body of a step; ``training.trl_adapter`` is the door between the two.

Departures from the reference (rubrics written at every policy step; tied groups kept with zero advantage;
rubric-conditioned pairs while the buffer is empty), each with its reason: docs/FIDELITY.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from evolm.config import RunConfig, grpo_setting
from evolm.errors import InputError, RunError
from evolm.eval.constraints import prompt_constraints
from evolm.runs.records import BUFFER_FILE, StepRecord
from evolm.runs.rundir import (
    RunStart,
    checkpoint_state,
    complete_checkpoints,
    open_run,
    record_config,
    run_lock,
)
from evolm.training.checks import path_errors
from evolm.training.contrast import ReplayBuffer
from evolm.training.extra_rewards import extra_rewards
from evolm.training.generate_calls import answer_params, rubric_params
from evolm.training.grpo_config import batch_error, evolm_grpo_settings, grpo_errors
from evolm.training.heldout import HeldOut
from evolm.training.plan import Plan, sequential_stages
from evolm.training.prompt_length import fit_prompt_set
from evolm.training.step import TrainingSteps

# ============================================================================= the run


def run(cfg: RunConfig, resume: bool = False, on_step: Callable[[StepRecord], None] | None = None,
        on_start: Callable[[RunStart], None] | None = None, on_tokens: Callable[[int], None] | None = None,
        stop_after: int | None = None, stop_only: bool = False) -> Path:
    """Train (or resume) the run described by ``cfg``, holding its directory (``rundir.run_lock``) throughout.
    ``stop_after``: stop after that step with a checkpoint there (``evolm train --stop-after-step``); ``stop_only``:
    no checkpoint before it (``training.smoke``)."""
    if errors := path_errors(cfg):  # the prompts and the output directory, before the directory is made
        raise InputError(errors[0])
    if stop_after is not None and cfg.schedule.regime == "sequential":
        raise InputError("--stop-after-step: a sequential run is two stages of their own steps; stop it with Ctrl-C "
                         "after a checkpoint, `evolm train --resume` continues it")
    if stop_after is not None and not 0 < stop_after <= cfg.total_steps:
        raise InputError(f"--stop-after-step {stop_after}: the run has steps 1 to {cfg.total_steps}")
    with run_lock(cfg.output_dir):
        return _run(cfg, resume, on_step, on_start, on_tokens, stop_after, stop_only)


def _run(cfg: RunConfig, resume: bool = False, on_step: Callable[[StepRecord], None] | None = None,
         on_start: Callable[[RunStart], None] | None = None, on_tokens: Callable[[int], None] | None = None,
         stop_after: int | None = None, stop_only: bool = False) -> Path:
    """Train (or resume) the run described by ``cfg``; returns the run directory. ``on_start`` gets where the run
    starts once the directory and settings are validated (before any model loads), ``on_step`` each step's record on
    the main process, ``on_tokens(n)`` the tokens the model generates as it goes (the CLI prints with them)."""
    from evolm.backends import loading as models
    from evolm.training import trl_adapter

    if cfg.schedule.regime == "sequential":
        return run_sequential(cfg, resume, on_step, on_start, on_tokens)
    check_launch(cfg)  # TRL version, batch arithmetic, grpo.* keys: before anything loads
    start = open_run(cfg, resume)  # a fresh directory, or the newest checkpoint that validates
    run_dir, checkpoint = start.run_dir, start.checkpoint
    if stop_after is not None and stop_after <= start.step:
        raise InputError(f"--stop-after-step {stop_after}: {run_dir} is already past it (its last complete "
                         f"checkpoint is step {start.step})")
    fit = fit_prompt_set(cfg)  # data.prompts and eval.* without those over data.max_prompt_tokens (said at the start)
    if on_start is not None:
        on_start(replace(start, prompts_skipped=fit.note()))
    plan = Plan(cfg, fit.questions, fit.references, fit.pairs,  # and the labelled pairs kept
                constraints=prompt_constraints(cfg.data.prompts))  # checkable constraints, where the prompts have them
    first = plan.info(0)  # eval.* files read before any model loads; held-out generation with step 0's seed
    heldout = HeldOut.load(cfg, run_dir, rubric_params(cfg, first), answer_params(cfg, first), fit.eval_pairs,
                           fit.eval_questions, on_step)
    models.resolve_model_path(cfg.model.name)  # a missing model: said before the training arguments are built
    args = training_args(cfg)  # first: under ZeRO-3 the policy then loads sharded (zero.Init)
    model, tokenizer = models.load_model(cfg.model.name, device="auto", dtype=cfg.model.dtype, sharded=True,
                                         train_adapter=cfg.model.lora.r > 0)  # a LoRA warm start trains on
    models.count_generated_tokens(model, on_tokens)  # answers, rubrics, pair answers: the CLI's bar moves in a step

    n = cfg.contrast.buffer_size
    buffer = ReplayBuffer.load(checkpoint / BUFFER_FILE, n) if checkpoint else ReplayBuffer(n)
    steps = TrainingSteps(cfg, plan, buffer, run_dir, on_step, start.step, heldout)  # TRL's reward function

    # TRL runs the plan: steps.begin once it loaded the checkpoint (the judges; the initial model's reads TRL's frozen
    # reference model), then in order, for each cycle, for each phase (one role), K steps of
    #   1. steps.materialise    the step's rows, made with the current weights
    #   2. TRL generates G completions per row; 3. steps.score, finish: rewards (missing -> group mean), buffer, samples
    #   4. TRL's GRPO update, then steps.end_step (metrics.jsonl; held-out evaluation when due) and, at phase
    #      ends and every save_every steps, a checkpoint with steps.save (replay buffer + completeness marker).
    trainer = trl_adapter.EvolmGRPOTrainer(cfg, args, model, tokenizer, steps)
    if stop_after is not None:
        trl_adapter.stop_after(trainer, stop_after, only=stop_only)
    trl_adapter.train(trainer, checkpoint)
    return run_dir


# ============================================================================= the launch, before any model loads


def check_launch(cfg: RunConfig) -> None:
    """Everything about the launch that can be refused before a model loads (one-line errors)."""
    from evolm.dist import world_size
    from evolm.training import trl_adapter

    trl_adapter.check_trl()
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
    """LoRA needs peft, ``report_to: wandb`` needs wandb: one-line errors before a model loads (``trl_adapter``
    contract items 6, 7)."""
    import importlib.util

    from evolm.backends.loading import adapter_rank
    from evolm.training import trl_adapter

    if cfg.model.lora.r > 0:
        if importlib.util.find_spec("peft") is None:
            raise InputError("model.lora needs peft: pip install 'evolm[lora]'")
        if (rank := adapter_rank(cfg.model.name)) and rank != cfg.model.lora.r:
            raise InputError(f"model.name {cfg.model.name} is a LoRA adapter of rank {rank}, which the run trains on; "
                             f"model.lora.r says {cfg.model.lora.r}: set them equal")
        if grpo_setting(cfg.grpo, "sync_ref_model"):
            raise InputError("model.lora's KL reference is frozen (the base with the adapter off, or a warm-start "
                             "adapter's frozen copy); grpo.sync_ref_model has no reference model to sync: unset it")
    reports = trl_adapter.reported_to(grpo_setting(cfg.grpo, "report_to"))
    if "wandb" in reports and importlib.util.find_spec("wandb") is None:
        raise InputError("grpo.report_to=wandb needs wandb: pip install 'evolm[wandb]'")


def _check_constrained(grpo: dict[str, Any]) -> None:
    """``rubric.constrained`` needs xgrammar and a TRL generation path the adapter can constrain (``trl_adapter``
    contract item 5)."""
    from evolm.backends.constrained import require_xgrammar

    require_xgrammar()
    if grpo_setting(grpo, "use_vllm") and grpo_setting(grpo, "vllm_structured_outputs_regex") is not None:
        raise InputError("rubric.constrained and grpo.vllm_structured_outputs_regex both constrain TRL's "
                         "generation: set one")
    if not grpo_setting(grpo, "use_vllm") and grpo_setting(grpo, "use_transformers_continuous_batching"):
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


def _report_to() -> list[str]:
    import importlib.util

    return ["tensorboard"] if importlib.util.find_spec("tensorboard") else []


def run_sequential(cfg: RunConfig, resume: bool = False, on_step: Callable[[StepRecord], None] | None = None,
                   on_start: Callable[[RunStart], None] | None = None,
                   on_tokens: Callable[[int], None] | None = None) -> Path:
    """The paper's sequential baseline: train the writer with the policy frozen, then the policy from the base
    weights with that writer frozen (``plan.sequential_stages``). Resuming skips a finished stage."""
    top = Path(cfg.output_dir)
    if not resume:
        open_run(cfg, resume=False)  # refuses a used directory, saves the config resume reads
    else:
        record_config(top, cfg, None)  # resume overrides: the stage that resumes records its step too
    writer_cfg, _ = sequential_stages(cfg)
    done = complete_checkpoints(writer_dir := Path(writer_cfg.output_dir))
    if not done or checkpoint_state(done[-1]).step < writer_cfg.total_steps:
        run(writer_cfg, resume=bool(done), on_step=on_step, on_start=on_start, on_tokens=on_tokens)
        done = complete_checkpoints(writer_dir)
        if _on_gpu(cfg):  # stage 1's trainer (DeepSpeed, colocated vLLM) cannot be torn down in this process
            raise RunError(f"sequential: stage 1 (the writer) is done in {writer_dir}; stage 2 trains the policy "
                           "from the base weights and must start in a fresh process, since this one still holds "
                           "stage 1's trainer"
                           + (" and its colocated vLLM engine" if grpo_setting(cfg.grpo, "use_vllm") else "")
                           + f" on the GPU: run `evolm train --resume {top}` (the same launch command) to start it")
        import gc

        gc.collect()  # stage 1's trainer, model and optimizer, before stage 2 loads its own
    _, policy_cfg = sequential_stages(cfg, writer_checkpoint=str(done[-1]))
    run(policy_cfg, bool(complete_checkpoints(Path(policy_cfg.output_dir))), on_step, on_start, on_tokens)
    return top


def _on_gpu(cfg: RunConfig) -> bool:
    """Whether the run trains on a CUDA device (not ``grpo.use_cpu``, and torch sees one)."""
    import torch

    return not grpo_setting(cfg.grpo, "use_cpu") and torch.cuda.is_available()
