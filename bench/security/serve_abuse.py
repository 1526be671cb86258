"""A bounded abuse run against `evolm serve`: one client must not stall the server (issue 23, items 2 and 3).

Starts the real `evolm serve` (the CLI, its defaults unless given) on a free port of 127.0.0.1, waits
for it, then, each case with a fixed number of requests and a time bound:

- ``5000``:       one request of 5,000 short answers; once the judge is on it, three 1-answer requests
                  one after another: each must complete in under 5 s (fair batching); then the big
                  request's client leaves, and the server must drop what it had not scored
- ``413``:        a 17 MiB body (declared), 8,193 answers, a 500,001-character answer: each 413 at once
- ``slow``:       50 connections that send half a request line and stop: closed by the header timeout
- ``200k``:       one /get_reward request whose answer is ``"</s> " * 40000 + "x"`` (200,001 characters:
                  the end-marker regex was quadratic on it, 37 s on the event loop) while ``/health`` is
                  polled every 0.1 s until it is answered: the slowest ``/health`` must answer in under 1 s
- ``memory``:     the server's resident memory before and after (a 100 MB answer took it 1.3 -> 9.4 GB)
- ``criteria``:   (issue 58) a 1-answer request whose label has 20,000 criteria (a 1 MB body) sent beside another
                  client's 1-answer request: the first 413 in under 2 s, the other in about its time alone
- ``list``:       (issue 58; run with ``--mode listwise``) a request of 200 short answers to one question beside
                  another client's 1-answer request: the same bounds

Loopback only; nothing is sent anywhere else. Prints the machine and one table.

    .venv/bin/python -m bench.security.serve_abuse                                    # smollm2-135m-instruct, prob
    .venv/bin/python -m bench.security.serve_abuse --serve-args "--max-batch 16"
    .venv/bin/python -m bench.security.serve_abuse --mode yesno --cases criteria          # issue 58
    .venv/bin/python -m bench.security.serve_abuse --mode listwise --cases list
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.common import print_header, table

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _body(question: str, answers: list[str]) -> dict:
    return {"query": [question + a for a in answers], "prompts": [question] * len(answers)}


def case_200k(url: str) -> list:
    answer = "</s> " * 40_000 + "x"
    waits: list[float] = []
    done = threading.Event()
    result: dict = {}

    def big() -> None:
        t0 = time.perf_counter()
        try:
            r = httpx.post(url + "/get_reward", json=_body("Summarise this text.", [answer]), timeout=1200)
            result["status"], result["s"] = r.status_code, time.perf_counter() - t0
        except httpx.HTTPError as e:
            result["status"], result["s"] = type(e).__name__, time.perf_counter() - t0
        done.set()

    threading.Thread(target=big, daemon=True).start()
    with httpx.Client(timeout=30) as client:
        while not done.is_set() and len(waits) < 3000:
            t0 = time.perf_counter()
            client.get(url + "/health")
            waits.append(time.perf_counter() - t0)
            time.sleep(0.1)
    done.wait(1200)
    return [["200k", f"1 request, answer of {len(answer):,} chars ('</s> ' x 40000 + 'x')",
             f"HTTP {result['status']} in {result['s']:.1f} s", f"/health x{len(waits)}: max {max(waits):.3f} s, "
             f"median {statistics.median(waits):.3f} s", "/health < 1 s", "MET" if max(waits) < 1 else "NOT MET"]]


def case_5000(url: str, probes: int) -> list:
    answers = [f"The answer is {i}." for i in range(5000)]
    body = json.dumps(_body("What is 2 + 2?", answers)).encode()
    batches0 = httpx.get(url + "/health").json()["batches"]
    big = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))  # a raw client: it leaves at will
    big.sendall(b"POST /get_reward HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body)
    deadline = time.monotonic() + 120
    while httpx.get(url + "/health").json()["batches"] == batches0 and time.monotonic() < deadline:
        time.sleep(0.05)  # the judge is on the big request
    latencies, codes = [], []
    for k in range(probes):
        t0 = time.perf_counter()
        try:
            r = httpx.post(url + "/reward", json={"prompt": "What is 3 + 3?", "response": f"It is {6 + k}."},
                           timeout=60)
            codes.append(r.status_code)
        except httpx.HTTPError as e:
            codes.append(type(e).__name__)
        latencies.append(time.perf_counter() - t0)
    during = httpx.get(url + "/health").json()
    big.close()  # the big request's client leaves: what it had not had scored is dropped
    time.sleep(1)
    after = httpx.get(url + "/health").json()
    batch_s = max(1.0, during["busy_s"] / max(1, during["batches"]))
    time.sleep(min(60.0, 3 * batch_s))  # long enough for the batch in flight to end, and two more to start
    later = httpx.get(url + "/health").json()
    scored = later["answers"] - during["answers"]  # after the probes: the big request's batch in flight, then none
    return [
        ["5000", f"1 request of 5,000 answers, then {probes} x 1-answer requests",
         f"probes HTTP {sorted(set(codes))}: {', '.join(f'{x:.2f}' for x in latencies)} s",
         f"{during['answers']} answers scored by then, in {during['batches']} judge calls", "each probe < 5 s",
         "MET" if max(latencies) < 5 else "NOT MET"],
        ["5000-left", "the 5,000-answer client disconnects", f"dropped {after['dropped']}, queued {after['queued']}",
         f"{scored} answers scored in the {min(60.0, 3 * batch_s) + 1:.0f} s after (the call in flight)",
         "dropped; at most the call in flight scored",
         "MET" if after["dropped"] >= 1 and after["queued"] == 0 and scored <= 64 else "NOT MET"],
    ]


def _beside(url: str, big: dict, what: str, case: str) -> list:
    """``big`` and a 1-answer request sent together; the 1-answer request alone before and after, for its usual time
    (on a shared CPU it varies by itself)."""
    small = {"prompt": "What is 3 + 3?", "response": "It is 6."}

    def alone() -> float:
        t0 = time.perf_counter()
        httpx.post(url + "/reward", json=small, timeout=600)
        return time.perf_counter() - t0

    before = alone()
    out: dict = {}

    def send(name: str, path: str, body: dict) -> None:
        t = time.perf_counter()
        r = httpx.post(url + path, json=body, timeout=600)
        out[name] = (r.status_code, time.perf_counter() - t)

    threads = [threading.Thread(target=send, args=("big", "/get_reward", big)),
               threading.Thread(target=send, args=("small", "/reward", small))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (big_code, big_s), (small_code, small_s) = out["big"], out["small"]
    after = alone()
    met = big_code == 413 and big_s < 2 and small_code == 200 and small_s < 1.25 * max(before, after) + 2
    return [[case, what, f"HTTP {big_code} in {big_s:.2f} s; beside it HTTP {small_code} in {small_s:.2f} s",
             f"the 1-answer request alone, before / after: {before:.2f} / {after:.2f} s",
             "413 in < 2 s; the other within 1.25 x its time alone + 2 s", "MET" if met else "NOT MET"]]


def case_criteria(url: str) -> list:
    label = json.dumps({"criteria": [{"criterion": f"The answer is correct ({k}).", "weight": 1.0}
                                     for k in range(20_000)]})
    big = {**_body("What is 2 + 2?", ["It is 4."]), "labels": [label]}
    return _beside(url, big, f"1 answer, a label of 20,000 criteria ({len(json.dumps(big)):,} bytes)", "criteria")


def case_list(url: str) -> list:
    return _beside(url, _body("Name a colour.", [f"Colour {k}." for k in range(200)]),
                   "200 short answers to one question (listwise)", "list")


def case_413(url: str) -> list:
    rows = []
    big_body = json.dumps(_body("Q?", ["x" * (17 * 2**20)])).encode()
    for what, kwargs in (
        ("17 MiB body (Content-Length)", {"content": big_body, "headers": {"content-type": "application/json"}}),
        ("8,193 answers", {"json": _body("Q?", ["a"] * 8193)}),
        ("one answer of 500,001 chars", {"json": _body("Q?", ["a" * 500_001])}),
    ):
        t0 = time.perf_counter()
        r = httpx.post(url + "/get_reward", timeout=60, **kwargs)
        rows.append(["413", what, f"HTTP {r.status_code} in {time.perf_counter() - t0:.2f} s",
                     r.json().get("error", "")[:70], "413 + JSON error", "MET" if r.status_code == 413 else "NOT MET"])
    return rows


def case_slow(url: str, n: int, timeout_s: float) -> list:
    port = int(url.rsplit(":", 1)[1])
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /get_reward HTT")
        s.settimeout(0.05)
        socks.append(s)
    t0 = time.monotonic()
    closed: dict[int, float] = {}
    while len(closed) < n and time.monotonic() - t0 < timeout_s + 10:
        for i, s in enumerate(socks):
            if i in closed:
                continue
            try:
                if s.recv(4096) == b"":
                    closed[i] = time.monotonic() - t0
            except TimeoutError:
                pass
            except OSError:
                closed[i] = time.monotonic() - t0
    for s in socks:
        s.close()
    health = httpx.get(url + "/health", timeout=10).status_code
    latest = max(closed.values()) if closed else float("nan")
    return [["slow", f"{n} connections send 'POST /get_reward HTT' and stop",
             f"{len(closed)} of {n} closed, the last after {latest:.1f} s", f"/health then: HTTP {health}",
             f"all closed by the {timeout_s:g} s header timeout (+2 s)",
             "MET" if len(closed) == n and latest < timeout_s + 2 else "NOT MET"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="judge model")
    ap.add_argument("--mode", default="prob", help="judge mode")
    ap.add_argument("--serve-args", default="", help="more `evolm serve` flags, e.g. '--max-batch 16'")
    ap.add_argument("--probes", type=int, default=3, help="1-answer requests during the 5,000-answer one")
    ap.add_argument("--slow-connections", type=int, default=50, help="connections that never finish their headers")
    ap.add_argument("--cases", default="5000,413,slow,200k", help="which cases, comma-separated, in this order")
    args = ap.parse_args()

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    extra = shlex.split(args.serve_args)
    header_timeout = float(extra[extra.index("--header-timeout-s") + 1]) if "--header-timeout-s" in extra else 10.0
    cmd = [sys.executable, "-m", "evolm.cli", "serve", "--judge", args.model, "--mode", args.mode, "--dtype",
           "float32", "--device", "cpu", "--port", str(port), *extra]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115 - read at the end
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    t_start = time.perf_counter()
    rows: list = []
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"evolm serve exited: {Path(log.name).read_text()[-2000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        load_s = time.perf_counter() - t_start
        httpx.post(url + "/reward", json={"prompt": "Warm up?", "response": "Yes."}, timeout=120)
        rss0 = _rss_mb(proc.pid)
        # the 200k case last: on a slow CPU its one judge call (an 8192-token prompt for SmolLM2) runs for minutes,
        # past the request's deadline, and a request behind it waits for that call (a forward pass is not interrupted)
        cases = {"5000": lambda: case_5000(url, args.probes), "413": lambda: case_413(url),
                 "slow": lambda: case_slow(url, args.slow_connections, header_timeout), "200k": lambda: case_200k(url),
                 "criteria": lambda: case_criteria(url), "list": lambda: case_list(url)}
        for name in args.cases.split(","):
            case = cases[name]
            try:
                rows += case()
            except Exception as e:  # noqa: BLE001 - a case that broke is a row of the table, the others still run
                rows.append([name, "", f"{type(e).__name__}: {e}", "", "", "NOT MET"])
        rss1 = _rss_mb(proc.pid)  # the 200k answer may still be in the judge: the server is stopped with it
        rows.append(["memory", "server resident memory, before the cases / after", f"{rss0:.0f} MB / {rss1:.0f} MB",
                     "", "", ""])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    print_header("evolm serve under abuse", {
        "command": " ".join(cmd[1:]).replace(f"--port {port}", "--port P"), "model_load_s": round(load_s, 1),
        "total_s": round(time.perf_counter() - t_start, 1)})
    print(table(["case", "sent", "result", "measured", "bound", "verdict"], rows))


if __name__ == "__main__":
    main()
