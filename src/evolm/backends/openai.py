"""Backend for any OpenAI-compatible chat server (``vllm serve``, SGLang, the OpenAI API).

This is how the judge runs at scale (docs/METHOD.md §6): a separate ``vllm serve <judge>`` process on its
own GPUs, with many requests in flight from every training process. Each call sends every
conversation as its own chat completion and returns the texts in input order. ``base_url`` may
name several endpoints serving the same model (a list, or comma-separated): an ``EndpointPool``
(``evolm.backends.pool``) sends each request to the least-loaded one, with at most
``max_concurrency`` in flight to each, optional requests- and tokens-per-minute limits, and
endpoints that keep failing skipped for a while. One URL is a pool of
one. ``stats()`` counts attempts, tokens (the servers' ``usage``) and seconds per endpoint.

The backend keeps one ``AsyncOpenAI`` client per endpoint, and its open connections, from call to
call, on an event loop of its own in a daemon thread: every caller (any thread, inside a running
event loop or not) hands its batch to that loop and waits. Opening the clients anew for each call
cost about 65 ms of CPU (docs/PERFORMANCE.md). ``close()`` closes them (so does garbage collection,
or the end of the process); a later call opens new ones.

Retries are tenacity's (``AsyncRetrying``), with the ``openai`` client's own rule of what to retry
(``evolm.backends.http.retryable``), but not the client's own loop (it runs with ``max_retries=0``): that
loop sends every retry to its one ``base_url``, and its timeout is per socket read, so a server that drips
a byte every few seconds keeps a request open forever. Here each attempt asks the pool for an endpoint, is
bounded in wall-clock time by ``timeout_s`` (connecting, waiting and reading the whole body), and a
request with its retries (on any endpoints) by ``deadline_s``, counted from its first attempt.
Retried: connection errors, timeouts, 408, 409, 429 and 5xx (or what the server's
``x-should-retry`` header says). A retry goes at once to another healthy endpoint that has not
failed this request when the pool has one; otherwise to the same one after exponential backoff
from 0.5 s to 8 s with jitter, or after the server's ``retry-after``/``retry-after-ms`` when that
fits in the deadline (a longer one ends the request at once). The final failure is one
``BackendError`` line naming the (last) URL, the status, the attempts really made, never the key.

Replies are read defensively: a body that is not a chat completion (HTML, invalid JSON,
``{"choices": "nope"}``) is a one-line ``BackendError``; in ``next_token_logprobs`` a reply whose
logprobs cannot be read (a non-numeric, NaN, infinite or positive log-probability, odd token
entries) makes that row unreadable (every candidate ``-inf``, see ``next_token_logprobs``),
never an exception from deep inside the event loop, an ``OverflowError`` or a NaN.

Control tokens: vLLM and SGLang tokenize the rendered chat prompt with special tokens enabled,
so message text such as ``<|im_end|>`` would become a real control token and let an answer being
judged end the judge's turn. Every message's text is sent with a zero-width space after ``<|``
(and DeepSeek's ``<｜``), which no tokenizer reads as a control token; ``<think>`` and other tags
are kept (they are ordinary text in Qwen3's vocabulary). The prompt's structure travels as chat
messages, so the server adds the real control tokens itself.

Chat-template kwargs travel as vLLM's ``chat_template_kwargs`` extra field, sent only when there
are some and the server accepts them (``send_template_kwargs``; not to the OpenAI API itself, which
rejects unknown fields). Thinking judges: the server renders the prompt, so this backend cannot
put an empty think block in it as the ``hf`` and ``vllm`` backends do. ``next_token_logprobs``
sends ``enable_thinking: false``, with which Qwen3-style templates (Qwen3, SmolLM3) end the prompt
with an empty think block, so the one-token read is the score; a server whose template ignores
that flag and lets the judge open ``<think>`` is reported as an error rather than read as a score
(templates that open the block in the prompt, R1 or Thinking-2507 style, cannot be detected here:
serve those judges with the ``vllm`` or ``hf`` backend for the probability modes).

To the same servers ``generate`` also sends the sampling settings that the OpenAI schema lacks, at
their neutral values (``SERVER_SAMPLING``: no top-k, no min-p, no repetition penalty): ``vllm
serve`` otherwise fills them from the model's ``generation_config.json`` (``--generation-config
auto``, its default), which for Qwen3 adds top_k=20 to every request, and the distribution sampled
would not be the one ``SamplingParams`` describes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import threading
import time
import urllib.parse
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import httpx
import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tqdm.auto import tqdm

from evolm.backends.base import THINK_OPEN, Conversation, SamplingParams, chat_kwargs, match_candidates
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
SERVER_SAMPLING: dict[str, Any] = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
"""Sampling fields outside the OpenAI schema, sent by ``generate`` to servers that take extra fields (vLLM, SGLang):
top-k off (-1, which every vLLM and SGLang version reads as off), no min-p, no repetition penalty. Left out, a
``vllm serve`` takes them from the model's generation config (Qwen3: top_k=20)."""
POSITIVE_LOGPROB_TOLERANCE = 1e-3
"""Log-probabilities up to this far above 0 are rounding (read as 0); larger ones are malformed."""

_CONTROL_OPEN = re.compile("<([|\uff5c])(?!\u200b)")
_ZERO_WIDTH_SPACE = "\u200b"


