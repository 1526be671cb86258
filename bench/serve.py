"""The reward server under concurrent clients against ``evolm judge``'s path, side by side.

Both variants score the same answers with the same loaded judge, in the same process:

- ``evolm judge``:  ``Judge.score`` on all answers in one call, and in calls of ``--batch-size`` rows
                    as the ``evolm judge`` command makes them on a local model (``cli._common.write_chunk``;
                    64 before it moved its progress bar per batch); the faster of the two is the reference
- ``evolm serve``:  the app of ``evolm serve`` (``evolm.serve.app.create_app``) on a real uvicorn server
                    in a thread, ``--clients`` threads each posting OpenRLHF ``/get_reward`` requests of
                    ``--per-request`` answers (two questions x two answers) one after another

and the server's answers/s must stay within 1.5x of the direct call (issue 13: micro-batching
keeps concurrent requests as cheap as one batch). Latency is per request, arrival to reply, over
all rounds. "seconds in judge calls" is the server's own time in ``Judge.score``: what is left of
its wall time went to HTTP, waiting and batching.
The answers are the shortest LLMBar Natural pairs (both outputs of each question); every answer
carries the generic 3-criterion rubric as its label, so ``yesno`` makes three reads per answer.

    .venv/bin/python -m bench.serve                       # 128 answers, 16 clients, prob and yesno
    .venv/bin/python -m bench.serve --answers 64 --modes prob
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import GENERIC_RUBRIC, LLMBAR_NATURAL, print_header, table


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of a few dozen requests is close to their maximum, and says so)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="judge model")
    ap.add_argument("--data", default=str(LLMBAR_NATURAL), help="LLMBar JSON file (questions and two outputs)")
    ap.add_argument("--answers", type=int, default=128, help="answers in all (two per question)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients")
    ap.add_argument("--per-request", type=int, default=4, help="answers per /get_reward request (even)")
    ap.add_argument("--modes", default="prob,yesno", help="judge modes, comma-separated")
    ap.add_argument("--max-batch", type=int, default=64, help="the server's --max-batch")
    ap.add_argument("--max-wait-ms", type=float, default=5.0, help="the server's --max-wait-ms")
    ap.add_argument("--batch-size", type=int, default=8, help="the judge backend's batch size (evolm's default)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds, variants interleaved (medians reported)")
    args = ap.parse_args()

    import httpx
    from tests import openai_server

    sys.modules.setdefault("openai_server", openai_server)  # the name tests/reward_server.py imports it by under pytest
    from tests.reward_server import running  # uvicorn in a thread on a free port

    from evolm.cli._common import write_chunk

    WRITE_BATCH = write_chunk(argparse.Namespace(backend="hf", batch_size=args.batch_size))  # rows per CLI call
    from evolm.backends.loading import load_backend
    from evolm.judge.judge import Judge, JudgeItem
    from evolm.rubrics import Rubric
    from evolm.serve.app import create_app
    from evolm.serve.settings import ServeSettings

    pairs = json.loads(Path(args.data).read_text(encoding="utf-8"))
    pairs.sort(key=lambda p: len(p["input"]) + len(p["output_1"]) + len(p["output_2"]))
    pairs = pairs[: args.answers // 2]
    rows = [(p["input"], p[k]) for p in pairs for k in ("output_1", "output_2")]  # a question's answers adjacent
    label = json.dumps(GENERIC_RUBRIC)
    rubric = Rubric.from_obj(GENERIC_RUBRIC)
    half = args.per_request // 2  # questions per request
    requests = []
    for start in range(0, len(rows), args.per_request):
        chunk = rows[start : start + args.per_request]
        requests.append({"query": [q + a for q, a in chunk], "prompts": [q for q, _ in chunk],
                         "labels": [label] * len(chunk)})
    backend = load_backend(args.model, device="cpu", dtype="float32", batch_size=args.batch_size)
    tok = backend.tokenizer
    answer_tokens = [len(tok.encode(a)) for _, a in rows]

    def serve_once(judge: Judge) -> tuple[float, list[float], list[float], int, float]:
        """Seconds for all requests from ``--clients`` threads; rewards, latencies, judge calls, judge busy s."""
        settings = ServeSettings(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_queue=4096,
                                 deadline_s=3600)
        app = create_app(judge, settings=settings)
        latencies: list[float] = []
        lock = threading.Lock()
        results: dict[int, list[float]] = {}
        with running(app) as url:
            def client(c: int) -> None:
                with httpx.Client(timeout=3600) as http:
                    for r in range(c, len(requests), args.clients):
                        t = time.perf_counter()
                        reply = http.post(url + "/get_reward", json=requests[r])
                        reply.raise_for_status()
                        with lock:
                            latencies.append(time.perf_counter() - t)
                            results[r] = reply.json()["rewards"]

            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                list(pool.map(client, range(args.clients)))
            seconds = time.perf_counter() - t0
            batcher = app.state.batcher
        return (seconds, [x for r in range(len(requests)) for x in results[r]], latencies, batcher.batches,
                batcher.busy_s)

    n = len(rows)
    out = []
    for mode in args.modes.split(","):
        judge = Judge(backend, mode=mode)
        items = [JudgeItem(q, a, rubric) for q, a in rows]
        judge.score(items[:4])  # warm-up: first-call costs out of every timing
        times: dict[str, list[float]] = {"one": [], "cli": [], "serve": []}
        latencies, calls, busy = [], [], []
        for rep in range(args.repeats):  # variants interleaved, so load drifts hit all of them alike
            t0 = time.perf_counter()
            direct = [j.score for j in judge.score(items)]
            times["one"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()  # `evolm judge` itself scores its input WRITE_BATCH rows per call
            chunked = [j.score for k in range(0, n, WRITE_BATCH) for j in judge.score(items[k : k + WRITE_BATCH])]
            times["cli"].append(time.perf_counter() - t0)
            seconds, served, lat, batches, busy_s = serve_once(judge)
            times["serve"].append(seconds)
            latencies += lat
            calls.append(batches)
            busy.append(busy_s)
            print(f"{mode} round {rep + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()),
                  file=sys.stderr, flush=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        best = min(med["one"], med["cli"])
        diff = max(abs(a - b) for a, b in zip(served, direct, strict=True))  # type: ignore[operator]
        chunk_diff = max(abs(a - b) for a, b in zip(chunked, direct, strict=True))  # type: ignore[operator]
        out.append([mode, "evolm judge: one Judge.score call", med["one"], n / med["one"], med["one"] / best,
                    "", "", 1, med["one"], ""])
        out.append([mode, f"evolm judge: {WRITE_BATCH} rows per call (the CLI)", med["cli"], n / med["cli"],
                    med["cli"] / best, "", "", math.ceil(n / WRITE_BATCH), med["cli"], f"{chunk_diff:.2g}"])
        out.append([mode, f"evolm serve, {args.clients} clients", med["serve"], n / med["serve"], med["serve"] / best,
                    statistics.median(latencies), _percentile(latencies, 99), statistics.median(calls),
                    statistics.median(busy), f"{diff:.2g}"])

    print_header("Reward server vs evolm judge", {
        "model": args.model, "data": Path(args.data).name, "answers": len(rows), "questions": len(pairs),
        "answer_tokens": f"{min(answer_tokens)}-{max(answer_tokens)} (mean {statistics.mean(answer_tokens):.0f})",
        "rubric": "generic, 3 criteria (label)", "clients": args.clients, "answers_per_request": args.per_request,
        "questions_per_request": half, "requests": len(requests), "max_batch": args.max_batch,
        "max_wait_ms": args.max_wait_ms, "judge_batch_size": args.batch_size, "repeats": args.repeats,
    })
    print(table(["mode", "variant", "seconds (median)", "answers/s", "time / faster evolm judge", "p50 latency s",
                 "p99 latency s", "judge calls", "seconds in judge calls", "max |reward diff| vs one call"], out))
    for row in out[2::3]:
        print(f"target: {row[0]} server within 1.5x of evolm judge: {row[4]:.2f}x -> "
              f"{'MET' if row[4] <= 1.5 else 'NOT MET'}")


if __name__ == "__main__":
    main()
