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

from evolm.config import RunConfig
from evolm.errors import InputError, RunError
from evolm.eval.constraints import prompt_constraints
from evolm.judge.cache import cached_judge
from evolm.judge.judge import build_judge
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
from evolm.training.heldout import HeldOut
from evolm.training.plan import Plan, sequential_stages
from evolm.training.prompt_length import fit_prompt_set
from evolm.training.step import TrainingSteps, answer_params, rubric_params

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
    trl_adapter.check_launch(cfg)  # TRL version, batch arithmetic, grpo.* keys: before anything loads
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
    args = trl_adapter.training_args(cfg)  # first: under ZeRO-3 the policy then loads sharded (zero.Init)
    model, tokenizer = models.load_model(cfg.model.name, device="auto", dtype=cfg.model.dtype, sharded=True,
                                         train_adapter=cfg.model.lora.r > 0)  # a LoRA warm start trains on
    models.count_generated_tokens(model, on_tokens)  # answers, rubrics, pair answers: the CLI's bar moves in a step

    n = cfg.contrast.buffer_size
    buffer = ReplayBuffer.load(checkpoint / BUFFER_FILE, n) if checkpoint else ReplayBuffer(n)

    def make_loop(trainer: Any) -> TrainingSteps:  # the judges first: the initial model's judge reads TRL's frozen copy
        judges = [cached_judge(build_judge(cfg.judge, m, seed=cfg.seed, fallback_dtype=cfg.model.dtype,
                                           loaded=trl_adapter.reference_model(trainer, cfg, m), failures="missing"),
                               cfg.judge.cache, cfg.judge.cache_mb)  # a failed request: a missing score
                  for m in [cfg.judge.model, *cfg.judge.extra_models]]
        return TrainingSteps(cfg, plan, judges, buffer, run_dir, on_step, start.step, heldout)

    # TRL runs the steps of the plan in order: for each cycle, for each phase (one role), K steps of
    #   1. loop.step_rows       the step's rows, materialised with the current weights
    #   2. TRL generates G completions per row; 3. loop.score, finish: rewards (missing -> group mean), buffer, samples
    #   4. TRL's GRPO update, then loop.end_step (metrics.jsonl; held-out evaluation when due) and, at phase
    #      ends and every save_every steps, a checkpoint with loop.save (replay buffer + completeness marker).
    trainer = trl_adapter.build_trainer(cfg, args, model, tokenizer, make_loop)
    if stop_after is not None:
        trl_adapter.stop_after(trainer, stop_after, only=stop_only)
    trl_adapter.train(trainer, checkpoint)
    return run_dir


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
                           "stage 1's trainer" + (" and its colocated vLLM engine" if cfg.grpo.get("use_vllm") else "")
                           + f" on the GPU: run `evolm train --resume {top}` (the same launch command) to start it")
        import gc

        gc.collect()  # stage 1's trainer, model and optimizer, before stage 2 loads its own
    _, policy_cfg = sequential_stages(cfg, writer_checkpoint=str(done[-1]))
    run(policy_cfg, bool(complete_checkpoints(Path(policy_cfg.output_dir))), on_step, on_start, on_tokens)
    return top


def _on_gpu(cfg: RunConfig) -> bool:
    """Whether the run trains on a CUDA device (not ``grpo.use_cpu``, and torch sees one)."""
    import torch

    return not cfg.grpo.get("use_cpu") and torch.cuda.is_available()
