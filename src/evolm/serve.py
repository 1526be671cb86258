"""The reward server: EvoLM's rubric + judge reward over HTTP, for RL engines in other processes.

OpenRLHF, slime and verl compute rewards in their own workers; they reach an external reward by
HTTP. ``evolm serve`` (``cli.py``) loads the judge once (``judge.build_judge``, the builder that
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
training. A full queue answers 503 with ``Retry-After``; a request past its deadline 504; a
malformed one a 4xx; every error body is ``{"error": ...}`` and the server keeps serving. All
model calls run in that one thread: the judge and a rubric writer may share one model.
(No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations at run time.)
"""

import asyncio
import hashlib
import json
import math
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from evolm.backends.base import Backend, SamplingParams
from evolm.errors import BackendError
from evolm.eval.rubric_source import RubricTable, write_prompt_rubrics
from evolm.judge import JudgeItem
from evolm.rewards import fill_missing_with_group_mean
from evolm.rubrics import Rubric

INSTALL = "the reward server needs FastAPI and uvicorn: pip install 'evolm[serve]'"
SOURCES = ("rubric_from_label", "rubric_written", "rubric_from_file", "no_rubric")
"""Where an answer's rubric came from; each is an ``extra_logs`` key (0/1 per answer), with ``missing_score``."""


@dataclass(frozen=True)
class ServeSettings:
    """How requests are batched, bounded and timed out (``evolm serve --help`` gives the flags)."""

    max_batch: int = 64
    """Answers per judge call, about (a request is never split; one larger than this is scored alone)."""
    max_wait_ms: float = 5.0
    """How long the first request of a batch waits for others; a few ms cost little next to a forward pass."""
    max_queue: int = 256
    """Requests waiting beyond the batch being scored; one more is answered 503 + Retry-After."""
    deadline_s: float = 300.0
    """Seconds a request may take from arrival, queueing included; then 504 (its answers are dropped unscored)."""
    rubric_cache: int = 4096
    """Written rubrics kept (one per distinct question, least recently used dropped first)."""


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


_USER_TURN = (re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S),  # ChatML (Qwen, SmolLM2)
              re.compile(r"<\|start_header_id\|>user<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>", re.S))  # Llama 3
ANCHOR = 24  # characters of the prompt's end that find the response when the prompt did not come back exactly
_END_MARKERS = re.compile(r"(?:<([|\uff5c])[^\s<>|\uff5c]{1,64}\1>|</s>)(?:\s*(?:<([|\uff5c])[^\s<>|\uff5c]{1,64}\2>|</s>))*\s*$")


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
    for pattern in _USER_TURN:
        turns = pattern.findall(prompt)
        if turns:
            return turns[-1]
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
        return _END_MARKERS.sub("", query[len(prompt) :]), False
    anchor = prompt[-ANCHOR:]
    at = query.find(anchor) if anchor else -1
    if at >= 0:
        return _END_MARKERS.sub("", query[at + len(anchor) :]), True
    return _END_MARKERS.sub("", query[len(os.path.commonprefix([query, prompt])) :]), True


def _text_list(body: dict, key: str, n: int | None) -> list:
    value = body.get(key)
    if not isinstance(value, list):
        raise RequestRejected(422, f"'{key}' must be a list, not {type(value).__name__}")
    if n is not None and len(value) != n:
        raise RequestRejected(422, f"'{key}' has {len(value)} entries, 'query' has {n}")
    return value


def openrlhf_answers(body: Any) -> list[Answer]:
    """The answers of an OpenRLHF ``/get_reward`` body ``{"query": [str], "prompts": [str], "labels": [...]}``."""
    if not isinstance(body, dict):
        raise RequestRejected(422, "the body must be a JSON object with 'query' and 'prompts'")
    queries = _text_list(body, "query", None)
    prompts = _text_list(body, "prompts", len(queries))
    labels = _text_list(body, "labels", len(queries)) if body.get("labels") is not None else [None] * len(queries)
    out = []
    for n, (q, p, label) in enumerate(zip(queries, prompts, labels, strict=True)):
        if not isinstance(q, str) or not isinstance(p, str):
            raise RequestRejected(422, f"query and prompt {n} must be text")
        response, mismatch = response_from_query(q, p)
        out.append(Answer(question_text(p), response, label, mismatch))
    return out


