"""``evolm train --dry-run``: a config checked against a launch and planned without loading a model. ``plan`` yields,
in the order the CLI shows them, ``Table``s (stdout) and one-line notes and warnings (stderr); a check that fails
raises ``InputError`` at the point it is found, after what was yielded before it.

In order: the checks that need no model (batch arithmetic for the launch's processes, paths, ``grpo:`` against the
installed TRL, the judges' endpoints, a rubric budget under the grammar, the extra rewards' imports); the launch
plan (``launch_plan``, its vLLM row counted from the step's own calls: ``generate_calls.step_calls``); the memory
estimate per training GPU (``memory``) with the judge's time budget; the GPU plan and the layouts of ``--gpus`` GPUs
(``gpu_plan``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolm.config import PAIR_BUILDERS, WRITER_REGIMES, RunConfig, endpoint_urls, grpo_setting
from evolm.errors import InputError
from evolm.training import gpu_plan, memory
from evolm.training.generate_calls import ANSWERER, TRAINED, GenerateCall, step_calls
from evolm.training.grpo_config import batch_error, evolm_grpo_settings, grpo_errors, importance_sampling_rule
from evolm.training.model_shape import model_facts

ASSUMED_GPU_GIB = 80.0  # a training GPU's memory without --gpu-memory: estimated for an 80 GB card, nothing refused
LAUNCH_JUDGE_SHARE = 0.15  # the GPU plan's judge server beside each trainer without --judge-share (vllm serve's share)
STAND_IN_TOKENIZER = "smollm2-135m-instruct"  # counts the tokens of a model that is not local (a hub id)


@dataclass(frozen=True)
class Options:
    """The launch the dry run plans for (``evolm train``'s flags)."""

    processes: int
    gpu_memory: float | None = None  # GiB of one training GPU; None: ASSUMED_GPU_GIB, and no refusal
    accelerate_config: str | None = None
    zero_stage: int | None = None
    prompt_tokens: int | None = None  # None: the longest training prompt kept, else memory.PROMPT_TOKENS
    judge_tokens_per_second: float = memory.JUDGE_TOKENS_PER_SECOND
    gpus: int = 8
    judge_share: float | None = None
    rates: gpu_plan.Rates = gpu_plan.RATES
    config_path: str = "CONFIG"  # the config file, for the commands of the layout shown

    @property
    def gpu_gib(self) -> float:
        return ASSUMED_GPU_GIB if self.gpu_memory is None else self.gpu_memory


@dataclass
class Table:
    """A table to show: its title, column headers and rows of text."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)


def plan(cfg: RunConfig, opts: Options) -> Iterator[Table | str]:
    """The dry run of ``cfg`` for the launch ``opts``: tables and lines in the order they are shown (module doc)."""
    from evolm.judge.probe import check_endpoints
    from evolm.training.checks import launch_errors
    from evolm.training.extra_rewards import extra_rewards

    n = opts.processes
    if n < 1:
        raise InputError(f"--num-processes must be >= 1, not {n}")
    errors = [e for e in [batch_error(cfg, n)] if e] + launch_errors(cfg) + grpo_errors(cfg.grpo)
    if errors:
        raise InputError(errors[0] + (f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""))
    check_endpoints(cfg)  # each served judge's URL, key and model name (its scoring probe runs when training starts)
    tokenizer, stand_in = counting_tokenizer(cfg)
    yield from rubric_budget(cfg, tokenizer, stand_in)
    yield from rubric_step_budget(cfg)
    extra_rewards(cfg.rewards.extra)  # imported now: a bad name is a one-line error before anything runs
    fit = _prompt_fit(cfg, tokenizer)
    if fit.note():
        yield f"evolm: {fit.note()}"
    counted = f" (counted with the built-in SmolLM2 tokenizer: {cfg.model.name} is not local)" if stand_in else ""
    table = Table(f"evolm train --dry-run: {cfg.output_dir}, {n} process(es)", ("plan", "value"), launch_plan(cfg, n))
    table.rows.append(("prompts", f"{len(fit.questions):,} of {fit.total:,} kept" + (
        f" ({fit.over:,} over data.max_prompt_tokens {fit.limit:,})" if fit.over else "")
        + (f"; the longest training prompt {fit.longest:,} tokens{counted}" if fit.longest else "")))
    if fit.pairs is not None:
        table.rows.append(("labelled pairs", f"{len(fit.pairs):,} of {fit.pairs_total:,} kept (data.pairs; a pair's "
                           "prompt counted as its rubric step's)"))
    for what, kept, total in (("held-out pairs", fit.eval_pairs, fit.eval_pairs_total),
                              ("held-out questions", fit.eval_questions, fit.eval_questions_total)):
        if total:
            table.rows.append((what, f"{len(kept):,} of {total:,} kept (eval.*; over data.max_prompt_tokens: "
                               "skipped)"))
    if warning := cuda_warning():
        yield warning
    yield table
    prompt_tokens = opts.prompt_tokens or fit.longest or memory.PROMPT_TOKENS
    yield from _memory_plan(cfg, opts, prompt_tokens)
    yield from _gpu_plan(cfg, opts, prompt_tokens)
    yield "dry run: the config is valid for this launch; nothing was loaded"


# ----------------------------------------------------------------------------- the launch plan


def launch_plan(cfg: RunConfig, num_processes: int) -> list[tuple[str, str]]:
    """What a launch with ``num_processes`` processes will do, as (item, value) rows."""
    s = cfg.schedule
    per_role = s.cycles * s.steps_per_phase
    labelled = cfg.contrast.pairs == "labelled"
    pairs_from = "labelled pairs from data.pairs" if labelled else "answers from a frozen policy"
    roles = {"coevolve": f"{per_role} policy + {per_role} rubric, alternating",
             "sequential": f"{per_role} rubric, then {per_role} policy",
             "frozen_rubric": f"{per_role} policy (rubrics from a fixed writer)",
             "judge_only": f"{per_role} policy (no rubric: the judge or reward model alone)",
             "rubric_only": f"{per_role} rubric ({pairs_from})"}[s.regime]
    per_device = grpo_setting(cfg.grpo, "per_device_train_batch_size")
    settings = evolm_grpo_settings(cfg, num_processes)
    rows = s.prompts_per_step * s.samples_per_prompt
    max_len = cfg.policy_tokens
    heldout = ", ".join(f for f in (cfg.eval.pairs, cfg.eval.questions) if f)
    every = f", every {cfg.eval.every} steps" if cfg.eval.every else ""
    lora = cfg.model.lora
    return [
        ("regime", s.regime),
        ("optimizer steps", f"{cfg.total_steps}: {roles}"),
        ("per cycle", f"{s.steps_per_phase} steps per phase, {2 if s.regime == 'coevolve' else 1} phase(s); "
                      f"{s.cycles} cycles"),
        ("rows per step", f"{s.prompts_per_step} questions x {s.samples_per_prompt} samples = {rows}"),
        ("processes x micro-batch", f"{num_processes} x {per_device}"),
        ("gradient accumulation", str(settings["gradient_accumulation_steps"])),
        ("rows per process", f"{rows // num_processes} per step: {settings['gradient_accumulation_steps']} "
                             f"micro-batches of {per_device}"),
        ("completion tokens per step", f"at most {rows * max_len:,} ({rows} x {max_len})"),
        ("checkpoints", f"every {s.save_every} steps and at each phase end, in {settings['output_dir']}"),
        ("importance sampling", importance_sampling_rule(cfg.grpo)),
        ("judge", f"{cfg.judge.model} ({cfg.judge.mode}, {cfg.judge.backend}"
                  + (f" at {', '.join(u for u in endpoint_urls(cfg.judge.base_url) if u)})"
                     if cfg.judge.base_url else ")")),
    ] + ([("rubric-step pairs", f"{cfg.contrast.pairs}: fresh answers of up to {cfg.pair_answer_tokens:,} tokens"
           + (" (the policy's budget, grpo.max_completion_length)" if cfg.contrast.max_new_tokens is None else ""))]
         if s.regime in WRITER_REGIMES and not labelled else []) \
      + ([("rubric writer", _writer_row(cfg))] if s.regime == "frozen_rubric" else []) \
      + ([("held-out evaluation", f"{heldout}: before step 1{every} and after the last step")] if heldout else []) \
      + ([("LoRA", f"rank {lora.r}, alpha {lora.alpha} on {', '.join(lora.target_modules)}: checkpoints hold the "
                   "adapter alone")] if lora.r > 0 else []) \
      + ([("extra rewards", ", ".join(f"{e.get('role', 'policy')}: {e.get('weight', 1.0)} x {e['name']}"
                                     for e in cfg.rewards.extra))] if cfg.rewards.extra else []) \
      + ([("judge reward", "skipped (rewards.judge_weight 0): rewards.extra alone")]
         if cfg.rewards.judge_weight == 0 else []) \
      + ([("vLLM per step", row)] if (row := vllm_plan(cfg)) else [])


def vllm_plan(cfg: RunConfig) -> str | None:
    """The vLLM work of a step with ``grpo.use_vllm``: evolm's generate calls on the trained weights before TRL's
    (``generate_calls.step_calls``, per role and situation), and the weight syncs (``trl_adapter`` contract item 4;
    metrics.jsonl logs both per step)."""
    if not grpo_setting(cfg.grpo, "use_vllm"):
        return None
    s, roles = cfg.schedule, []
    if s.regime != "rubric_only":
        roles.append("policy steps " + _calls_text(cfg, step_calls(cfg, "policy"),
                                                   step_calls(cfg, "policy", first_step=True), "on the first", "after"))
    if s.regime in WRITER_REGIMES and cfg.contrast.pairs == "combined":  # each slot draws its builder
        drawn = [b for b in PAIR_BUILDERS if cfg.contrast.combined_weights.get(b, 0) > 0]
        slots = (drawn * s.prompts_per_step)[:s.prompts_per_step]  # every builder drawn, as far as the slots go
        most = max(len(_on_vllm(step_calls(cfg, "rubric", builders=slots, buffer_empty=e))) for e in (None, True))
        roles.append(f"rubric steps up to {most}")
    elif s.regime in WRITER_REGIMES:
        roles.append("rubric steps " + _calls_text(cfg, step_calls(cfg, "rubric"),
                                                   step_calls(cfg, "rubric", buffer_empty=True),
                                                   "while the buffer is empty", "otherwise"))
    if grpo_setting(cfg.grpo, "vllm_mode") == "colocate" and grpo_setting(cfg.grpo, "vllm_enable_sleep_mode"):
        syncs = ("1 per step: evolm wakes the sleeping engine once for its calls and TRL's generation puts it back "
                 "to sleep (sleep level 2 drops the weights: one sync per call otherwise)")
    else:
        syncs = "1 per step, after the update"
    heldout = ", and 1 more after a held-out evaluation (eval.*)" if cfg.eval.pairs or cfg.eval.questions else ""
    return f"evolm's generate calls before TRL's: {'; '.join(roles)}; weight syncs: {syncs}{heldout}"


def _on_vllm(calls: list[GenerateCall]) -> list[GenerateCall]:
    return [c for c in calls if c.model == TRAINED and not c.by_trl]


def _calls_text(cfg: RunConfig, usual: list[GenerateCall], other: list[GenerateCall], when: str,
                otherwise: str) -> str:
    """``1 (fresh answers), 2 while the buffer is empty``, ``1 on the first (the frozen rubrics), 0 after``: evolm's
    calls on the trained weights in a usual step and in the ``other`` situation, each with what they write (or the
    fixed model that writes instead)."""
    ours, theirs = _on_vllm(usual), _on_vllm(other)
    fixed = [c for c in usual if c.model != TRAINED and not c.by_trl]
    what = f" ({_fixed_text(cfg, fixed[0].model)})" if fixed else ""
    if theirs and not ours:
        return f"{len(theirs)} {when} ({', '.join(c.what for c in theirs)}), 0 {otherwise}{what}"
    text = f"{len(ours)} ({', '.join(c.what for c in ours)})" if ours else f"0{what}"
    return text + (f", {len(theirs)} {when}" if len(theirs) != len(ours) else "")


def _fixed_text(cfg: RunConfig, model: str) -> str:
    sequential = cfg.schedule.regime == "sequential"
    if model == ANSWERER:
        return "answers from the base model" if sequential and not cfg.contrast.answerer else \
            "answers from contrast.answerer"
    return "the writer stage's checkpoint" if sequential else "a fixed writer"


def _writer_row(cfg: RunConfig) -> str:
    """The fixed writer of a frozen_rubric run and how it samples."""
    r = cfg.rubric
    temperature, top_p, tokens = (cfg.rubric.writer_sampling()[k] for k in ("temperature", "top_p", "max_new_tokens"))
    who = f"{r.writer} ({r.writer_backend})" if r.writer else f"{cfg.model.name} (the base model, frozen)"
    served = (f", {r.writer_max_retries} retries of {r.writer_timeout:g} s, fallback {r.writer_fallback or 'none'}"
              if r.writer and r.writer_backend == "openai" else "")
    return f"{who}: temperature {temperature:g}, top-p {top_p:g}, up to {tokens:,} tokens{served}"


# ----------------------------------------------------------------------------- what the tokenizer counts


def counting_tokenizer(cfg: RunConfig) -> tuple[Any | None, bool]:
    """The tokenizer the dry run counts with: the model's when it is local (a directory or a built-in model), else
    the built-in SmolLM2 one standing in for a hub id (second value true); None when neither loads (the run's start
    says what is wrong with the model)."""
    from evolm.backends.builtin import BUILTIN_MODELS
    from evolm.backends.loading import load_tokenizer
    from evolm.errors import EvolmError

    name = cfg.model.name
    local = name in BUILTIN_MODELS or Path(name).expanduser().exists()
    try:
        return load_tokenizer(name if local else STAND_IN_TOKENIZER), not local
    except EvolmError:
        return None, False


def rubric_step_budget(cfg: RunConfig) -> Iterator[str]:
    """A warning when rubric steps (TRL's generation, ``grpo.max_completion_length``) cut rubrics shorter than the
    ones the policy is judged with (``rubric.max_new_tokens``): the writer would be trained on other rubrics than it
    writes. (The temperatures differ by design: the paper samples 1.0 in rubric steps, 0.6 for the policy's.)"""
    steps, used = grpo_setting(cfg.grpo, "max_completion_length"), cfg.rubric.max_new_tokens
    if cfg.schedule.regime in WRITER_REGIMES and isinstance(steps, int) and steps < used:
        yield (f"evolm: warning: rubric steps sample rubrics within grpo.max_completion_length ({steps} tokens), "
               f"below rubric.max_new_tokens ({used}) that the policy's rubrics get: longer rubrics are cut (and "
               "score as unparsed) in training only; set both to the same budget")


def rubric_budget(cfg: RunConfig, tokenizer: Any, stand_in: bool) -> Iterator[str]:
    """With rubric.constrained: a warning when a rubric token budget cuts long rubrics (a cut rubric does not parse:
    validity 0 and no reward spread, found only after minutes), and ``InputError`` when one cannot hold any."""
    from evolm.backends.constrained import rubric_token_bounds

    r, regime = cfg.rubric, cfg.schedule.regime
    budgets = [("rubric.max_new_tokens", r.max_new_tokens)] if regime != "judge_only" else []
    if regime in WRITER_REGIMES:  # rubric steps sample rubrics within TRL's budget
        budgets.append(("grpo.max_completion_length", grpo_setting(cfg.grpo, "max_completion_length")))
    budgets = [(key, b) for key, b in budgets if isinstance(b, int)]
    if not r.constrained or not budgets or tokenizer is None:
        return
    shortest, long_plain = rubric_token_bounds(tokenizer, r.max_criteria)
    counted = f", counted with the built-in SmolLM2 tokenizer ({cfg.model.name} is not local)" if stand_in else ""
    for key, budget in budgets:
        if budget < shortest:
            raise InputError(f"{key}={budget} cannot hold a whole rubric under the rubric grammar "
                             f"(rubric.constrained): the shortest it allows is {shortest} tokens{counted}, so every "
                             f"rubric would be cut and none would parse; raise it to {long_plain} or more")
        if budget < long_plain:
            yield (f"evolm: warning: {key}={budget} is below a rubric of {r.max_criteria} criteria at the grammar's "
                   f"length limits ({long_plain} tokens of plain English{counted}; the shortest whole rubric is "
                   f"{shortest}): rubrics cut at the budget do not parse (validity 0, no reward spread); raise it to "
                   f"{long_plain} or lower rubric.max_criteria")


def _prompt_fit(cfg: RunConfig, tokenizer: Any):  # noqa: ANN202 - prompt_length.PromptFit
    """The prompts the run keeps under data.max_prompt_tokens and the longest; uncounted without a tokenizer (the
    run's start counts with the model's)."""
    from evolm.training.prompt_length import PromptFit, fit_prompt_set
    from evolm.training.prompts import load_prompt_set

    if tokenizer is None:
        questions, references = load_prompt_set(cfg.data.prompts, cfg.data.limit)
        return PromptFit(questions, references, len(questions), cfg.data.max_prompt_tokens)
    return fit_prompt_set(cfg, tokenizer)


def cuda_warning() -> str | None:
    """On a machine with NVIDIA GPUs (nvidia-smi lists them), why torch cannot drive them: a torch built for a
    newer CUDA than the driver runs (a vLLM wheel's torch on a CUDA 12 driver), or a CPU-only build."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = sum(line.startswith("GPU ") for line in listed.splitlines())
    import torch

    if gpus and not (torch.cuda.is_available() and torch.cuda.device_count()):
        built = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return (f"evolm: warning: nvidia-smi lists {gpus} GPU(s) but torch {torch.__version__} ({built}) cannot use "
                "them: its CUDA is newer than the driver runs (nvidia-smi's 'CUDA Version'), or it has none; install "
                "the torch and vLLM built for the driver's CUDA (docs/GPU.md, 'Install')")
    return None


# ----------------------------------------------------------------------------- memory and the GPU plan


def _memory_plan(cfg: RunConfig, opts: Options, prompt_tokens: int) -> Iterator[Table | str]:
    """The judge's time budget, the memory estimate per training GPU and, with --gpu-memory, its refusal."""
    n, rate = opts.processes, opts.judge_tokens_per_second
    budget = memory.judge_budget(cfg, n, rate)
    reply = f"{budget.reply_tokens:,} tokens at {rate:g} tokens/s (assumed): {budget.seconds:,.0f} s"
    if budget.timeout is not None and not budget.fits:
        yield (f"evolm: warning: the judge's longest reply ({reply}) outlasts judge.timeout ({budget.timeout:g} s): "
               "long replies would time out, be retried and count as missing; raise judge.timeout")
    if budget.step_seconds > budget.ddp_timeout:
        yield (f"evolm: warning: judging one step on one process may take {budget.step_seconds:,.0f} s at worst, "
               f"longer than grpo.ddp_timeout ({budget.ddp_timeout:g} s) that the other processes wait in a "
               "collective: raise grpo.ddp_timeout")
    facts = model_facts(cfg.model.name)
    if grpo_setting(cfg.grpo, "use_cpu") or facts is None:
        why = "a CPU run (grpo.use_cpu)" if facts else (
            f"the shape of {cfg.model.name} is not known (not a local directory with config.json, not in "
            "evolm.training.model_shape.KNOWN_MODELS)")
        yield f"memory estimate skipped: {why}"
        return
    gpu = opts.gpu_gib
    sharding = memory.sharding_for(cfg, opts.accelerate_config, opts.zero_stage)
    setup = memory.setup_for(cfg, facts, n, sharding, gpu, prompt_tokens)
    est = memory.estimate(facts, setup)
    table = Table(f"memory per training GPU, estimated ({sharding.source}; "
                  f"{'--gpu-memory' if opts.gpu_memory is not None else 'assumed'} {gpu:g} GiB)",
                  ("term", "GiB", "when", "how"), [(t.name, f"{t.gib:.1f}", t.phase, t.note) for t in est.terms])
    table.rows.append(("peak while generating", f"{est.generation_gib:.1f}", "", "resident + generation"))
    table.rows.append(("peak while training", f"{est.training_gib:.1f}", "", "resident + training"))
    if est.step_gib:
        table.rows.append(("peak in the optimizer step", f"{est.step_gib:.1f}", "",
                           "resident + step (+ a colocated vLLM's share outside generation)"))
    if est.vllm_sequences is not None:
        table.rows.append(("vLLM KV cache", "", "", f"room for {est.vllm_sequences:.1f} sequences of the full context "
                           "at once (vLLM needs 1 to start)"))
    timeout = "no deadline (in process)" if budget.timeout is None else \
        f"judge.timeout {budget.timeout:g} s: {'fits' if budget.fits else 'TOO SHORT'}"
    table.rows.append(("judge reply", "", "", f"{reply}; {timeout}"))
    table.rows.append(("judging per step", "", "", f"at worst {budget.step_seconds:,.0f} s on one process; "
                       f"grpo.ddp_timeout {budget.ddp_timeout:g} s"))
    yield table
    if opts.gpu_memory is not None and (refused := memory.refusal(est, setup, gpu)):
        raise InputError(refused)


def _gpu_plan(cfg: RunConfig, opts: Options, prompt_tokens: int) -> Iterator[Table | str]:
    """The GPU plan of the launch's layout, and the layouts of ``--gpus`` that fit with the commands of one."""
    facts = model_facts(cfg.model.name)
    if grpo_setting(cfg.grpo, "use_cpu") or facts is None:
        return  # said by the memory estimate
    n, gpu, rates = opts.processes, opts.gpu_gib, opts.rates
    sharding = memory.sharding_for(cfg, opts.accelerate_config, opts.zero_stage)
    served = cfg.judge.backend == "openai"
    share = LAUNCH_JUDGE_SHARE if opts.judge_share is None else opts.judge_share
    chosen = gpu_plan.Layout(n, max(0, opts.gpus - n), share if served and opts.gpus <= n else 0.0) \
        if served else gpu_plan.Layout(n, 0)
    plan = gpu_plan.plan_layout(cfg, chosen, facts, sharding, gpu, prompt_tokens, rates)
    table = Table(f"GPU plan: {chosen.text()} ({gpu:g} GiB GPUs)", ("plan", "value"))
    length = prompt_tokens + cfg.policy_tokens
    rows = cfg.schedule.prompts_per_step * cfg.schedule.samples_per_prompt // n
    if plan.room is not None:
        table.rows.append(("vLLM KV-cache room", f"{plan.room:.1f} sequences of the configured length ({length:,} "
                           f"tokens: prompt {prompt_tokens:,} + completion {cfg.policy_tokens:,}) per training GPU; a "
                           f"process generates {rows} rows per step: "
                           f"{math.ceil(rows / max(1, math.floor(plan.room)))} waves"))
    for t in gpu_plan.step_tokens(cfg, prompt_tokens):
        table.rows.append((f"tokens per {t.role} step", t.text().split(": ", 1)[1] + " (budgets, all processes)"))
    if served:
        table.rows.append(("judge in flight", gpu_plan.judge_row(cfg, chosen, gpu, prompt_tokens, rates)))
    for role, sec in plan.step_seconds.items():
        table.rows.append((f"a {role} step, estimated", f"{sec / 60:,.0f} min"))
    table.rows.append(("the run, estimated", f"{plan.run_seconds / 3600:,.1f} h for {cfg.total_steps} steps; "
                       + rates.text() + " (assumptions: `evolm train --smoke` measures a step)"))
    disk = gpu_plan.checkpoint_disk(cfg, facts, sharding)
    table.rows.append(("checkpoint disk", disk.text()))
    if not plan.fits:
        table.rows.append(("fits", f"NO: {plan.why}"))
    yield table
    if warning := disk.warning():
        yield warning
    plans = [gpu_plan.plan_layout(cfg, lay, facts, sharding, gpu, prompt_tokens, rates)
             for lay in gpu_plan.candidate_layouts(cfg, opts.gpus, opts.judge_share)]
    table = Table(f"layouts of {opts.gpus} GPUs (the same assumed rates)",
                  ("layout", "GiB per GPU", "vLLM room", "judge in flight", *(f"{r} step" for r in plan.step_seconds),
                   "run"))
    for p in plans:
        table.rows.append((p.layout.text(), f"{p.peak_gib:.1f}" + (" (over)" if p.peak_gib > gpu else ""),
                           "-" if p.room is None else f"{p.room:.1f}", str(p.judge_room),
                           *[f"{p.step_seconds[r] / 60:,.0f} min" for r in plan.step_seconds],
                           f"{p.run_seconds / 3600:,.1f} h" if p.fits else p.why))
    yield table
    fastest, shared = gpu_plan.best_layout(plans, judge_alone=True), gpu_plan.best_layout(plans)
    if fastest is not None and fastest is not shared:
        yield f"fastest layout that fits: {fastest.layout.text()}, {fastest.run_seconds / 3600:,.1f} h estimated"
    if shared is None:
        why = "; ".join(sorted({p.why for p in plans if not p.layout.judge_gpus and p.why}))
        yield f"no layout of {opts.gpus} GPUs without a GPU serving the judge alone fits: {why}"
        return
    yield (f"layout with no GPU serving the judge alone: {shared.layout.text()}, {shared.run_seconds / 3600:,.1f} h "
           "estimated; its commands:")
    for line in gpu_plan.commands(cfg, opts.config_path, shared.layout, opts.accelerate_config):
        yield f"  {line}"
