"""verl's custom reward function, backed by a running ``evolm serve``.

How verl calls it (read at volcengine/verl@b178a3cd56f58b2d502255daba591e92833930a7):

- ``verl/trainer/ppo/reward.py`` ``get_custom_reward_fn``: loads ``custom_reward_function.name`` from
  the file ``custom_reward_function.path`` and merges ``custom_reward_function.reward_kwargs`` into
  the keywords of every call; an ``async def`` stays a coroutine function.
- ``verl/experimental/reward_loop/reward_manager/naive.py`` (the default, ``reward_model.use_reward_loop``):
  one row at a time, ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)``,
  awaited when ``inspect.iscoroutinefunction`` says so, else run in an executor thread. So
  ``compute_score_async`` serves the reward loop without holding a thread per request.
- ``verl/workers/reward_manager/naive.py`` (``use_reward_loop=False``, ``reward_manager=naive``): the
  same keywords, synchronously, row after row: ``compute_score``.
- ``verl/workers/reward_manager/batch.py`` (``use_reward_loop=False``, ``reward_manager=batch``):
  ``compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)``
  once per batch, one result per row: ``compute_score_batch``.

A result is a float or a dict with ``"score"`` whose other keys verl logs (``reward_extra_info``); we
return the dict, with the server's per-answer logs (where the rubric came from, missing scores).

``solution_str`` is the response alone and the prompt is not passed, so each row's question travels
in ``extra_info["question"]`` (``QUESTION_KEY``; the key verl's own
``examples/data_preprocess/gsm8k.py`` fills, and ``scripts/verl_data.py`` too). ``ground_truth`` is
sent as the label: a rubric (JSON text or object) is used as the rubric, anything else is ignored.
The server's URL: the ``evolm_url`` keyword (``+custom_reward_function.reward_kwargs.evolm_url=...``),
else ``extra_info["evolm_url"]``, else the ``EVOLM_REWARD_URL`` environment variable (set on the
reward workers, like the launcher's own variables), as ``http://host:port``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from evolm.backends.http import retry_after
from evolm.errors import BackendError, InputError

URL_ENV = "EVOLM_REWARD_URL"
QUESTION_KEY = "question"
URL_KEY = "evolm_url"
CHUNK = 64  # rows per request of compute_score_batch (the chunks go concurrently; the server batches them)
ATTEMPTS = 8  # tries of one request: a refused connection, a 5xx (503 waits its Retry-After)
MAX_WAIT_S = 60.0  # the longest wait between tries
TIMEOUT = httpx.Timeout(connect=10.0, read=900.0, write=60.0, pool=900.0)  # read: beyond the server's deadline


def _url(extra_info: Any, kw: dict[str, Any]) -> str:
    url = kw.get(URL_KEY) or (extra_info or {}).get(URL_KEY) or os.environ.get(URL_ENV)
    if not url:
        raise InputError(f"no evolm server: set {URL_ENV}=http://host:port, extra_info['{URL_KEY}'] or "
                         f"custom_reward_function.reward_kwargs.{URL_KEY}")
    url = str(url).rstrip("/")
    return url if url.endswith("/get_reward") else url + "/get_reward"


def _question(extra_info: Any) -> str:
    question = (extra_info or {}).get(QUESTION_KEY)
    if not isinstance(question, str):
        raise InputError(f"extra_info['{QUESTION_KEY}'] must hold the question as text (scripts/verl_data.py "
                         f"writes it), got {type(question).__name__}")
    return question


def _label(ground_truth: Any) -> Any:
    """A label JSON can carry: text and objects as they are, arrays (parquet) as lists, else text."""
    if ground_truth is None or isinstance(ground_truth, str | dict | list):
        return ground_truth
    if hasattr(ground_truth, "tolist"):
        return ground_truth.tolist()
    return str(ground_truth)


def _payload(questions: Sequence[str], solutions: Sequence[str], ground_truths: Sequence[Any]) -> dict[str, Any]:
    """OpenRLHF's body: the query is question + response, so the server's prefix split gives the response back."""
    return {"query": [q + s for q, s in zip(questions, solutions, strict=True)], "prompts": list(questions),
            "labels": [_label(g) for g in ground_truths]}


class _Busy(Exception):
    """A 5xx: the server asks to be tried again after ``wait`` seconds."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"HTTP 5xx, retry after {wait:g} s")
        self.wait = wait