def slime_answer(body: Any) -> Answer:
    """The answer of a slime ``remote_rm`` body ``{"prompt": str | messages, "response": str, "label": ...}``."""
    if not isinstance(body, dict) or not isinstance(body.get("response"), str) or "prompt" not in body:
        raise RequestRejected(422, "the body must be a JSON object with 'prompt' and 'response' (text)")
    return Answer(question_text(body["prompt"]), body["response"], body.get("label"))


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
    raw = judge.score([JudgeItem(answers[i].question, answers[i].response, chosen[i][0]) for i in order])
    scores: list[float | None] = [None] * len(answers)
    for i, s in zip(order, raw, strict=True):
        scores[i] = s
    filled = fill_missing_with_group_mean(scores, [a.question for a in answers])
    return [Scored(value, {**{s: float(s == source) for s in SOURCES}, "missing_score": float(score is None),
                           "prompt_mismatch": float(a.prompt_mismatch)})
            for value, score, (_, source), a in zip(filled, scores, chosen, answers, strict=True)]


# ----------------------------------------------------------------------------- the batcher


@dataclass
class _Job:
    answers: list[Answer]
    future: asyncio.Future


@dataclass
class Batcher:
    """Collects concurrent requests into batches and scores each batch in one call on one worker thread."""

    score: Callable[[list[Answer]], list[Scored]]
    settings: ServeSettings = field(default_factory=ServeSettings)
    batches: int = 0
    answers: int = 0
    busy_s: float = 0.0  # seconds spent in judge calls, all batches
    last_batch_s: float = 0.0
    last_batch_jobs: int = 0
    queue: asyncio.Queue | None = None
    _executor: ThreadPoolExecutor | None = None
    _task: asyncio.Task | None = None

    def start(self) -> None:
        self.queue = asyncio.Queue(maxsize=self.settings.max_queue)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evolm-judge")
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, answers: list[Answer]) -> list[Scored]:
        """The scores of ``answers``; ``RequestRejected`` 503 when the queue is full, 504 past the deadline."""
        assert self.queue is not None, "Batcher.start() runs at server startup"
        job = _Job(answers, asyncio.get_running_loop().create_future())
        try:
            self.queue.put_nowait(job)
        except asyncio.QueueFull:
            # about the time the queue takes to drain, at the last batch's seconds per request
            wait = min(600, max(1, math.ceil(self.queue.qsize() * self.last_batch_s / max(1, self.last_batch_jobs))))
            raise RequestRejected(503, f"{self.queue.qsize()} requests queued (--max-queue); retry later",
                                  {"Retry-After": str(wait)}) from None
        try:  # on timeout wait_for cancels the future: a job not yet scored is then skipped
            return await asyncio.wait_for(job.future, self.settings.deadline_s)
        except TimeoutError:
            raise RequestRejected(504, f"not scored within the {self.settings.deadline_s:g} s deadline "
                                  "(--deadline-s)") from None

    async def _run(self) -> None:
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        held: _Job | None = None  # a job that would have overfilled the last batch: first of the next
        while True:
            jobs = [held if held is not None else await self.queue.get()]
            held, n = None, len(jobs[0].answers)
            for attempt in range(2):  # what is queued now; then, if room is left, what comes within max_wait
                while n < self.settings.max_batch and not self.queue.empty():
                    job = self.queue.get_nowait()
                    if n + len(job.answers) > self.settings.max_batch:
                        held = job
                        break
                    jobs.append(job)
                    n += len(job.answers)
                if held is not None or n >= self.settings.max_batch or attempt:
                    break
                await asyncio.sleep(self.settings.max_wait_ms / 1000)
            jobs = [j for j in jobs if not j.future.done()]  # past their deadline meanwhile
            if jobs:
                await self._score(loop, jobs)

    async def _score(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job]) -> None:
        """One judge call for all ``jobs``; if it fails, each job alone, so one bad request fails alone."""
        t0 = time.perf_counter()
        parts: list[list[Scored] | Exception] = []
        try:
            scored = await loop.run_in_executor(self._executor, self.score, [a for j in jobs for a in j.answers])
            for j in jobs:
                parts.append(scored[: len(j.answers)])
                scored = scored[len(j.answers) :]
        except Exception as e:  # noqa: BLE001 - the requests get the error, the server goes on
            parts = [e] if len(jobs) == 1 else [await self._alone(loop, j) for j in jobs]
        self.last_batch_s, self.last_batch_jobs = time.perf_counter() - t0, len(jobs)
        self.busy_s += self.last_batch_s
        self.batches += 1
        self.answers += sum(len(j.answers) for j in jobs)
        for j, part in zip(jobs, parts, strict=True):
            if j.future.done():
                continue
            if isinstance(part, Exception):
                j.future.set_exception(RequestRejected(500, f"scoring failed: {type(part).__name__}: {part}"))
            else:
                j.future.set_result(part)

    async def _alone(self, loop: asyncio.AbstractEventLoop, job: _Job) -> list[Scored] | Exception:
        try:
            return await loop.run_in_executor(self._executor, self.score, job.answers)
        except Exception as e:  # noqa: BLE001
            return e


