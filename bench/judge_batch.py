"""Judge scores against batch composition: the same answers scored one at a time and 16 together, per weight type.

A score should not depend on which other answers share its batch (padding, matrix shapes). This scores the
first N LLMBar Natural pairs (both answers, the generic rubric of ``bench/common.py``) with ``--batch-size 1``
and ``--batch-size 16``, in float32 and bfloat16, and reports the largest and mean |difference| per mode: the
evidence behind ``judge.dtype: auto`` = float32 (dev/performance.md).

    .venv/bin/python -m bench.judge_batch                      # 8 pairs (16 answers), prob and yesno
    .venv/bin/python -m bench.judge_batch --pairs 20 --modes prob
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench.common import GENERIC_RUBRIC, LLMBAR_NATURAL, print_header, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="judge model")
    ap.add_argument("--pairs", type=int, default=8, help="LLMBar Natural pairs (two answers each)")
    ap.add_argument("--modes", default="prob,yesno", help="comma-separated probability modes")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated weight types")
    args = ap.parse_args()

    import torch

    from evolm.backends.loading import load_backend
    from evolm.judge.judge import Judge, JudgeItem
    from evolm.rubrics import Rubric

    rubric = Rubric.from_obj(GENERIC_RUBRIC)
    rows = json.loads(LLMBAR_NATURAL.read_text(encoding="utf-8"))[: args.pairs]
    items = [JudgeItem(r["input"], a, rubric) for r in rows for a in (r["output_1"], r["output_2"])]
    print_header("Judge scores: batch of 1 vs batch of 16", {
        "model": args.model, "answers": len(items), "rubric": "generic, 3 criteria (bench/common.py)",
        "cpu_avx512_bf16": getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: "?")(),
    })
    out = []
    for dtype in args.dtypes.split(","):
        backend = load_backend(args.model, device="cpu", dtype=dtype, batch_size=16)
        for mode in args.modes.split(","):
            judge = Judge(backend, mode=mode)
            scores = {}
            t0 = time.perf_counter()
            for bs in (1, 16):
                backend.batch_size = bs
                scores[bs] = [j.score for j in judge.score(items)]
            gaps = [abs(a - b) for a, b in zip(scores[1], scores[16], strict=True) if a is not None and b is not None]
            out.append([mode, dtype, len(gaps), max(gaps), statistics.fmean(gaps), time.perf_counter() - t0])
            print(f"{mode} {dtype}: max {max(gaps):.3g}, mean {statistics.fmean(gaps):.3g}", file=sys.stderr,
                  flush=True)
        del backend
    print(table(["mode", "weights", "answers", "max |bs1 - bs16|", "mean |bs1 - bs16|", "seconds"], out))


if __name__ == "__main__":
    main()
