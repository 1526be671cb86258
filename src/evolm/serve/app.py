"""The reward server: EvoLM's rubric + judge reward over HTTP, for RL engines in other processes.

OpenRLHF, slime and verl compute rewards in their own workers; they reach an external reward by
HTTP. ``evolm serve`` (``cli/serve.py``) loads the judge once (``judge.build_judge``, the builder that
``evolm judge`` and training use, so a reward here equals ``evolm judge`` on the same row) and
answers two wire protocols, verified against the engines' sources:

- ``POST /get_reward``, OpenRLHF's remote reward model (OpenRLHF@3c3be623). Client:
  ``openrlhf/utils/agent.py`` (``SingleTurnAgentExecutor._fetch_rewards_via_http``: ``{"query":
  [...], "prompts": [...], "labels": [...]}``, one rollout per request; reads ``rewards``, ``scores``
  then ``extra_logs``; up to 0.10.1 the same body came from ``openrlhf/utils/remote_rm_utils.py``);
  reference server: ``openrlhf/cli/serve_rm.py`` (answers ``{"rewards", "scores", "extra_logs"}``, lists).
  OpenRLHF's query is the prompt and the response decoded together with special tokens; the
  response is the query minus its prompt, end-of-turn markers stripped (``response_from_query``).
- ``POST /reward``, slime's ``remote_rm`` (``slime/rollout/rm_hub/__init__.py``, slime@624b824a): it posts
  ``{"prompt", "response", "label"}`` and keeps whatever JSON comes back as the sample's reward, so
  the reply is a bare number (a dict would need ``--reward-key``).

A prompt may be chat-templated text (ChatML or Llama 3) or a list of messages: the judge and the
rubric writer see the last user turn (``question_text``). Rubrics come from the label when it
parses as one; else from the rubric writer (once per distinct question, kept in a bounded LRU keyed
by its sha256) or a rubric file; else the judge scores alone. ``extra_logs`` says which, per answer.

Requests are not scored one by one: an asyncio batcher collects what arrives within a few
milliseconds (up to ``max_batch`` answers) and scores it in one ``Judge.score`` call in a worker
thread, answers to one question next to each other, so they share the judge's prompt prefix as in
training. A request larger than a batch is scored over several, each shared fairly with the
requests waiting (``fair_shares``), and a batch is cut to about ``max_batch_s`` seconds of judging,
so one client cannot hold the judge from the others. A ``listwise`` judge is the exception: there a
request's answers to one question are one list, judged with no other client's answers and never
split between batches (``whole_shares``: a large request is a batch of its own). A full queue answers 503 with
``Retry-After``; a request past its deadline 504, and one whose client has gone is dropped: their
answers not yet scored never are. A malformed request is a 4xx, one over a size limit (body,
answers, characters per text) 413; every error body is ``{"error": ...}`` and the server keeps
serving. Bodies are decoded and their text handled off the event loop, in linear time (``/health``
answers while a 200k-character request is read or a batch is judged); a connection that does not
send its headers or body in time is closed (``guarded_h11``). All model calls run in that one
thread: the judge and a rubric writer may share one model. The judge's results are kept (``--judge-cache``,
``evolm.judge.cache``): an answer scored before, under the same question, rubric and judge, is not judged again,
and ``extra_logs.judge_cached`` says so per answer; ``/health`` gives the cache's hit rate.
(No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations at run time.)
"""

import asyncio
import hashlib
import json
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from evolm.backends.base import Backend, SamplingParams
from evolm.errors import BackendError
from evolm.eval.rubric_source import RubricTable, write_prompt_rubrics
from evolm.judge.judge import JudgeItem
from evolm.judge.cache import CachedJudge
from evolm.training.rewards import fill_missing_with_group_mean
from evolm.rubrics import Rubric

INSTALL = "the reward server needs FastAPI and uvicorn: pip install 'evolm[serve]'"
SOURCES = ("rubric_from_label", "rubric_written", "rubric_from_file", "no_rubric")
"""Where an answer's rubric came from; each is an ``extra_logs`` key (0/1 per answer), with ``missing_score``."""


