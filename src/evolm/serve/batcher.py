"""Scoring what arrives: rubrics from the label, a writer (once per question, an LRU) or a file; one ``Judge.score``
call per batch in one worker thread; requests larger than a batch shared fairly (``fair_shares``) with those
waiting, a batch cut to about ``max_batch_s`` seconds of judging, deadlines and a bounded queue.

Batches count work, not answers (``costed``): an answer costs its label rubric's criteria (one forward pass
each in ``yesno``, a rubric as long in the prompt of the other modes) and, with a ``listwise`` judge, the size
of the list it is judged in (a list's cost grows about with the square of its size). A request over
``max_label_criteria`` or ``max_list`` is refused (413) before it is judged. A missing score is filled within the
request that sent it (``fill_within_request``), once all its answers are back, never from another client's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from evolm.backends.base import Backend, SamplingParams
from evolm.eval.rubric_source import RubricTable, write_prompt_rubrics
from evolm.judge.cache import CachedJudge
from evolm.judge.judge import JudgeItem
from evolm.rewards import fill_missing_with_group_mean
from evolm.rubrics import Rubric
from evolm.serve.protocols import Answer, RequestRejected
from evolm.serve.settings import ServeSettings

SOURCES = ("rubric_from_label", "rubric_written", "rubric_from_file", "no_rubric")
"""Where an answer's rubric came from; each is an ``extra_logs`` key (0/1 per answer), with ``missing_score``."""


def label_rubric(label: Any) -> Rubric | None:
    """The rubric a label carries (an object, or JSON text, that ``Rubric.from_obj`` parses), else ``None``."""
    if label is None or (isinstance(label, str) and not label.strip()):
        return None
    return Rubric.from_obj(label)


def _rubric_key(rubric: Rubric | None) -> str:
    return json.dumps(rubric.to_dict(), sort_keys=True) if rubric is not None else ""


def costed(answers: Sequence[Answer], settings: ServeSettings, listwise: bool) -> list[Answer]:
    """``answers`` (one request's) with their cost in the batcher's work units; ``RequestRejected`` 413 for an answer
    whose label rubric has over ``settings.max_label_criteria`` criteria, or a ``listwise`` list over
    ``settings.max_list``.

    An answer costs its label rubric's criteria (at least 1: a rubric written or read from a file is one of the
    writer's, bounded by its reply); with a ``listwise`` judge, the number of answers in its list (the request's
    answers to one question under one rubric), so a list of n costs n * n. Run off the event loop: it parses labels.

    >>> [a.cost for a in costed([Answer("Q", "a", {"criteria": [{"criterion": "c", "weight": 1}] * 3})],
    ...                         ServeSettings(), listwise=False)]
    [3]
    >>> [a.cost for a in costed([Answer("Q", "a"), Answer("Q", "b"), Answer("R", "c")], ServeSettings(), True)]
    [2, 2, 1]
    """
    rubrics = [label_rubric(a.label) for a in answers]
    for n, rubric in enumerate(rubrics):
        if rubric is not None and len(rubric.criteria) > settings.max_label_criteria:
            raise RequestRejected(413, f"label {n} has {len(rubric.criteria)} criteria; at most "
                                  f"{settings.max_label_criteria} (--max-label-criteria)")
    if not listwise:
        return [replace(a, cost=max(1, len(r.criteria) if r is not None else 1)) for a, r in zip(answers, rubrics,
                                                                                                 strict=True)]
    keys = [(a.question, _rubric_key(r)) for a, r in zip(answers, rubrics, strict=True)]
    sizes: dict[tuple[str, str], int] = {}
    for k in keys:
        sizes[k] = sizes.get(k, 0) + 1
    if (largest := max(sizes.values(), default=0)) > settings.max_list:
        raise RequestRejected(413, f"a listwise list of {largest} answers to one question; at most "
                              f"{settings.max_list} (--max-list)")
    return [replace(a, cost=sizes[k]) for a, k in zip(answers, keys, strict=True)]


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
    score: float | None  # the judge's; ``None`` (missing) until ``fill_within_request`` fills it
    logs: dict[str, float]
    group: tuple[str, str] = ("", "")  # (question, rubric): what a missing score is filled from, within its request


def fill_within_request(scored: Sequence[Scored]) -> list[Scored]:
    """One request's scores with each missing one filled by the mean of the same request's scores to the same question
    and rubric (0.0 when it has none: all equal, zero advantage), as training fills a group
    (``fill_missing_with_group_mean``). Only that request's scores are read: a client never gets a reward computed
    from another client's answers.

    >>> [s.score for s in fill_within_request([Scored(1.0, {}), Scored(None, {}), Scored(0.5, {})])]
    [1.0, 0.75, 0.5]
    """
    filled = fill_missing_with_group_mean([s.score for s in scored], [s.group for s in scored])
    return [replace(s, score=v) for s, v in zip(scored, filled, strict=True)]


