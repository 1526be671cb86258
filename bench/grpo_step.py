"""Where a GRPO step's time goes in the CPU demo, and what EvoLM adds on top of plain TRL.

Measured, each in its own subprocess (so each has its own peak memory and no warm state leaks):

1. ``demo``: the CPU demo exactly as shipped (configs/demo-cpu.yaml: SmolLM2-135M policy and
   judge, 2 prompts x 4 samples, up to 480 tokens, constrained rubrics, 2 cycles x (2 policy + 2 rubric
   steps)), only the output directory changed. Each step is broken down into

   - materialise: EvoLM's per-step work before TRL generates (policy: the step's rubrics; rubric: the fresh
     a+ answers of the pairs), ``TrainingSteps.step_rows``;
   - generation: TRL's ``transformers.generate`` block (TRL's own profiling);
   - judging: ``Judge.score`` inside the reward function;
   - ref log-probs: TRL's no-grad ``_get_per_token_logps_and_entropies`` (reference model, beta > 0);
   - other (prepare): the rest of TRL's ``_prepare_inputs`` (tokenising, padding, reward plumbing,
     EvoLM's after-reward bookkeeping and sample logging);
   - update: the rest of the step (loss forward, backward, clipping, optimizer).

   A step is timed from ``on_step_begin`` to ``on_step_end`` (checkpoint saving and logging come
   after and are reported apart, as total run time). The first step is warm-up and left out;
   each role's figures are medians over its remaining steps. Peak RSS is the high-water mark of
   the whole demo process (``resource.getrusage``); the part of the run during which it last grew is
   reported too (where the peak comes from). ``--compare-rev REV`` runs the same demo with the
   package as it was at REV, beside it.
2. ``plain TRL``: the same GRPOConfig, model and prompts (policy prompts; rubric prompts) with a
   constant reward, 3 steps each: what TRL alone costs, so the difference is EvoLM's overhead.
3. scaling: policy steps of the demo with samples per prompt 4, 8, 16 (128 tokens) and with
   max_completion_length 32, 64, 128 (4 samples), 3 steps each (first one warm-up).

All timers are attached from the outside (monkeypatching in this script and TRL's profiling
records); no library code is changed to be measured.

    .venv/bin/python -m bench.grpo_step                  # everything (~10-15 min on 2 cores)
    .venv/bin/python -m bench.grpo_step --skip-scaling   # breakdown + plain TRL only
    .venv/bin/python -m bench.grpo_step --skip-scaling --compare-rev 9783296   # and the demo at that revision
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import env_at, print_header, table

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "demo-cpu.yaml"
PARTS = ["materialise", "generation", "judging", "ref log-probs", "other (prepare)", "update"]


# ============================================================================= worker (one measured run)


class _Timers:
    """Seconds per category, per optimizer step (filled by the patches below)."""

    def __init__(self) -> None:
        self.step = 0
        self.begin = 0.0
        self.steps: list[dict[str, float]] = []
        self.cur: dict[str, float] = defaultdict(float)

        self.hwm = 0.0  # the process's peak RSS so far, MiB
        self.rise: dict[str, float] = {}  # part -> the peak RSS right after the last time it raised it

    def add(self, name: str, seconds: float) -> None:
        self.cur[name] += seconds

    def mark(self, name: str) -> None:
        """Where the memory peak grows: if the process's high-water mark rose during ``name``, note it there."""
        import resource

        now = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
        if now > self.hwm:
            self.hwm, self.rise[name] = now, now


def _wrap(owner: Any, attr: str, name: str, timers: _Timers, when: Any = None) -> None:
    original = getattr(owner, attr)

    def timed(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*a, **kw)
        finally:
            if when is None or when():
                timers.add(name, time.perf_counter() - t0)
                timers.mark(name)

    setattr(owner, attr, timed)