@dataclass(frozen=True)
class ServeSettings:
    """How requests are batched, bounded and timed out (``evolm serve --help`` gives the flags)."""

    max_batch: int = 64
    """Answers per judge call. A larger request is scored over several calls, sharing each with the others."""
    max_batch_s: float = 2.0
    """Seconds a judge call should take, about: a batch holds at most the answers the judge scored in that time
    on recent batches (at least one), so a request arriving behind a large one waits about two calls of this."""
    max_wait_ms: float = 5.0
    """How long the first request of a batch waits for others; a few ms cost little next to a forward pass."""
    max_queue: int = 256
    """Requests waiting beyond the batch being scored; one more is answered 503 + Retry-After."""
    deadline_s: float = 300.0
    """Seconds a request may take from arrival, queueing included; then 504 (its answers are dropped unscored)."""
    rubric_cache: int = 4096
    """Written rubrics kept (one per distinct question, least recently used dropped first)."""
    max_body_mb: float = 16.0
    """Request body size limit in MiB; a larger body is answered 413 (from its Content-Length, or as it is read)."""
    max_answers: int = 8192
    """Answers in one request; more is answered 413."""
    max_answer_chars: int = 500_000
    """Characters in one query, prompt or response (about a 128k-token context); more is answered 413."""
    header_timeout_s: float = 10.0
    """Seconds a connection has to send a request's headers (from its start or its last reply); then it is closed."""
    body_timeout_s: float = 60.0
    """Seconds a request's body may take to arrive once its headers have; then the connection is closed."""
    keep_alive_s: int = 5
    """Seconds an idle keep-alive connection is kept open (uvicorn's ``timeout_keep_alive``)."""
    max_connections: int = 1024
    """Open connections (or requests in progress) at once; beyond it uvicorn answers 503 (``limit_concurrency``)."""
    max_header_kb: int = 64
    """KiB of an unfinished request head buffered at most (h11's incomplete-event limit); more is answered 400."""
    threads: int = 0
    """CPU threads of a local judge's forward passes (torch's intra-op threads); 0: torch's default (the cores). On
    a CPU shared with other work, fewer threads than cores keep a call from stalling: SmolLM2 scored one answer in
    7-11 s with 2 threads on a loaded 2-core machine, 1.9-2.0 s with 1 (docs/SECURITY.md)."""


# ----------------------------------------------------------------------------- the two protocols


