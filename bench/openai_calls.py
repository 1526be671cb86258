"""What one call of the ``openai`` backend costs the caller beyond the server's own time: before/after keeping clients.

Small calls (``generate`` and ``next_token_logprobs``, 1 and 8 rows each) against a real local OpenAI-compatible
server that answers at once (tests/openai_server.py on 127.0.0.1, in a process of its own), timed in interleaved
rounds: the backend module as it was at ``--before`` (a fresh event loop and fresh ``AsyncOpenAI`` clients per call)
beside the work tree's (clients and connections kept on the backend's own event loop thread). CPU is this process's
(all its threads; the server's is not counted).

    .venv/bin/python -m bench.openai_calls --before 3f42466
    .venv/bin/python -m bench.openai_calls --before 3f42466 --calls 100 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from async_reward import server_process  # noqa: E402

from bench.common import load_old_module, print_header, table


def _per_call(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """Milliseconds of wall time and of this process's CPU time per call, over ``calls`` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - wall) / calls * 1e3, (time.process_time() - cpu) / calls * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision whose src/evolm/backends/openai.py is 'before'")
    ap.add_argument("--calls", type=int, default=50, help="calls per variant per round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians reported)")
    args = ap.parse_args()

    from tests.openai_server import MODEL_ID

    from evolm.backends.base import SamplingParams
    from evolm.backends.openai import OpenAIBackend

    old = load_old_module(args.before, "src/evolm/backends/openai.py", "_openai_before")
    params = SamplingParams(max_new_tokens=4, temperature=0.0)
    print_header("openai backend: ms per small call, before/after keeping the clients between calls",
                 {"calls per round": args.calls, "rounds": args.rounds, "server delay": 0, "endpoints": 1,
                  "before": args.before})
    rows = []
    with server_process(0.0) as url:
        variants = {"before": old.OpenAIBackend(MODEL_ID, base_url=url), "after": OpenAIBackend(MODEL_ID, base_url=url)}
        for method in ("generate", "next_token_logprobs"):
            for n in (1, 8):
                convs = [[{"role": "user", "content": f"yes row {i}"}] for i in range(n)]
                calls = {
                    name: (lambda b=b, c=convs: b.generate(c, params)) if method == "generate"
                    else (lambda b=b, c=convs: b.next_token_logprobs(c, ["Yes", "No"]))
                    for name, b in variants.items()
                }
                results = {name: fn() for name, fn in calls.items()}  # warm-up, and the same answers from both
                assert results["before"] == results["after"], f"{method}: before and after differ"
                got: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
                for _ in range(args.rounds):
                    for name, fn in calls.items():
                        got[name].append(_per_call(fn, args.calls))
                (bw, bc), (aw, ac) = ((statistics.median(x[0] for x in got[k]), statistics.median(x[1] for x in got[k]))
                                      for k in ("before", "after"))
                rows.append([method, n, bw, aw, bw - aw, bc, ac, bc - ac])
        variants["after"].close()
    print(table(["call", "rows", "before wall (ms/call)", "after wall (ms/call)", "saved wall (ms)",
                 "before CPU (ms/call)", "after CPU (ms/call)", "saved CPU (ms)"], rows))
    print("\nanswers identical before and after: yes (checked once per call kind)")


if __name__ == "__main__":
    main()
