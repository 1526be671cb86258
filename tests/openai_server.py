"""A small, real OpenAI-compatible chat server for tests (FastAPI + uvicorn on 127.0.0.1).

It speaks the wire format of ``POST /v1/chat/completions`` and ``GET /v1/models`` closely enough
for the official ``openai`` client, answers deterministically from the messages, and can be told
to misbehave so that retries, timeouts and concurrency limits are tested against real HTTP:

- the reply to a conversation is ``"echo: <last user message>"``, cut to ``max_tokens`` words;
- with ``logprobs``, the first token's ``top_logprobs`` come from ``TOP_LOGPROBS``, chosen by the
  first word of the last user message ("no", "digits"; anything else gets "yes"), in the table's
  order (most likely first; the first entry is the chosen token);
- ``state.fail_first = N`` answers the first N requests with ``state.fail_status``;
  ``state.fail_every = K`` answers every K-th request (the K-th, 2K-th...) with it (K = 1: every request);
- ``state.contents`` (a list) gives the next replies' message contents, in turn, instead of the echo;
- ``state.delay_s`` delays every request; ``state.jitter_s`` adds a delay derived from the message
  (deterministic, so tests can make later rows finish first);
- every request body, Authorization header and client port (one per connection) is recorded, and
  the most requests in flight at once is counted;
- misbehaviour of real servers and proxies: ``state.delay_s = 3600`` accepts and never replies,
  ``state.drip_s`` answers HTTP 200 and then sends one byte every ``drip_s`` seconds (for a minute),
  ``state.raw_body`` answers HTTP 200 with that body verbatim (HTML, invalid JSON...),
  ``state.retry_after`` sets the ``retry-after`` header of injected failures, ``state.should_retry`` their
  ``x-should-retry`` header ("true" or "false", the OpenAI API's own say on retrying);
- hostile replies: ``state.gzip_bomb_mb = N`` answers a valid chat completion padded with N MiB of
  spaces, gzip-compressed (about 1,000:1), ``state.flood_status = S`` answers HTTP S with a chunked
  body of spaces that never ends (64 KiB per write, until the client leaves or the server stops).

Replies are written with ``json.dumps``, so a ``TOP_LOGPROBS`` table may hold NaN, infinities or
even strings, as broken servers do.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

MODEL_ID = "test-echo-model"

TOP_LOGPROBS: dict[str, list[tuple[str, Any]]] = {
    "yes": [
        (" Yes", math.log(0.5)),
        ("Yes", math.log(0.2)),
        ("No", math.log(0.1)),
        (" no", math.log(0.05)),
        ("yes", math.log(0.04)),
        ("1", math.log(0.03)),
        ("2", math.log(0.02)),
        ("The", math.log(0.01)),
    ],
    "no": [
        ("No", math.log(0.6)),
        (" No", math.log(0.3)),
        ("Yes", math.log(0.05)),
        ("Maybe", math.log(0.01)),
    ],
    "digits": [
        ("3", math.log(0.4)),
        (" 4", math.log(0.3)),
        ("4", math.log(0.1)),
        ("5", math.log(0.1)),
        ("1", math.log(0.05)),
    ],
}


@dataclass
class ServerState:
    """What the server was told to do and what it saw; tests read and set it between calls."""

    fail_first: int = 0
    fail_every: int = 0
    fail_status: int = 503
    retry_after_ms: int | None = None
    retry_after: str | None = None
    should_retry: str | None = None
    echo_auth_in_errors: bool = False
    delay_s: float = 0.0
    jitter_s: float = 0.0
    drip_s: float = 0.0
    raw_body: str | None = None
    raw_content_type: str = "text/html"
    gzip_bomb_mb: int = 0
    flood_status: int = 0
    contents: list[str] = field(default_factory=list)  # replies' message contents, served in turn (then echo)
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    peers: list[int | None] = field(default_factory=list)  # each request's client port: one per connection
    spans: list[tuple[float, float]] = field(default_factory=list)  # each request's (start, end), time.monotonic()
    failed: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    closing: bool = False


async def _sleep(state: ServerState, seconds: float) -> None:
    """``asyncio.sleep`` that ends early when the server shuts down (hanging requests then end quietly)."""
    end = time.monotonic() + seconds
    while not state.closing and (left := end - time.monotonic()) > 0:
        await asyncio.sleep(min(left, 0.05))


def _last_user(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else str(content)
    return ""


def _token(text: Any, logprob: Any) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(str(text).encode("utf-8"))}


def _logprobs(prompt: str, top_n: int) -> dict[str, Any]:
    words = prompt.split()
    table = TOP_LOGPROBS.get(words[0].lower() if words else "", TOP_LOGPROBS["yes"])
    top = table[:top_n]
    first = _token(*top[0])
    first["top_logprobs"] = [_token(*pair) for pair in top]
    return {"content": [first], "refusal": None}


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "evolm-tests"}],
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = await request.json()
        state.requests.append(body)
        authorization = request.headers.get("authorization")
        state.authorizations.append(authorization)
        state.peers.append(request.client.port if request.client else None)
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        started = time.monotonic()
        try:
            prompt = _last_user(body.get("messages", []))
            delay = state.delay_s + state.jitter_s * (zlib.crc32(prompt.encode()) % 1000) / 1000
            if delay:
                await _sleep(state, delay)
            every = state.fail_every and len(state.requests) % state.fail_every == 0
            if state.failed < state.fail_first or every:
                state.failed += 1
                message = (f"injected failure: request {len(state.requests)}" if every
                           else f"injected failure {state.failed} of {state.fail_first}")
                if state.echo_auth_in_errors:
                    message += f" (you sent Authorization: {authorization})"
                headers = {} if state.retry_after_ms is None else {"retry-after-ms": str(state.retry_after_ms)}
                if state.retry_after is not None:
                    headers["retry-after"] = state.retry_after
                if state.should_retry is not None:
                    headers["x-should-retry"] = state.should_retry
                return JSONResponse(
                    {"error": {"message": message, "type": "server_error", "code": state.fail_status}},
                    status_code=state.fail_status,
                    headers=headers,
                )
            if state.drip_s:
                return StreamingResponse(_drip(state, state.drip_s), media_type="application/json")
            if state.flood_status:
                return StreamingResponse(_flood(state), status_code=state.flood_status, media_type="application/json")
            if state.gzip_bomb_mb:
                return Response(_gzip_bomb(state.gzip_bomb_mb), media_type="application/json",
                                headers={"content-encoding": "gzip"})
            if state.raw_body is not None:
                return Response(state.raw_body, media_type=state.raw_content_type)
            words = f"echo: {prompt}".split(" ")
            max_tokens = body.get("max_tokens")
            finish = "stop"
            if max_tokens is not None and len(words) > max_tokens:
                words, finish = words[:max_tokens], "length"
            logprobs = None
            if body.get("logprobs"):
                logprobs = _logprobs(prompt, int(body.get("top_logprobs") or 1))
                words = [str(logprobs["content"][0]["token"])]
            text = state.contents.pop(0) if state.contents else " ".join(words)
            return Response(
                json.dumps({
                    "id": f"chatcmpl-{len(state.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", MODEL_ID),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "logprobs": logprobs,
                            "finish_reason": finish,
                        }
                    ],
                    "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(words),
                              "total_tokens": len(prompt.split()) + len(words)},
                }),
                media_type="application/json",
            )
        finally:
            state.in_flight -= 1
            state.spans.append((started, time.monotonic()))

    return app


async def _drip(state: ServerState, every_s: float) -> Any:
    """A reply body that never finishes: one byte every ``every_s`` seconds, for a minute at most."""
    yield b"{"
    for _ in range(int(60 / every_s)):
        await _sleep(state, every_s)
        if state.closing:
            return
        yield b" "


async def _flood(state: ServerState) -> Any:
    """A reply body that never ends, as fast as the client reads it."""
    chunk = b" " * 65536
    while not state.closing:
        yield chunk
        await asyncio.sleep(0)


def _gzip_bomb(mib: int) -> bytes:
    """A chat completion padded with ``mib`` MiB of spaces, gzip-compressed (a few KB per MiB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = json.dumps({"id": "bomb", "object": "chat.completion", "created": 0, "model": MODEL_ID, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "9"}, "finish_reason": "stop"}]})
    parts = [packer.compress(head[:-1].encode())]
    parts += [packer.compress(b" " * 2**20) for _ in range(mib)]
    return b"".join([*parts, packer.compress(b"}"), packer.flush()])


