"""A pool of OpenAI-compatible endpoints serving one model: which endpoint the next request goes to.

At scale the judge runs as several ``vllm serve`` replicas (or several API keys' worth of a hosted
model). ``EndpointPool`` holds their state for one ``OpenAIBackend`` (no globals) and is shared by
every call and thread using that backend, so its limits hold for the whole process:

- **least loaded first**: a request goes to the endpoint with the fewest requests in flight; ties
  go round-robin, so a pool of idle endpoints is used evenly;
- **concurrency**: at most ``max_concurrency`` requests in flight to each endpoint; a request waits
  (first come, first served) for a free slot;
- **rates** (optional): ``requests_per_minute`` and ``tokens_per_minute`` per endpoint, as token
  buckets refilled continuously that hold one second's worth (at least one request), which is how
  hosted APIs and gateways enforce a per-minute limit. A request's tokens are estimated before it
  is sent as its message characters / 3 + ``max_tokens`` (a generous bound: replies usually stop
  early) and corrected to the server's ``usage`` when the reply reports it;
- **health**: after ``FAILURES_BEFORE_COOLDOWN`` failed attempts in a row (connection refused,
  timeouts, 408/409/429/5xx) an endpoint is skipped for ``COOLDOWN_S`` seconds, and one that answers
  with ``Retry-After`` (a rate limit, a full queue) is skipped for as long as it asked; one success
  makes it healthy again. When every endpoint is cooling down, they are all used anyway: a pool of one
  endpoint behaves as a plain URL does;
- a retry prefers endpoints that have not failed this request yet (``avoid``).

Deadlines and retries are the backend's (``evolm.backends.openai``); the pool only says where and
when. Counters per endpoint (``Usage``: attempts, failures, retries, tokens from the servers'
``usage``, seconds) are kept for the judge's per-step logging.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

FAILURES_BEFORE_COOLDOWN = 3
"""Failed attempts in a row after which an endpoint is skipped for a while."""
COOLDOWN_S = 30.0
"""How long an endpoint that keeps failing is skipped (other endpoints permitting)."""
CHARS_PER_TOKEN = 3
"""Token estimate of a request before it is sent: characters / 3 + max_tokens (see the module docstring)."""


@dataclass
class Usage:
    """Counters of one endpoint (or a sum of them). Subtract two snapshots for what happened in between."""

    requests: int = 0  # attempts sent
    failures: int = 0  # attempts that failed with a retryable error (connection, timeout, 408/409/429/5xx)
    retries: int = 0  # attempts that followed a failed one of the same request
    prompt_tokens: int = 0  # from the servers' usage, when they report it
    completion_tokens: int = 0
    latency_s: float = 0.0  # wall seconds of all attempts, summed (not the elapsed time of a batch)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True)))

    def __sub__(self, other: Usage) -> Usage:
        return Usage(*(a - b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True)))


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of every endpoint's ``Usage``, by URL."""

    endpoints: dict[str, Usage]

    @property
    def total(self) -> Usage:
        return sum(self.endpoints.values(), Usage())

    def since(self, earlier: PoolStats) -> PoolStats:
        """What happened between ``earlier`` and this snapshot."""
        return PoolStats({u: s - earlier.endpoints.get(u, Usage()) for u, s in self.endpoints.items()})