class RequestRejected(Exception):
    """A request answered with an error: ``status``, one-line ``message`` and optional headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass(frozen=True)
class Answer:
    """One answer to score: the question the judge sees, the answer text, and the label as sent."""

    question: str
    response: str
    label: Any = None
    prompt_mismatch: bool = False  # the query did not start with its prompt (see ``response_from_query``)
    request: int | None = None  # the request it came in (set by the batcher): a listwise judge lists one request's
    # answers to one question together, never another client's


_USER_TURN = (("<|im_start|>user\n", "<|im_end|>"),  # ChatML (Qwen, SmolLM2)
              ("<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>"))  # Llama 3
ANCHOR = 24  # characters of the prompt's end that find the response when the prompt did not come back exactly
_MARKER_NAME = 64  # the longest name of an end marker <|name|> (or DeepSeek's <｜name｜>)


def _last_turn(text: str, start: str, end: str) -> str | None:
    """The text of the last ``start ... end`` turn (turns taken left to right, as a non-greedy regex would), else None.

    One left-to-right pass with ``str.find``: a regex ``start(.*?)end`` rescans the rest of the text
    from every unclosed start (quadratic: ``"<|im_start|>user\\n" * n`` froze the server).
    """
    found, at = None, 0
    while (s := text.find(start, at)) >= 0:
        e = text.find(end, s + len(start))
        if e < 0:
            break  # no end after this start: none after any later start either
        found, at = text[s + len(start) : e], e + len(end)
    return found


def _marker_start(text: str, end: int) -> int | None:
    """Where an end marker (``</s>``, ``<|name|>``, ``<｜name｜>``) ending at ``end`` starts, else None (O(1))."""
    if text.endswith("</s>", 0, end):
        return end - 4
    if end < 4 or text[end - 1] != ">" or text[end - 2] not in "|\uff5c":
        return None
    bar, k = text[end - 2], end - 2
    while k > 0 and end - 2 - k < _MARKER_NAME and not (text[k - 1].isspace() or text[k - 1] in "<>|\uff5c"):
        k -= 1
    if k == end - 2 or k < 2 or text[k - 1] != bar or text[k - 2] != "<":
        return None
    return k - 2


def strip_end_markers(text: str) -> str:
    """``text`` without its trailing end-of-turn markers (and the whitespace between and after them), in linear time.

    >>> strip_end_markers("It is 4. <|im_end|>\\n<|endoftext|></s>\\n")
    'It is 4. '
    """
    cut = end = len(text)
    while True:
        while end > 0 and text[end - 1].isspace():
            end -= 1
        start = _marker_start(text, end)
        if start is None:
            return text[:cut]
        cut = end = start


def question_text(prompt: Any) -> str:
    """The question in a prompt: the last user turn of a message list or of ChatML / Llama 3 text, else the text.

    Engines send the policy's prompt as rendered for the policy; the judge and the rubric writer
    want the question itself (a system prompt or template markup would only add noise).

    >>> question_text("<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\nWhat is 2+2?<|im_end|>\\n")
    'What is 2+2?'
    >>> question_text([{"role": "user", "content": "Hi"}])
    'Hi'
    """
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if not users or not isinstance(users[-1], str):
            raise RequestRejected(422, "a prompt given as messages needs a user message with text content")
        return users[-1]
    if not isinstance(prompt, str):
        raise RequestRejected(422, f"a prompt must be text or a list of messages, not {type(prompt).__name__}")
    for start, end in _USER_TURN:
        turn = _last_turn(prompt, start, end)
        if turn is not None:
            return turn
    return prompt


def response_from_query(query: str, prompt: str) -> tuple[str, bool]:
    """The response in an OpenRLHF query (prompt + response), and whether the prompt was not its exact prefix.

    OpenRLHF decodes prompt and response tokens together with special tokens kept, so the prompt may
    not come back byte for byte: then the response starts after the prompt's last ``ANCHOR`` characters
    (the generation prompt, e.g. ``<|im_start|>assistant\\n``), else where query and prompt first
    differ. Trailing end-of-turn markers (``<|im_end|>``, ``</s>``...) are the policy's stop tokens.

    >>> response_from_query("Q: 2+2?A: 4<|im_end|>", "Q: 2+2?")
    ('A: 4', False)
    """
    if query.startswith(prompt):
        return strip_end_markers(query[len(prompt) :]), False
    anchor = prompt[-ANCHOR:]
    at = query.find(anchor) if anchor else -1
    if at >= 0:
        return strip_end_markers(query[at + len(anchor) :]), True
    return strip_end_markers(query[len(os.path.commonprefix([query, prompt])) :]), True


def _text_list(body: dict, key: str, n: int | None) -> list:
    value = body.get(key)
    if not isinstance(value, list):
        raise RequestRejected(422, f"'{key}' must be a list, not {type(value).__name__}")
    if n is not None and len(value) != n:
        raise RequestRejected(422, f"'{key}' has {len(value)} entries, 'query' has {n}")
    return value


def _check_chars(text: str, what: str, limits: ServeSettings) -> None:
    if len(text) > limits.max_answer_chars:
        raise RequestRejected(413, f"{what} has {len(text)} characters; at most {limits.max_answer_chars} "
                              "(--max-answer-chars)")


def openrlhf_answers(body: Any, limits: ServeSettings = ServeSettings()) -> list[Answer]:  # noqa: B008 - frozen
    """The answers of an OpenRLHF ``/get_reward`` body ``{"query": [str], "prompts": [str], "labels": [...]}``.

    ``RequestRejected`` 422 for a malformed body, 413 past ``limits`` (answers per request, characters per text).
    """
    if not isinstance(body, dict):
        raise RequestRejected(422, "the body must be a JSON object with 'query' and 'prompts'")
    queries = _text_list(body, "query", None)
    if len(queries) > limits.max_answers:
        raise RequestRejected(413, f"{len(queries)} answers in one request; at most {limits.max_answers} "
                              "(--max-answers)")
    prompts = _text_list(body, "prompts", len(queries))
    labels = _text_list(body, "labels", len(queries)) if body.get("labels") is not None else [None] * len(queries)
    out = []
    for n, (q, p, label) in enumerate(zip(queries, prompts, labels, strict=True)):
        if not isinstance(q, str) or not isinstance(p, str):
            raise RequestRejected(422, f"query and prompt {n} must be text")
        _check_chars(q, f"query {n}", limits)
        _check_chars(p, f"prompt {n}", limits)
        response, mismatch = response_from_query(q, p)
        out.append(Answer(question_text(p), response, label, mismatch))
    return out


def slime_answer(body: Any, limits: ServeSettings = ServeSettings()) -> Answer:  # noqa: B008 - frozen
    """The answer of a slime ``remote_rm`` body ``{"prompt": str | messages, "response": str, "label": ...}``."""
    if not isinstance(body, dict) or not isinstance(body.get("response"), str) or "prompt" not in body:
        raise RequestRejected(422, "the body must be a JSON object with 'prompt' and 'response' (text)")
    _check_chars(body["response"], "the response", limits)
    question = question_text(body["prompt"])
    _check_chars(question, "the question", limits)
    return Answer(question, body["response"], body.get("label"))


# ----------------------------------------------------------------------------- rubrics and scores


def label_rubric(label: Any) -> Rubric | None:
    """The rubric a label carries (an object, or JSON text, that ``Rubric.from_obj`` parses), else ``None``."""
    if label is None or (isinstance(label, str) and not label.strip()):
        return None
    return Rubric.from_obj(label)


@dataclass
class RubricSource:
    """Each answer's rubric: from its label, else the writer (cached per question) or the table, else none.

    Used from the scoring thread only, so the cache needs no lock.
    """

    writer: Backend | None = None
    params: SamplingParams | None = None
    table: RubricTable | None = None
    cache_size: int = 4096
    written: int = 0
    """Questions the writer has written a rubric for (retries at cooler temperatures not counted)."""
    cache: OrderedDict[str, Rubric | None] = field(default_factory=OrderedDict)

    @property
    def kind(self) -> str:
        return "written" if self.writer is not None else "file" if self.table is not None else "label only"

    def resolve(self, answers: Sequence[Answer]) -> list[tuple[Rubric | None, str]]:
        """(rubric, source in ``SOURCES``) per answer, writing the rubrics the cache lacks in one batch."""
        keys = [hashlib.sha256(a.question.encode("utf-8")).hexdigest() for a in answers]
        from_label = [label_rubric(a.label) for a in answers]
        fresh: dict[str, Rubric | None] = {}
        if self.writer is not None:
            todo = {k: a.question for k, a, r in zip(keys, answers, from_label, strict=True)
                    if r is None and k not in self.cache}
            if todo:  # write_prompt_rubrics retries unparsed ones cooler, as the evaluations do
                rubrics, _ = write_prompt_rubrics(self.writer, list(todo.values()), self.params or SamplingParams())
                fresh = dict(zip(todo, rubrics, strict=True))
                self.written += len(todo)
        out: list[tuple[Rubric | None, str]] = []
        for key, answer, rubric in zip(keys, answers, from_label, strict=True):
            if rubric is not None:
                out.append((rubric, "rubric_from_label"))
            elif self.writer is not None:
                rubric = fresh[key] if key in fresh else self.cache[key]
                self.cache[key] = rubric
                self.cache.move_to_end(key)
                out.append((rubric, "rubric_written") if rubric is not None else (None, "no_rubric"))
            elif self.table is not None and (rubric := self.table.by_prompt.get(answer.question)) is not None:
                out.append((rubric, "rubric_from_file"))
            else:
                out.append((None, "no_rubric"))
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        return out


@dataclass(frozen=True)
class Scored:
    score: float
    logs: dict[str, float]


def score_answers(judge: Any, rubrics: RubricSource, answers: Sequence[Answer]) -> list[Scored]:
    """Score ``answers`` in one ``judge.score`` call, answers to one question (and rubric) adjacent.

    A missing score (an unreadable reply, a prompt over the judge's context) becomes the mean of the
    scored answers to the same question in this batch, else 0.0 (``rewards.fill_missing_with_group_mean``:
    zero advantage, as in training), and ``missing_score`` says so: an engine needs a number.
    """
    chosen = rubrics.resolve(answers)
    key = [json.dumps(r.to_dict(), sort_keys=True) if r is not None else "" for r, _ in chosen]
    order = sorted(range(len(answers)), key=lambda i: (answers[i].question, key[i]))
    # listwise: a group is one request's answers to one question under one rubric (the other modes ignore it)
    items = [JudgeItem(answers[i].question, answers[i].response, chosen[i][0],
                       group=None if answers[i].request is None else (answers[i].request, answers[i].question, key[i]))
             for i in order]
    if isinstance(judge, CachedJudge):  # evolm serve's judge: results kept (--judge-cache), said per answer
        call = judge.score_with_hits(items)
        raw, hits = call.results, call.cached
    else:
        raw, hits = judge.score(items), [False] * len(items)
    scores: list[float | None] = [None] * len(answers)
    cached = [False] * len(answers)
    for i, judgment, hit in zip(order, raw, hits, strict=True):
        scores[i], cached[i] = judgment.score, hit
    filled = fill_missing_with_group_mean(scores, [a.question for a in answers])
    return [Scored(value, {**{s: float(s == source) for s in SOURCES}, "missing_score": float(score is None),
                           "prompt_mismatch": float(a.prompt_mismatch), "judge_cached": float(hit)})
            for value, score, (_, source), a, hit in zip(filled, scores, chosen, answers, cached, strict=True)]


# ----------------------------------------------------------------------------- the batcher


@dataclass(eq=False)
class _Job:
    """One request's answers; ``sent`` of them have gone to the judge, ``results`` came back in order."""

    answers: list[Answer]
    future: asyncio.Future
    request: int = 0  # the request's number, carried by its answers (``Answer.request``)
    sent: int = 0
    results: list[Scored] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """Answers left to send, for a request still wanted (not answered, past its deadline or abandoned)."""
        return self.sent < len(self.answers) and not self.future.done()


def fair_shares(left: Sequence[int], room: int) -> list[int]:
    """Answers each request puts in the next batch: ``room`` shared equally (water-filling); when there is less
    room than requests, the first ones in ``left``'s order get one each.

    A request gets at most what it has ``left``; what a small one does not need goes to the others.
    So a 1-answer request arriving behind a 5,000-answer one is in the next batch, not 5,000 answers later.

    >>> fair_shares([5000, 1, 3], 8)
    [4, 1, 3]
    """
    shares = [0] * len(left)
    while room > 0:
        open_ = [i for i, n in enumerate(left) if shares[i] < n]
        if not open_:
            break
        per = max(1, room // len(open_))
        for i in open_:
            give = min(per, left[i] - shares[i], room)
            shares[i] += give
            room -= give
            if room == 0:
                break
    return shares


def whole_shares(left: Sequence[int], room: int) -> list[int]:
    """``fair_shares`` for requests that must not be split (a ``listwise`` judge: a request is one list): the first
    request whole, whatever its size, then each next one whole while the batch has room for it, else none of it.

    >>> whole_shares([3, 5000, 2], 8)
    [3, 0, 2]
    >>> whole_shares([5000, 1], 8)
    [5000, 0]
    """
    shares = [0] * len(left)
    for i, n in enumerate(left):
        if i == 0 or n <= room:
            shares[i] = n
            room -= n
    return shares


COLD_BATCH = 8  # answers in a batch before the judge's time per answer is known (``Batcher.room``)


@dataclass
class Batcher:
    """Collects concurrent requests into batches and scores each batch in one call on one worker thread.

    Each batch holds up to ``max_batch`` answers (fewer when the judge would take past
    ``max_batch_s`` on them, ``room``) shared fairly among the requests waiting (``fair_shares``): a
    large request is scored over several batches and cannot hold the judge from the small ones
    behind it for more than about two batches. A request past its deadline, or whose client has gone, is
    dropped: its answers not yet sent are never scored and its place in the queue is free at once.
    """

    score: Callable[[list[Answer]], list[Scored]]
    settings: ServeSettings = field(default_factory=ServeSettings)
    whole: bool = False
    """Never split a request between batches (``whole_shares``): a ``listwise`` judge lists a request's answers
    together."""
    batches: int = 0
    answers: int = 0
    dropped: int = 0  # requests given up (deadline, client gone) before all their answers were scored
    busy_s: float = 0.0  # seconds spent in judge calls, all batches
    last_batch_s: float = 0.0
    last_batch_answers: int = 0
    answer_s: float = 0.0  # seconds per answer of recent judge calls (a moving average; 0 before the first)
    jobs: list[_Job] = field(default_factory=list)  # admitted requests, in arrival order
    _requests: int = 0  # requests admitted so far (each one's number)
    _wake: asyncio.Event | None = None
    _executor: ThreadPoolExecutor | None = None
    _task: asyncio.Task | None = None

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evolm-judge")
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def queued(self) -> int:
        """Requests with answers not yet sent to the judge (what ``max_queue`` bounds)."""
        return sum(j.waiting for j in self.jobs)

    async def submit(self, answers: list[Answer], client_gone: asyncio.Future | None = None,
                     deadline_s: float | None = None) -> list[Scored]:
        """The scores of ``answers``; ``RequestRejected`` 503 when the queue is full, 504 past the deadline.

        ``client_gone`` (an awaitable that finishes when the client disconnects) drops the request
        early, 499. ``deadline_s`` is what is left of the request's deadline (default: all of it).
        """
        assert self._wake is not None, "Batcher.start() runs at server startup"
        waiting = self.queued()
        if waiting >= self.settings.max_queue:
            # about the time the queue takes to drain, at the last batch's seconds per answer
            left = sum(len(j.answers) - j.sent for j in self.jobs if j.waiting)
            per = self.last_batch_s / max(1, self.last_batch_answers)
            wait = min(600, max(1, math.ceil(left * per)))
            raise RequestRejected(503, f"{waiting} requests queued (--max-queue); retry later",
                                  {"Retry-After": str(wait)})
        self._requests += 1
        job = _Job([replace(a, request=self._requests) for a in answers], asyncio.get_running_loop().create_future(),
                   self._requests)
        self.jobs.append(job)
        self._wake.set()
        deadline = self.settings.deadline_s if deadline_s is None else deadline_s
        watch = {job.future} | ({client_gone} if client_gone is not None else set())
        try:
            done, _ = await asyncio.wait(watch, timeout=max(0.0, deadline), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not job.future.done():  # past the deadline, the client gone, or this task cancelled: drop it
                job.future.cancel()
                self.dropped += 1
        if job.future in done:
            return job.future.result()
        if client_gone is not None and client_gone in done:
            raise RequestRejected(499, "the client closed the connection; its answers were dropped")
        raise RequestRejected(504, f"not scored within the {self.settings.deadline_s:g} s deadline (--deadline-s)")

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            self.jobs = [j for j in self.jobs if j.waiting]
            if not self.jobs:
                self._wake.clear()
                await self._wake.wait()
                continue
            if sum(len(j.answers) - j.sent for j in self.jobs) < self.settings.max_batch:
                await asyncio.sleep(self.settings.max_wait_ms / 1000)  # room left: let others join
                self.jobs = [j for j in self.jobs if j.waiting]
            # least served first: when the batch has less room than there are requests, a newcomer goes before a
            # large request that has had batches already (and large ones take turns)
            jobs = sorted(self.jobs, key=lambda j: j.sent)
            shares = (whole_shares if self.whole else fair_shares)([len(j.answers) - j.sent for j in jobs], self.room())
            parts = [(j, j.sent, j.sent + n) for j, n in zip(jobs, shares, strict=True) if n]
            for j, _, end in parts:
                j.sent = end
            if parts:
                await self._score(loop, parts)

    def room(self) -> int:
        """Answers in the next batch: ``max_batch``, or fewer if the judge would take past ``max_batch_s`` on them;
        ``COLD_BATCH`` at most before any call has been timed (a cold server's first call of 64 answers took 17 s on
        a loaded CPU, and a request arriving then waited for all of it)."""
        if self.answer_s <= 0:
            return min(self.settings.max_batch, COLD_BATCH)
        return max(1, min(self.settings.max_batch, int(self.settings.max_batch_s / self.answer_s)))

    async def _score(self, loop: asyncio.AbstractEventLoop, parts: list[tuple[_Job, int, int]]) -> None:
        """One judge call for all ``parts`` (a request's answers start:end); if it fails, each request's part
        alone, so one bad request fails alone."""
        t0 = time.perf_counter()
        outs: list[list[Scored] | Exception | None] = []
        answers = [a for j, start, end in parts for a in j.answers[start:end]]
        try:
            scored = await loop.run_in_executor(self._executor, self.score, answers)
            for _, start, end in parts:
                outs.append(scored[: end - start])
                scored = scored[end - start :]
        except Exception as e:  # noqa: BLE001 - the requests get the error, the server goes on
            outs = [e] if len(parts) == 1 else [
                None if j.future.done() else await self._alone(loop, j.answers[start:end]) for j, start, end in parts]
        self.last_batch_s, self.last_batch_answers = time.perf_counter() - t0, len(answers)
        per = self.last_batch_s / len(answers)
        self.answer_s = per if self.answer_s <= 0 else 0.5 * self.answer_s + 0.5 * per
        self.busy_s += self.last_batch_s
        self.batches += 1
        self.answers += len(answers)
        for (j, _, _), out in zip(parts, outs, strict=True):
            if j.future.done() or out is None:
                continue
            if isinstance(out, Exception):
                j.future.set_exception(RequestRejected(500, f"scoring failed: {type(out).__name__}: {out}"))
                continue
            j.results += out
            if len(j.results) == len(j.answers):
                j.future.set_result(j.results)

    async def _alone(self, loop: asyncio.AbstractEventLoop, answers: list[Answer]) -> list[Scored] | Exception:
        try:
            return await loop.run_in_executor(self._executor, self.score, answers)
        except Exception as e:  # noqa: BLE001
            return e


# ----------------------------------------------------------------------------- the app


def _json_body(raw: bytes) -> Any:
    """The request's JSON; 400 for what is not JSON, nests too deeply, or holds a lone surrogate escape."""
    from evolm.errors import InputError
    from evolm.runs.jsonl import check_text

    try:
        body = json.loads(raw)
        check_text(body, "the body")
        return body
    except ValueError as e:
        raise RequestRejected(400, f"the body is not JSON: {e}") from None
    except RecursionError:
        raise RequestRejected(400, "the body is JSON nested too deeply") from None
    except InputError as e:
        raise RequestRejected(400, str(e)) from None


async def _client_gone(request: Any) -> None:
    """Return once the client of ``request`` (its body already read) has closed the connection."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def require_serve_extra() -> None:
    """FastAPI and uvicorn are the ``serve`` extra: a one-line ``BackendError`` naming it when absent."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise BackendError(INSTALL) from None


def _body_doc(example: dict) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"example": example}}}}


