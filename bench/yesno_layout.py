"""The ``yesno`` judge's prompt order: its cost per judged answer, and what the judge reads, before and after.

    python bench/yesno_layout.py                      # cost, probe and held-out accuracy, qwen2.5-coder-1.5b-instruct
    python bench/yesno_layout.py --judge DIR --skip-accuracy

``yesno`` asks one question per criterion. Before (git ``ff0e7d6``) the prompt was instructions, question,
*criterion*, answer: the criterion came before the answer, so an answer was read once per criterion, and only the
answers under one criterion shared a prefix. After, the answer comes before the criterion: ``HFBackend`` reads
the instructions, question and answer once and each criterion continues from a copy of that cache.

Three measurements, both orders side by side in one process on the same judge (the old prompt function loaded
from git):

1. cost: seconds (wall and CPU of this process) per judged answer at 3 criteria, on held-out LLMBar pairs whose
   hand-written rubric has 3 criteria, timed round-robin;
2. the probe (``bench/learning.py writers-probe``): P(Yes) of a right minus a wrong answer under a criterion
   that names the value, per order;
3. held-out pair accuracy with the hand-written rubrics (the writers study's ceiling arm), 100 pairs, with a
   paired sign test between the orders.

The result is kept in ``docs/results/yesno_layout.json``; docs/PERFORMANCE.md quotes the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_old_module, print_header, table  # noqa: E402
from learning import (  # noqa: E402
    PROBES,
    ROOT,
    bootstrap_mean,
    fmt_ci,
    handwritten_rubrics,
    sign_test,
    wilson,
    writers_pairs,
)

BEFORE = "ff0e7d6"  # the last commit with the criterion before the answer
RESULT = ROOT / "docs" / "results" / "yesno_layout.json"


def orders() -> dict[str, Any]:
    """``{order: yesno_messages}``: the function as it was at ``BEFORE`` and as it is now."""
    import evolm.judge.prompts as now

    old = load_old_module(BEFORE, "src/evolm/judge_prompts.py", "_judge_prompts_before")
    return {"criterion first (before)": old.yesno_messages, "answer first (after)": now.yesno_messages}


def use(order_fn: Any) -> None:
    import evolm.judge.judge as judge_module

    judge_module.yesno_messages = order_fn


def items_for(pairs: list[Any], rubrics: dict[str, str]) -> list[Any]:
    from evolm.judge.judge import JudgeItem
    from evolm.rubrics import parse_rubric

    return [JudgeItem(p.prompt, a, parse_rubric(rubrics[p.prompt])) for p in pairs for a in (p.better, p.worse)]


def cost(judge: Any, fns: dict[str, Any], pairs: list[Any], rubrics: dict[str, str], n_pairs: int, repeats: int,
         warmup: int) -> dict[str, Any]:
    three = [p for p in pairs if len(json.loads(rubrics[p.prompt])["criteria"]) == 3][:n_pairs]
    items = items_for(three, rubrics)
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
    for r in range(warmup + repeats):  # round-robin: load from other jobs falls on both orders alike
        for name, fn in fns.items():
            use(fn)
            w0, c0 = time.perf_counter(), time.process_time()
            judge.score(items)
            if r >= warmup:
                times[name].append((time.perf_counter() - w0, time.process_time() - c0))
            print(f"cost: {name}, round {r + 1} of {warmup + repeats}: {time.perf_counter() - w0:.0f} s", flush=True)
    out = {}
    for name, ts in times.items():
        wall = statistics.median(t[0] for t in ts) / len(items)
        cpu = statistics.median(t[1] for t in ts) / len(items)
        out[name] = {"wall_s_per_answer": wall, "cpu_s_per_answer": cpu, "answers": len(items), "criteria": 3}
    return out


def probe(judge: Any, fns: dict[str, Any]) -> dict[str, Any]:
    from evolm.judge.judge import JudgeItem
    from evolm.rubrics import Criterion, Rubric

    out = {}
    for name, fn in fns.items():
        use(fn)
        items = []
        for q, crit, right, wrong in PROBES:
            items += [JudgeItem(q, a, Rubric((Criterion(crit, 1.0),))) for a in (right, wrong)]
        s = [j.score for j in judge.score(items)]
        gaps = [s[2 * i] - s[2 * i + 1] for i in range(len(PROBES))]
        out[name] = {"gap": statistics.fmean(gaps), "ci": bootstrap_mean(gaps),
                     "right_higher": sum(g > 0 for g in gaps), "wrong_higher": sum(g < 0 for g in gaps),
                     "gaps": gaps}
    return out


def accuracy(judge: Any, fns: dict[str, Any], pairs: list[Any], rubrics: dict[str, str]) -> dict[str, Any]:
    from evolm.eval.pairs import pair_credit

    items = items_for(pairs, rubrics)
    out = {}
    for name, fn in fns.items():
        use(fn)
        t0 = time.perf_counter()
        s = [j.score for j in judge.score(items, progress=True)]
        credits = [pair_credit(s[2 * i], s[2 * i + 1]) for i in range(len(pairs))]
        out[name] = {"accuracy": statistics.fmean(credits), "ci": wilson(sum(credits), len(credits)),
                     "n": len(credits), "credits": credits, "seconds": time.perf_counter() - t0}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--judge", default="qwen2.5-coder-1.5b-instruct", help="the yesno judge (default: %(default)s)")
    p.add_argument("--cost-pairs", type=int, default=4, help="held-out pairs (2 answers, 3 criteria each) the cost is "
                   "measured on (default 4)")
    p.add_argument("--repeats", type=int, default=1, help="timed rounds of the cost measurement (default 1)")
    p.add_argument("--warmup", type=int, default=0, help="untimed rounds first (default 0: CPU seconds, the measure "
                   "that holds on a shared machine, need none)")
    p.add_argument("--skip-accuracy", action="store_true", help="cost and probe only (the accuracy run is the long "
                   "part: 100 pairs in each order)")
    args = p.parse_args()

    from evolm.eval.pairs import load_pairs
    from evolm.judge.judge import Judge
    from evolm.backends.loading import load_backend

    pairs = load_pairs(writers_pairs())
    rubrics = handwritten_rubrics()
    judge = Judge(load_backend(args.judge, dtype="float32", batch_size=16), mode="yesno")
    fns = orders()
    print_header("yesno prompt order", {"judge": args.judge, "pairs": len(pairs)})
    res: dict[str, Any] = {"judge": args.judge, "cost": cost(judge, fns, pairs, rubrics, args.cost_pairs, args.repeats,
                                                                         args.warmup),
                           "probe": probe(judge, fns)}
    if not args.skip_accuracy:
        res["accuracy"] = accuracy(judge, fns, pairs, rubrics)
    rows = []
    for name in fns:
        c, pr = res["cost"][name], res["probe"][name]
        acc = res.get("accuracy", {}).get(name)
        rows.append([name, f"{c['wall_s_per_answer']:.2f}", f"{c['cpu_s_per_answer']:.2f}",
                     fmt_ci(pr["gap"], pr["ci"]), f"{pr['right_higher']} / {pr['wrong_higher']}",
                     fmt_ci(acc["accuracy"], acc["ci"]) + f" (n={acc['n']})" if acc else "not run"])
    print(table(["order", "wall s / answer", "CPU s / answer", "probe: right - wrong", "right / wrong higher",
                 "held-out accuracy, hand-written rubrics"], rows))
    names = list(fns)
    before, after = res["cost"][names[0]], res["cost"][names[1]]
    res["speedup_wall"] = before["wall_s_per_answer"] / after["wall_s_per_answer"]
    res["speedup_cpu"] = before["cpu_s_per_answer"] / after["cpu_s_per_answer"]
    print(f"\nafter / before: {res['speedup_wall']:.2f}x faster in wall time, {res['speedup_cpu']:.2f}x in CPU time")
    if "accuracy" in res:
        a, b = res["accuracy"][names[1]]["credits"], res["accuracy"][names[0]]["credits"]
        up, down, pval = sign_test(a, b)
        res["accuracy_sign_test"] = {"after_better": up, "before_better": down, "p": pval}
        print(f"held-out pairs, after vs before: {up} better / {down} worse, sign test p = {pval:.3f}")
    RESULT.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    print(f"kept in {RESULT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
