"""Judge weights in bfloat16 vs float32: pairwise accuracy and speed on LLMBar (the evidence behind
``judge.dtype: auto``).

Same judge model, same rubric (the generic three-criterion rubric of ``bench/common.py``, so that only the weights
differ), same answers: both answers of every pair in the chosen LLMBar files, from ./data/llmbar (`python
scripts/fetch_data.py llmbar`). For each mode and dtype: pairwise accuracy (1 when the better answer scores higher,
1/2 on a tie, 0 otherwise) with a 95% bootstrap interval, answers per second (one timed pass after a warm-up batch),
and, per mode, bfloat16 against float32 on the same pairs: an exact sign test on the pairs whose credit differs and
a paired bootstrap interval of the difference in accuracy.

    .venv/bin/python -m bench.judge_dtype                             # Natural (100 pairs), prob and yesno
    .venv/bin/python -m bench.judge_dtype --sets Natural Adversarial_Neighbor --modes yesno
    .venv/bin/python -m bench.judge_dtype --model qwen2.5-coder-1.5b-instruct --modes yesno --limit 8

Besides, per mode and dtype: the value probe (``evolm.eval.value_probe``, the one ``studies/learning/study.py
writers-probe`` runs: P(Yes) of a right minus a wrong short answer under a criterion naming the expected value), and the
CPU seconds (this process) per judged answer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench.common import GENERIC_RUBRIC, LLMBAR_NATURAL, print_header, table
from evolm.eval.value_probe import value_probe_gaps, value_probe_items
from evolm.stats import bootstrap_mean, sign_test


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="judge model")
    ap.add_argument("--sets", nargs="+", default=["Natural"], help="LLMBar files (without .json)")
    ap.add_argument("--modes", default="prob,yesno", help="comma-separated probability modes")
    ap.add_argument("--batch-size", type=int, default=16, help="judge batch size (the CLI's default: 16)")
    ap.add_argument("--limit", type=int, default=0, help="the first N pairs only (0: all), for a large judge")
    args = ap.parse_args()

    import torch

    from evolm.backends.loading import load_backend
    from evolm.eval.pairs import pair_credit
    from evolm.judge.judge import Judge, JudgeItem
    from evolm.rubrics import Rubric

    rubric = Rubric.from_obj(GENERIC_RUBRIC)
    pairs = []
    for name in args.sets:
        for r in json.loads((LLMBAR_NATURAL.parent / f"{name}.json").read_text(encoding="utf-8")):
            better, worse = (r["output_1"], r["output_2"]) if int(r["label"]) == 1 else (r["output_2"], r["output_1"])
            pairs.append((r["input"], better, worse))
    pairs = pairs[:args.limit] if args.limit else pairs
    items = [JudgeItem(q, a, rubric) for q, b, w in pairs for a in (b, w)]
    probe = value_probe_items()
    modes = args.modes.split(",")
    print_header("Judge weights: bfloat16 vs float32", {
        "model": args.model, "sets": " ".join(args.sets), "pairs": len(pairs), "answers": len(items),
        "rubric": "generic, 3 criteria (bench/common.py)", "batch_size": args.batch_size, "modes": " ".join(modes),
        "cpu_bf16": torch.cpu._is_avx512_bf16_supported() if hasattr(torch.cpu, "_is_avx512_bf16_supported") else "?",
    })
    credits: dict[tuple[str, str], list[float]] = {}
    scores: dict[tuple[str, str], list[float | None]] = {}
    rows = []
    for dtype in ("float32", "bfloat16"):
        backend = load_backend(args.model, device="cpu", dtype=dtype, batch_size=args.batch_size)
        for mode in modes:
            judge = Judge(backend, mode=mode)
            judge.score(items[: args.batch_size])  # warm-up
            t0, c0 = time.perf_counter(), time.process_time()
            s = [j.score for j in judge.score(items, progress=True)]
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            c = [pair_credit(a, b) for a, b in zip(s[0::2], s[1::2], strict=True)]
            credits[mode, dtype], scores[mode, dtype] = c, s
            lo, hi = bootstrap_mean(c)
            ps = [j.score for j in judge.score(probe)]
            gaps = value_probe_gaps(ps)
            glo, ghi = bootstrap_mean(gaps)
            rows.append([mode, dtype, len(c), f"{statistics.fmean(c):.3f} [{lo:.3f}, {hi:.3f}]", seconds,
                         len(items) / seconds, f"{cpu / len(items):.2f}",
                         f"{statistics.fmean(gaps):+.3f} [{glo:+.3f}, {ghi:+.3f}], {sum(g > 0 for g in gaps)} / "
                         f"{sum(g < 0 for g in gaps)}"])
        del backend
    print(table(["mode", "weights", "pairs", "pairwise accuracy [95% CI]", "seconds", "answers/s",
                 "CPU s / answer", "probe: right - wrong, right / wrong higher"], rows))
    print("\nbfloat16 against float32, same pairs:\n")
    rows = []
    for mode in modes:
        a, b = credits[mode, "bfloat16"], credits[mode, "float32"]
        up, down, p = sign_test(a, b)
        diff = [x - y for x, y in zip(a, b)]
        lo, hi = bootstrap_mean(diff)
        gaps = [abs(x - y) for x, y in zip(scores[mode, "bfloat16"], scores[mode, "float32"])
                if x is not None and y is not None]
        rows.append([mode, f"{up} / {down}", p, f"{statistics.fmean(diff):+.3f} [{lo:+.3f}, {hi:+.3f}]",
                     max(gaps) if gaps else float("nan"), statistics.fmean(gaps) if gaps else float("nan")])
    print(table(["mode", "pairs bf16 better / worse", "sign test p", "accuracy difference [95% CI]",
                 "max |score difference|", "mean |score difference|"], rows))


if __name__ == "__main__":
    main()
