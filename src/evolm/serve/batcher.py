"""Scoring what arrives: rubrics from the label, a writer (once per question, an LRU) or a file; judge calls in one
worker thread; requests larger than a batch shared fairly (``fair_shares``) with those waiting, a batch cut to about
``max_batch_s`` seconds of judging and judged in chunks, deadlines and a bounded queue.

Batches count work, not answers (``costed``): an answer costs its rubric's criteria, whether the rubric came from
its label, the writer or the file (one forward pass each in ``yesno``, a rubric as long in the prompt of the other
modes), and, with a ``listwise`` judge, the size of the list it is judged in (a list's cost grows about with the
square of its size). A label or file rubric is known when the request arrives; the writer writes its rubrics before
their answers are shared (``RubricSource.resolve``), so those answers are costed by their criteria too. A request
over ``max_label_criteria`` or ``max_list`` is refused (413) before it is judged. A batch goes to the judge in chunks
(``Batcher.chunk``, ``score_answers``); before each, the answers of a request past its deadline, or whose client has
gone, are left out, so the judge's work for it stops within a chunk. A missing score is filled within the request
that sent it (``fill_within_request``), once all its answers are back, never from another client's.
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
TO_WRITE = "rubric_to_write"
"""An answer's ``source`` while the writer has yet to write its rubric (``RubricSource.known``, ``resolve``)."""


def label_rubric(label: Any) -> Rubric | None:
    """The rubric a label carries (an object, or JSON text, that ``Rubric.from_obj`` parses), else ``None``."""
    if label is None or (isinstance(label, str) and not label.strip()):
        return None
    return Rubric.from_obj(label)


def _rubric_key(rubric: Rubric | None) -> str:
    return json.dumps(rubric.to_dict(), sort_keys=True) if rubric is not None else ""


def answer_cost(answer: Answer) -> int:
    """An answer's work outside ``listwise``: its rubric's criteria, at least 1 (1 while its rubric is unknown)."""
    return max(1, len(answer.rubric.criteria)) if answer.rubric is not None else 1


def list_key(answer: Answer) -> tuple[str, str]:
    """Which ``listwise`` list of its request an answer is in: its question, and its rubric when its label gave one
    (a written or file rubric is its question's, the same for all its answers, so it is known before it is written).
    """
    return answer.question, _rubric_key(answer.rubric) if answer.source == "rubric_from_label" else ""


def costed(answers: Sequence[Answer], settings: ServeSettings, listwise: bool,
           rubrics: RubricSource | None = None) -> list[Answer]:
    """``answers`` (one request's) with the rubrics known before any writing (``RubricSource.known``: label, file)
    and their cost in the batcher's work units; ``RequestRejected`` 413 for an answer whose label rubric has over
    ``settings.max_label_criteria`` criteria, or a ``listwise`` list over ``settings.max_list``.

    An answer costs its rubric's criteria, from its label or the file (at least 1; an answer the writer has yet to
    write a rubric for costs 1 until ``written`` costs it by the rubric's criteria); with a ``listwise`` judge, the
    number of answers in its list (``list_key``: the request's answers to one question under one rubric), so a list
    of n costs n * n. Run off the event loop: it parses labels.

    >>> [a.cost for a in costed([Answer("Q", "a", {"criteria": [{"criterion": "c", "weight": 1}] * 3})],
    ...                         ServeSettings(), listwise=False)]
    [3]
    >>> [a.cost for a in costed([Answer("Q", "a"), Answer("Q", "b"), Answer("R", "c")], ServeSettings(), True)]
    [2, 2, 1]
    """
    source = rubrics if rubrics is not None else RubricSource()
    answers = [source.known(a) for a in answers]
    for n, a in enumerate(answers):
        if a.source == "rubric_from_label" and a.rubric is not None and len(a.rubric.criteria) > \
                settings.max_label_criteria:
            raise RequestRejected(413, f"label {n} has {len(a.rubric.criteria)} criteria; at most "
                                  f"{settings.max_label_criteria} (--max-label-criteria)")
    if not listwise:
        return [replace(a, cost=answer_cost(a)) for a in answers]
    sizes: dict[tuple[str, str], int] = {}
    for a in answers:
        sizes[list_key(a)] = sizes.get(list_key(a), 0) + 1
    if (largest := max(sizes.values(), default=0)) > settings.max_list:
        raise RequestRejected(413, f"a listwise list of {largest} answers to one question; at most "
                              f"{settings.max_list} (--max-list)")
    return [replace(a, cost=sizes[list_key(a)]) for a in answers]


