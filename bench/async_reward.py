"""make_trl_reward's async reward function against the synchronous one, as TRL's GRPOTrainer runs them.

Two reward functions per step, each a served judge (``Judge(OpenAIBackend, mode="prob")``) against its own real
local OpenAI-compatible server (tests/openai_server.py on 127.0.0.1, in a process of its own) that sleeps
``--delays`` seconds per request, as a busy judge server would. TRL 1.16's ``_calculate_rewards`` calls its
synchronous reward functions one after the other, then gathers its async ones on a daemon event loop
(``start_event_loop_in_daemon``, ``asyncio.run_coroutine_threadsafe``); the bench does exactly that with TRL's
own helpers:

- sync:  ``make_trl_reward(judge, asynchronous=False)`` x 2, called in turn;
- async: ``make_trl_reward(judge)`` x 2 (async: the judges are served), gathered on TRL's daemon loop.

    .venv/bin/python -m bench.async_reward                      # 16 completions, 0.1 s and 0.5 s per request
    .venv/bin/python -m bench.async_reward --delays 1.0 --rows 64
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from bench.common import print_header, table, timed_interleaved

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the server process imports tests/ from here
_SERVER = """
import sys
sys.path.insert(0, sys.argv[2])
from tests.openai_server import serve
with serve() as s:
    s.state.delay_s = float(sys.argv[1])
    print(s.base_url, flush=True)
    sys.stdin.read()
"""


@contextmanager
def server_process(delay: float) -> Iterator[str]:
    """A test OpenAI server sleeping ``delay`` s per request, in its own process (not this one's GIL): its URL."""
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(delay)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _measure(judges: list, prompts: list, completions: list, loop: asyncio.AbstractEventLoop,
             repeats: int) -> dict[str, float]:
    """Median seconds per step of the two rewards run as TRL runs sync functions, and as it runs async ones."""
    from trl.trainer.utils import is_async_callable

    from evolm.integrations.trl import make_trl_reward

    sync_fns = [make_trl_reward(j, asynchronous=False) for j in judges]
    async_fns = [make_trl_reward(j) for j in judges]
    assert all(is_async_callable(f) for f in async_fns) and not any(is_async_callable(f) for f in sync_fns)

    def run_sync() -> list:  # TRL: one synchronous reward function after the other
        return [f(prompts=prompts, completions=completions) for f in sync_fns]

    def run_async() -> list:  # TRL: its async reward functions gathered on its daemon event loop
        async def gathered() -> list:
            return list(await asyncio.gather(*(f(prompts=prompts, completions=completions) for f in async_fns)))

        return asyncio.run_coroutine_threadsafe(gathered(), loop).result()

    t = timed_interleaved({"sync": run_sync, "async": run_async}, repeats=repeats, warmup=1, progress=False)
    assert t["sync"][1] == t["async"][1], "async rewards differ from the synchronous ones"
    return {k: v[0] for k, v in t.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=16, help="completions per step")
    ap.add_argument("--delays", default="0.1,0.5", help="seconds each server sleeps per request (comma-separated)")
    ap.add_argument("--concurrency", type=int, default=32, help="judge.max_concurrency: requests in flight per server")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds (medians reported)")
    args = ap.parse_args()

    from tests.openai_server import MODEL_ID
    from trl.trainer.utils import shutdown_event_loop_in_daemon, start_event_loop_in_daemon

    from evolm.backends.openai import OpenAIBackend
    from evolm.judge.judge import Judge

    prompts = [[{"role": "user", "content": f"What is {k} + {k}?"}] for k in range(args.rows)]
    completions = [[{"role": "assistant", "content": f"It is {2 * k}."}] for k in range(args.rows)]
    thread, loop, ready = start_event_loop_in_daemon()
    ready.wait()
    rows = []
    print_header("Two served-judge rewards per step: synchronous vs async reward functions under TRL",
                 {"completions": args.rows, "reward functions": 2, "servers": 2, "max_concurrency": args.concurrency,
                  "delays (s per request)": args.delays, "repeats": args.repeats})
    try:
        for delay in [float(d) for d in args.delays.split(",")]:
            with ExitStack() as stack:
                urls = [stack.enter_context(server_process(delay)) for _ in range(2)]
                judges = [Judge(OpenAIBackend(MODEL_ID, base_url=u, max_concurrency=args.concurrency), mode="prob")
                          for u in urls]
                t = _measure(judges, prompts, completions, loop, args.repeats)
            rows.append([delay, t["sync"], t["async"], t["sync"] / t["async"]])
    finally:
        shutdown_event_loop_in_daemon(thread, loop)
    print(table(["server delay (s/request)", "sync (s per step)", "async (s per step)", "sync / async"], rows))
    print("\nrewards identical in both: yes (checked every round)")


if __name__ == "__main__":
    main()