class _Bucket:
    """A per-minute limit as a token bucket: refilled continuously, holding one second's worth (at least 1).

    Not aiolimiter's ``AsyncLimiter``: it refuses a cost above its capacity (a request estimated past one second's
    tokens), gives nothing back (the server's ``usage`` refunds the estimate here), cannot say how long until a cost
    fits (``_pick`` compares endpoints by that, under a thread lock), and reads the running event loop's clock."""

    def __init__(self, per_minute: float, now: float) -> None:
        self.rate = per_minute / 60.0  # per second
        self.capacity = max(self.rate, 1.0)
        self.level, self.stamp = self.capacity, now

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait(self, cost: float, now: float) -> float:
        """Seconds until ``cost`` may be taken (more than the capacity waits for a full bucket, then leaves a debt)."""
        self._refill(now)
        need = min(cost, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def take(self, cost: float, now: float) -> None:
        self._refill(now)
        self.level -= cost

    def refund(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level = min(self.capacity, self.level + amount)


@dataclass(eq=False)
class Endpoint:
    """One server of the pool and its state (read and written under the pool's lock)."""

    url: str | None
    index: int
    in_flight: int = 0
    failed_in_a_row: int = 0
    cool_until: float = 0.0
    usage: Usage = field(default_factory=Usage)
    rpm: _Bucket | None = None
    tpm: _Bucket | None = None

    def rate_wait(self, tokens: float, now: float) -> float:
        return max(self.rpm.wait(1, now) if self.rpm else 0.0, self.tpm.wait(tokens, now) if self.tpm else 0.0)


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    tokens: float
    avoid: tuple[Endpoint, ...]
    wake: asyncio.Future[None]
    endpoint: Endpoint | None = None  # handed over by a release


class EndpointPool:
    """The endpoints of one backend, shared safely by every call, event loop and thread using it."""

    def __init__(self, urls: Sequence[str | None], max_concurrency: int, requests_per_minute: float = 0,
                 tokens_per_minute: float = 0) -> None:
        now = time.monotonic()
        self.max_concurrency = max_concurrency
        self.endpoints = [
            Endpoint(url, i, rpm=_Bucket(requests_per_minute, now) if requests_per_minute else None,
                     tpm=_Bucket(tokens_per_minute, now) if tokens_per_minute else None)
            for i, url in enumerate(urls)
        ]
        self._lock = threading.Lock()
        self._waiters: list[_Waiter] = []
        self._cursor = 0  # round-robin among equally loaded endpoints

    # ---------------------------------------------------------------- choosing an endpoint

    async def acquire(self, tokens: float, avoid: Collection[Endpoint] = (), deadline: float | None = None,
                      retry: bool = False) -> Endpoint | None:
        """A slot on the best endpoint for a request of about ``tokens`` tokens; ``None`` if ``deadline`` passes first.

        ``avoid``: endpoints to use only when no other healthy one exists (those that failed this
        request); ``retry``: the attempt follows a failed one (counted). Call ``release`` when the
        attempt is over, whatever happened.
        """
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop, tokens, tuple(avoid), loop.create_future())
        try:
            while True:
                with self._lock:
                    now, wait = time.monotonic(), None
                    if waiter.endpoint is None:  # else a release handed it a slot while it slept
                        chosen, wait = self._pick(waiter, now)
                        if chosen is not None:
                            self._start(chosen, waiter, now)
                    if waiter.endpoint is not None:
                        self._forget(waiter)
                        waiter.endpoint.usage.retries += int(retry)
                        return waiter.endpoint
                    if deadline is not None:
                        wait = min(wait if wait is not None else deadline - now, deadline - now)
                        if wait <= 0:
                            self._forget(waiter)
                            return None
                    if waiter not in self._waiters:
                        self._waiters.append(waiter)
                    if waiter.wake.done():
                        waiter.wake = loop.create_future()
                await asyncio.wait([waiter.wake], timeout=wait)  # a release, a refilled rate bucket, or the deadline
        except BaseException:  # cancelled (the batch failed elsewhere): leave the queue, give back a slot handed over
            with self._lock:
                self._forget(waiter)
                handed, waiter.endpoint = waiter.endpoint, None
            if handed is not None:
                self.release(handed, ok=None)
            raise

    def _forget(self, waiter: _Waiter) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)

    def _pick(self, waiter: _Waiter, now: float) -> tuple[Endpoint | None, float | None]:
        """The endpoint to use now, or ``None`` and how long a rate limit makes it wait (``None``: until a release)."""
        healthy = [e for e in self.endpoints if e.cool_until <= now]
        candidates = [e for e in healthy if e not in waiter.avoid] or healthy or self.endpoints
        free = [e for e in candidates if e.in_flight < self.max_concurrency]
        if not free:
            return None, None
        waits = [e.rate_wait(waiter.tokens, now) for e in free]
        ready = [e for e, w in zip(free, waits, strict=True) if w <= 0]
        if not ready:
            return None, min(waits)
        least = min(e.in_flight for e in ready)
        n = len(self.endpoints)
        chosen = min((e for e in ready if e.in_flight == least), key=lambda e: (e.index - self._cursor) % n)
        self._cursor = chosen.index + 1
        return chosen, 0.0

    def _start(self, endpoint: Endpoint, waiter: _Waiter, now: float) -> None:
        endpoint.in_flight += 1
        if endpoint.rpm:
            endpoint.rpm.take(1, now)
        if endpoint.tpm:
            endpoint.tpm.take(waiter.tokens, now)
        waiter.endpoint = endpoint

    def has_alternative(self, avoid: Collection[Endpoint]) -> bool:
        """Whether a healthy endpoint outside ``avoid`` exists (a retry can go there at once, without backing off)."""
        now = time.monotonic()
        with self._lock:
            return any(e.cool_until <= now and e not in avoid for e in self.endpoints)

    # ---------------------------------------------------------------- after an attempt

    def release(self, endpoint: Endpoint, ok: bool | None, seconds: float = 0.0, tokens: float = 0.0,
                usage: tuple[int, int] | None = None, cool_s: float | None = None) -> None:
        """End an attempt: ``ok`` True (a reply), False (a failure that counts against the endpoint's health) or
        ``None`` (neither: cancelled, or a reply the caller refused); ``usage`` is the server's (prompt,
        completion) tokens, which replace the estimate ``tokens`` in the tokens-per-minute bucket; ``cool_s``
        is how long the server asked to be left alone (a 429's or 503's ``Retry-After``): a failure with it
        skips the endpoint that long, whatever its count of failures in a row."""
        with self._lock:
            now = time.monotonic()
            endpoint.in_flight -= 1
            if ok is not None or seconds:
                endpoint.usage.requests += 1
                endpoint.usage.latency_s += seconds
            if ok is True:
                endpoint.failed_in_a_row = 0
            elif ok is False:
                endpoint.usage.failures += 1
                endpoint.failed_in_a_row += 1
                if endpoint.failed_in_a_row >= FAILURES_BEFORE_COOLDOWN:
                    endpoint.cool_until = now + COOLDOWN_S
                if cool_s:
                    endpoint.cool_until = max(endpoint.cool_until, now + cool_s)
            if usage is not None:
                endpoint.usage.prompt_tokens += usage[0]
                endpoint.usage.completion_tokens += usage[1]
                if endpoint.tpm:
                    endpoint.tpm.refund(tokens - sum(usage), now)
            self._dispatch(now)

    def _dispatch(self, now: float) -> None:
        """Hand free slots to waiting requests, first come first served (under the lock)."""
        for waiter in list(self._waiters):
            if all(e.in_flight >= self.max_concurrency for e in self.endpoints):
                return  # nothing left to hand out
            chosen, _ = self._pick(waiter, now)
            if chosen is None:
                continue
            self._waiters.remove(waiter)
            self._start(chosen, waiter, now)
            try:
                waiter.loop.call_soon_threadsafe(_wake, waiter.wake)
            except RuntimeError:  # its event loop is gone: nobody will use the slot
                chosen.in_flight -= 1
                waiter.endpoint = None

    def stats(self) -> PoolStats:
        """A snapshot of every endpoint's counters, keyed by URL (``"default"``: the client's own; a URL listed
        twice gets `` #index`` after its second mention)."""
        out: dict[str, Usage] = {}
        with self._lock:
            for e in self.endpoints:
                key = e.url or "default"
                out[key if key not in out else f"{key} #{e.index}"] = dataclasses.replace(e.usage)
        return PoolStats(out)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def estimate_tokens(messages: Sequence[dict], max_tokens: int | None) -> float:
    """Tokens a request may use, before it is sent: its text's characters / 3 + its reply budget."""
    chars = sum(len(m["content"]) for m in messages if isinstance(m.get("content"), str))
    return chars / CHARS_PER_TOKEN + (max_tokens or 0)