def written(rubrics: RubricSource, answers: Sequence[Answer], listwise: bool) -> list[Answer]:
    """``answers`` (``TO_WRITE``) with the writer's rubrics (``RubricSource.resolve``) and, outside ``listwise``, the
    cost those rubrics give them (``answer_cost``; a listwise answer's cost, its list's size, is known already)."""
    out = rubrics.resolve(answers)
    return out if listwise else [replace(a, cost=answer_cost(a)) for a in out]


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

    def known(self, answer: Answer) -> Answer:
        """``answer`` with the rubric it has without the writer: its label's, else (with no writer) the file's, else
        none; with a writer, a label-less answer is left ``TO_WRITE`` for ``resolve``. Reads the label and the table
        only, so it runs off the scoring thread (``costed``)."""
        if (rubric := label_rubric(answer.label)) is not None:
            return replace(answer, rubric=rubric, source="rubric_from_label")
        if self.writer is not None:
            return replace(answer, rubric=None, source=TO_WRITE)
        if self.table is not None and (rubric := self.table.by_prompt.get(answer.question)) is not None:
            return replace(answer, rubric=rubric, source="rubric_from_file")
        return replace(answer, rubric=None, source="no_rubric")

    def resolve(self, answers: Sequence[Answer]) -> list[Answer]:
        """Each answer with its rubric and source (``SOURCES``): ``known``'s, and for one it leaves ``TO_WRITE`` the
        writer's, from the cache or written (the rubrics the cache lacks in one batch). On the scoring thread only."""
        answers = [a if a.source else self.known(a) for a in answers]
        keys = [hashlib.sha256(a.question.encode("utf-8")).hexdigest() for a in answers]
        fresh: dict[str, Rubric | None] = {}
        todo = {k: a.question for k, a in zip(keys, answers, strict=True)
                if a.source == TO_WRITE and k not in self.cache}
        if todo and self.writer is not None:  # write_prompt_rubrics retries unparsed ones cooler, as the evaluations do
            rubrics, _ = write_prompt_rubrics(self.writer, list(todo.values()), self.params or SamplingParams())
            fresh = dict(zip(todo, rubrics, strict=True))
            self.written += len(todo)
        out: list[Answer] = []
        for key, answer in zip(keys, answers, strict=True):
            if answer.source == TO_WRITE:
                rubric = fresh[key] if key in fresh else self.cache[key]
                self.cache[key] = rubric
                self.cache.move_to_end(key)
                answer = replace(answer, rubric=rubric, source="rubric_written" if rubric is not None else "no_rubric")
            out.append(answer)
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


