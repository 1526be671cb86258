"""One-answer client beside a flooding client of ``evolm serve``: the small client's latency, alone and
flooded.

The app of ``evolm serve`` runs on a real uvicorn server in a thread (``tests/reward_server.running``) over a
fake judge and writer that sleep for their work, so the numbers are the batcher's, not a model's:

- the judge takes ``--unit-ms`` per criterion per started 4,000 characters of question and answer (a yesno
  judge's forward passes grow with both); the writer ``--write-ms`` per rubric it writes.
- the flooding client connects from 127.0.0.2, the one-answer ("probe") client from 127.0.0.3: two peers, as
  two machines would be. Each scenario first times the probe alone, then floods and sends ``--probes``
  one-answer requests one after another, each with a question of its own.

Scenarios (``--scenarios``):

  queue    ``--flood-requests`` requests at once, ``--flood-answers`` answers each, every answer with a
           1-criterion label: more requests than the server's 256-request queue
  writer   ``--writer-requests`` requests of ``--flood-answers`` answers, each answer a question of its own,
  no
           labels: the server's writer writes a rubric per question (the probe's question is new too)
  long     ``--long-requests`` requests of 4 answers of ``--long-chars`` characters each, labelled

A probe reply is "ok" (200), "503" (queue full), "504" (past ``--deadline-s``). Latency is from send to reply.

    .venv/bin/python -m bench.serve_fairness
    .venv/bin/python -m bench.serve_fairness --scenarios queue --probes 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field

from bench.common import print_header, table

LABEL = json.dumps({"criteria": [{"criterion": "The answer is correct.", "weight": 1.0}]})
CHARS = 4000  # characters of question and answer the fake judge takes one unit of time for


@dataclass
class SleepyJudge:
    """A judge whose ``score`` sleeps ``unit_s`` per criterion per started ``CHARS`` characters of each
    item."""

    unit_s: float
    mode: str = "fake"

    def score(self, items: list) -> list:
        from evolm.scores import Judgment

        units = sum(max(1, len(it.rubric.criteria) if it.rubric else 1)
                    * max(1, math.ceil((len(it.question) + len(it.answer)) / CHARS)) for it in items)
        time.sleep(self.unit_s * units)
        return [Judgment(0.5) for _ in items]


@dataclass
class SleepyWriter:
    """A rubric writer (``Backend.generate``) that sleeps ``write_s`` per rubric and writes ``LABEL``."""

    write_s: float
    name: str = "sleepy-writer"
    prompts: int = field(default=0)

    def generate(self, conversations: list, params: object, *, progress: bool = False) -> list[str]:
        self.prompts += len(conversations)
        time.sleep(self.write_s * len(conversations))
        return [LABEL] * len(conversations)


def _body(questions: list[str], answers: list[str], label: bool) -> dict:
    body = {"query": [q + a for q, a in zip(questions, answers, strict=True)], "prompts": list(questions)}
    return {**body, "labels": [LABEL] * len(answers)} if label else body


def _client(address: str, timeout: float):  # noqa: ANN202 - an httpx.AsyncClient
    import httpx

    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=address), timeout=timeout,
                             limits=httpx.Limits(max_connections=2000, max_keepalive_connections=2000))


async def _probe(url: str, n: int, tag: str, label: bool, timeout: float) -> list[tuple[str, float]]:
    """``n`` one-answer requests from 127.0.0.3, one after another: (status, seconds) each."""
    out = []
    async with _client("127.0.0.3", timeout) as http:
        for k in range(n):
            body = _body([f"Probe {tag} {k}: what is {k} + {k}?"], [f" It is {2 * k}."], label)
            t0 = time.perf_counter()
            reply = await http.post(url + "/get_reward", json=body)
            status = str(reply.status_code) if reply.status_code != 200 else "ok"
            out.append((status, time.perf_counter() - t0))
            await asyncio.sleep(0.05)
    return out


async def _raw_post(url: str, body: bytes, local: str) -> int:
    """POST ``body`` to ``url`` + /get_reward from address ``local`` on a connection of its own; the reply's
    status.

    Plain asyncio streams: one httpx client opening hundreds of connections at once sent them over tens of
    seconds, which is a trickle, not a flood."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(local, 0))
    try:
        writer.write(b"POST /get_reward HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (host.encode(), len(body)) + body)
        await writer.drain()
        return int((await reader.readline()).split()[1])
    finally:
        writer.close()


async def _flood_and_probe(url: str, bodies: list[dict], args: argparse.Namespace, tag: str,
                           label: bool) -> tuple[list[tuple[str, float]], dict[str, int]]:
    raw = [json.dumps(b).encode() for b in bodies]
    flood = [asyncio.ensure_future(_raw_post(url, b, "127.0.0.2")) for b in raw]
    async with _client("127.0.0.4", 60) as http:
        queued = await _settled(http, url, args.settle_s)
    probes = await _probe(url, args.probes, tag, label, args.deadline_s + 60)
    replies = await asyncio.gather(*flood, return_exceptions=True)
    counts: dict[str, int] = {}
    for r in replies:
        key = type(r).__name__ if isinstance(r, BaseException) else str(r)
        counts[key] = counts.get(key, 0) + 1
    return probes, {**counts, "queued at the first probe": queued}


async def _settled(http, url: str, seconds: float) -> int:  # noqa: ANN001 - an httpx.AsyncClient
    """Requests queued once the flood has arrived: /health's count once it stops growing for 0.5 s (at most
    ``seconds``)."""
    t0, best, since = time.perf_counter(), -1, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        queued = (await http.get(url + "/health")).json()["queued"]
        if queued > best:
            best, since = queued, time.perf_counter()
        elif best > 0 and time.perf_counter() - since > 0.5:
            break
        await asyncio.sleep(0.05)
    return best


def _bodies(scenario: str, args: argparse.Namespace) -> tuple[list[dict], bool]:
    """The flooding client's requests, and whether the probe carries a label."""
    n = args.flood_answers
    if scenario == "queue":
        return [_body([f"Flood {r}?"] * n, [f" answer {k}" for k in range(n)], True)
                for r in range(args.flood_requests)], True
    if scenario == "writer":
        return [_body([f"Flood question {r}-{k}?" for k in range(n)], [f" answer {k}" for k in range(n)],
                      False)
                for r in range(args.writer_requests)], False
    long = "x" * args.long_chars
    return [_body([f"Long {r}?"] * 4, [long] * 4, True) for r in range(args.long_requests)], True


def _row(scenario: str, phase: str, probes: list[tuple[str, float]], flood: dict[str, int] | None) -> list:
    ok = [s for status, s in probes if status == "ok"]
    refused = {k: sum(1 for status, _ in probes if status == k) for k in ("503", "504")}
    return [scenario, phase, f"{sum(1 for s, _ in probes if s == 'ok')}/{len(probes)}", refused["503"],
            refused["504"], statistics.median(ok) if ok else "-", max(ok) if ok else "-",
            max(s for _, s in probes),
            "" if flood is None else ", ".join(f"{k}: {v}" for k, v in sorted(flood.items()))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default="queue,writer,long", help="comma-separated: queue, writer, long")
    ap.add_argument("--probes", type=int, default=5,
                    help="one-answer requests the small client sends in a row")
    ap.add_argument("--flood-requests", type=int, default=300, help="queue scenario: the flooder's requests")
    ap.add_argument("--flood-answers", type=int, default=64,
                    help="answers per flooding request (queue, writer)")
    ap.add_argument("--writer-requests", type=int, default=32, help="writer scenario: the flooder's requests")
    ap.add_argument("--long-requests", type=int, default=8, help="long scenario: the flooder's requests")
    ap.add_argument("--long-chars", type=int, default=400_000, help="long scenario: characters per answer")
    ap.add_argument("--unit-ms", type=float, default=2.0, help="the fake judge's time per unit of work")
    ap.add_argument("--write-ms", type=float, default=20.0, help="the fake writer's time per rubric")
    ap.add_argument("--deadline-s", type=float, default=15.0, help="the server's --deadline-s")
    ap.add_argument("--max-batch-s", type=float, default=0.5, help="the server's --max-batch-s")
    ap.add_argument("--settle-s", type=float, default=10.0,
                    help="at most this long between the flood and the first probe, while the queue grows")
    args = ap.parse_args()

    from tests import openai_server

    sys.modules.setdefault("openai_server", openai_server)  # the name tests/reward_server.py imports it by
    from tests.reward_server import running

    from evolm.serve.app import create_app
    from evolm.serve.batcher import RubricSource
    from evolm.serve.settings import ServeSettings

    settings = ServeSettings(deadline_s=args.deadline_s, max_batch_s=args.max_batch_s, max_wait_ms=5)
    rows = []
    for scenario in args.scenarios.split(","):
        bodies, label = _bodies(scenario, args)
        for phase in ("alone", "flooded"):
            writer = SleepyWriter(args.write_ms / 1000)
            rubrics = RubricSource(writer=writer) if scenario == "writer" else None
            app = create_app(SleepyJudge(args.unit_ms / 1000), rubrics, settings)
            with running(app) as url:
                if phase == "alone":
                    probes = asyncio.run(_probe(url, args.probes, "alone", label, args.deadline_s + 60))
                    flood = None
                else:
                    probes, flood = asyncio.run(_flood_and_probe(url, bodies, args, "flooded", label))
            rows.append(_row(scenario, phase, probes, flood))
            print(f"{scenario} {phase}: {rows[-1]}", file=sys.stderr, flush=True)

    fields = ServeSettings.model_fields
    print_header("evolm serve: a one-answer client beside a flooding client", {
        "judge": f"fake, {args.unit_ms:g} ms per criterion per {CHARS} chars",
        "writer": f"fake, {args.write_ms:g} ms per rubric", "deadline_s": args.deadline_s,
        "max_batch_s": args.max_batch_s, "max_queue": settings.max_queue,
        "per_client": {k: getattr(settings, k) for k in fields if "client" in k},
        "queue flood": f"{args.flood_requests} x {args.flood_answers} answers",
        "writer flood": f"{args.writer_requests} x {args.flood_answers} questions",
        "long flood": f"{args.long_requests} x 4 answers of {args.long_chars:,} chars",
        "probes": args.probes})
    print(table(["scenario", "phase", "probe ok", "503", "504", "probe p50 s", "probe max s (ok)",
                 "probe max s (any)", "flooder's replies"], rows))


if __name__ == "__main__":
    main()