def _outcome(resp: httpx.Response, url: str, n: int) -> list[dict[str, float]]:
    """The rows' results; a 5xx raises ``_Busy`` (tried again), a 4xx ``BackendError`` (not)."""
    if resp.status_code == 200:
        body = resp.json()
        rewards, logs = body["rewards"], body.get("extra_logs") or {}
        if len(rewards) != n:
            raise BackendError(f"{url}: {len(rewards)} rewards for {n} rows")
        return [{"score": float(r), **{k: float(v[i]) for k, v in logs.items()}} for i, r in enumerate(rewards)]
    try:
        error = resp.json().get("error", resp.text)
    except (ValueError, AttributeError):
        error = resp.text[:200]
    if resp.status_code < 500:
        raise BackendError(f"{url}: HTTP {resp.status_code}: {error}")
    wait = retry_after(resp.headers)  # the openai backend's reading: seconds, milliseconds or an HTTP date
    raise _Busy(1.0 if wait is None else min(MAX_WAIT_S, wait))


def _wait(state: RetryCallState) -> float:
    """A 5xx's Retry-After; after a refused, reset or timed-out connection, 1, 2, 4 ... s up to MAX_WAIT_S."""
    exc = state.outcome.exception() if state.outcome else None
    return exc.wait if isinstance(exc, _Busy) else min(MAX_WAIT_S, 2.0 ** (state.attempt_number - 1))


def _retrying(kind: type[Retrying] | type[AsyncRetrying]) -> Any:
    return kind(retry=retry_if_exception_type((httpx.TransportError, _Busy)), wait=_wait,
                stop=stop_after_attempt(ATTEMPTS), reraise=True)


def _post(client: httpx.Client, url: str, payload: dict[str, Any]) -> list[dict[str, float]]:
    try:
        return _retrying(Retrying)(lambda: _outcome(client.post(url, json=payload), url, len(payload["query"])))
    except (httpx.TransportError, _Busy) as e:
        raise BackendError(f"{url}: no reward after {ATTEMPTS} tries (last: {e})") from None


async def _apost(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> list[dict[str, float]]:
    async def attempt() -> list[dict[str, float]]:
        return _outcome(await client.post(url, json=payload), url, len(payload["query"]))

    try:
        return await _retrying(AsyncRetrying)(attempt)
    except (httpx.TransportError, _Busy) as e:
        raise BackendError(f"{url}: no reward after {ATTEMPTS} tries (last: {e})") from None


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  **kw: Any) -> dict[str, float]:
    """One row's reward from ``evolm serve``: ``{"score": float in [0, 1], <log name>: 0/1, ...}``.

    ``data_source`` is accepted for verl's convention and not used: the server judges every source alike.
    """
    url = _url(extra_info, kw)
    with httpx.Client(timeout=TIMEOUT) as client:
        return _post(client, url, _payload([_question(extra_info)], [solution_str], [ground_truth]))[0]


async def compute_score_async(data_source: Any, solution_str: str, ground_truth: Any,
                              extra_info: dict | None = None, **kw: Any) -> dict[str, float]:
    """``compute_score`` as a coroutine, for verl's reward loop (it awaits coroutine functions)."""
    url = _url(extra_info, kw)
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        return (await _apost(client, url, _payload([_question(extra_info)], [solution_str], [ground_truth])))[0]


def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[dict | None], **kw: Any) -> list[dict[str, float]]:
    """Every row's reward, for verl's ``BatchRewardManager``: chunks of ``CHUNK`` rows posted concurrently.

    Concurrent chunks let the server batch them as it batches concurrent clients; a group's answers
    stay together in a chunk when verl keeps them adjacent (it does: repeated rollouts are interleaved).
    """
    n = len(solution_strs)
    if not n:
        return []
    urls = {_url(e, kw) for e in extra_infos}
    if len(urls) > 1:
        raise InputError(f"one batch, one evolm server: extra_info names {len(urls)} URLs")
    url = urls.pop()
    questions = [_question(e) for e in extra_infos]
    starts = range(0, n, CHUNK)
    with httpx.Client(timeout=TIMEOUT) as client, ThreadPoolExecutor(max_workers=min(16, len(starts))) as pool:
        parts = pool.map(lambda s: _post(client, url, _payload(questions[s : s + CHUNK], solution_strs[s : s + CHUNK],
                                                               ground_truths[s : s + CHUNK])), starts)
        return [row for part in parts for row in part]


def rubric_label(rubric: Any) -> str:
    """The ``ground_truth`` that carries ``rubric`` (an ``evolm rubric`` object or ``None``) to the server."""
    return "" if rubric is None else rubric if isinstance(rubric, str) else json.dumps(rubric, ensure_ascii=False)