def score_answers(judge: Any, answers: Sequence[Answer], listwise: bool = False, chunk: int = 0,
                  wanted: Callable[[int | None], bool] = lambda request: True) -> list[Scored | None]:
    """Score ``answers`` (their rubrics resolved: ``RubricSource.resolve``) in ``judge.score`` calls of about
    ``chunk`` units of work each (``Answer.cost``; 0: all in one call), answers to one question (and rubric) adjacent.

    An answer, or with a ``listwise`` judge one list (a request's answers to one question under one rubric), is
    never split between calls; one larger than ``chunk`` is a call of its own. Before each call ``wanted`` is asked
    about the request (``Answer.request``) of each answer it would hold: a request no longer wanted (past its
    deadline, its client gone) has its answers left out, ``None`` here, so the judge's work for it stops within a
    call, and the answers still wanted fill the call instead. A missing score (an unreadable reply, a prompt over
    the judge's context) stays ``None`` in its ``Scored``, with ``missing_score`` saying so: the batcher fills it
    from the same request's answers once all of them are back (``fill_within_request``), never from the other
    requests of the batch.
    """
    key = [_rubric_key(a.rubric) for a in answers]
    order = sorted(range(len(answers)), key=lambda i: (answers[i].question, key[i]))
    units: dict[Any, list[int]] = {}  # what one call never splits: an answer, or a listwise list
    for i in order:
        units.setdefault((answers[i].request, *list_key(answers[i]), key[i]) if listwise else i, []).append(i)
    out: list[Scored | None] = [None] * len(answers)
    left, at = list(units.values()), 0
    while at < len(left):
        call: list[int] = []
        work = 0
        while at < len(left) and (not call or not chunk or work + sum(answers[i].cost for i in left[at]) <= chunk):
            unit, at = left[at], at + 1
            if wanted(answers[unit[0]].request):
                call += unit
                work += sum(answers[i].cost for i in unit)
        for i, scored in zip(call, _judge_call(judge, [answers[i] for i in call]), strict=True):
            out[i] = scored
    return out


def _judge_call(judge: Any, answers: list[Answer]) -> list[Scored]:
    """One ``judge.score`` call for ``answers``, in order; each listwise group is a request's list (``list_key``)."""
    if not answers:
        return []
    key = [_rubric_key(a.rubric) for a in answers]
    # listwise: a group is one request's answers to one question under one rubric (the other modes ignore it)
    items = [JudgeItem(a.question, a.response, a.rubric,
                       group=None if a.request is None else (a.request, *list_key(a), k))
             for a, k in zip(answers, key, strict=True)]
    if isinstance(judge, CachedJudge):  # results kept (--judge-cache, off by default in serve), said per answer
        call = judge.score_with_hits(items)
        raw, hits = call.results, call.cached
    else:
        raw, hits = judge.score(items), [False] * len(items)
    return [Scored(judgment.score, {**{s: float(s == a.source) for s in SOURCES},
                                    "missing_score": float(judgment.score is None),
                                    "prompt_mismatch": float(a.prompt_mismatch), "judge_cached": float(hit)},
                   (a.question, k))
            for judgment, hit, a, k in zip(raw, hits, answers, key, strict=True)]


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

    def ready(self, whole: bool) -> int:
        """The cost of the next answers whose rubric is known (up to the first ``TO_WRITE``): what can be judged now;
        0 for a ``whole`` request with any rubric still to write."""
        work = 0
        for a in self.answers[self.sent :]:
            if a.source == TO_WRITE:
                return 0 if whole else work
            work += a.cost
        return work

    def to_write(self) -> list[int]:
        """Indices of the answers not yet sent whose rubric the writer has yet to write."""
        return [k for k in range(self.sent, len(self.answers)) if self.answers[k].source == TO_WRITE]

    def take(self, work: int, first: bool) -> int:
        """How many of the next answers fit in ``work`` units (all of them when ``work`` is all that is left); at
        least one when ``first`` (the batch's first part: it always moves on), else none when the next does not fit;
        never one whose rubric is still to write."""
        n, used = 0, 0
        for a in self.answers[self.sent :]:
            if a.source == TO_WRITE or (used + a.cost > work and (n or not first)):
                break
            n, used = n + 1, used + a.cost
        return n