def _instrument(timers: _Timers, stop_after: int) -> None:
    """Step boundaries, TRL's profiling records and EvoLM's hooks, all patched from the outside."""
    import torch
    import trl.extras.profiling as profiling
    from transformers.trainer_callback import CallbackHandler
    from trl import GRPOTrainer

    import evolm.judge.judge as judge
    from evolm.training.step import TrainingSteps

    def log_metrics(self: Any, duration: float) -> None:  # TRL's profiling: keep the durations
        for suffix, name in ((".transformers.generate", "generation"), ("._prepare_inputs", "prepare")):
            if self.name.endswith(suffix):
                timers.add(name, duration)
                # TRL enters _prepare_inputs at every micro-batch: a rise marked here happened since the last mark,
                # i.e. mostly in the previous micro-batch's forward and backward
                timers.mark("generation" if name == "generation" else "micro-batches (forward, backward, prepare)")

    profiling.ProfilingContext._log_metrics = log_metrics

    begin, end = CallbackHandler.on_step_begin, CallbackHandler.on_step_end

    def on_step_begin(self: Any, args: Any, state: Any, control: Any, **kw: Any) -> Any:
        timers.mark("loading (models, trainer)" if not timers.steps else "update")
        timers.cur = defaultdict(float)
        timers.begin = time.perf_counter()
        return begin(self, args, state, control, **kw)

    def on_step_end(self: Any, args: Any, state: Any, control: Any, **kw: Any) -> Any:
        wall = time.perf_counter() - timers.begin
        timers.mark("update")
        timers.steps.append({"step": state.global_step, "wall": wall, **timers.cur})
        control = end(self, args, state, control, **kw)
        if stop_after and state.global_step >= stop_after:
            control.should_training_stop = True
        return control

    CallbackHandler.on_step_begin, CallbackHandler.on_step_end = on_step_begin, on_step_end
    _wrap(TrainingSteps, "step_rows", "materialise", timers)
    _wrap(judge.Judge, "score", "judging", timers)  # every judge call of rewards.score_rows
    _wrap(GRPOTrainer, "_get_per_token_logps_and_entropies", "ref log-probs", timers,
          when=lambda: not torch.is_grad_enabled())


def _evolm_worker(spec: dict[str, Any]) -> dict[str, Any]:
    from evolm.config import load_config
    from evolm.runs.records import read_metrics
    from evolm.training.run import run

    timers = _Timers()
    _instrument(timers, spec.get("stop_after", 0))
    with tempfile.TemporaryDirectory(prefix="evolm-bench-") as tmp:
        cfg = load_config(CONFIG, [f"output_dir={tmp}/run", *spec.get("overrides", [])])
        t0 = time.perf_counter()
        run_dir = run(cfg)
        total = time.perf_counter() - t0
        records = {r.step: r for r in read_metrics(run_dir) if r.role != "eval"}  # not held-out evaluations
    for s in timers.steps:
        m = records.get(s["step"])
        s["role"] = m.role if m else None
        s["completion_length"] = m.completion_length if m else None
        s["judge_pair_accuracy"] = m.pair_accuracy if m else None
    return {"steps": timers.steps, "total_seconds": total, "memory_rise": timers.rise}


