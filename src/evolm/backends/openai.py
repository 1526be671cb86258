"""Backend for any OpenAI-compatible chat server (``vllm serve``, SGLang, the OpenAI API).

This is how the judge runs at scale (SPEC §6): a separate ``vllm serve <judge>`` process on its
own GPUs, with many requests in flight from every training process. Each call opens one
``AsyncOpenAI`` client, sends every conversation as its own chat completion with at most
``max_concurrency`` in flight, and returns the texts in input order.

Retries are the ``openai`` client's own (``max_retries``): exponential backoff from 0.5 s up to
8 s with jitter, honouring the server's ``retry-after``/``retry-after-ms`` headers, on connection
errors, timeouts, 408, 409, 429 and 5xx. We use them rather than a second loop of our own because
the client already gets the details right (which statuses, the headers); this module only turns
the final failure into one ``BackendError`` line that names the URL and status and never the key.

Chat-template kwargs travel as vLLM's ``chat_template_kwargs`` extra field, sent only when there
are some and the server accepts them (``send_template_kwargs``; not to the OpenAI API itself, which
rejects unknown fields). Thinking judges: the server renders the prompt, so this backend cannot
put an empty think block in it as the ``hf`` and ``vllm`` backends do. ``next_token_logprobs``
sends ``enable_thinking: false``, with which Qwen3-style templates (Qwen3, SmolLM3) end the prompt
with an empty think block, so the one-token read is the score; a server whose template ignores
that flag and lets the judge open ``<think>`` is reported as an error rather than read as a score
(templates that open the block in the prompt, R1 or Thinking-2507 style, cannot be detected here:
serve those judges with the ``vllm`` or ``hf`` backend for the probability modes).
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

import openai
from tqdm.auto import tqdm

from evolm.backends.base import THINK_OPEN, Conversation, SamplingParams, chat_kwargs, match_candidates
from evolm.errors import BackendError

_T = TypeVar("_T")

TOP_LOGPROBS = 20
"""How many next tokens the probability modes ask for (the most ``vllm serve`` allows by default)."""


class OpenAIBackend:
    """Chat completions over HTTP, many in flight, results in input order.

    The API key comes from the environment variable ``api_key_env`` (secrets are the one thing we
    read from the environment); when it is unset we send ``"EMPTY"``, which local servers such
    as ``vllm serve`` without ``--api-key`` accept. The key never appears in ``repr`` or in errors.

    ``max_concurrency`` bounds the requests in flight within one call (a call from each of several
    threads gets its own bound). ``timeout_s`` is per request attempt; ``max_retries`` is the
    number of retries after the first attempt.

    ``send_template_kwargs``: whether non-empty chat-template kwargs are sent (as the
    ``chat_template_kwargs`` field that vLLM and SGLang read). ``None`` (default): sent unless the
    server is the OpenAI API (``api.openai.com``, Azure OpenAI), which answers HTTP 400 to unknown
    fields; ``False`` for any other strict server.
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 32,
        timeout_s: float = 120.0,
        max_retries: int = 5,
        send_template_kwargs: bool | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise BackendError(f"openai backend: max_concurrency must be at least 1, got {max_concurrency}")
        if max_retries < 0:
            raise BackendError(f"openai backend: max_retries must be 0 or more, got {max_retries}")
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.send_template_kwargs = send_template_kwargs
        self._api_key = os.environ.get(api_key_env) or "EMPTY"

    def __repr__(self) -> str:
        return (
            f"OpenAIBackend(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key_env={self.api_key_env!r}, max_concurrency={self.max_concurrency})"
        )

    # ------------------------------------------------------------------ public API

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams, *, progress: bool = False
    ) -> list[str]:
        """One completion per conversation, in order; raises ``BackendError`` if any row fails.

        With ``params.seed`` set, row ``i`` is sent ``seed + i``: repeatable, yet two identical
        prompts in one batch (a group of samples) still get different completions.
        """
        body: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p}
        body["max_tokens"] = params.max_new_tokens

        async def one(client: openai.AsyncOpenAI, index: int, conversation: Conversation) -> str:
            seed: dict[str, Any] = {} if params.seed is None else {"seed": params.seed + index}
            extra = self._extra_body(client, chat_kwargs(params.chat_template_kwargs))
            response = await client.chat.completions.create(
                model=self.model, messages=cast(Any, list(conversation)), **body, **seed, **extra
            )
            if not response.choices:
                raise BackendError(f"openai backend: {self._url(client)} returned no choices")
            # A server with a reasoning parser may put everything in reasoning_content and leave
            # content None (e.g. thinking cut off by max_tokens): that is an empty answer, not a failure.
            return response.choices[0].message.content or ""

        return _run_sync(lambda: self._map(one, conversations, progress=progress))

    def next_token_logprobs(
        self,
        conversations: Sequence[Conversation],
        candidates: Sequence[str],
        *,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> list[dict[str, float]]:
        """Log-probabilities of each candidate as the reply's first token, one dict per conversation.

        One greedy completion of one token with the top 20 alternatives; candidates are matched
        with ``match_candidates`` (case and surrounding spaces ignored, variants summed). Thinking is
        turned off (``enable_thinking: false``, whatever the caller asked): a one-token read must
        follow the (empty) think block. A reply that opens ``<think>`` anyway raises ``BackendError``.
        """
        template_kwargs = {**chat_kwargs(chat_template_kwargs), "enable_thinking": False}

        async def one(client: openai.AsyncOpenAI, index: int, conversation: Conversation) -> dict[str, float]:
            extra = self._extra_body(client, template_kwargs)
            response = await client.chat.completions.create(
                model=self.model,
                messages=cast(Any, list(conversation)),
                max_tokens=1,
                temperature=0.0,
                logprobs=True,
                top_logprobs=TOP_LOGPROBS,
                **extra,
            )
            choice = response.choices[0] if response.choices else None
            if choice is None or choice.logprobs is None:
                raise BackendError(
                    f"openai backend: {self._url(client)} returned no logprobs "
                    "(the server must support logprobs/top_logprobs for the judge's probability modes)"
                )
            content = choice.logprobs.content or []
            if not content:
                return match_candidates([], candidates)
            first = content[0]
            if first.token.strip() == THINK_OPEN:
                raise BackendError(
                    f"openai backend: {self._url(client)}: the judge starts its reply with {THINK_OPEN} "
                    "although enable_thinking is false, so its first token is no score (serve it with a chat "
                    "template that honours enable_thinking, or use the hf or vllm backend)"
                )
            top = [(t.token, t.logprob) for t in first.top_logprobs] or [(first.token, first.logprob)]
            return match_candidates(top, candidates)

        return _run_sync(lambda: self._map(one, conversations, progress=False))

    # ------------------------------------------------------------------ internals

    async def _map(
        self,
        one: Callable[[openai.AsyncOpenAI, int, Conversation], Awaitable[_T]],
        conversations: Sequence[Conversation],
        *,
        progress: bool,
    ) -> list[_T]:
        """Run ``one`` on every conversation, at most ``max_concurrency`` at a time, in input order.

        The first failing row cancels the rest (a batch with a hole in it is useless to callers,
        which never drop rows) and is raised as a ``BackendError``.
        """
        if not conversations:
            return []
        limit = asyncio.Semaphore(self.max_concurrency)
        bar = tqdm(total=len(conversations), desc=f"openai {self.model}", disable=not progress)

        async with openai.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout_s,
            max_retries=self.max_retries,
        ) as client:

            async def guarded(index: int, conversation: Conversation) -> _T:
                async with limit:
                    try:
                        result = await one(client, index, conversation)
                    except openai.APIError as exc:
                        raise self._error(client, exc) from None
                bar.update(1)
                return result

            try:
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(guarded(i, c)) for i, c in enumerate(conversations)]
            except BaseExceptionGroup as failures:
                raise _first_backend_error(failures) from None
            finally:
                bar.close()
        return [task.result() for task in tasks]

    def _extra_body(self, client: openai.AsyncOpenAI, template_kwargs: dict[str, Any]) -> dict[str, Any]:
        """``extra_body`` with the chat-template kwargs, or nothing (none, or a server that rejects the field)."""
        send = self.send_template_kwargs
        if send is None:
            send = not _is_openai_api(str(client.base_url))
        return _extra_body(template_kwargs) if send else {}

    def _url(self, client: openai.AsyncOpenAI) -> str:
        return str(client.base_url).rstrip("/") + "/chat/completions"

    def _error(self, client: openai.AsyncOpenAI, exc: openai.APIError) -> BackendError:
        """One line naming the URL, the status and the server's message, with the key removed."""
        attempts = f"{self.max_retries + 1} attempt{'s' if self.max_retries else ''}"
        url = self._url(client)
        if isinstance(exc, openai.APITimeoutError):
            line = f"openai backend: {url} timed out after {self.timeout_s:g} s ({attempts})"
        elif isinstance(exc, openai.APIConnectionError):
            cause = type(exc.__cause__).__name__ if exc.__cause__ else "connection error"
            line = f"openai backend: cannot reach {url} ({cause}, {attempts})"
        elif isinstance(exc, openai.APIStatusError):
            line = f"openai backend: {url} answered HTTP {exc.status_code} ({attempts}): {_server_message(exc)}"
        else:
            line = f"openai backend: {url} failed: {type(exc).__name__}: {exc.message}"
        return BackendError(self._redact(" ".join(line.split())))

    def _redact(self, text: str) -> str:
        if self._api_key and self._api_key != "EMPTY":
            text = text.replace(self._api_key, "***")
        return text