def score_answers(judge: Any, rubrics: RubricSource, answers: Sequence[Answer]) -> list[Scored]:
    """Score ``answers`` in one ``judge.score`` call, answers to one question (and rubric) adjacent.

    A missing score (an unreadable reply, a prompt over the judge's context) stays ``None`` here, with
    ``missing_score`` saying so: the batcher fills it from the same request's answers once all of them are back
    (``fill_within_request``), never from the other requests of the batch.
    """
    chosen = rubrics.resolve(answers)
    key = [_rubric_key(r) for r, _ in chosen]
    order = sorted(range(len(answers)), key=lambda i: (answers[i].question, key[i]))
    # listwise: a group is one request's answers to one question under one rubric (the other modes ignore it)
    items = [JudgeItem(answers[i].question, answers[i].response, chosen[i][0],
                       group=None if answers[i].request is None else (answers[i].request, answers[i].question, key[i]))
             for i in order]
    if isinstance(judge, CachedJudge):  # results kept (--judge-cache, off by default in serve), said per answer
        call = judge.score_with_hits(items)
        raw, hits = call.results, call.cached
    else:
        raw, hits = judge.score(items), [False] * len(items)
    scores: list[float | None] = [None] * len(answers)
    cached = [False] * len(answers)
    for i, judgment, hit in zip(order, raw, hits, strict=True):
        scores[i], cached[i] = judgment.score, hit
    return [Scored(score, {**{s: float(s == source) for s in SOURCES}, "missing_score": float(score is None),
                           "prompt_mismatch": float(a.prompt_mismatch), "judge_cached": float(hit)}, (a.question, k))
            for score, (_, source), a, hit, k in zip(scores, chosen, answers, cached, key, strict=True)]


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

    @property
    def work_left(self) -> int:
        """The cost (``Answer.cost``) of the answers not yet sent."""
        return sum(a.cost for a in self.answers[self.sent :])

    def take(self, work: int, first: bool) -> int:
        """How many of the next answers fit in ``work`` units (all of them when ``work`` is all that is left); at
        least one when ``first`` (the batch's first part: it always moves on), else none when the next does not fit."""
        n, used = 0, 0
        for a in self.answers[self.sent :]:
            if used + a.cost > work and (n or not first):
                break
            n, used = n + 1, used + a.cost
        return n


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


COLD_BATCH = 8  # work in a batch before the judge's time per unit of work is known (``Batcher.room``)


@dataclass
class Batcher:
    """Collects concurrent requests into batches and scores each batch in one call on one worker thread.

    Each batch holds up to ``max_batch`` units of work (``costed``: an answer counts its rubric's criteria, a
    listwise answer its list's size; fewer when the judge would take past ``max_batch_s`` on them, ``room``)
    shared fairly among the requests waiting (``fair_shares`` over their work): a large request, in answers or in
    criteria, is scored over several batches and cannot hold the judge from the small ones behind it for more than
    about two batches. A request past its deadline, or whose client has gone, is dropped: its answers not yet sent
    are never scored and its place in the queue is free at once. A request's missing scores are filled from its own
    answers once all are back (``fill_within_request``).
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
    last_batch_work: int = 0
    unit_s: float = 0.0  # seconds per unit of work of recent judge calls (a moving average; 0 before the first)
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
            left = sum(j.work_left for j in self.jobs if j.waiting)
            per = self.last_batch_s / max(1, self.last_batch_work)
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
            if sum(j.work_left for j in self.jobs) < self.settings.max_batch:
                await asyncio.sleep(self.settings.max_wait_ms / 1000)  # room left: let others join
                self.jobs = [j for j in self.jobs if j.waiting]
            # least served first: when the batch has less room than there are requests, a newcomer goes before a
            # large request that has had batches already (and large ones take turns)
            jobs = sorted(self.jobs, key=lambda j: j.sent)
            shares = (whole_shares if self.whole else fair_shares)([j.work_left for j in jobs], self.room())
            parts: list[tuple[_Job, int, int]] = []
            for j, work in zip(jobs, shares, strict=True):
                if work and (n := j.take(work, first=not parts)):
                    parts.append((j, j.sent, j.sent + n))
                    j.sent += n
            if parts:
                await self._score(loop, parts)

    def room(self) -> int:
        """Work in the next batch: ``max_batch`` units, or fewer if the judge would take past ``max_batch_s`` on them;
        ``COLD_BATCH`` at most before any call has been timed (a cold server's first call of 64 answers took 17 s on
        a loaded CPU, and a request arriving then waited for all of it)."""
        if self.unit_s <= 0:
            return min(self.settings.max_batch, COLD_BATCH)
        return max(1, min(self.settings.max_batch, int(self.settings.max_batch_s / self.unit_s)))

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
        self.last_batch_s, self.last_batch_work = time.perf_counter() - t0, sum(a.cost for a in answers)
        per = self.last_batch_s / self.last_batch_work
        self.unit_s = per if self.unit_s <= 0 else 0.5 * self.unit_s + 0.5 * per
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
            if len(j.results) == len(j.answers):  # all its parts are back: fill its missing scores from its own
                j.future.set_result(fill_within_request(j.results))

    async def _alone(self, loop: asyncio.AbstractEventLoop, answers: list[Answer]) -> list[Scored] | Exception:
        try:
            return await loop.run_in_executor(self._executor, self.score, answers)
        except Exception as e:  # noqa: BLE001
            return e
