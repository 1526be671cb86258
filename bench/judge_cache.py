"""The judge cache (evolm.judge.cache): judge time per step with and without it, and a repeat through evolm serve.

Part ``step`` (in one process, one loaded judge, variants interleaved):

- demo-like policy step: 1 question x 4 distinct answers under one 3-criterion rubric (configs/demo-cpu.yaml's
  policy step), judged by ``Judge.score`` (no cache) and by a ``CachedJudge`` with an empty cache (first sight:
  nothing to reuse, so this is the cache's overhead);
- a step with duplicates: ``--dup-questions`` (2) questions x 8 answers of which 4 distinct per question (what a
  group sampled at low temperature, or a short answer, often gives), no cache vs. empty cache (identical completions
  judged once);
- the same step again with the cache kept (every judgment stored).

Part ``serve``: ``evolm serve --judge MODEL --mode yesno`` as a subprocess; the rows of an ``evolm judge`` input
file (prompt, response, rubric) posted twice to ``/get_reward`` (the rubric as each row's label): seconds per
request, ``extra_logs.judge_cached`` and ``/health``'s ``judge_cache``.

    .venv/bin/python -m bench.judge_cache                 # both parts, SmolLM2-135M yesno
    .venv/bin/python -m bench.judge_cache --parts serve --rows 32
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import GENERIC_RUBRIC, LLMBAR_NATURAL, print_header, table, timed_interleaved

ROOT = Path(__file__).resolve().parents[1]


def _pairs(n: int) -> list[dict]:
    return json.loads(Path(LLMBAR_NATURAL).read_text(encoding="utf-8"))[:n]


def step_part(args: argparse.Namespace) -> None:
    from evolm.backends.loading import load_backend
    from evolm.judge.cache import CachedJudge, JudgeCache
    from evolm.judge.judge import Judge, JudgeItem
    from evolm.rubrics import Rubric

    backend = load_backend(args.model, device="cpu", dtype="float32", batch_size=16)
    judge = Judge(backend, mode=args.mode)
    rubric = Rubric.from_obj(GENERIC_RUBRIC)
    rows = _pairs(2)

    def four(row: dict) -> list[str]:  # four distinct answers to one question: both outputs and their first halves
        a, b = row["output_1"][: args.answer_chars], row["output_2"][: args.answer_chars]
        return [a, b, a[: len(a) // 2], b[: len(b) // 2]]

    demo = [JudgeItem(rows[0]["input"], a, rubric) for a in four(rows[0])]
    dup = [JudgeItem(r["input"], a, rubric) for r in rows[: args.dup_questions] for a in four(r) * 2]
    kept = CachedJudge(judge, JudgeCache())
    kept.score(dup)  # stored once: the repeat variant finds every judgment
    print_header("Judge time per step, with and without the judge cache",
                 {"judge": args.model, "mode": args.mode, "criteria": 3, "answer chars": f"<= {args.answer_chars}",
                  "demo step answers": len(demo),
                  "duplicate step answers": f"{len(dup)} ({len({(i.question, i.answer) for i in dup})} distinct)",
                  "repeats": args.repeats})
    variants = {
        "demo step, no cache": lambda: judge.score(demo),
        "demo step, cache (empty)": lambda: CachedJudge(judge, JudgeCache()).score(demo),
        "duplicates step, no cache": lambda: judge.score(dup),
        "duplicates step, cache (empty)": lambda: CachedJudge(judge, JudgeCache()).score(dup),
        "duplicates step again, cache kept": lambda: kept.score(dup),
    }
    timings = timed_interleaved(variants, repeats=args.repeats, warmup=args.warmup)
    base = {"demo": timings["demo step, no cache"][0], "duplicates": timings["duplicates step, no cache"][0]}
    out = []
    for name, (seconds, scores) in timings.items():
        ref = base["demo" if name.startswith("demo") else "duplicates"]
        plain = timings["demo step, no cache" if name.startswith("demo") else "duplicates step, no cache"][1]
        diff = max(abs(getattr(a, "score", a) - getattr(b, "score", b)) for a, b in zip(scores, plain, strict=True))
        out.append([name, seconds, seconds / ref, diff])
    print(table(["variant", "judge seconds (median)", "x no cache", "max |score - no cache|"], out))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_part(args: argparse.Namespace) -> None:
    import httpx

    pairs = _pairs((args.rows + 1) // 2)
    rows = [{"prompt": p["input"], "response": p[k][: args.answer_chars], "rubric": GENERIC_RUBRIC} for p in pairs
            for k in ("output_1", "output_2")][: args.rows]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "judge_input.jsonl"  # what `evolm judge --input` reads
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        port = _free_port()
        cmd = [sys.executable, "-m", "evolm.cli", "serve", "--judge", args.model, "--mode", args.mode,
               "--dtype", "float32", "--port", str(port), "--deadline-s", "3600",  # a slow machine: no 504
               "--judge-cache", "10000"]  # serve keeps no cache unless asked (one client here)
        server = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 600
            while True:
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"evolm serve did not start: {server.stderr.read() if server.stderr else ''}")
                time.sleep(0.5)
            body = {"query": [r["prompt"] + r["response"] for r in rows], "prompts": [r["prompt"] for r in rows],
                    "labels": [json.dumps(r["rubric"]) for r in rows]}
            replies = []
            for _ in range(2):
                t0 = time.perf_counter()
                got = httpx.post(url + "/get_reward", json=body, timeout=3600)
                if got.status_code != 200:
                    raise SystemExit(f"evolm serve answered {got.status_code}: {got.text[:300]}")
                reply = got.json()
                replies.append((time.perf_counter() - t0, reply))
            health = httpx.get(url + "/health", timeout=10).json()
        finally:
            server.terminate()
            server.wait(timeout=30)
    print_header("The same evolm judge input twice through evolm serve",
                 {"judge": args.model, "mode": args.mode, "rows": len(rows), "criteria": 3,
                  "answer chars": f"<= {args.answer_chars}",
                  "command": " ".join(["evolm", *cmd[3:]])})
    first_s = replies[0][0]
    out = []
    for k, (seconds, reply) in enumerate(replies, start=1):
        cached = reply["extra_logs"]["judge_cached"]
        out.append([f"request {k}", seconds, seconds / first_s, sum(cached) / len(cached)])
    print(table(["POST /get_reward", "seconds", "x first", "judge_cached (hit rate)"], out))
    same = replies[0][1]["rewards"] == replies[1][1]["rewards"]
    print(f"\nrewards identical: {same}; /health judge_cache: {json.dumps(health.get('judge_cache'))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="judge model")
    ap.add_argument("--mode", default="yesno", help="judge mode")
    ap.add_argument("--parts", default="step,serve", help="step, serve or both (comma-separated)")
    ap.add_argument("--rows", type=int, default=16, help="serve part: rows of the evolm judge input")
    ap.add_argument("--repeats", type=int, default=3, help="step part: timed rounds (medians reported)")
    ap.add_argument("--warmup", type=int, default=1, help="step part: untimed rounds first")
    ap.add_argument("--dup-questions", type=int, default=2, help="step part: questions of the duplicates step (8 "
                    "answers each, 4 distinct)")
    ap.add_argument("--answer-chars", type=int, default=400, help="answers cut to this many characters (a demo "
                    "answer is at most 64 tokens)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if "step" in parts:
        step_part(args)
    if "serve" in parts:
        serve_part(args)


if __name__ == "__main__":
    main()