def _extra_body(template_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``extra_body`` only when there is something to send: strict servers reject unknown fields."""
    return {"extra_body": {"chat_template_kwargs": dict(template_kwargs)}} if template_kwargs else {}


def _is_openai_api(url: str) -> bool:
    """Whether ``url`` is OpenAI's own API (or Azure OpenAI), which rejects fields it does not know.

    >>> _is_openai_api("https://api.openai.com/v1/"), _is_openai_api("https://me.openai.azure.com/openai")
    (True, True)
    >>> _is_openai_api("http://judge-host:8000/v1"), _is_openai_api("not a url")
    (False, False)
    """
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own error message, shortened (bodies can be whole HTML pages)."""
    body = exc.body
    message: object = body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message", inner) if isinstance(inner, dict) else inner
    text = str(message) if message is not None else exc.message
    return text if len(text) <= 300 else text[:300] + "..."


def _first_backend_error(group: BaseExceptionGroup) -> BaseException:
    """The first ``BackendError`` in a task group's failures, else the group itself (a bug)."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            exc = _first_backend_error(exc)
        if isinstance(exc, BackendError):
            return exc
    return group


def _run_sync(make: Callable[[], Awaitable[_T]]) -> _T:
    """Run a coroutine to completion from synchronous code, even inside a running event loop.

    Callers (TRL reward functions, notebooks) may already be inside an event loop, where
    ``asyncio.run`` refuses to start; then the coroutine runs on a fresh loop in a private thread
    and this call blocks until it is done, as a synchronous call should.
    """

    async def main() -> _T:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="evolm-openai") as pool:
        return pool.submit(asyncio.run, main()).result()
