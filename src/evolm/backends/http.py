"""The HTTP layer under the OpenAI-compatible backend: a client whose replies are read to a size cap (``ReplyCap``),
which failures are retried and the wait before a retry (the ``openai`` SDK's rule, for tenacity; ``Retry-After``
honoured), one-line server messages, and the event loop thread the async clients run on (``_ClientLoop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import os
import random
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import httpx
import openai
import tenacity

from evolm.errors import BackendError

_T = TypeVar("_T")

MAX_BACKOFF_S = 8.0
"""Longest wait between attempts of our own choosing (``backoff``), the ``openai`` SDK's ``MAX_RETRY_DELAY``."""


class ReplyTooLarge(httpx.RequestError):
    """A reply body past the backend's ``max_reply_mb`` (after decompression)."""


class ReplyCap(httpx.AsyncBaseTransport):
    """An httpx transport that reads at most ``max_bytes`` of a reply body, decompressed, else ``ReplyTooLarge``.

    httpx reads a whole body into memory whatever its size, and inflates a gzip reply whole: a 2 MB
    gzip bomb took 5 GB, an endless chunked reply grew until the timeout. So this transport asks
    for gzip or deflate only, decompresses them itself with a bounded output per step (the body
    then reaches httpx plain, its encoding headers removed), counts the bytes as they come and
    stops at the cap. Any other content encoding is refused.
    """

    _ACCEPT = "gzip, deflate"

    def __init__(self, inner: httpx.AsyncBaseTransport, max_bytes: int) -> None:
        self.inner, self.max_bytes = inner, max_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["accept-encoding"] = self._ACCEPT
        response = await self.inner.handle_async_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
            await response.aclose()
            raise ReplyTooLarge(f"the reply's content encoding '{_snippet(encoding, 40)}' was not asked for "
                                f"(only {self._ACCEPT})", request=request)
        length = response.headers.get("content-length", "")
        if encoding in ("identity", "") and length.isdigit() and int(length) > self.max_bytes:
            await response.aclose()
            raise self._too_large(request)
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length")]
        stream = _CappedStream(response.stream, encoding, self, request)  # type: ignore[arg-type]
        return httpx.Response(response.status_code, headers=headers, stream=stream, extensions=response.extensions)

    def _too_large(self, request: httpx.Request) -> ReplyTooLarge:
        return ReplyTooLarge(f"the reply is over the {self.max_bytes / 2**20:g} MiB limit (max_reply_mb, "
                             "--max-reply-mb); not read further", request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


KEEPALIVE_EXPIRY_S = 4.0  # below uvicorn's timeout_keep_alive (5 s)


def capped_client(timeout_s: float, max_bytes: int) -> httpx.AsyncClient:
    """The ``openai`` client's HTTP client (its defaults: 1000 connections, redirects followed, proxies from the
    environment) with every transport, the proxies' too, behind ``ReplyCap``.

    An idle kept-alive connection is dropped after ``KEEPALIVE_EXPIRY_S``, before the server drops it: uvicorn (under
    `vllm serve` and most OpenAI-compatible servers) closes one idle for 5 s, httpx's own default, so a request sent
    on a connection idle for just under 5 s could meet the server's close and cost a retry."""
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=KEEPALIVE_EXPIRY_S)
    client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits, follow_redirects=True,
                               transport=ReplyCap(httpx.AsyncHTTPTransport(limits=limits), max_bytes))
    mounts = getattr(client, "_mounts", None)  # the environment's proxies, each its own transport
    if isinstance(mounts, dict):
        client._mounts = {k: ReplyCap(t, max_bytes) if t is not None else None for k, t in mounts.items()}
    return client


class _CappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, encoding: str, cap: ReplyCap, request: httpx.Request) -> None:
        self.inner, self.cap, self.request = inner, cap, request
        self.encoding = encoding

    async def __aiter__(self):  # noqa: ANN204 - an async generator of bytes
        import zlib

        inflate = None
        if self.encoding in ("gzip", "x-gzip"):
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        read = received = 0  # bytes decompressed, bytes on the wire: both capped
        step = 1 << 16
        async for chunk in self.inner:
            received += len(chunk)
            if received > self.cap.max_bytes:
                raise self.cap._too_large(self.request)
            if inflate is None and self.encoding == "deflate":  # zlib-wrapped, as the RFC says, or raw as some send
                inflate = zlib.decompressobj(zlib.MAX_WBITS if chunk[:1] and chunk[0] & 0x0F == 8 else -zlib.MAX_WBITS)
            pending = chunk
            while pending:
                try:
                    out = inflate.decompress(pending, step) if inflate is not None else pending
                except zlib.error as e:
                    raise httpx.DecodingError(f"the reply's {self.encoding} body is corrupt ({e})",
                                              request=self.request) from None
                pending = inflate.unconsumed_tail if inflate is not None else b""
                read += len(out)
                if read > self.cap.max_bytes:
                    raise self.cap._too_large(self.request)
                if out:
                    yield out
                if inflate is not None and inflate.eof:
                    break  # what follows the compressed stream is not read as content (nor kept)

    async def aclose(self) -> None:
        await self.inner.aclose()