_RUBRIC = ('{"criteria": [{"criterion": "The answer is 4.", "weight": 1.0, '
           '"scoring_levels": {"1.0": "yes", "0.0": "no"}}]}')
LOG_KEYS = (*SOURCES, "missing_score", "prompt_mismatch", "judge_cached")


def create_app(judge: Any, rubrics: RubricSource | None = None, settings: ServeSettings | None = None) -> Any:
    """The FastAPI app around ``judge`` (anything with ``score(list[JudgeItem])``); its state lives in it.

    The batcher starts and stops with the app's lifespan, so run it under a server that runs the
    lifespan (uvicorn does by default).
    """
    require_serve_extra()
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.requests import ClientDisconnect

    rubrics = rubrics if rubrics is not None else RubricSource()
    settings = settings or ServeSettings()
    batcher = Batcher(lambda answers: score_answers(judge, rubrics, answers), settings,
                      whole=getattr(judge, "mode", None) == "listwise")

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202 - FastAPI's lifespan contract
        batcher.start()
        try:
            yield
        finally:
            await batcher.stop()

    app = FastAPI(title="evolm reward server", lifespan=lifespan,
                  description="EvoLM's rubric + judge reward: OpenRLHF's /get_reward, slime's /reward.")
    app.state.batcher, app.state.rubrics, app.state.settings = batcher, rubrics, settings

    async def rejected(request: Request, exc: RequestRejected) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)

    app.add_exception_handler(RequestRejected, rejected)

    async def answers_of(request: Request, parse: Callable[[Any, ServeSettings], Any]) -> Any:
        """The body read within ``max_body_mb`` (else 413), then parsed off the event loop by ``parse``."""
        limit = int(settings.max_body_mb * 2**20)
        too_big = RequestRejected(413, f"the body is over the {settings.max_body_mb:g} MiB limit (--max-body-mb)")
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise too_big
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_big
                chunks.append(chunk)
        except ClientDisconnect:
            raise RequestRejected(499, "the client closed the connection") from None
        # JSON decoding and text handling are linear but take a while on megabytes: not on the event loop
        return await asyncio.to_thread(lambda: parse(_json_body(b"".join(chunks)), settings))

    async def _scored(request: Request, answers: list[Answer], arrived: float) -> list[Scored]:
        gone = asyncio.ensure_future(_client_gone(request))
        try:
            return await batcher.submit(answers, gone, settings.deadline_s - (time.monotonic() - arrived))
        finally:
            gone.cancel()

    @app.post("/get_reward", openapi_extra=_body_doc({"query": ["What is 2+2?The answer is 4."],
                                                      "prompts": ["What is 2+2?"], "labels": [_RUBRIC]}))
    async def get_reward(request: Request) -> JSONResponse:
        """OpenRLHF's remote reward: rewards and scores (the same values, in [0, 1]) and per-answer logs."""
        arrived = time.monotonic()
        answers = await answers_of(request, openrlhf_answers)
        scored = await _scored(request, answers, arrived) if answers else []
        rewards = [s.score for s in scored]
        return JSONResponse({"rewards": rewards, "scores": rewards,
                             "extra_logs": {k: [s.logs[k] for s in scored] for k in LOG_KEYS}})

    @app.post("/reward", openapi_extra=_body_doc({"prompt": "What is 2+2?", "response": "4", "label": _RUBRIC}))
    async def reward(request: Request) -> JSONResponse:
        """slime's remote_rm: the reward in [0, 1] as a bare JSON number."""
        arrived = time.monotonic()
        (scored,) = await _scored(request, [await answers_of(request, slime_answer)], arrived)
        return JSONResponse(scored.score)

    @app.get("/health")
    async def health() -> dict:
        """Liveness, and what the server has done: batches, answers, rubrics written and cached."""
        return {"status": "ok", "mode": getattr(judge, "mode", None), "rubrics": rubrics.kind,
                "queued": batcher.queued(), "dropped": batcher.dropped, "batches": batcher.batches,
                "answers": batcher.answers, "busy_s": round(batcher.busy_s, 3), "rubrics_written": rubrics.written,
                "rubric_cache": len(rubrics.cache), **_judge_cache_health(judge)}

    return app


