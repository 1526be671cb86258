"""``evolm train``: run EvoLM training, or with ``--dry-run`` check a config and print the plan."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from evolm.cli._common import positive_int, say


def make_parser(sub: argparse._SubParsersAction) -> None:
    from evolm.config import describe

    p = sub.add_parser(
        "train",
        help="run EvoLM training (co-evolving, sequential or frozen-rubric regime)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train one model in two roles (policy and rubric writer) with GRPO against a frozen judge.\n\n"
        "Regimes (schedule.regime):\n"
        "  coevolve       K policy steps then K rubric steps, for each cycle (default, the paper's EvoLM)\n"
        "  sequential     two stages, two weight sets: the writer trains with the policy frozen, then the\n"
        "                 policy trains from the base weights on that writer's rubrics (OUTPUT_DIR/stage*)\n"
        "  frozen_rubric  policy steps only; rubrics from a fixed writer (base model, or rubric.writer such as\n"
        "                 gpt-4.1 with rubric.writer_backend=openai)\n"
        "  judge_only     policy steps only, no rubric (judge.mode=likert, or reward_model for a scalar RM)\n"
        "  rubric_only    rubric steps only, answers from a frozen policy (contrast.answerer)\n"
        "The paper's baselines are configs in configs/baselines/ (see docs/FIDELITY.md).\n\n"
        "Examples:\n"
        "  evolm train --config configs/demo-cpu.yaml\n"
        "  evolm train --config configs/paper-qwen3-8b.yaml --dry-run --num-processes 4\n"
        "  evolm train --config configs/demo-cpu.yaml judge.mode=yesno schedule.cycles=3 output_dir=runs/demo2\n"
        "  evolm train --resume runs/demo\n"
        "  evolm train --resume runs/demo --stop-after-step 12\n\n"
        "Settings (override any with section.key=value):\n" + describe(),
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--config", help="YAML run config (e.g. configs/demo-cpu.yaml, configs/paper-qwen3-8b.yaml)")
    g.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last complete checkpoint")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. schedule.cycles=3")
    p.add_argument("--dry-run", action="store_true",
                   help="resolve the config, check every constraint that needs no model (batch arithmetic for "
                   "--num-processes, age window vs buffer, endpoints) and print the plan; loads nothing")
    p.add_argument("--smoke", action="store_true",
                   help="a smoke run first: this config's models, judge, backends and processes on a shrunk schedule "
                   "(a policy step, a rubric step with temporal pairs, a checkpoint, a resume that takes one more "
                   "step) in OUTPUT_DIR-smoke, then a one-screen verdict (each role, seconds per step, peak GPU "
                   "memory, vLLM's room, judge failures, the whole run's time extrapolated); meant to take about 30 "
                   "minutes for the paper config on its node, not yet measured on one (docs/GPU.md)")
    p.add_argument("--stop-after-step", type=positive_int, default=None, metavar="N",
                   help="end the run after optimizer step N, with a checkpoint there besides the usual ones; "
                   "`evolm train --resume RUN_DIR` goes on from it (a run sized to a budget, a few steps of a "
                   "longer config)")
    p.add_argument("--smoke-leg", type=int, default=None, choices=(1, 2), help=argparse.SUPPRESS)  # --smoke's child
    p.add_argument("--num-processes", type=int, default=None, metavar="N",
                   help="training processes the launch will use, for --dry-run (default: WORLD_SIZE or 1)")
    mem = p.add_argument_group(
        "memory estimate (--dry-run)",
        "GiB per training GPU from the model's shape (a local config.json, or a few known hub ids) and the settings:\n"
        "  bf16 weights; Adam with an fp32 master copy and two moments under DeepSpeed, sharded by the ZeRO stage;\n"
        "  TRL's reference model when grpo.beta != 0 without LoRA; colocated vLLM's share while it generates (all the\n"
        "  time without sleep mode); activations of one micro-batch of prompt + max_completion_length tokens (flash\n"
        "  attention; checkpointed: each layer's input plus one layer); TRL's chunked output head (no full logits);\n"
        "  1.5 GiB of CUDA context and 10% of each phase for torch's allocator reserve (both measured on an H200).\n"
        "  An estimate, not a measurement: docs/PERFORMANCE.md derives each term")
    mem.add_argument("--gpu-memory", type=float, default=None, metavar="GIB",
                     help="memory of one training GPU in GiB (an 80 GB H100: 79.6); refuse a launch whose estimate "
                     "exceeds it, naming the setting to turn (default: estimate for 80, refuse nothing)")
    mem.add_argument("--accelerate-config", default=None, metavar="FILE",
                     help="the accelerate config (or DeepSpeed JSON) of the launch: ZeRO stage and CPU offload "
                     "(default: grpo.deepspeed, else plain data parallel)")
    mem.add_argument("--zero-stage", type=int, default=None, choices=(0, 1, 2, 3),
                     help="DeepSpeed ZeRO stage, instead of reading it from --accelerate-config")
    mem.add_argument("--prompt-tokens", type=positive_int, default=None, metavar="N",
                     help="prompt length assumed for a training row (default: the longest training prompt kept under "
                     "data.max_prompt_tokens, as counted by the model's tokenizer)")
    mem.add_argument("--judge-tokens-per-second", type=float, default=50.0, metavar="R",
                     help="decode speed assumed for one judge request on a busy server, to time the judge's longest "
                     "reply against judge.timeout (default 50)")
    from evolm.training.gpu_plan import RATES

    gp = p.add_argument_group(
        "GPU plan (--dry-run)",
        "the layout of training processes and judge servers on the node: tokens per step per role, vLLM's room, a\n"
        "  step's time from assumed rates (an assumption, not a measurement: `--smoke` measures), the disk of the\n"
        "  checkpoints kept, and the layouts that fit with the commands of the fastest (training/gpu_plan.py)")
    gp.add_argument("--gpus", type=positive_int, default=8, metavar="N",
                    help="GPUs of the node (default 8); those beyond --num-processes serve the judge, else the judge "
                    "shares every training GPU (--judge-share)")
    gp.add_argument("--judge-share", type=float, default=None, metavar="F",
                    help="share of each training GPU a judge server beside the trainer holds (vllm serve "
                    "--gpu-memory-utilization; default: the layouts try 0.1 to 0.3, the launch's own 0.15)")
    gp.add_argument("--mean-tokens", type=positive_int, default=RATES.mean_tokens, metavar="N",
                    help="assumed mean length of a reply (answer, rubric, the judge's), at most its budget "
                    f"(default {RATES.mean_tokens})")
    gp.add_argument("--decode-tokens-per-second", type=float, default=None, metavar="R",
                    help=f"assumed decode speed per sequence of the policy in vLLM (default {RATES.decode:g})")
    gp.add_argument("--prefill-tokens-per-second", type=float, default=None, metavar="R",
                    help=f"assumed prompt tokens per second per GPU (default {RATES.prefill:g})")
    gp.add_argument("--train-tokens-per-second", type=float, default=None, metavar="R",
                    help="assumed training tokens per second per GPU for an 8B model, scaled by parameters (default "
                    f"{RATES.train:g})")
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> None:
    from evolm.config import load_config
    from evolm.errors import InputError
    from evolm.runs.rundir import resume_config

    if args.smoke and (args.resume or args.dry_run):
        raise InputError("--smoke starts from --config (not --resume) and trains: leave out --dry-run")
    if args.smoke and args.stop_after_step is not None:
        raise InputError("--stop-after-step: --smoke sets its own steps; give one or the other")
    cfg = resume_config(args.resume, args.overrides) if args.resume else load_config(args.config, args.overrides)
    if args.dry_run:
        _dry_run(cfg, args)
        return
    if args.smoke_leg is None:  # a smoke run's legs were probed by the process that started them
        _probe(cfg)
    if args.smoke:
        _smoke(cfg, args)
        return
    from evolm.dist import is_main
    from evolm.report.report import summarise
    from evolm.training.smoke import LEGS

    leg = LEGS[args.smoke_leg - 1] if args.smoke_leg else None
    run_dir = _train(cfg, bool(args.resume), leg.stop_after if leg else args.stop_after_step, stop_only=leg is not None)
    if is_main() and leg is None:
        _print_summary(run_dir, summarise(run_dir))


def _probe(cfg) -> None:  # noqa: ANN001 - evolm.config.RunConfig
    """Each served judge answers real scoring requests, read by the configured parser, before any model loads."""
    from evolm.judge.probe import probe_judges

    for report in probe_judges(cfg, warn=say):
        read = len(report.scores) - len(report.unreadable)
        say(f"evolm: judge probe: {report.model} at {report.url}: {read} of {len(report.scores)} replies scored "
            f"({', '.join('-' if x is None else f'{x:.2f}' for x in report.scores)}) in {report.seconds:.1f} s")


def _train(cfg, resume: bool, stop_after: int | None = None,  # noqa: ANN001, ANN202 - RunConfig -> Path
           stop_only: bool = False):
    """``training.run.run`` under the progress bar (rank 0 prints); the run directory."""
    import signal
    import time

    from tqdm.auto import tqdm

    from evolm.backends.base import BAR_REFRESH_S
    from evolm.dist import is_main, single_cpu_launch_warning
    from evolm.runs.records import METRICS_FILE, iter_lenient
    from evolm.training.heldout import describe
    from evolm.training.monitor import PAIR_KEYS, pairs_inverted
    from evolm.training.run import run

    rank0 = is_main()  # under torchrun every process runs this: only rank 0 prints
    from transformers.utils import logging as hf_logging

    # the training bar is the only bar: transformers' loading and checkpoint-writing bars would interleave with it
    hf_logging.disable_progress_bar()
    if rank0 and (warning := single_cpu_launch_warning()):
        print(warning, file=sys.stderr)
    bar = tqdm(total=stop_after or cfg.total_steps, desc="evolm", unit="step", dynamic_ncols=True, delay=1,
               disable=not rank0)
    post: dict[str, object] = {}  # the bar's postfix: the last step's role, cycle and reward, the tokens of this one
    tokens = {"step": 0, "drawn": 0.0}
    pairs: dict[str, Any] = {"steps": [], "warned": False}  # the rubric steps' pair credit: the monitor's warning

    def on_start(start) -> None:  # noqa: ANN001 - evolm.runs.rundir.RunStart
        if not rank0:
            return
        for why in start.skipped:
            print(f"evolm: passing over a checkpoint that does not validate: {why}", file=sys.stderr)
        if start.prompts_skipped:
            print(f"evolm: {start.prompts_skipped}", file=sys.stderr)
        where = f"resuming after step {start.step}" if start.checkpoint else "fresh start"
        pairs["steps"] = [{k: r.get(k) for k in PAIR_KEYS} for r in iter_lenient(start.run_dir / METRICS_FILE)
                          if r.get("role") == "rubric" and int(r.get("step", 0)) <= start.step]  # a resumed run's
        bar.n = bar.last_print_n = bar.initial = start.step  # a resumed bar counts on (its rate: this process's steps)
        until = f", stopping after step {stop_after}" if stop_after else ""
        print(f"evolm: {cfg.schedule.regime} run in {start.run_dir}: {cfg.total_steps} steps ({where}{until})",
              file=sys.stderr, flush=True)

    def on_step(rec) -> None:  # noqa: ANN001 - evolm.runs.records.StepRecord
        if rec.role == "eval":  # a held-out evaluation (eval.*), not a training step
            bar.write(f"evolm: {describe(rec)}", file=sys.stderr)
            return
        if rec.role == "rubric" and not pairs["warned"]:
            pairs["steps"].append({k: getattr(rec, k, None) for k in PAIR_KEYS})
            if flag := pairs_inverted(pairs["steps"]):
                bar.write(f"evolm: warning: {flag.text}", file=sys.stderr)
                pairs["warned"] = True  # once per process: `evolm report` lists it with the other flags
        reward = "-" if rec.reward_mean is None else f"{rec.reward_mean:.3f}"
        post.update(role=rec.role, cycle=rec.cycle, reward=reward)
        tokens["step"] = 0
        post.pop("generated", None)
        bar.set_postfix(post, refresh=False)
        bar.update(rec.step - bar.n)

    def on_tokens(n: int) -> None:  # inside a step: the tokens generated so far (answers, rubrics, pair answers)
        tokens["step"] += n
        if (now := time.monotonic()) - tokens["drawn"] >= BAR_REFRESH_S:
            tokens["drawn"] = now
            post["generated"] = f"{tokens['step']} tok in step {bar.n + 1}"
            bar.set_postfix(post, refresh=time.time() - bar.start_t >= bar.delay)  # the bar's delay holds

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops like Ctrl-C
    try:
        return run(cfg, resume=resume, on_step=on_step, on_start=on_start, on_tokens=on_tokens if rank0 else None,
                   stop_after=stop_after, stop_only=stop_only)
    finally:
        signal.signal(signal.SIGTERM, previous)
        bar.close()


def _smoke(cfg, args: argparse.Namespace) -> None:  # noqa: ANN001 - evolm.config.RunConfig
    """``--smoke``: the two legs (in this process on the CPU, each in a child process on a GPU), then the verdict."""
    import logging
    import time
    from pathlib import Path

    import torch
    from rich.console import Console
    from rich.table import Table

    from evolm.config import load_config
    from evolm.dist import is_main, world_size
    from evolm.errors import RunError
    from evolm.runs.rundir import resume_config
    from evolm.training import smoke

    n = world_size()
    overrides = [*args.overrides, *smoke.smoke_overrides(cfg, n)]
    scfg = load_config(args.config, overrides)
    run_dir = Path(scfg.output_dir)
    smoke.prepare(run_dir, n)
    room = smoke.VLLMRoom()
    in_process = bool(scfg.grpo.get("use_cpu")) or not torch.cuda.is_available()
    fresh = None if in_process else smoke.LegRendezvous(float(scfg.grpo.get("ddp_timeout", 1800)))
    started = time.monotonic()
    for leg in smoke.LEGS:
        say(f"evolm: smoke run, leg {leg.number} of {len(smoke.LEGS)}: "
            + (f"resume from checkpoint {smoke.LEGS[0].stop_after}, " if leg.resume else "")
            + f"stop after step {leg.stop_after}" + ("" if in_process else " (a process of its own)"))
        if in_process:
            catch = room.handler()
            logging.getLogger("vllm").addHandler(catch)
            try:
                _train(resume_config(run_dir) if leg.resume else scfg, leg.resume, leg.stop_after, stop_only=True)
            finally:
                logging.getLogger("vllm").removeHandler(catch)
        elif rc := smoke.run_leg_process(smoke.leg_command(leg, args.config, overrides, run_dir), room.read,
                                         fresh.environment(leg)):
            raise RunError(f"smoke run: leg {leg.number} exited with status {rc} (its output is above); the smoke "
                           f"directory is {run_dir}")
    if not is_main():
        return
    v = smoke.verdict(cfg, scfg, n, time.monotonic() - started, room.found)
    table = Table(title=f"evolm smoke run of {args.config}: {'PASS' if not v.failed else 'FAIL'}", show_header=False)
    table.add_column("what")
    table.add_column("result")
    for what, result in v.rows:
        table.add_row(what, result)
    Console(stderr=False).print(table)
    if v.failed:
        raise RunError(f"smoke run failed: {', '.join(v.failed)} (see {run_dir})")


def _dry_run(cfg, args: argparse.Namespace) -> None:  # noqa: ANN001 - evolm.config.RunConfig
    from rich.console import Console
    from rich.table import Table

    from evolm.dist import world_size
    from evolm.errors import InputError
    from evolm.training.checks import launch_errors
    from evolm.training.extra_rewards import extra_rewards
    from evolm.training.grpo_config import batch_error, grpo_errors

    n = args.num_processes if args.num_processes is not None else world_size()  # the real launch's world
    if n < 1:
        raise InputError(f"--num-processes must be >= 1, not {n}")
    errors = [e for e in [batch_error(cfg, n)] if e] + launch_errors(cfg) + grpo_errors(cfg.grpo)
    if errors:
        raise InputError(errors[0] + (f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""))
    from evolm.judge.probe import check_endpoints

    check_endpoints(cfg)  # each served judge's URL, key and model name (its scoring probe runs when training starts)
    if refused := _rubric_budget(cfg):
        raise InputError(refused)
    extra_rewards(cfg.rewards.extra)  # imported now: a bad name is a one-line error before anything runs
    fit, counted = _prompt_fit(cfg)
    if fit.note():
        say(f"evolm: {fit.note()}")
    table = Table(title=f"evolm train --dry-run: {cfg.output_dir}, {n} process(es)")
    table.add_column("plan")
    table.add_column("value")
    for k, v in launch_plan(cfg, n):
        table.add_row(k, v)
    table.add_row("prompts", f"{len(fit.questions):,} of {fit.total:,} kept" + (
        f" ({fit.over:,} over data.max_prompt_tokens {fit.limit:,})" if fit.over else "")
        + (f"; the longest training prompt {fit.longest:,} tokens{counted}" if fit.longest else ""))
    if fit.pairs is not None:
        table.add_row("labelled pairs", f"{len(fit.pairs):,} of {fit.pairs_total:,} kept (data.pairs; a pair's prompt "
                      "counted as its rubric step's)")
    for what, kept, total in (("held-out pairs", fit.eval_pairs, fit.eval_pairs_total),
                              ("held-out questions", fit.eval_questions, fit.eval_questions_total)):
        if total:
            table.add_row(what, f"{len(kept):,} of {total:,} kept (eval.*; over data.max_prompt_tokens: skipped)")
    _cuda_check()
    Console().print(table)
    if args.prompt_tokens is None:
        args.prompt_tokens = fit.longest or 1024
    refused = _memory_plan(cfg, n, args)
    if refused:
        raise InputError(refused)
    _gpu_plan(cfg, n, args)
    say("dry run: the config is valid for this launch; nothing was loaded")


def _prompt_fit(cfg):  # noqa: ANN001, ANN202 - evolm.config.RunConfig -> (prompt_length.PromptFit, str)
    """The prompts the run keeps under data.max_prompt_tokens and the longest, counted with the model's tokenizer, or
    the built-in SmolLM2 one when the model is not local (said in the second value); uncounted if neither loads."""
    from pathlib import Path

    from evolm.backends.loading import BUILTIN_MODELS, load_tokenizer
    from evolm.errors import EvolmError
    from evolm.training.prompt_length import PromptFit, fit_prompt_set
    from evolm.training.prompts import load_prompt_set

    name = cfg.model.name
    local = name in BUILTIN_MODELS or Path(name).expanduser().exists()
    try:
        tokenizer = load_tokenizer(name if local else "smollm2-135m-instruct")
    except EvolmError:  # nothing to count with: the run's start counts with the model's tokenizer
        questions, references = load_prompt_set(cfg.data.prompts, cfg.data.limit)
        return PromptFit(questions, references, len(questions), cfg.data.max_prompt_tokens), ""
    counted = "" if local else f" (counted with the built-in SmolLM2 tokenizer: {name} is not local)"
    return fit_prompt_set(cfg, tokenizer), counted


def _cuda_check() -> None:
    """On a machine with NVIDIA GPUs (nvidia-smi lists them), say when torch cannot drive them: a torch built for a
    newer CUDA than the driver runs (a vLLM wheel's torch on a CUDA 12 driver), or a CPU-only build."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return
    gpus = sum(line.startswith("GPU ") for line in listed.splitlines())
    import torch

    if gpus and not (torch.cuda.is_available() and torch.cuda.device_count()):
        built = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        say(f"evolm: warning: nvidia-smi lists {gpus} GPU(s) but torch {torch.__version__} ({built}) cannot use them: "
            "its CUDA is newer than the driver runs (nvidia-smi's 'CUDA Version'), or it has none; install the torch "
            "and vLLM built for the driver's CUDA (docs/GPU.md, 'Install')")


def launch_plan(cfg, num_processes: int) -> list[tuple[str, str]]:  # noqa: ANN001 - evolm.config.RunConfig
    """What a launch with ``num_processes`` processes will do, as (item, value) rows (``--dry-run``)."""
    from evolm.config import WRITER_REGIMES, endpoint_urls
    from evolm.training.grpo_config import evolm_grpo_settings, importance_sampling_rule

    s = cfg.schedule
    per_role = s.cycles * s.steps_per_phase
    labelled = cfg.contrast.pairs == "labelled"
    pairs_from = "labelled pairs from data.pairs" if labelled else "answers from a frozen policy"
    roles = {"coevolve": f"{per_role} policy + {per_role} rubric, alternating",
             "sequential": f"{per_role} rubric, then {per_role} policy",
             "frozen_rubric": f"{per_role} policy (rubrics from a fixed writer)",
             "judge_only": f"{per_role} policy (no rubric: the judge or reward model alone)",
             "rubric_only": f"{per_role} rubric ({pairs_from})"}[s.regime]
    per_device = cfg.grpo.get("per_device_train_batch_size", 8)
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
      + ([("vLLM per step", plan)] if (plan := vllm_plan(cfg)) else [])


def vllm_plan(cfg) -> str | None:  # noqa: ANN001 - evolm.config.RunConfig
    """The vLLM work of a step with ``grpo.use_vllm``: evolm's generate calls per role before TRL's own, and the
    weight syncs (``trl_adapter`` contract item 4; metrics.jsonl logs both per step)."""
    from evolm.config import WRITER_REGIMES

    g, s, c = cfg.grpo, cfg.schedule, cfg.contrast
    if not g.get("use_vllm"):
        return None
    policy = {"coevolve": "1 (its rubrics)", "judge_only": "0", "sequential": "0 (the writer stage's checkpoint)",
              "frozen_rubric": "0 (a fixed writer)" if cfg.rubric.writer else "1 on the first (the frozen rubrics), 0 "
              "after"}.get(s.regime)
    # the pairs' answers come from a fixed model, not vLLM (sequential: the base model, plan.sequential_stages)
    fixed = (bool(c.answerer) or s.regime == "sequential") and c.pairs != "labelled"
    rubric = "0" if c.pairs == "labelled" else {
        "temporal": "0, or 1 while the buffer is empty" if fixed else "1 (fresh answers), 2 while the buffer is empty",
        "rubric_conditioned": "1" if fixed else "2", "inferred_question": "0" if fixed else "3",
        "combined": "up to 1" if fixed else "up to 6"}[c.pairs]
    roles = [f"policy steps {policy}" if s.regime != "rubric_only" and policy else "",
             f"rubric steps {rubric}" if s.regime in WRITER_REGIMES else ""]
    calls = "; ".join(r for r in roles if r)
    if g.get("vllm_mode", "colocate") == "colocate" and g.get("vllm_enable_sleep_mode"):
        syncs = ("1 per step: evolm wakes the sleeping engine once for its calls and TRL's generation puts it back "
                 "to sleep (sleep level 2 drops the weights: one sync per call otherwise)")
    else:
        syncs = "1 per step, after the update"
    heldout = ", and 1 more after a held-out evaluation (eval.*)" if cfg.eval.pairs or cfg.eval.questions else ""
    return f"evolm's generate calls before TRL's: {calls}; weight syncs: {syncs}{heldout}"


def _writer_row(cfg) -> str:  # noqa: ANN001 - evolm.config.RunConfig
    """The fixed writer of a frozen_rubric run and how it samples, for the dry run."""
    r = cfg.rubric
    temperature, top_p, tokens = (cfg.rubric.writer_sampling()[k] for k in ("temperature", "top_p", "max_new_tokens"))
    who = f"{r.writer} ({r.writer_backend})" if r.writer else f"{cfg.model.name} (the base model, frozen)"
    served = (f", {r.writer_max_retries} retries of {r.writer_timeout:g} s, fallback {r.writer_fallback or 'none'}"
              if r.writer and r.writer_backend == "openai" else "")
    return f"{who}: temperature {temperature:g}, top-p {top_p:g}, up to {tokens:,} tokens{served}"


def _rubric_budget(cfg) -> str | None:  # noqa: ANN001 - evolm.config.RunConfig
    """With rubric.constrained: the refusal line when a rubric token budget cannot hold any whole rubric; a warning
    when it cuts long ones (a cut rubric does not parse: validity 0 and no reward spread, found only after minutes)."""
    from pathlib import Path

    from evolm.backends.constrained import rubric_token_bounds
    from evolm.backends.loading import BUILTIN_MODELS, load_tokenizer
    from evolm.config import WRITER_REGIMES
    from evolm.errors import EvolmError

    r, regime = cfg.rubric, cfg.schedule.regime
    budgets = [("rubric.max_new_tokens", r.max_new_tokens)] if regime != "judge_only" else []
    if regime in WRITER_REGIMES:  # rubric steps sample rubrics within TRL's budget
        budgets.append(("grpo.max_completion_length", cfg.grpo.get("max_completion_length")))
    budgets = [(key, b) for key, b in budgets if isinstance(b, int)]
    if not r.constrained or not budgets:
        return None
    name = cfg.model.name
    local = name in BUILTIN_MODELS or Path(name).expanduser().exists()  # a hub id: counted with the built-in one
    try:
        tokenizer = load_tokenizer(name if local else "smollm2-135m-instruct")
    except EvolmError:
        return None  # the run itself says what is wrong with the model
    shortest, long_plain = rubric_token_bounds(tokenizer, r.max_criteria)
    counted = "" if local else f", counted with the built-in SmolLM2 tokenizer ({name} is not local)"
    for key, budget in budgets:
        if budget < shortest:
            return (f"{key}={budget} cannot hold a whole rubric under the rubric grammar (rubric.constrained): the "
                    f"shortest it allows is {shortest} tokens{counted}, so every rubric would be cut and none would "
                    f"parse; raise it to {long_plain} or more")
        if budget < long_plain:
            say(f"evolm: warning: {key}={budget} is below a rubric of {r.max_criteria} criteria at the grammar's "
                f"length limits ({long_plain} tokens of plain English{counted}; the shortest whole rubric is "
                f"{shortest}): rubrics cut at the budget do not parse (validity 0, no reward spread); raise it to "
                f"{long_plain} or lower rubric.max_criteria")
    return None


def _memory_plan(cfg, n: int, args: argparse.Namespace) -> str | None:  # noqa: ANN001 - evolm.config.RunConfig
    """Print the memory estimate per training GPU and the judge's time budget; the refusal line, if any."""
    from rich.console import Console
    from rich.table import Table

    from evolm.training import memory

    budget = memory.judge_budget(cfg, n, args.judge_tokens_per_second)
    reply = (f"{budget.reply_tokens:,} tokens at {args.judge_tokens_per_second:g} tokens/s (assumed): "
             f"{budget.seconds:,.0f} s")
    if budget.timeout is not None and not budget.fits:
        say(f"evolm: warning: the judge's longest reply ({reply}) outlasts judge.timeout ({budget.timeout:g} s): "
            "long replies would time out, be retried and count as missing; raise judge.timeout")
    if budget.step_seconds > budget.ddp_timeout:
        say(f"evolm: warning: judging one step on one process may take {budget.step_seconds:,.0f} s at worst, "
            f"longer than grpo.ddp_timeout ({budget.ddp_timeout:g} s) that the other processes wait in a "
            "collective: raise grpo.ddp_timeout")
    facts = memory.model_facts(cfg.model.name)
    if cfg.grpo.get("use_cpu") or facts is None:
        why = "a CPU run (grpo.use_cpu)" if facts else (
            f"the shape of {cfg.model.name} is not known (not a local directory with config.json, not in "
            "evolm.training.memory.KNOWN_MODELS)")
        say(f"memory estimate skipped: {why}")
        return None
    gpu = args.gpu_memory if args.gpu_memory is not None else 80.0
    sharding = memory.sharding_for(cfg, args.accelerate_config, args.zero_stage)
    setup = memory.setup_for(cfg, facts, n, sharding, gpu, args.prompt_tokens)
    est = memory.estimate(facts, setup)
    table = Table(title=f"memory per training GPU, estimated ({sharding.source}; "
                        f"{'--gpu-memory' if args.gpu_memory is not None else 'assumed'} {gpu:g} GiB)")
    for col in ("term", "GiB", "when", "how"):
        table.add_column(col)
    for t in est.terms:
        table.add_row(t.name, f"{t.gib:.1f}", t.phase, t.note)
    table.add_row("peak while generating", f"{est.generation_gib:.1f}", "", "resident + generation")
    table.add_row("peak while training", f"{est.training_gib:.1f}", "", "resident + training")
    if est.step_gib:
        table.add_row("peak in the optimizer step", f"{est.step_gib:.1f}", "",
                      "resident + step (+ a colocated vLLM's share outside generation)")
    if est.vllm_sequences is not None:
        table.add_row("vLLM KV cache", "", "", f"room for {est.vllm_sequences:.1f} sequences of the full context at "
                      "once (vLLM needs 1 to start)")
    timeout = "no deadline (in process)" if budget.timeout is None else \
        f"judge.timeout {budget.timeout:g} s: {'fits' if budget.fits else 'TOO SHORT'}"
    table.add_row("judge reply", "", "", f"{reply}; {timeout}")
    table.add_row("judging per step", "", "", f"at worst {budget.step_seconds:,.0f} s on one process; "
                  f"grpo.ddp_timeout {budget.ddp_timeout:g} s")
    Console().print(table)
    return memory.refusal(est, setup, gpu) if args.gpu_memory is not None else None


def _gpu_plan(cfg, n: int, args: argparse.Namespace) -> None:  # noqa: ANN001 - evolm.config.RunConfig
    """Print the GPU plan of the launch's layout and the layouts of ``--gpus`` that fit (``training.gpu_plan``)."""
    from rich.console import Console
    from rich.table import Table

    from evolm.training import gpu_plan, memory

    facts = memory.model_facts(cfg.model.name)
    if cfg.grpo.get("use_cpu") or facts is None:
        return  # said by the memory estimate
    gpu = args.gpu_memory if args.gpu_memory is not None else 80.0
    sharding = memory.sharding_for(cfg, args.accelerate_config, args.zero_stage)
    rates = gpu_plan.with_rates(gpu_plan.Rates(judge=args.judge_tokens_per_second, mean_tokens=args.mean_tokens),
                                decode=args.decode_tokens_per_second, prefill=args.prefill_tokens_per_second,
                                train=args.train_tokens_per_second)
    served = cfg.judge.backend == "openai"
    share = 0.15 if args.judge_share is None else args.judge_share
    chosen = gpu_plan.Layout(n, max(0, args.gpus - n), share if served and args.gpus <= n else 0.0) \
        if served else gpu_plan.Layout(n, 0)
    plan = gpu_plan.plan_layout(cfg, chosen, facts, sharding, gpu, args.prompt_tokens, rates)
    table = Table(title=f"GPU plan: {chosen.text()} ({gpu:g} GiB GPUs)")
    table.add_column("plan")
    table.add_column("value")
    length = args.prompt_tokens + cfg.policy_tokens
    rows = cfg.schedule.prompts_per_step * cfg.schedule.samples_per_prompt // n
    if plan.room is not None:
        table.add_row("vLLM KV-cache room", f"{plan.room:.1f} sequences of the configured length ({length:,} tokens: "
                      f"prompt {args.prompt_tokens:,} + completion {cfg.policy_tokens:,}) per training GPU; a process "
                      f"generates {rows} rows per step: {math.ceil(rows / max(1, math.floor(plan.room)))} waves")
    for t in gpu_plan.step_tokens(cfg, args.prompt_tokens):
        table.add_row(f"tokens per {t.role} step", t.text().split(": ", 1)[1] + " (budgets, all processes)")
    if served:
        table.add_row("judge in flight", gpu_plan.judge_row(cfg, chosen, gpu, args.prompt_tokens, rates))
    for role, sec in plan.step_seconds.items():
        table.add_row(f"a {role} step, estimated", f"{sec / 60:,.0f} min")
    table.add_row("the run, estimated", f"{plan.run_seconds / 3600:,.1f} h for {cfg.total_steps} steps; "
                  + rates.text() + " (assumptions: `evolm train --smoke` measures a step)")
    disk = gpu_plan.checkpoint_disk(cfg, facts, sharding)
    table.add_row("checkpoint disk", disk.text())
    if not plan.fits:
        table.add_row("fits", f"NO: {plan.why}")
    Console().print(table)
    if warning := disk.warning():
        say(warning)
    plans = [gpu_plan.plan_layout(cfg, lay, facts, sharding, gpu, args.prompt_tokens, rates)
             for lay in gpu_plan.candidate_layouts(cfg, args.gpus, args.judge_share)]
    table = Table(title=f"layouts of {args.gpus} GPUs (the same assumed rates)")
    for col in ("layout", "GiB per GPU", "vLLM room", "judge in flight", *plan.step_seconds, "run"):
        table.add_column(col if col in ("layout", "GiB per GPU", "vLLM room", "judge in flight", "run")
                         else f"{col} step")
    for p in plans:
        table.add_row(p.layout.text(), f"{p.peak_gib:.1f}" + (" (over)" if p.peak_gib > gpu else ""),
                      "-" if p.room is None else f"{p.room:.1f}", str(p.judge_room),
                      *[f"{p.step_seconds[r] / 60:,.0f} min" for r in plan.step_seconds],
                      f"{p.run_seconds / 3600:,.1f} h" if p.fits else p.why)
    Console().print(table)
    fastest, shared = gpu_plan.best_layout(plans, judge_alone=True), gpu_plan.best_layout(plans)
    if fastest is not None and fastest is not shared:
        say(f"fastest layout that fits: {fastest.layout.text()}, {fastest.run_seconds / 3600:,.1f} h estimated")
    if shared is None:
        why = "; ".join(sorted({p.why for p in plans if not p.layout.judge_gpus and p.why}))
        say(f"no layout of {args.gpus} GPUs without a GPU serving the judge alone fits: {why}")
        return
    say(f"layout with no GPU serving the judge alone: {shared.layout.text()}, {shared.run_seconds / 3600:,.1f} h "
        "estimated; its commands:")
    for line in gpu_plan.commands(cfg, args.config or "CONFIG", shared.layout, args.accelerate_config):
        say(f"  {line}")


def _print_summary(run_dir, phases) -> None:  # noqa: ANN001
    """The phases of the run (training steps only) and, when logged, its first and last held-out evaluations."""
    from rich.console import Console
    from rich.table import Table

    from evolm.report.report import pair_n
    from evolm.runs.records import read_metrics
    from evolm.training.heldout import summary_rows

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    # short headers, so the table fits an 80-column terminal without cutting one (the phases are its rows, in order)
    table = Table(title=f"EvoLM run: {run_dir}")
    for col in ("cycle", "role", "steps", "reward", "reward std", "pair acc.", "validity", "seconds"):
        table.add_column(col, justify="right")
    for ph in phases:
        table.add_row(str(ph["cycle"]), ph["role"], str(ph["steps"]), fmt(ph["reward"]),
                      fmt(ph.get("reward_std")), fmt(ph["pair_accuracy"]), fmt(ph["rubric_validity"]),
                      f"{ph['seconds']:.0f}")
    Console().print(table)
    counted = [f"{pair_n(ph['pair_judgements'], ph.get('pairs'))} (phase {ph['phase']})" for ph in phases
               if ph.get("pair_judgements") is not None]
    if counted:  # below the table, which has no room for it in 80 columns
        print(f"pair acc. n: {'; '.join(counted)}")
    heldout = summary_rows(read_metrics(run_dir))
    if heldout:
        table = Table(title="held-out evaluation (eval.*): first and last")
        for col in ("", "first", "last"):
            table.add_column(col, justify="right")
        for row in heldout:
            table.add_row(*row)
        Console().print(table)
    print(f"run directory: {run_dir} (metrics.jsonl, samples/, checkpoints/; `evolm report {run_dir}` for plots)")