def retryable(exc: BaseException) -> bool:
    """Whether an attempt that failed with ``exc`` is worth another, by the ``openai`` SDK's rule (``_should_retry``):
    connection errors and timeouts; HTTP 408, 409, 429 and 5xx, unless the server's ``x-should-retry`` says otherwise.

    The SDK also refuses a ``Retry-After`` over two minutes; here the request's deadline decides, and another endpoint
    of the pool may take the retry at once.

    >>> retryable(TimeoutError()), retryable(ValueError("a bug, not the server"))
    (True, False)
    """
    if isinstance(exc, openai.APIStatusError):
        should = exc.response.headers.get("x-should-retry")
        if should in ("true", "false"):
            return should == "true"
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return isinstance(exc, TimeoutError | openai.APIConnectionError | httpx.HTTPError)


_EXPONENTIAL = tenacity.wait_exponential(multiplier=0.5, max=MAX_BACKOFF_S)


def backoff(state: tenacity.RetryCallState) -> float:
    """The ``openai`` SDK's wait after failed attempt n (``_calculate_retry_timeout``): 0.5 s doubling up to 8 s,
    less up to 25 % of jitter."""
    return _EXPONENTIAL(state) * (1 - 0.25 * random.random())


def retry_after(headers: httpx.Headers) -> float | None:
    """The server's ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date), in seconds."""
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            value = float(ms) / 1000
        elif (text := headers.get("retry-after")) is not None:
            try:
                value = float(text)
            except ValueError:
                value = email.utils.parsedate_to_datetime(text).timestamp() - time.time()
        else:
            return None
    except (TypeError, ValueError, OverflowError):
        return None
    return max(value, 0.0) if math.isfinite(value) else None


def _snippet(content: bytes | str, limit: int = 200) -> str:
    """The start of a reply body, on one line."""
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
    text = " ".join(text.split())
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own error message, shortened (bodies can be whole HTML pages)."""
    body = exc.body
    message: object = body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message", inner) if isinstance(inner, dict) else inner
    text = str(message) if message is not None else exc.message
    return text if len(text) <= 300 else text[:300] + "..."


def _first_error(group: BaseExceptionGroup) -> BaseException:
    """The first ``BackendError`` in a task group's failures, else its first failure (a bug), never the group."""
    leaves: list[BaseException] = []

    def walk(g: BaseExceptionGroup) -> None:
        for exc in g.exceptions:
            walk(exc) if isinstance(exc, BaseExceptionGroup) else leaves.append(exc)

    walk(group)
    return next((exc for exc in leaves if isinstance(exc, BackendError)), leaves[0] if leaves else group)


class _ClientLoop:
    """An event loop in a daemon thread, owned by one backend, where its HTTP clients live and are used.

    httpx clients belong to the event loop that opened them, so they cannot be kept in a caller's loop
    (``asyncio.run`` makes a new one per call, TRL has its own): every call, from any thread, runs its
    batch here instead (``run``) and blocks until it is done, as a synchronous call should. The clients
    are opened by the first batch and kept, with their connections, until ``close``.
    """

    _current: threading.local = threading.local()  # the loop thread's own _ClientLoop

    def __init__(self, name: str) -> None:  # nothing here refers to the backend, which the garbage collector may end
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._clients: dict[int, openai.AsyncOpenAI] | None = None
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        _ClientLoop._current.value = self
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    @staticmethod
    def clients(open_clients: Callable[[], dict[int, openai.AsyncOpenAI]]) -> dict[int, openai.AsyncOpenAI]:
        """The clients of the loop running this coroutine, opened by ``open_clients`` on first use (only the loop's
        thread touches them)."""
        owner: _ClientLoop = _ClientLoop._current.value
        if owner._clients is None:
            owner._clients = open_clients()
        return owner._clients

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` here and return its result; a caller interrupted while waiting cancels it."""
        if getattr(_ClientLoop._current, "value", None) is self:
            coroutine.close()
            raise RuntimeError("openai backend: called from inside its own event loop (it would wait for itself)")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # KeyboardInterrupt and the like: the batch's requests stop and give back their slots
            raise

    def close(self, timeout_s: float = 5.0) -> None:
        """Close the clients and stop the thread (in the process that started it; a fork's child only drops it)."""
        if self.pid != os.getpid() or not self.thread.is_alive():
            return
        if threading.current_thread() is self.thread:  # the backend's last reference went away on its own loop
            self.loop.create_task(self._close_clients()).add_done_callback(lambda _: self.loop.stop())
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close_clients(), self.loop).result(timeout_s)
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout_s)

    async def _close_clients(self) -> None:
        clients, self._clients = self._clients, None
        await asyncio.gather(*(c.close() for c in (clients or {}).values()), return_exceptions=True)
