"""``evolm train``: run EvoLM training, or with ``--dry-run`` check a config and print the plan."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from evolm.cli._common import positive_int, print_stderr


def make_parser(sub: argparse._SubParsersAction) -> None:
    from evolm.config import describe
    from evolm.training.dry_run import ASSUMED_GPU_GIB, LAUNCH_JUDGE_SHARE
    from evolm.training.gpu_plan import JUDGE_SHARES, RATES

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
                     f"exceeds it, naming the setting to turn (default: estimate for {ASSUMED_GPU_GIB:g}, refuse "
                     "nothing)")
    mem.add_argument("--accelerate-config", default=None, metavar="FILE",
                     help="the accelerate config (or DeepSpeed JSON) of the launch: ZeRO stage and CPU offload "
                     "(default: grpo.deepspeed, else plain data parallel)")
    mem.add_argument("--zero-stage", type=int, default=None, choices=(0, 1, 2, 3),
                     help="DeepSpeed ZeRO stage, instead of reading it from --accelerate-config")
    mem.add_argument("--prompt-tokens", type=positive_int, default=None, metavar="N",
                     help="prompt length assumed for a training row (default: the longest training prompt kept under "
                     "data.max_prompt_tokens, as counted by the model's tokenizer)")
    mem.add_argument("--judge-tokens-per-second", type=float, default=RATES.judge, metavar="R",
                     help="decode speed assumed for one judge request on a busy server, to time the judge's longest "
                     f"reply against judge.timeout (default {RATES.judge:g})")
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
                    f"--gpu-memory-utilization; default: the layouts try {min(JUDGE_SHARES):g} to "
                    f"{max(JUDGE_SHARES):g}, the launch's own {LAUNCH_JUDGE_SHARE:g})")
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

    for report in probe_judges(cfg, warn=print_stderr):
        read = len(report.scores) - len(report.unreadable)
        print_stderr(f"evolm: judge probe: {report.model} at {report.url}: {read} of {len(report.scores)} replies "
                     f"scored ({', '.join('-' if x is None else f'{x:.2f}' for x in report.scores)}) in "
                     f"{report.seconds:.1f} s")


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

    from evolm.config import grpo_setting, load_config
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
    in_process = bool(grpo_setting(scfg.grpo, "use_cpu")) or not torch.cuda.is_available()
    fresh = None if in_process else smoke.LegRendezvous(float(grpo_setting(scfg.grpo, "ddp_timeout")))
    started = time.monotonic()
    for leg in smoke.LEGS:
        print_stderr(f"evolm: smoke run, leg {leg.number} of {len(smoke.LEGS)}: "
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
    """Print ``training.dry_run.plan`` as it comes: its tables on stdout, its lines on stderr."""
    from rich.console import Console
    from rich.table import Table

    from evolm.dist import world_size
    from evolm.training import dry_run, gpu_plan

    rates = gpu_plan.with_rates(gpu_plan.Rates(judge=args.judge_tokens_per_second, mean_tokens=args.mean_tokens),
                                decode=args.decode_tokens_per_second, prefill=args.prefill_tokens_per_second,
                                train=args.train_tokens_per_second)
    opts = dry_run.Options(
        args.num_processes if args.num_processes is not None else world_size(),  # the real launch's world
        args.gpu_memory, args.accelerate_config, args.zero_stage, args.prompt_tokens, args.judge_tokens_per_second,
        args.gpus, args.judge_share, rates, args.config or "CONFIG")
    for item in dry_run.plan(cfg, opts):
        if isinstance(item, str):
            print_stderr(item)
            continue
        table = Table(title=item.title)
        for col in item.columns:
            table.add_column(col)
        for row in item.rows:
            table.add_row(*row)
        Console().print(table)


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