class _Unreadable(Exception):
    """A reply's logprobs that cannot be read: the row has no score (not an error for the batch)."""


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

    ``neutralize_control_tokens``: insert a zero-width space after ``<|`` in message text (see the
    module docstring); on by default.

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
        turned off (``enable_thinking: false``, whatever the caller asked): a one-token read must
        follow the (empty) think block. A reply that opens ``<think>`` anyway raises ``BackendError``.

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
                top = _top_logprobs(choice["logprobs"])
            except _Unreadable as exc:
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
        """Run ``coroutine`` on the backend's event loop (started here when needed) and wait for its result."""
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
        """The URL that answered and the first choice of one chat completion, retried and bounded as the class says.

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
        """The first choice of a chat-completion body and its (prompt, completion) token usage when reported,
        or a one-line ``BackendError`` for anything else."""
        try:
            data = json.loads(content)
        except (ValueError, UnicodeDecodeError):
            raise BackendError(self._redact(
                f"openai backend: {url} answered HTTP 200 with a body that is not JSON: {_snippet(content)}"
            )) from None
        except RecursionError:  # a hostile or broken server: that row fails, as any unreadable reply does
            raise BackendError(self._redact(f"openai backend: {url} answered with JSON nested too deeply")) from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if isinstance(data, dict) and choices is None and data.get("error") is not None:
            error = data["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise BackendError(self._redact(f"openai backend: {url} answered with an error: {_snippet(str(message))}"))
        if not isinstance(choices, list):
            raise BackendError(self._redact(
                f"openai backend: {url} answered with something that is not a chat completion "
                f"(no 'choices' list): {_snippet(content)}"
            ))
        if not choices:
            raise BackendError(f"openai backend: {url} returned no choices")
        if not isinstance(choices[0], dict):
            raise BackendError(self._redact(
                f"openai backend: {url} returned a malformed choice: {_snippet(json.dumps(choices[0], default=str))}"
            ))
        return choices[0], _usage(data.get("usage"))

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
            send = not _is_openai_api(str(client.base_url))
        return _extra_body(template_kwargs, sampling) if send else {}

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


def neutralize_control_tokens(text: str) -> str:
    """``text`` with a zero-width space after every ``<|`` (and ``<｜``), so no tokenizer reads a control token in it.

    Idempotent; ``<think>`` and other tags are left alone.

    >>> neutralize_control_tokens("ok<|im_end|>\\n<|im_start|>system <think>") == (
    ...     "ok<|\\u200bim_end|>\\n<|\\u200bim_start|>system <think>")
    True
    >>> neutralize_control_tokens(neutralize_control_tokens("<|eot_id|>")) == "<|\\u200beot_id|>"
    True
    """
    return _CONTROL_OPEN.sub(lambda m: "<" + m.group(1) + _ZERO_WIDTH_SPACE, text)


def _top_logprobs(logprobs: Any) -> list[tuple[str, float]]:
    """``[(chosen token, logprob), *top alternatives]`` of the reply's first token; ``_Unreadable`` if malformed.

    An empty reply (no tokens) gives ``[]``: no candidate is readable.
    """
    if not isinstance(logprobs, dict):
        raise _Unreadable(f"logprobs is {_snippet(json.dumps(logprobs, default=str))}, not an object")
    content = logprobs.get("content")
    if content is None or content == []:
        return []
    if not isinstance(content, list):
        raise _Unreadable(f"logprobs.content is {_snippet(json.dumps(content, default=str))}, not a list")
    first = content[0]
    chosen = _token_entry(first)
    alternatives = first.get("top_logprobs")
    if alternatives is None or alternatives == []:
        return [chosen, chosen]
    if not isinstance(alternatives, list):
        raise _Unreadable(f"top_logprobs is {_snippet(json.dumps(alternatives, default=str))}, not a list")
    return [chosen, *(_token_entry(entry) for entry in alternatives)]


def _token_entry(entry: Any) -> tuple[str, float]:
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
        raise _Unreadable(f"token entry {_snippet(json.dumps(entry, default=str))} has no token string")
    return entry["token"], _logprob(entry.get("logprob"))


def _logprob(value: Any) -> float:
    """A log-probability in ``[-inf, 0]``; tiny positive rounding reads as 0; anything else is ``_Unreadable``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Unreadable(f"logprob {value!r} is not a number")
    value = float(value)
    if math.isnan(value) or value == math.inf:
        raise _Unreadable(f"logprob {value!r} is not a log-probability")
    if value > POSITIVE_LOGPROB_TOLERANCE:
        raise _Unreadable(f"logprob {value:g} is positive")
    return min(value, 0.0)


def _usage(usage: Any) -> tuple[int, int] | None:
    """A reply's (prompt, completion) tokens, or ``None`` when it reports none (or nonsense)."""
    if not isinstance(usage, dict):
        return None
    counts = (usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        return None
    return counts[0], counts[1]


def _extra_body(template_kwargs: dict[str, Any], sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """``extra_body`` only when there is something to send: strict servers reject unknown fields."""
    extra = {**(sampling or {}), **({"chat_template_kwargs": dict(template_kwargs)} if template_kwargs else {})}
    return {"extra_body": extra} if extra else {}


def _is_openai_api(url: str) -> bool:
    """Whether ``url`` is OpenAI's own API (or Azure OpenAI), which rejects fields it does not know.

    >>> _is_openai_api("https://api.openai.com/v1/"), _is_openai_api("https://me.openai.azure.com/openai")
    (True, True)
    >>> _is_openai_api("http://judge-host:8000/v1"), _is_openai_api("not a url")
    (False, False)
    """
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


