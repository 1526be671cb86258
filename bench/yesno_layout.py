"""The ``yesno`` judge's cost per judged answer, and what it reads, across three layouts of its work.

    python -m bench.yesno_layout                      # cost, probe and held-out accuracy, qwen2.5-coder-1.5b-instruct
    python -m bench.yesno_layout --judge DIR --skip-accuracy

``yesno`` asks one question per criterion. Three variants, side by side in one process on the same weights (the
old code loaded from git):

1. criterion first (git ``ff0e7d6``'s prompt): instructions, question, *criterion*, answer. An answer is read once
   per criterion; only the answers under one criterion share a prefix.
2. answer first, one group at a time (``HFBackend`` as of git ``588ad90``): instructions, question, answer, then
   the criterion, so an answer's criteria continue from one cache of its prefix; but each answer's prefix runs as
   its own forward pass, then its 3 criteria as one small batch.
3. answer first, groups batched (now): the prefixes of up to ``batch_size`` answers run side by side in one pass,
   and the criteria of several answers in one batch (``PrefixForward.grouped_logits``). Same arithmetic as 2: the
   scores agree to float rounding.
4. criterion first, groups batched: the old prompt on today's backend (what the batching alone saves, with the
   judge reading what it read before).

Measured:

1. cost: seconds (wall and CPU of this process) per judged answer at 3 criteria, on held-out LLMBar pairs whose
   hand-written rubric has 3 criteria, timed round-robin;
2. the value probe (``evolm.eval.value_probe``, as ``studies/learning/study.py writers-probe`` runs it): P(Yes) of a
   right minus a wrong answer under a criterion that names the value, per variant;
3. held-out pair accuracy with the hand-written rubrics (the writers study's ceiling arm), 100 pairs, with paired
   sign tests against the first variant.

The result is kept in ``bench/results/yesno_layout.json``; dev/performance.md quotes the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import load_old_module, print_header, table
from evolm.eval.value_probe import value_probe_gaps, value_probe_items
from evolm.report.intervals import Estimate, fmt_estimate
from evolm.runs.jsonl import read_jsonl
from evolm.stats import bootstrap_mean, sign_test, wilson

BEFORE = "ff0e7d6"  # the last commit with the criterion before the answer
ONE_GROUP_AT_A_TIME = "588ad90"  # the last commit whose HFBackend ran each group's prefix as its own pass
ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "yesno_layout.json"
# the writers study's held-out pairs and hand-written rubrics, as it keeps them (docs/RESULTS.md)
HELDOUT_PAIRS = ROOT / "studies" / "learning" / "results" / "writers" / "heldout_pairs.jsonl"
HANDWRITTEN = ROOT / "studies" / "learning" / "data" / "handwritten_rubrics.jsonl"


def variants(judge_name: str, batch_size: int) -> dict[str, tuple[Any, Any]]:
    """``{variant: (yesno_messages, Judge)}``: the judges share one copy of the weights."""
    import evolm.judge.prompts as now
    from evolm.backends.hf import HFBackend
    from evolm.backends.loading import load_backend
    from evolm.judge.judge import Judge

    old_prompt = load_old_module(BEFORE, "src/evolm/judge_prompts.py", "_judge_prompts_before").yesno_messages
    old_backend = load_old_module(ONE_GROUP_AT_A_TIME, "src/evolm/backends/hf.py", "_hf_before").HFBackend
    new = load_backend(judge_name, dtype="float32", batch_size=batch_size)
    assert isinstance(new, HFBackend)
    old = old_backend(new.model, new.tokenizer, batch_size=batch_size)
    return {"criterion first (ff0e7d6)": (old_prompt, Judge(old, mode="yesno")),
            "answer first, one group at a time (588ad90)": (now.yesno_messages, Judge(old, mode="yesno")),
            "answer first, groups batched (now)": (now.yesno_messages, Judge(new, mode="yesno")),
            "criterion first, groups batched": (old_prompt, Judge(new, mode="yesno"))}


def use(order_fn: Any) -> None:
    import evolm.judge.judge as judge_module

    judge_module.yesno_messages = order_fn


def items_for(pairs: list[Any], rubrics: dict[str, str]) -> list[Any]:
    from evolm.judge.judge import JudgeItem
    from evolm.rubrics import parse_rubric

    return [JudgeItem(p.prompt, a, parse_rubric(rubrics[p.prompt])) for p in pairs for a in (p.better, p.worse)]


def cost(fns: dict[str, tuple[Any, Any]], pairs: list[Any], rubrics: dict[str, str], n_pairs: int, repeats: int,
         warmup: int) -> dict[str, Any]:
    three = [p for p in pairs if len(json.loads(rubrics[p.prompt])["criteria"]) == 3][:n_pairs]
    items = items_for(three, rubrics)
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
    for r in range(warmup + repeats):  # round-robin: load from other jobs falls on both orders alike
        for name, (fn, judge) in fns.items():
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


def probe(fns: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    out = {}
    for name, (fn, judge) in fns.items():
        use(fn)
        s = [j.score for j in judge.score(value_probe_items())]
        gaps = value_probe_gaps(s)
        out[name] = {"gap": statistics.fmean(gaps), "ci": bootstrap_mean(gaps),
                     "right_higher": sum(g > 0 for g in gaps), "wrong_higher": sum(g < 0 for g in gaps),
                     "gaps": gaps, "scores": s}
    return out


def accuracy(fns: dict[str, tuple[Any, Any]], pairs: list[Any], rubrics: dict[str, str]) -> dict[str, Any]:
    from evolm.eval.pairs import pair_credit

    items = items_for(pairs, rubrics)
    out = {}
    for name, (fn, judge) in fns.items():
        use(fn)
        t0 = time.perf_counter()
        s = [j.score for j in judge.score(items, progress=True)]
        credits = [pair_credit(s[2 * i], s[2 * i + 1]) for i in range(len(pairs))]
        out[name] = {"accuracy": statistics.fmean(credits), "ci": wilson(statistics.fmean(credits), len(credits)),
                     "n": len(credits), "credits": credits, "seconds": time.perf_counter() - t0}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--judge", default="qwen2.5-coder-1.5b-instruct", help="the yesno judge (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=16, help="the backend's rows per forward pass (default 16)")
    p.add_argument("--cost-pairs", type=int, default=4, help="held-out pairs (2 answers, 3 criteria each) the cost is "
                   "measured on (default 4)")
    p.add_argument("--repeats", type=int, default=1, help="timed rounds of the cost measurement (default 1)")
    p.add_argument("--warmup", type=int, default=0, help="untimed rounds first (default 0: CPU seconds, the measure "
                   "that holds on a shared machine, need none)")
    p.add_argument("--skip-accuracy", action="store_true", help="cost and probe only (the accuracy run is the long "
                   "part: 100 pairs for the first and the third variant; the second computes what the third "
                   "does, the fourth what the first does)")
    args = p.parse_args()

    from evolm.eval.pairs import load_pairs

    pairs = load_pairs(HELDOUT_PAIRS)
    rubrics = {r["prompt"]: json.dumps({"criteria": r["criteria"]}) for r in read_jsonl(HANDWRITTEN) if "prompt" in r}
    fns = variants(args.judge, args.batch_size)
    names = list(fns)
    host = print_header("yesno judge layouts",
                        {"judge": args.judge, "pairs": len(pairs), "batch_size": args.batch_size})
    res: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "machine": host,
                           "judge": args.judge, "batch_size": args.batch_size,
                           "cost": cost(fns, pairs, rubrics, args.cost_pairs, args.repeats, args.warmup),
                           "probe": probe(fns)}
    same = max(max(abs(a - b) for a, b in zip(res["probe"][x]["scores"], res["probe"][y]["scores"], strict=True))
               for x, y in ((names[1], names[2]), (names[0], names[3])))
    res["probe_max_score_diff_batched_vs_one_group"] = same
    if not args.skip_accuracy:
        res["accuracy"] = accuracy({n: fns[n] for n in (names[0], names[2])}, pairs, rubrics)
    rows = []
    first = res["cost"][names[0]]
    for name in names:
        c, pr = res["cost"][name], res["probe"][name]
        acc = res.get("accuracy", {}).get(name)
        rows.append([name, f"{c['wall_s_per_answer']:.2f}", f"{c['cpu_s_per_answer']:.2f}",
                     f"{first['cpu_s_per_answer'] / c['cpu_s_per_answer']:.2f}x",
                     fmt_estimate(Estimate(pr["gap"], pr["ci"], None)), f"{pr['right_higher']} / {pr['wrong_higher']}",
                     fmt_estimate(Estimate(acc["accuracy"], acc["ci"], acc["n"])) + f" (n={acc['n']})" if acc
                     else {names[1]: "as the third row", names[3]: "as the first row"}.get(name, "not run")])
    print(table(["variant", "wall s / answer", "CPU s / answer", "CPU: first / this", "probe: right - wrong",
                 "right / wrong higher", "held-out accuracy, hand-written rubrics"], rows))
    print(f"\nprobe scores, batched vs one group at a time (same prompt): max |difference| {same:.2g}")
    if "accuracy" in res:
        a, b = res["accuracy"][names[2]]["credits"], res["accuracy"][names[0]]["credits"]
        up, down, pval = sign_test(a, b)
        res["accuracy_sign_test"] = {"answer_first_better": up, "criterion_first_better": down, "p": pval}
        print(f"held-out pairs, answer first vs criterion first: {up} better / {down} worse, sign test p = {pval:.3f}")
    RESULT.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    print(f"kept in {RESULT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
