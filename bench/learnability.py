"""The writer's learnability check: can GRPO on the rubric role raise a property of the rubrics that a program
rewards? The judge is skipped (``rewards.judge_weight: 0``); a rubric earns 1 when it names the constraint its pair's
answers differ in (``evolm.eval.rubric_naming.named_difference_reward``), else 0: the "+" arm. The "-" arm reverses it
(weight -1). If naming does not rise in "+" and fall in "-", the writer's training path is broken, whatever the judge.

Each arm is an ``evolm train`` run of a config (``CONFIGS``: the "+" and "-" arms, and the q arms of the reading
curve), from the warm start (``-warm``: the config's model) or the base writer (``-base``). Then, per arm and step,
the share of the step's rubrics that name the constraint their pair differs in, per constraint family, from the
runs' samples files: a table, a JSON file and a figure in ``--out``. An arm whose run directory already holds its
steps is read, not run again (``--rerun`` to redo it). Run from the repository root:

    python bench/learnability.py                        # 4 arms x 20 steps (5-9 minutes a step on 2 CPU cores)
    python bench/learnability.py --steps 5 --arms plus-warm,minus-warm --out /tmp/learn   # a quick re-check
    python bench/learnability.py --table-only           # the table and figure again from the kept runs
    python bench/learnability.py --name reading --runs runs/study/reading \
        --arms q100-warm,q080-warm,q065-warm,judge15-warm    # the reading curve (64 rubrics a step: a GPU)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"plus": "learnability/plus.yaml", "minus": "learnability/minus.yaml", "q100": "reading/q100.yaml",
           "q080": "reading/q080.yaml", "q065": "reading/q065.yaml", "judge15": "reading/judge-1.5b.yaml"}
"""An arm is a config (under configs/study/) and a start: ``plus-warm``, ``q080-base``. The q arms are the reading
curve: EvoLM's own writer reward under a checker judge that reads a named constraint right with probability q, and
under the real 1.5B judge (``judge15``)."""
ARMS = tuple(f"{c}-{start}" for c in CONFIGS for start in ("warm", "base"))
BASE = "smollm2-135m-instruct"


def run_arm(arm: str, steps: int, runs: Path, rerun: bool, extra: Sequence[str] = ()) -> Path:
    """``evolm train`` for one arm, ``steps`` rubric steps (one phase of ``steps``); its run directory."""
    sign, start = arm.split("-")
    out = runs / arm
    if (out / "metrics.jsonl").is_file() and not rerun:
        done = sum(1 for _ in (out / "metrics.jsonl").open())
        if done >= steps:
            print(f"{arm}: {done} steps kept in {out}", flush=True)
            return out
    overrides = [f"output_dir={out}", "schedule.cycles=1", f"schedule.steps_per_phase={steps}",
                 f"schedule.save_every={min(5, steps)}", *extra]  # an adapter every 5 steps: a stopped arm keeps one
    if start == "base":  # the untrained writer: a fresh LoRA adapter (run (a)'s) on the built-in base
        overrides.append(f"model.name={BASE}")
    config = ROOT / "configs" / "study" / CONFIGS[sign]
    cmd = [sys.executable, "-m", "evolm.cli", "train", "--config", str(config), *overrides]
    if out.exists():
        import shutil

        shutil.rmtree(out)
    print(f"{arm}: {' '.join(cmd[2:])}", flush=True)
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": os.environ.get(
        "OMP_NUM_THREADS", str(os.cpu_count() or 1))})
    print(f"{arm}: {steps} steps in {(time.time() - t0) / 60:.1f} min", flush=True)
    return out


def naming(run: Path) -> dict[int, dict[str, list[int]]]:
    """Per step, per constraint family: [rubrics naming it, rubrics whose pair differs in it]."""
    from evolm.eval.constraints import constraints_json
    from evolm.eval.rubric_naming import differing, names
    from evolm.runs.jsonl import read_jsonl

    out: dict[int, dict[str, list[int]]] = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    for f in sorted((run / "samples").glob("phase-*-rubric.jsonl")):
        for r in read_jsonl(f):
            if not r.get("constraints") or r.get("a_pos") is None:
                continue
            for c in differing(r["a_pos"], r["a_neg"], r["question"], constraints_json(r["constraints"])):
                cell = out[int(r["step"])][c["id"].split(":", 1)[1]]
                cell[0] += names(r["completion"] or "", c)
                cell[1] += 1
    return out


def summary(counts: dict[int, dict[str, list[int]]], first: int = 3, last: int = 3) -> dict[str, Any]:
    """Per family and overall: the naming share over the first and the last ``first``/``last`` steps."""
    steps = sorted(counts)
    fams = sorted({f for s in steps for f in counts[s]})

    def share(chosen: list[int], fam: str | None) -> tuple[float | None, int]:
        k = n = 0
        for s in chosen:
            for f, (named, total) in counts[s].items():
                if fam is None or f == fam:
                    k, n = k + named, n + total
        return (k / n if n else None), n

    return {fam or "all": {"first": share(steps[:first], fam), "last": share(steps[-last:], fam)}
            for fam in [*fams, None]}


def _last(counts: dict[int, dict[str, list[int]]], last: int = 3) -> tuple[float | None, int]:
    """The naming share over the last ``last`` steps, every constraint, and its count."""
    return summary(counts, last=last)["all"]["last"]


def _fisher(a: float | None, na: int, b: float | None, nb: int) -> str:
    """Fisher's exact two-sided p for two shares (``a`` of ``na`` against ``b`` of ``nb``), or "-"."""
    if a is None or b is None:
        return "-"
    from scipy.stats import fisher_exact

    ka, kb = round(a * na), round(b * nb)
    return f"{fisher_exact([[ka, na - ka], [kb, nb - kb]]).pvalue:.3g}"