@dataclass
class RunningServer:
    base_url: str
    state: ServerState


@contextmanager
def run_app(app: FastAPI, lifespan: str = "off", start_timeout_s: float = 10.0,
            what: str = "test server", **options: Any) -> Iterator[int]:
    """Serve ``app`` on a free port of 127.0.0.1 in a background thread until the block ends; yields the port.

    ``options`` go to ``uvicorn.Config`` (``evolm.serve.http.uvicorn_options`` for the reward server's limits).

    Requests still hanging when the block ends are cancelled after a second, not waited for.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan=lifespan, timeout_graceful_shutdown=1, **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def serve() -> Iterator[RunningServer]:
    """Run the fake OpenAI app on a free port of 127.0.0.1 in a background thread until the block ends."""
    state = ServerState()
    with run_app(create_app(state), what="test OpenAI server") as port:
        try:
            yield RunningServer(base_url=f"http://127.0.0.1:{port}/v1", state=state)
        finally:
            state.closing = True  # before the server stops: dripping replies end


def free_port() -> int:
    """A port nothing listens on (bound then released), for 'server is down' tests."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    """Serve the fake app from the command line until interrupted, e.g. a judge that fails every third request:
    ``python tests/openai_server.py --port 8011 --fail-every 3 --fail-status 500``."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--fail-every", type=int, default=0, help="answer every N-th request with --fail-status (1: all)")
    p.add_argument("--fail-status", type=int, default=500)
    args = p.parse_args()
    state = ServerState(fail_every=args.fail_every, fail_status=args.fail_status)
    uvicorn.run(create_app(state), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