def _plain_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Plain TRL GRPO on the demo's model, prompts and GRPO settings with a constant reward."""
    import datasets
    from trl import GRPOConfig, GRPOTrainer

    from evolm.backends.loading import load_model
    from evolm.config import load_config
    from evolm.rubrics import rubric_messages
    from evolm.training.contrast import policy_messages
    from evolm.training.prompts import load_prompts

    timers = _Timers()
    _instrument(timers, spec["steps"])
    cfg = load_config(CONFIG, spec.get("overrides", []))
    s = cfg.schedule
    questions = load_prompts(cfg.data.prompts, cfg.data.limit)
    build = (lambda q: policy_messages(q, cfg.model.system_prompt)) if spec["role"] == "policy" else rubric_messages
    n = 2 * s.prompts_per_step * spec["steps"]  # more rows than the steps use: never a short epoch
    dataset = datasets.Dataset.from_dict({"prompt": [build(questions[i % len(questions)]) for i in range(n)]})
    model, tokenizer = load_model(cfg.model.name, device="cpu", dtype=cfg.model.dtype)
    accum = s.prompts_per_step * s.samples_per_prompt // int(cfg.grpo["per_device_train_batch_size"])
    with tempfile.TemporaryDirectory(prefix="evolm-bench-") as tmp:
        args = GRPOConfig(output_dir=tmp, num_generations=s.samples_per_prompt, gradient_accumulation_steps=accum,
                          steps_per_generation=accum, max_steps=spec["steps"], shuffle_dataset=False,
                          save_strategy="no", logging_steps=1, seed=cfg.seed, disable_tqdm=True,
                          **{**cfg.grpo, "report_to": []})

        def constant_reward(completions: list, **kw: Any) -> list[float]:
            return [0.5] * len(completions)

        trainer = GRPOTrainer(model=model, reward_funcs=[constant_reward], args=args, train_dataset=dataset,
                              processing_class=tokenizer)
        t0 = time.perf_counter()
        trainer.train()
        total = time.perf_counter() - t0
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    for step, length in zip(timers.steps, lengths, strict=False):
        step["role"] = spec["role"]
        step["completion_length"] = length
    return {"steps": timers.steps, "total_seconds": total}


def worker(spec: dict[str, Any]) -> None:
    import resource

    out = _evolm_worker(spec) if spec["kind"] == "evolm" else _plain_worker(spec)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print("BENCH-RESULT " + json.dumps(out), flush=True)


# ============================================================================= parent (runs workers, prints tables)