def plot(curves: dict[str, dict[int, dict[str, list[int]]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = sorted({f for c in curves.values() for s in c.values() for f in s})
    fig, axes = plt.subplots(1, len(fams) + 1, figsize=(4 * (len(fams) + 1), 3.4), sharey=True)
    for ax, fam in zip(axes, [None, *fams], strict=True):
        for arm, counts in curves.items():
            xs, ys = [], []
            for s in sorted(counts):
                cells = [v for f, v in counts[s].items() if fam is None or f == fam]
                n = sum(t for _, t in cells)
                if n:
                    xs.append(s)
                    ys.append(sum(k for k, _ in cells) / n)
            ax.plot(xs, ys, marker="o", ms=3, label=arm, ls="--" if arm.startswith("minus") else "-")
        ax.set_title(fam or "every constraint")
        ax.set_xlabel("rubric step")
        ax.set_ylim(-0.03, 1.03)
        ax.axhline(0.9, color="grey", lw=0.6, ls=":")
    axes[0].set_ylabel("rubrics naming the constraint\nthe pair differs in")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--arms", default="plus-warm,minus-warm,plus-base,minus-base",
                    help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--name", default="learnability", help="the output files' stem (reading: the q arms)")
    ap.add_argument("--steps", type=int, default=20, help="rubric steps per arm (default 20)")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "study" / "learnability", help="run directories")
    ap.add_argument("--out", type=Path, default=ROOT / "studies" / "constraints" / "results" / "learnability",
                    help="where the table (.md), numbers (.json) and figure (.png) go")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every arm, e.g. schedule.prompts_per_step=4 (a CPU look at the q arms)")
    ap.add_argument("--rerun", action="store_true", help="train the arms again even where their runs are kept")
    ap.add_argument("--table-only", action="store_true", help="only read the kept runs")
    args = ap.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if bad := [a for a in arms if a not in ARMS]:
        sys.exit(f"learnability: unknown arm {bad[0]!r} (choose from {', '.join(ARMS)})")
    curves = {}
    for arm in arms:
        run = args.runs / arm if args.table_only else run_arm(arm, args.steps, args.runs, args.rerun, args.set)
        if not (run / "samples").is_dir():
            print(f"{arm}: no samples in {run}: skipped")
            continue
        curves[arm] = naming(run)
    if not curves:
        sys.exit("learnability: no arm to read")
    args.out.mkdir(parents=True, exist_ok=True)
    lines = ["| arm | constraint | first 3 steps | last 3 steps | p (Fisher, first against last) |",
             "|---|---|---|---|---|"]
    per_step = ["| arm | step | named / differing (all constraints) | per constraint |", "|---|---|---|---|"]
    for arm, counts in curves.items():
        for fam, v in summary(counts).items():
            (a, na), (b, nb) = v["first"], v["last"]
            lines.append(f"| {arm} | {fam} | {'-' if a is None else f'{a:.2f}'} (n={na}) | "
                         f"{'-' if b is None else f'{b:.2f}'} (n={nb}) | {_fisher(a, na, b, nb)} |")
        for s in sorted(counts):
            k, n = sum(c[0] for c in counts[s].values()), sum(c[1] for c in counts[s].values())
            per = ", ".join(f"{f} {c[0]}/{c[1]}" for f, c in sorted(counts[s].items()))
            per_step.append(f"| {arm} | {s} | {k}/{n} | {per} |")
    against = [f"- {plus} against {minus}, last 3 steps, every constraint: p = "
               f"{_fisher(*_last(curves[plus]), *_last(curves[minus]))} (Fisher)"
               for plus in curves for minus in curves if plus.startswith("plus-") and minus == "minus-" + plus[5:]]
    text = "\n".join([f"# The writer's {args.name} check", "", "Share of rubrics naming the constraint their pair's "
                      f"answers differ in (`python bench/learnability.py --name {args.name} --arms {args.arms}`).", "",
                      *lines, "", *against, "", "## Per step", "",
                      *per_step]) + "\n"
    (args.out / f"{args.name}.md").write_text(text, encoding="utf-8")
    (args.out / f"{args.name}.json").write_text(json.dumps(
        {arm: {str(s): dict(c) for s, c in counts.items()} for arm, counts in curves.items()}, indent=1) + "\n")
    plot(curves, args.out / f"{args.name}.png")
    print("\n".join([*lines, *against]))
    print(f"wrote {args.out}/{args.name}.{{md,json,png}}")


if __name__ == "__main__":
    main()