# ----------------------------------------------------------------------------- the app


def require_serve_extra() -> None:
    """FastAPI and uvicorn are the ``serve`` extra: a one-line ``BackendError`` naming it when absent."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise BackendError(INSTALL) from None


def _body_doc(example: dict) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"example": example}}}}


_RUBRIC = '{"criteria": [{"criterion": "The answer is 4.", "weight": 1.0, "scoring_levels": {"1.0": "yes", "0.0": "no"}}]}'
LOG_KEYS = (*SOURCES, "missing_score", "prompt_mismatch")


def create_app(judge: Any, rubrics: RubricSource | None = None, settings: ServeSettings | None = None) -> Any:
    """The FastAPI app around ``judge`` (anything with ``score(list[JudgeItem])``); its state lives in it.

    The batcher starts and stops with the app's lifespan, so run it under a server that runs the
    lifespan (uvicorn does by default).
    """
    require_serve_extra()
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    rubrics = rubrics if rubrics is not None else RubricSource()
    batcher = Batcher(lambda answers: score_answers(judge, rubrics, answers), settings or ServeSettings())

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202 - FastAPI's lifespan contract
        batcher.start()
        try:
            yield
        finally:
            await batcher.stop()

    app = FastAPI(title="evolm reward server", lifespan=lifespan,
                  description="EvoLM's rubric + judge reward: OpenRLHF's /get_reward, slime's /reward.")
    app.state.batcher, app.state.rubrics = batcher, rubrics

    async def rejected(request: Request, exc: RequestRejected) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)

    app.add_exception_handler(RequestRejected, rejected)

    async def body_of(request: Request) -> Any:
        try:
            return json.loads(await request.body())
        except ValueError as e:
            raise RequestRejected(400, f"the body is not JSON: {e}") from None

    @app.post("/get_reward", openapi_extra=_body_doc({"query": ["What is 2+2?The answer is 4."],
                                                      "prompts": ["What is 2+2?"], "labels": [_RUBRIC]}))
    async def get_reward(request: Request) -> JSONResponse:
        """OpenRLHF's remote reward: rewards and scores (the same values, in [0, 1]) and per-answer logs."""
        answers = openrlhf_answers(await body_of(request))
        scored = await batcher.submit(answers) if answers else []
        rewards = [s.score for s in scored]
        return JSONResponse({"rewards": rewards, "scores": rewards,
                             "extra_logs": {k: [s.logs[k] for s in scored] for k in LOG_KEYS}})

    @app.post("/reward", openapi_extra=_body_doc({"prompt": "What is 2+2?", "response": "4", "label": _RUBRIC}))
    async def reward(request: Request) -> JSONResponse:
        """slime's remote_rm: the reward in [0, 1] as a bare JSON number."""
        (scored,) = await batcher.submit([slime_answer(await body_of(request))])
        return JSONResponse(scored.score)

    @app.get("/health")
    async def health() -> dict:
        """Liveness, and what the server has done: batches, answers, rubrics written and cached."""
        queue = batcher.queue
        return {"status": "ok", "mode": getattr(judge, "mode", None), "rubrics": rubrics.kind,
                "queued": queue.qsize() if queue is not None else 0, "batches": batcher.batches,
                "answers": batcher.answers, "busy_s": round(batcher.busy_s, 3), "rubrics_written": rubrics.written, "rubric_cache": len(rubrics.cache)}

    return app


def run_server(app: Any, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``app`` until interrupted (uvicorn; the lifespan starts and stops the batcher)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)