def run_worker(spec: dict[str, Any], label: str) -> dict[str, Any]:
    print(f"[grpo_step] running {label} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], cwd=ROOT, capture_output=True,
                          text=True, env=env_at(spec.get("rev")))  # rev: the package as it was at that revision
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH-RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"{label}: worker failed (exit {proc.returncode})")
    print(f"[grpo_step] {label}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return json.loads(lines[-1][len("BENCH-RESULT "):])


def breakdown(steps: list[dict[str, Any]]) -> dict[str, float]:
    """Median per category over the given steps; 'other' and 'update' are what the timers leave."""
    def med(key: str) -> float:
        return statistics.median(s.get(key, 0.0) for s in steps)

    per_step = []
    for s in steps:
        prep = s.get("prepare", 0.0)
        inside = sum(s.get(k, 0.0) for k in ("materialise", "generation", "judging", "ref log-probs"))
        per_step.append({**s, "other (prepare)": max(0.0, prep - inside), "update": max(0.0, s["wall"] - prep)})
    steps = per_step
    out = {k: med(k) for k in [*PARTS, "wall"]}
    lengths = [s["completion_length"] for s in steps if s.get("completion_length") is not None]
    out["completion_length"] = statistics.median(lengths) if lengths else float("nan")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--skip-plain", action="store_true", help="skip the plain-TRL constant-reward baseline")
    ap.add_argument("--skip-scaling", action="store_true", help="skip the samples / length scaling runs")
    ap.add_argument("--compare-micro-batch", type=int, default=0, metavar="N",
                    help="also run one demo cycle with grpo.per_device_train_batch_size=N (memory and step time)")
    ap.add_argument("--samples", default="4,8,16", help="samples per prompt for the scaling runs")
    ap.add_argument("--lengths", default="32,64,128", help="max_completion_length values for the scaling runs")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra config overrides for every run (e.g. model.name=DIR judge.model=DIR for a smoke test)")
    ap.add_argument("--scaling-steps", type=int, default=3, help="policy steps per scaling run (first is warm-up)")
    ap.add_argument("--compare-rev", default=None, metavar="REV",
                    help="also run the demo with the package as it was at git revision REV (same worker, config and "
                         "machine), and print both side by side")
    args = ap.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return

    from tqdm.auto import tqdm

    jobs: list[tuple[str, dict[str, Any]]] = [("demo", {"kind": "evolm"})]
    before = f"demo at {args.compare_rev}"
    if args.compare_rev:
        jobs.append((before, {"kind": "evolm", "rev": args.compare_rev}))
    if not args.skip_plain:
        jobs += [(f"plain TRL {role}", {"kind": "plain", "role": role, "steps": 3}) for role in ("policy", "rubric")]
    micro = f"demo, one cycle, per_device_train_batch_size={args.compare_micro_batch}"
    if args.compare_micro_batch:
        jobs.append((micro, {"kind": "evolm", "overrides": [
            "schedule.cycles=1", f"grpo.per_device_train_batch_size={args.compare_micro_batch}"]}))
    scaling: list[tuple[str, int, int]] = []
    if not args.skip_scaling:
        n = args.scaling_steps
        base = [f"schedule.steps_per_phase={n}", "schedule.cycles=1"]
        for g in map(int, args.samples.split(",")):
            scaling.append((f"G={g}, L=128", g, 128))
        for length in map(int, args.lengths.split(",")):
            if (f"G=4, L={length}", 4, length) not in scaling:
                scaling.append((f"G=4, L={length}", 4, length))
        jobs += [(label, {"kind": "evolm", "stop_after": n,
                          "overrides": [*base, f"schedule.samples_per_prompt={g}",
                                        f"grpo.max_completion_length={length}"]})
                 for label, g, length in scaling]

    for _, spec in jobs:
        spec["overrides"] = [*spec.get("overrides", []), *args.set]
    results: dict[str, dict[str, Any]] = {}
    for label, spec in tqdm(jobs, desc="bench runs", unit="run"):
        results[label] = run_worker(spec, label)

    from evolm.config import load_config

    cfg = load_config(CONFIG, args.set)
    print_header("One GRPO step in the CPU demo (configs/demo-cpu.yaml)", {
        "policy": cfg.model.name, "judge": f"{cfg.judge.model} ({cfg.judge.mode}, batch {cfg.judge.batch_size})",
        "prompts_per_step": cfg.schedule.prompts_per_step, "samples_per_prompt": cfg.schedule.samples_per_prompt,
        "max_completion_length": cfg.grpo.get("max_completion_length"),
        "rubric_max_new_tokens": cfg.rubric.max_new_tokens, "pair_answer_max_new_tokens": cfg.pair_answer_tokens,
        "overrides": " ".join(args.set) or "none", "warm-up": "first step of each run left out",
    })
    demo = results["demo"]
    rows, by_role = [], {}
    for role in ("policy", "rubric"):
        steps = [s for s in demo["steps"][1:] if s.get("role") == role]
        by_role[role] = b = breakdown(steps)
        rows.append([f"EvoLM {role} ({len(steps)} steps)", *[b[k] for k in PARTS], b["wall"],
                     b["judging"] / b["wall"], b["completion_length"]])
    if before in results:
        for role in ("policy", "rubric"):
            steps = [s for s in results[before]["steps"][1:] if s.get("role") == role]
            b = breakdown(steps)
            rows.append([f"EvoLM {role} at {args.compare_rev} ({len(steps)} steps)", *[b[k] for k in PARTS], b["wall"],
                         b["judging"] / b["wall"], b["completion_length"]])
            by_role[f"{role} before"] = b
    for role in ("policy", "rubric"):
        if f"plain TRL {role}" in results:
            steps = results[f"plain TRL {role}"]["steps"][1:]
            b = breakdown(steps)
            rows.append([f"plain TRL {role}, constant reward ({len(steps)} steps)", *[b[k] for k in PARTS], b["wall"],
                         0.0, b["completion_length"]])
            by_role[f"plain {role}"] = b
    print("Median seconds per step, by part:\n")
    print(table(["run", *PARTS, "step total", "judging share", "mean completion tokens"], rows))

    print("\nEvoLM's overhead over plain TRL (same model, prompts, GRPO settings; median step):\n")
    over = []
    for role in ("policy", "rubric"):
        if f"plain {role}" in by_role:
            e, p = by_role[role], by_role[f"plain {role}"]
            over.append([role, e["wall"], p["wall"], e["wall"] / p["wall"], e["materialise"] + e["judging"],
                         (e["materialise"] + e["judging"]) / e["wall"]])
            if f"{role} before" in by_role:
                b = by_role[f"{role} before"]
                over.append([f"{role} at {args.compare_rev}", b["wall"], p["wall"], b["wall"] / p["wall"],
                             b["materialise"] + b["judging"], (b["materialise"] + b["judging"]) / b["wall"]])
    if over:
        print(table(["role", "EvoLM step s", "plain TRL step s", "ratio", "materialise + judging s",
                     "share of EvoLM step"], over))

    print("\nMemory and whole-run time:\n")
    mem = [[f"demo ({len(demo['steps'])} steps{', as shipped' if not args.set else ''})", demo["peak_rss_mib"],
            demo["total_seconds"], sum(s["wall"] for s in demo["steps"])]]
    if before in results:
        r = results[before]
        mem.append([f"{before} ({len(r['steps'])} steps)", r["peak_rss_mib"], r["total_seconds"],
                    sum(s["wall"] for s in r["steps"])])
    for label in (f"plain TRL {r}" for r in ("policy", "rubric")):
        if label in results:
            mem.append([label + " (3 steps)", results[label]["peak_rss_mib"], results[label]["total_seconds"],
                        sum(s["wall"] for s in results[label]["steps"])])
    print(table(["run", "peak RSS MiB", "train() seconds (incl. saves, logs)", "sum of step seconds"], mem))
    rise = demo.get("memory_rise") or {}
    if rise:
        print("\nWhere the demo's memory peak grows (peak RSS right after the last part that raised it; the last row "
              "is where the peak was reached):\n")
        print(table(["part", "peak RSS MiB after it"], sorted(rise.items(), key=lambda kv: kv[1])))
    if micro in results:
        print("\nMicro-batch size (grpo.per_device_train_batch_size), median step:\n")
        mrows = []
        for label, res in ((f"demo, {cfg.grpo.get('per_device_train_batch_size')} (config)", demo),
                           (micro, results[micro])):
            for role in ("policy", "rubric"):
                b = breakdown([s for s in res["steps"][1:] if s.get("role") == role])
                mrows.append([label, role, b["wall"], b["update"], res["peak_rss_mib"]])
        print(table(["run", "role", "step s", "update s", "peak RSS MiB (run)"], mrows))

    if scaling:
        print(f"\nScaling of a policy step (median of steps 2..{args.scaling_steps}):\n")
        srows = []
        for label, g, _length in scaling:
            b = breakdown(results[label]["steps"][1:])
            srows.append([label, b["wall"], b["wall"] / (2 * g), b["generation"], b["judging"], b["update"],
                          b["completion_length"], results[label]["peak_rss_mib"]])
        print(table(["setting", "step s", "s per sample", "generation s", "judging s", "update s",
                     "mean completion tokens", "peak RSS MiB"], srows))
        g_rows = {g: r for (label, g, length), r in zip(scaling, srows, strict=True) if length == 128}
        if 4 in g_rows and max(g_rows) > 4:
            gmax = max(g_rows)
            ratio = g_rows[gmax][1] / g_rows[4][1]
            print(f"\ntarget: step time grows no faster than linearly in samples: G=4 -> G={gmax} is "
                  f"{ratio:.2f}x for {gmax / 4:.0f}x samples -> {'MET' if ratio <= gmax / 4 else 'NOT MET'}")
    share = by_role["policy"]["judging"] / by_role["policy"]["wall"]
    print(f"target: judging <= 30% of a policy step: {100 * share:.1f}% -> {'MET' if share <= 0.3 else 'NOT MET'}")


if __name__ == "__main__":
    main()