def _writing(jobs: Sequence[_Job], questions: int) -> list[tuple[_Job, int]]:
    """The answers (request, index) whose rubrics the writer writes next: those ``TO_WRITE`` of at most ``questions``
    distinct questions (a batch's room), taken from ``jobs`` in order. A question's answers go together: its rubric is
    written once (``RubricSource`` caches it)."""
    todo: list[tuple[_Job, int]] = []
    chosen: set[str] = set()
    for j in jobs:
        for k in j.to_write():
            question = j.answers[k].question
            if question in chosen or len(chosen) < questions:
                chosen.add(question)
                todo.append((j, k))
    return todo


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
CHUNKS = 4  # a batch of max_batch_s seconds of work goes to the judge in this many calls (``Batcher.chunk``)


@dataclass
class Batcher:
    """Collects concurrent requests into batches and scores each batch on one worker thread.

    Each batch holds up to ``max_batch`` units of work (``costed``: an answer counts its rubric's criteria, a
    listwise answer its list's size; fewer when the judge would take past ``max_batch_s`` on them, ``room``)
    shared fairly among the requests waiting (``fair_shares`` over their work): a large request, in answers or in
    criteria, is scored over several batches and cannot hold the judge from the small ones behind it for more than
    about two batches. Answers whose rubric the writer has yet to write are written for first (``resolve``, at most
    a batch's room of questions at a time, ``_writing``), so they are shared by their rubric's criteria too. A
    request past its deadline, or whose client has gone, is dropped: its answers not yet sent are never scored, those
    in the batch being judged are left out of its next judge call (``chunk``), and its place in the queue is free at
    once. A request's missing scores are filled from its own answers once all are back (``fill_within_request``).
    """

    score: Callable[[list[Answer], int, Callable[[int | None], bool]], list[Scored | None]]
    """``score(answers, chunk, wanted)``: ``score_answers``'s contract (judge calls of about ``chunk`` units of work,
    ``None`` for the answers of a request that ``wanted`` says is gone)."""
    settings: ServeSettings = field(default_factory=ServeSettings)
    resolve: Callable[[list[Answer]], list[Answer]] | None = None
    """Run on the worker thread over answers ``TO_WRITE``: they come back with their rubric and cost (``written``)."""
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
            room = self.room()
            # least served first: when the batch has less room than there are requests, a newcomer goes before a
            # large request that has had batches already (and large ones take turns)
            jobs = sorted(self.jobs, key=lambda j: j.sent)
            # rubrics first (what is shared is costed by them); while other requests have work ready, only a few
            # questions a round, so that writing for new questions cannot hold them up for a batch's room of rubrics
            waiting = any(j.waiting and j.ready(self.whole) for j in jobs)
            if self.resolve is not None and (todo := _writing(jobs, CHUNKS if waiting else room)):
                await self._write(loop, todo)
            jobs = [j for j in jobs if j.waiting and j.ready(self.whole)]
            shares = (whole_shares if self.whole else fair_shares)([j.ready(self.whole) for j in jobs], room)
            parts: list[tuple[_Job, int, int]] = []
            for j, work in zip(jobs, shares, strict=True):
                if work and (n := j.take(work, first=not parts)):
                    parts.append((j, j.sent, j.sent + n))
                    j.sent += n
            if parts:
                await self._score(loop, parts)

    def chunk(self) -> int:
        """Work in one judge call within a batch: what the judge does in about ``max_batch_s / CHUNKS`` seconds at
        its measured rate, so the work of a request that passes its deadline (or whose client leaves) during a batch
        stops within about that; 0 (the batch in one call) before any call has been timed, when a batch holds
        ``COLD_BATCH`` units at most. A fast judge's whole batch is one call."""
        if self.unit_s <= 0:
            return 0
        return max(1, int(self.settings.max_batch_s / CHUNKS / self.unit_s))

    async def _write(self, loop: asyncio.AbstractEventLoop, todo: list[tuple[_Job, int]]) -> None:
        """The writer's rubrics for ``todo`` (a request's answer k) in one call; if it fails, each request's alone, so
        one bad request fails alone (500)."""
        error = await self._write_some(loop, todo)
        if error is None:
            return
        by_job: dict[_Job, list[tuple[_Job, int]]] = {}
        for j, k in todo:
            by_job.setdefault(j, []).append((j, k))
        for j, own in by_job.items():
            if len(by_job) > 1 and not j.future.done():
                error = await self._write_some(loop, own)
            if error is not None and not j.future.done():
                j.future.set_exception(RequestRejected(500, f"writing rubrics failed: {type(error).__name__}: {error}"))

    async def _write_some(self, loop: asyncio.AbstractEventLoop, todo: list[tuple[_Job, int]]) -> Exception | None:
        try:
            out = await loop.run_in_executor(self._executor, self.resolve, [j.answers[k] for j, k in todo])
        except Exception as e:  # noqa: BLE001 - the requests get the error, the server goes on
            return e
        for (j, k), answer in zip(todo, out, strict=True):
            j.answers[k] = answer
        return None

    def room(self) -> int:
        """Work in the next batch: ``max_batch`` units, or fewer if the judge would take past ``max_batch_s`` on them;
        ``COLD_BATCH`` at most before any call has been timed (a cold server's first call of 64 answers took 17 s on
        a loaded CPU, and a request arriving then waited for all of it)."""
        if self.unit_s <= 0:
            return min(self.settings.max_batch, COLD_BATCH)
        return max(1, min(self.settings.max_batch, int(self.settings.max_batch_s / self.unit_s)))

    async def _score(self, loop: asyncio.AbstractEventLoop, parts: list[tuple[_Job, int, int]]) -> None:
        """Judge calls for all ``parts`` (a request's answers start:end) in chunks (``chunk``), leaving out a request
        dropped meanwhile; if scoring fails, each request's part alone, so one bad request fails alone."""
        t0 = time.perf_counter()
        outs: list[list[Scored | None] | Exception | None] = []
        answers = [a for j, start, end in parts for a in j.answers[start:end]]
        futures = {j.request: j.future for j, _, _ in parts}
        chunk = self.chunk()

        def wanted(request: int | None) -> bool:  # on the worker thread: a future's done() is a read
            return request not in futures or not futures[request].done()

        try:
            scored = await loop.run_in_executor(self._executor, self.score, answers, chunk, wanted)
            for _, start, end in parts:
                outs.append(scored[: end - start])
                scored = scored[end - start :]
        except Exception as e:  # noqa: BLE001 - the requests get the error, the server goes on
            outs = [e] if len(parts) == 1 else [
                None if j.future.done() else await self._alone(loop, j.answers[start:end], chunk, wanted)
                for j, start, end in parts]
        judged = [a for (j, start, end), out in zip(parts, outs, strict=True) if isinstance(out, list)
                  for a, s in zip(j.answers[start:end], out, strict=True) if s is not None]
        self.last_batch_s, self.last_batch_work = time.perf_counter() - t0, sum(a.cost for a in judged)
        if self.last_batch_work:
            per = self.last_batch_s / self.last_batch_work
            self.unit_s = per if self.unit_s <= 0 else 0.5 * self.unit_s + 0.5 * per
        self.busy_s += self.last_batch_s
        self.batches += 1
        self.answers += len(judged)
        for (j, _, _), out in zip(parts, outs, strict=True):
            if j.future.done() or out is None:
                continue
            if isinstance(out, Exception):
                j.future.set_exception(RequestRejected(500, f"scoring failed: {type(out).__name__}: {out}"))
                continue
            j.results += [s for s in out if s is not None]  # all of them: a request left out is done
            if len(j.results) == len(j.answers):  # all its parts are back: fill its missing scores from its own
                j.future.set_result(fill_within_request(j.results))

    async def _alone(self, loop: asyncio.AbstractEventLoop, answers: list[Answer], chunk: int,
                     wanted: Callable[[int | None], bool]) -> list[Scored | None] | Exception:
        try:
            return await loop.run_in_executor(self._executor, self.score, answers, chunk, wanted)
        except Exception as e:  # noqa: BLE001
            return e
