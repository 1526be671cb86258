"""Backend for any OpenAI-compatible chat server (``vllm serve``, SGLang, the OpenAI API): how the judge runs at
scale (docs/METHOD.md §6), a separate server with many requests in flight from every training process. Each
conversation is its own chat completion, sent to the least-loaded of one or several endpoints (``evolm.backends.pool``),
each attempt bounded in wall-clock time and retried by tenacity within one deadline (``OpenAIBackend._complete``).
What a request carries and how a reply is read: ``evolm.backends.completions``."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import httpx
import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tqdm.auto import tqdm

from evolm.backends.base import THINK_OPEN, Conversation, SamplingParams, chat_kwargs, match_candidates
from evolm.backends.completions import (
    SERVER_SAMPLING,
    Unreadable,
    extra_body,
    first_choice,
    is_openai_api,
    neutralize_control_tokens,
    top_logprobs,
)
from evolm.backends.constrained import openai_response_format, schema_name
from evolm.backends.http import (
    MAX_BACKOFF_S,
    ReplyTooLarge,
    _ClientLoop,
    _first_error,
    _server_message,
    _snippet,
    backoff,
    capped_client,
    retry_after,
    retryable,
)
from evolm.backends.pool import Endpoint, EndpointPool, PoolStats, estimate_tokens
from evolm.config import endpoint_urls
from evolm.errors import BackendError

_T = TypeVar("_T")
log = logging.getLogger(__name__)

TOP_LOGPROBS = 20
"""How many next tokens the probability modes ask for (the most ``vllm serve`` allows by default)."""

DEFAULT_TIMEOUT_S = 120.0
"""Wall-clock limit of one attempt (connect, wait, read the whole reply)."""
DEFAULT_MAX_RETRIES = 2
"""Retries after the first attempt (so at most three attempts)."""
DEFAULT_MAX_REPLY_MB = 8.0
"""Largest reply body read, in MiB after decompression (a chat completion with 20 top logprobs is a few KB)."""

class OpenAIBackend:
    """Chat completions over HTTP, many in flight, results in input order.

    The API key comes from the environment variable ``api_key_env`` (secrets are the one thing we
    read from the environment); when it is unset we send ``"EMPTY"``, which local servers such
    as ``vllm serve`` without ``--api-key`` accept. The key never appears in ``repr`` or in errors.

    ``base_url``: one URL, several (a list, or comma-separated) serving the same model, or ``None``
    (the ``openai`` client's default). ``max_concurrency`` bounds the requests in flight to each
    endpoint, over every call and thread using this backend; ``requests_per_minute`` and
    ``tokens_per_minute`` (0: none) limit each endpoint's rate (``evolm.backends.pool``).
    ``timeout_s`` bounds each attempt in wall-clock time (not per read); ``max_retries`` is the
    number of retries after the first attempt. One request, retries, waits and endpoint changes
    included, ends within ``deadline_s`` seconds from its first attempt (default ``(max_retries + 1) *
    timeout_s + max_retries * 8``; rows wait for a free slot first; a failed row stops the rest).

    ``send_template_kwargs``: whether fields outside the OpenAI schema are sent: non-empty chat-template
    kwargs (as the ``chat_template_kwargs`` field that vLLM and SGLang read) and, in ``generate``,
    ``SERVER_SAMPLING``. ``None`` (default): sent unless the server is the OpenAI API
    (``api.openai.com``, Azure OpenAI), which answers HTTP 400 to unknown fields; ``False`` for any
    other strict server.

    ``neutralize_control_tokens``: insert a zero-width space after ``<|`` in message text
    (``evolm.backends.completions.neutralize_control_tokens``); on by default.

    ``max_reply_mb``: the most of a reply body read, in MiB after decompression (``ReplyCap``); a
    larger reply (an error body too) fails its request at once, one line, not retried.

    ``fallback_model``: in ``generate``, a request still failing after its retries is sent again, with
    retries of its own, to this model at the same endpoints (as litellm's ``fallbacks``; the authors'
    GPT-4.1 rubric writer falls back to gpt-4.1-mini); ``None``: the failure stands.
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | Sequence[str] | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 32,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        send_template_kwargs: bool | None = None,
        neutralize_control_tokens: bool = True,
        requests_per_minute: float = 0,
        tokens_per_minute: float = 0,
        deadline_s: float | None = None,
        max_reply_mb: float = DEFAULT_MAX_REPLY_MB,
        fallback_model: str | None = None,
    ) -> None:
        if not (isinstance(max_reply_mb, int | float) and math.isfinite(max_reply_mb) and max_reply_mb > 0):
            raise BackendError(f"openai backend: max_reply_mb must be a positive number, got {max_reply_mb}")
        if max_concurrency < 1:
            raise BackendError(f"openai backend: max_concurrency must be at least 1, got {max_concurrency}")
        for name, rate in (("requests_per_minute", requests_per_minute), ("tokens_per_minute", tokens_per_minute)):
            if not (isinstance(rate, int | float) and math.isfinite(rate) and rate >= 0):
                raise BackendError(f"openai backend: {name} must be 0 (no limit) or more, got {rate}")
        urls = endpoint_urls(base_url)
        if not urls:
            raise BackendError(f"openai backend: base_url names no URL: {base_url!r}")
        if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
            raise BackendError(f"openai backend: max_retries must be 0 or more, got {max_retries}")
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise BackendError(f"openai backend: timeout must be a positive number of seconds, got {timeout_s}")
        if deadline_s is not None and not (isinstance(deadline_s, int | float) and math.isfinite(deadline_s)
                                           and deadline_s > 0):
            raise BackendError(f"openai backend: deadline must be a positive number of seconds, got {deadline_s}")
        self.model = model
        self.fallback_model = fallback_model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self._deadline_s = None if deadline_s is None else float(deadline_s)
        self.max_reply_mb = float(max_reply_mb)
        self.send_template_kwargs = send_template_kwargs
        self.neutralize_control_tokens = neutralize_control_tokens
        self._api_key = os.environ.get(api_key_env) or "EMPTY"
        self._pool = EndpointPool(urls, max_concurrency, requests_per_minute, tokens_per_minute)
        self._loop: _ClientLoop | None = None  # started by the first call (and again after close() or a fork)
        self._loop_lock = threading.Lock()
        self._closer: weakref.finalize | None = None

    def __repr__(self) -> str:
        return (
            f"OpenAIBackend(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key_env={self.api_key_env!r}, max_concurrency={self.max_concurrency}, "
            f"timeout_s={self.timeout_s:g}, max_retries={self.max_retries})"
        )

    @property
    def deadline_s(self) -> float:
        """The longest one request may take, retries and the waits between them included: ``deadline_s`` when
        given, else ``(max_retries + 1) * timeout_s + max_retries * 8``."""
        if self._deadline_s is not None:
            return self._deadline_s
        return (self.max_retries + 1) * self.timeout_s + self.max_retries * MAX_BACKOFF_S

    def close(self) -> None:
        """Close the HTTP clients and stop the backend's event loop thread (a later call starts them again).

        Call it when no call is in flight. Not needed at exit or when the backend is garbage-collected:
        that closes them too."""
        with self._loop_lock:
            closer, self._loop, self._closer = self._closer, None, None
        if closer is not None:
            closer()

    def stats(self) -> PoolStats:
        """Counters since this backend was made, per endpoint (``.total`` sums them; ``a.since(b)`` for a delta):
        attempts, failures, retries, prompt and completion tokens as the servers reported them, seconds."""
        return self._pool.stats()

    # ------------------------------------------------------------------ public API

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams, *, progress: bool = False,
        failures: dict[int, str] | None = None,
    ) -> list[str]:
        """One completion per conversation, in order; raises ``BackendError`` if any row fails.

        With ``params.seed`` set, row ``i`` is sent ``seed + i``: repeatable, yet two identical
        prompts in one batch (a group of samples) still get different completions; with
        ``params.seed_per_row`` false every row is sent ``seed`` itself, so identical prompts get
        the same completion (as the authors' judge requests do). A reply that is not a chat
        completion raises a one-line ``BackendError``. ``params.json_schema`` goes as
        ``response_format`` (``evolm.backends.constrained.openai_response_format``): the server renders the
        prompt, so a thinking model needs the server's reasoning parser to think before the JSON.
        Servers that take extra fields also get ``SERVER_SAMPLING`` (no top-k, min-p or repetition
        penalty of the server's choosing).

        ``failures``: a dict to fill instead of raising: a row whose request fails after its retries
        gets ``""`` and its index mapped to the one-line error; the other rows are kept.
        """
        body: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p}
        body["max_tokens"] = params.max_new_tokens
        if params.json_schema is not None:
            body["response_format"] = openai_response_format(params.json_schema, schema_name(params.json_schema))

        template_kwargs = chat_kwargs(params.chat_template_kwargs)

        async def one(clients: dict[int, openai.AsyncOpenAI], index: int, conversation: Conversation) -> str:
            seed: dict[str, Any] = {} if params.seed is None else {
                "seed": params.seed + index if params.seed_per_row else params.seed}
            try:
                url, choice = await self._complete(clients, conversation, {**body, **seed}, template_kwargs,
                                                   sampling=SERVER_SAMPLING)
            except BackendError:
                if self.fallback_model is None:
                    raise
                url, choice = await self._complete(clients, conversation, {**body, **seed}, template_kwargs,
                                                   sampling=SERVER_SAMPLING, model=self.fallback_model)
            message = choice.get("message")
            # A server with a reasoning parser may put everything in reasoning_content and leave
            # content None (e.g. thinking cut off by max_tokens): that is an empty answer, not a failure.
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(message, dict | None) or not isinstance(content, str | None):
                raise BackendError(
                    self._redact(f"openai backend: {url} returned a malformed message: "
                                 f"{_snippet(json.dumps(message, default=str))}")
                )
            return content or ""

        return self._run(self._map(one, conversations, progress=progress, failures=failures, blank=""))

    def next_token_logprobs(
        self,
        conversations: Sequence[Conversation],
        candidates: Sequence[str],
        *,
        chat_template_kwargs: dict[str, Any] | None = None,
        failures: dict[int, str] | None = None,
    ) -> list[dict[str, float]]:
        """Log-probabilities of each candidate as the reply's first token, one dict per conversation.

        One greedy completion of one token with the top 20 alternatives; candidates are matched
        with ``match_candidates`` (case and surrounding spaces ignored, variants summed). Thinking is
        turned off (``enable_thinking: false``, whatever the caller asked): Qwen3-style templates then end the prompt
        with an empty think block, so the one-token read is the score. A reply that opens ``<think>`` anyway (a
        template that ignores the flag) raises ``BackendError``; templates that open the block in the prompt (R1 or
        Thinking-2507 style) cannot be detected here: serve those judges with the ``vllm`` or ``hf`` backend.

        Every row is a dict with exactly the candidates as keys and values in ``[-inf, 0]``, never
        NaN or ``+inf``. A row whose candidates are all ``-inf`` has no readable score: none of them
        was among the top tokens, or the reply's logprobs were malformed (non-numeric, NaN,
        infinite, positive beyond rounding; logged as a warning). Replies that are not chat
        completions at all, or carry no logprobs, raise ``BackendError`` (one line).
        ``failures``: as in ``generate``; a failed row has every candidate at ``-inf``.
        """
        template_kwargs = {**chat_kwargs(chat_template_kwargs), "enable_thinking": False}
        unreadable: list[str] = []

        async def one(
            clients: dict[int, openai.AsyncOpenAI], index: int, conversation: Conversation
        ) -> dict[str, float]:
            body = {"max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": TOP_LOGPROBS}
            url, choice = await self._complete(clients, conversation, body, template_kwargs)
            if choice.get("logprobs") is None:
                raise BackendError(
                    f"openai backend: {url} returned no logprobs "
                    "(the server must support logprobs/top_logprobs for the judge's probability modes)"
                )
            try:
                top = top_logprobs(choice["logprobs"])
            except Unreadable as exc:
                unreadable.append(str(exc))
                return {candidate: -math.inf for candidate in candidates}
            if top and top[0][0].strip() == THINK_OPEN:
                raise BackendError(
                    f"openai backend: {url}: the judge starts its reply with {THINK_OPEN} "
                    "although enable_thinking is false, so its first token is no score (serve it with a chat "
                    "template that honours enable_thinking, or use the hf or vllm backend)"
                )
            # Variants of one candidate add up; a server whose probabilities sum past 1 is clamped.
            return {c: min(v, 0.0) for c, v in match_candidates(top[1:], candidates).items()}

        blank = {candidate: -math.inf for candidate in candidates}
        rows = self._run(self._map(one, conversations, progress=False, failures=failures, blank=blank))
        if unreadable:
            log.warning(
                self._redact(f"openai backend: {len(unreadable)} of {len(rows)} replies had unreadable logprobs "
                             f"(no score for them; first: {unreadable[0]})")
            )
        return rows

    # ------------------------------------------------------------------ internals

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the backend's event loop (started here when needed) and wait for its result.

        The loop runs in a daemon thread and keeps one ``AsyncOpenAI`` client per endpoint, and its open connections,
        from call to call; every caller (any thread, inside a running event loop or not) hands its batch to it and
        waits. Opening the clients anew for each call cost about 65 ms of CPU (docs/PERFORMANCE.md)."""
        with self._loop_lock:
            loop = self._loop
            if loop is None or loop.pid != os.getpid():  # a forked child has the loop but not its thread
                loop = self._loop = _ClientLoop(f"evolm-openai-{self.model}"[:60])
                self._closer = weakref.finalize(self, loop.close)
        return loop.run(coroutine)

    def _open_clients(self) -> dict[int, openai.AsyncOpenAI]:
        """One client per endpoint, each with its own connection pool behind ``ReplyCap``."""
        return {
            e.index: openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=e.url,
                timeout=httpx.Timeout(self.timeout_s),
                max_retries=0,  # tenacity's, over the pool's endpoints: see _complete
                http_client=capped_client(self.timeout_s, int(self.max_reply_mb * 2**20)),
            )
            for e in self._pool.endpoints
        }

    def _messages(self, conversation: Conversation) -> list[dict[str, Any]]:
        if not self.neutralize_control_tokens:
            return [dict(m) for m in conversation]
        return [
            {**m, "content": neutralize_control_tokens(m["content"])} if isinstance(m.get("content"), str) else dict(m)
            for m in conversation
        ]

    async def _complete(
        self, clients: dict[int, openai.AsyncOpenAI], conversation: Conversation, body: dict[str, Any],
        template_kwargs: dict[str, Any], sampling: dict[str, Any] | None = None, model: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The URL that answered and the first choice of one chat completion, retried and bounded.

        Retries are tenacity's, with the ``openai`` client's own rule of what to retry (``http.retryable``: connection
        errors, timeouts, 408, 409, 429 and 5xx, or what the ``x-should-retry`` header says), but not the client's own
        loop (``max_retries=0``): that loop sends every retry to its one ``base_url``, and its timeout is
        per socket read, so a server that drips a byte every few seconds keeps a request open forever. Here each
        attempt asks the pool for an endpoint and is bounded in wall-clock time by ``timeout_s`` (connecting, waiting
        and reading the whole body), and the request with its retries by ``deadline_s``, counted from its first
        attempt. A retry goes at once to another healthy endpoint that has not failed this request when the pool has
        one; otherwise to the same one after exponential backoff (0.5 s to 8 s, jittered), or after the server's
        ``retry-after`` when that fits in the deadline (a longer one ends the request at once). The final failure is
        one ``BackendError`` line naming the last URL, the status and the attempts really made, never the key.

        ``sampling``: fields outside the OpenAI schema, sent where ``send_template_kwargs`` allows; ``model``: another
        model than the backend's (``fallback_model``)."""
        messages = self._messages(conversation)
        tokens = estimate_tokens(messages, body.get("max_tokens"))
        tried: list[Endpoint] = []  # endpoints that failed this request, in order: one per attempt made
        start, deadline, url = 0.0, None, ""  # the deadline counts from the first attempt, not the wait for a slot
        failure: BaseException | None = None
        asked: float | None = None  # the last failure's Retry-After

        def wait(state: RetryCallState) -> float:  # another endpoint takes the retry at once when there is one
            return 0.0 if self._pool.has_alternative(tried) else asked if asked is not None else backoff(state)

        def past_deadline(state: RetryCallState) -> bool:  # the wait and a short attempt no longer fit
            return state.upcoming_sleep + min(self.timeout_s, 1.0) > deadline - time.monotonic()

        attempts = AsyncRetrying(retry=retry_if_exception(retryable), wait=wait, reraise=True,
                                 stop=stop_after_attempt(self.max_retries + 1) | past_deadline)
        try:
            async for attempt in attempts:
                with attempt:
                    endpoint = await self._pool.acquire(tokens, tried, deadline, retry=bool(tried))
                    if endpoint is None:  # a retry found no free endpoint before the deadline
                        error = self._error(url, failure, len(tried), time.monotonic() - start, None, len(set(tried)))
                        raise BackendError(f"{error}; no endpoint was free for a retry before the deadline")
                    if deadline is None:
                        start = time.monotonic()
                        deadline = start + self.deadline_s
                    client = clients[endpoint.index]
                    url = self._url(client)
                    sent, outcome, usage, asked = time.monotonic(), None, None, None
                    cut = deadline - sent < self.timeout_s - 0.01  # the deadline, not timeout_s, bounds this attempt
                    try:
                        async with asyncio.timeout(min(self.timeout_s, deadline - sent)):
                            raw = await client.chat.completions.with_raw_response.create(
                                model=model or self.model, messages=messages, **body,
                                **self._extra_body(client, template_kwargs, sampling)
                            )
                            content = raw.content
                        choice, usage = self._first_choice(url, content)
                        outcome = True
                    except (TimeoutError, openai.APIError, httpx.HTTPError) as exc:
                        if isinstance(exc.__cause__, ReplyTooLarge) or isinstance(exc, ReplyTooLarge):
                            raise BackendError(self._redact(f"openai backend: {url}: {exc.__cause__ or exc}")) from None
                        failure, outcome = exc, False if retryable(exc) else None  # a 4xx says nothing of its health
                        if outcome is False and isinstance(exc, openai.APIStatusError):
                            asked = retry_after(exc.response.headers)
                        tried.append(endpoint)
                        raise
                    finally:
                        self._pool.release(endpoint, outcome, time.monotonic() - sent, tokens, usage, cool_s=asked)
        except (TimeoutError, openai.APIError, httpx.HTTPError) as exc:
            wait_s = attempt.retry_state.upcoming_sleep if retryable(exc) else None  # a retry past the deadline
            raise self._error(url, exc, len(tried), time.monotonic() - start, wait_s, len(set(tried)), cut) from None
        return url, choice

    def _first_choice(self, url: str, content: bytes) -> tuple[dict[str, Any], tuple[int, int] | None]:
        """``first_choice``, with the API key removed from its error."""
        try:
            return first_choice(url, content)
        except BackendError as exc:
            raise BackendError(self._redact(str(exc))) from None

    async def _map(
        self,
        one: Callable[[dict[int, openai.AsyncOpenAI], int, Conversation], Awaitable[_T]],
        conversations: Sequence[Conversation],
        *,
        progress: bool,
        failures: dict[int, str] | None = None,
        blank: Any = None,
    ) -> list[_T]:
        """Run ``one`` on every conversation, in input order (the pool bounds what is in flight).

        The first failing row cancels the rest (a batch with a hole in it is useless to callers,
        which never drop rows) and is raised as a ``BackendError``. With ``failures`` (a dict), a
        row that fails with a ``BackendError`` gets ``blank`` instead and its index and error line
        go into ``failures``; the other rows go on (a judge in training: a missing score).
        """
        if not conversations:
            return []
        clients = _ClientLoop.clients(self._open_clients)
        bar = tqdm(total=len(conversations), desc=f"openai {self.model}", disable=not progress)

        async def guarded(index: int, conversation: Conversation) -> _T:
            try:
                result = await one(clients, index, conversation)
            except BackendError as exc:
                if failures is None:
                    raise
                failures[index], result = str(exc), blank
            bar.update(1)
            return result

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(guarded(i, c)) for i, c in enumerate(conversations)]
        except BaseExceptionGroup as errors:
            raise _first_error(errors) from None
        finally:
            bar.close()
        if failures:
            first = failures[min(failures)]
            log.warning(f"openai backend: {len(failures)} of {len(conversations)} requests failed after their "
                        f"retries (first: {first})")
        return [task.result() for task in tasks]

    def _extra_body(self, client: openai.AsyncOpenAI, template_kwargs: dict[str, Any],
                    sampling: dict[str, Any] | None = None) -> dict[str, Any]:
        """``extra_body`` with the chat-template kwargs and ``sampling``, or nothing (none, or a server that rejects
        fields outside the OpenAI schema)."""
        send = self.send_template_kwargs
        if send is None:
            send = not is_openai_api(str(client.base_url))
        return extra_body(template_kwargs, sampling) if send else {}

    def _url(self, client: openai.AsyncOpenAI) -> str:
        return str(client.base_url).rstrip("/") + "/chat/completions"

    def _error(
        self, url: str, exc: BaseException, attempts: int, elapsed: float, wait: float | None, endpoints: int = 1,
        cut: bool = False,
    ) -> BackendError:
        """One line naming the URL, the status, the server's message and the attempts made, with the key removed.

        ``cut``: the last attempt had less than ``timeout_s`` left before the request's deadline."""
        on = f" on {endpoints} endpoints" if endpoints > 1 else ""
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}{on}, {elapsed:.1f} s in all"
        if wait is not None and attempts <= self.max_retries:  # retryable, but the wait does not fit the deadline
            who = "the server asked to retry" if isinstance(exc, openai.APIStatusError) else "a retry would start"
            tries += f"; {who} in {wait:.3g} s, past the {self.deadline_s:g} s deadline"
        if isinstance(exc, TimeoutError | openai.APITimeoutError | httpx.TimeoutException):
            limit = f"at the {self.deadline_s:g} s deadline" if cut else f"after {self.timeout_s:g} s"
            line = f"openai backend: {url} timed out {limit} ({tries})"
        elif isinstance(exc, openai.APIStatusError):
            line = f"openai backend: {url} answered HTTP {exc.status_code} ({tries}): {_server_message(exc)}"
        elif isinstance(exc, openai.APIConnectionError | httpx.HTTPError):
            cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) and exc.__cause__ else exc
            line = f"openai backend: cannot reach {url} ({type(cause).__name__}, {tries})"
        else:
            line = f"openai backend: {url} failed ({tries}): {type(exc).__name__}: {exc}"
        return BackendError(self._redact(" ".join(line.split())))

    def _redact(self, text: str) -> str:
        if self._api_key and self._api_key != "EMPTY":
            text = text.replace(self._api_key, "***")
        return text
