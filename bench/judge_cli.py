"""`evolm judge` as a user runs it: marginal answers/s of each mode at the CLI's defaults, and pairwise accuracy.

The rows: both answers of the first N LLMBar Natural pairs (./data/llmbar/Natural.json, from `python
scripts/fetch_data.py llmbar`), each with the same two-criterion rubric. Every mode runs the installed CLI twice in
a subprocess, on all 2N rows and on the first N rows; the marginal rate ``N / (t(2N) - t(N))`` leaves model loading
and start-up out. Pairwise accuracy (1 when the better answer scores higher, 1/2 on a tie or a missing score) comes
from the 2N-row run. With ``--compare-rev REV`` the same runs use the package as it was at git revision REV (side by
side, one machine), so a change of defaults shows as a before/after.

    .venv/bin/python -m bench.judge_cli                                   # prob, yesno, generative; 23 pairs
    .venv/bin/python -m bench.judge_cli --modes prob,generative --compare-rev 9783296
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import LLMBAR_NATURAL, env_at, print_header, table

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = {"criteria": [
    {"criterion": "The answer does what the instruction asks, meeting every explicit requirement.", "weight": 0.6,
     "scoring_levels": {"1.0": "all requirements met", "0.5": "some met", "0.0": "none met"}},
    {"criterion": "The answer is accurate, clear and free of irrelevant content.", "weight": 0.4,
     "scoring_levels": {"1.0": "accurate and clear", "0.5": "minor problems", "0.0": "wrong or confusing"}},
]}


def run_cli(rows: Path, out: Path, mode: str, model: str, rev: str | None) -> float:
    cmd = [str(Path(sys.executable).parent / "evolm"), "judge", "--judge", model, "--mode", mode, "--input", str(rows),
           "--output", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env_at(rev), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"evolm judge --mode {mode} failed ({rev or 'work tree'}): {proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--pairs", type=int, default=23, help="LLMBar Natural pairs (2N answers; default 23 = 46 answers)")
    ap.add_argument("--modes", default="prob,yesno,generative")
    ap.add_argument("--compare-rev", default=None, metavar="REV", help="also run the CLI as it was at git revision REV")
    ap.add_argument("--compare-modes", default=None, help="modes to run at --compare-rev (default: --modes)")
    args = ap.parse_args()

    from evolm.eval.pairs import pair_credit
    from evolm.runs.jsonl import read_jsonl

    data = json.loads(LLMBAR_NATURAL.read_text(encoding="utf-8"))[: args.pairs]
    rows = []
    for r in data:
        better, worse = (r["output_1"], r["output_2"]) if int(r["label"]) == 1 else (r["output_2"], r["output_1"])
        rows += [{"prompt": r["input"], "response": a, "rubric": RUBRIC} for a in (better, worse)]
    tmp = Path(tempfile.mkdtemp(prefix="evolm-judge-cli-"))
    full, half = tmp / "full.jsonl", tmp / "half.jsonl"
    full.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    half.write_text("".join(json.dumps(r) + "\n" for r in rows[: args.pairs]), encoding="utf-8")
    print_header("evolm judge at the CLI's defaults: marginal answers/s", {
        "model": args.model, "answers": len(rows), "marginal_over": f"{len(rows)} - {args.pairs} rows",
        "rubric": "two criteria (bench/judge_cli.py)", "modes": args.modes, "compare_rev": args.compare_rev or "none"})
    revs = [None] + ([args.compare_rev] if args.compare_rev else [])
    results = []
    for rev in revs:
        for mode in (args.compare_modes or args.modes).split(",") if rev else args.modes.split(","):
            label = f"{mode}" + (f" [{rev}]" if rev else "")
            print(f"[judge_cli] {label} ...", file=sys.stderr, flush=True)
            t_half = run_cli(half, tmp / "out-half.jsonl", mode, args.model, rev)
            t_full = run_cli(full, tmp / "out-full.jsonl", mode, args.model, rev)
            scored = read_jsonl(tmp / "out-full.jsonl")  # evolm.runs.jsonl: lines end in \n only
            scores = [s.get("score") for s in scored]
            credits = [pair_credit(a, b) for a, b in zip(scores[0::2], scores[1::2], strict=True)]
            marginal = (len(rows) - args.pairs) / max(1e-9, t_full - t_half)
            results.append((label, mode, rev, t_half, t_full, marginal, statistics.fmean(credits),
                            sum(s is None for s in scores)))
    base = {rev: next((r[5] for r in results if r[1] == "generative" and r[2] == rev), None) for rev in revs}
    print(table(["mode", f"seconds ({args.pairs} rows)", f"seconds ({len(rows)} rows)", "marginal answers/s",
                 "x generative (same code)", "pairwise accuracy", "missing scores"],
                [[r[0], r[3], r[4], r[5], (r[5] / base[r[2]]) if base[r[2]] else None, r[6], r[7]] for r in results]))
    for rev in revs:
        prob = next((r for r in results if r[1] == "prob" and r[2] == rev), None)
        if prob and base[rev]:
            ratio = prob[5] / base[rev]
            print(f"target ({rev or 'work tree'}): prob >= 10x generative marginal answers/s: {ratio:.1f}x -> "
                  f"{'MET' if ratio >= 10 else 'NOT MET'}")


if __name__ == "__main__":
    main()