def _judge_cache_health(judge: Any) -> dict:
    """The judge cache's counts for /health (none without a cache): results kept, answers asked for, hit rate."""
    if not isinstance(judge, CachedJudge):
        return {}
    s = judge.cache.stats
    return {"judge_cache": {"entries": len(judge.cache), "lookups": s.lookups, "hits": s.hits,
                            "duplicates": s.duplicates, "sent": s.sent,
                            "hit_rate": None if s.hit_rate is None else round(s.hit_rate, 4)}}


def guarded_h11(header_timeout_s: float, body_timeout_s: float) -> type:
    """uvicorn's h11 protocol with read deadlines: a connection is closed when a request's headers have not
    arrived ``header_timeout_s`` after the connection opened (or its last reply went out), or its body
    ``body_timeout_s`` after its headers. uvicorn alone waits forever for a request that trickles in
    (its ``timeout_keep_alive`` is only for idle connections, and any byte stops it).
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _reading: str = "done"  # "headers", "body" or "done" (a request received, or being answered)

        def _arm(self, reading: str, seconds: float) -> None:
            self._disarm()
            self._reading = reading
            self._timer = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expired(self) -> None:
            self._timer = None
            if not self.transport.is_closing():
                self.logger.info("closing a connection: request %s not received in time", self._reading)
                self.transport.close()

        def _follow(self) -> None:
            state = self.conn.their_state
            if state is h11.SEND_BODY and self._reading == "headers":
                self._arm("body", body_timeout_s)
            elif state is h11.IDLE and self._reading == "done":
                self._arm("headers", header_timeout_s)
            elif state not in (h11.IDLE, h11.SEND_BODY):
                self._disarm()
                self._reading = "done"

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm("headers", header_timeout_s)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11


def uvicorn_options(settings: ServeSettings) -> dict[str, Any]:
    """``uvicorn.Config`` arguments for ``settings``' connection limits: read deadlines, keep-alive, headers."""
    return {"http": guarded_h11(settings.header_timeout_s, settings.body_timeout_s),
            "timeout_keep_alive": settings.keep_alive_s, "limit_concurrency": settings.max_connections,
            "h11_max_incomplete_event_size": settings.max_header_kb * 1024}


def run_server(app: Any, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``app`` until interrupted (uvicorn; the lifespan starts and stops the batcher)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5,
                **uvicorn_options(app.state.settings))
