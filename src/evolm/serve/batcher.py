"""Scoring what arrives: requests queued per client, batches shared fairly between clients (``fairness``),
judge calls and rubric writing in one worker thread, each cut to a fraction of ``max_batch_s``, deadlines and
bounded queues.

Batches count work, not answers (``sources.costed``): an answer costs its rubric's criteria times its length,
with a ``listwise`` judge its list's size times its length. A request over ``max_label_criteria`` or
``max_list`` is refused (413) before it is judged. A batch goes to the judge in chunks (``Batcher.chunk``,
``score_answers``) and the writer writes a few questions a call (``Batcher.write_room``); before each, the
answers of a request past its deadline, or whose client has gone, are left out, so the work for it stops
within a chunk. A missing score is filled within the request that sent it (``fill_within_request``), once all
its answers are back.

The helpers this module used to hold live in ``sources`` (rubrics, costs), ``scoring`` (judge calls) and
``fairness`` (who goes next); the names below are kept for the callers that import them from here.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from evolm.serve.fairness import Job, level, pick_batch, pick_questions
from evolm.serve.protocols import Answer, RequestRejected
from evolm.serve.scoring import Scored, fill_within_request, score_answers
from evolm.serve.settings import ServeSettings
from evolm.serve.sources import SOURCES, TO_WRITE, RubricSource, costed, label_rubric, written

__all__ = ["SOURCES", "TO_WRITE", "Batcher", "RubricSource", "Scored", "costed", "fill_within_request",
           "label_rubric", "score_answers", "written"]

COLD_BATCH = 8  # work in a batch before the judge's time per unit of work is known (``Batcher.room``)
CHUNKS = 4  # a batch of max_batch_s seconds of work goes to the judge in this many calls (``Batcher.chunk``)


@dataclass
class Batcher:
    """Collects concurrent requests into batches and scores each batch on one worker thread.

    Each batch holds up to ``max_batch`` units of work (fewer when the judge would take past ``max_batch_s``
    on them, ``room``), shared between clients by fair queueing (``fairness.pick_batch``: the client with the
    least work served goes next, then its least-served request), so neither a large request nor a client with
    many requests holds the judge from the others for more than about a batch. Answers whose rubric the writer
    has yet to write are written for first (``resolve``, a few questions a call, ``write_room``, taken the
    same fair way and charged to their client's share). A client may have at most ``max_client_queue``
    requests waiting; past ``max_queue`` in all, only a client with none waiting is let in. A request past its
    deadline, or whose client has gone, is dropped: its answers not yet sent are never scored, those in the
    batch being judged are left out of its next judge call (``chunk``), and its place in the queue is free at
    once. A request's missing scores are filled from its own answers once all are back
    (``fill_within_request``).
    """

    score: Callable[[list[Answer], int, Callable[[int | None], bool]], list[Scored | None]]
    """``score(answers, chunk, wanted)``: ``score_answers``'s contract (judge calls of about ``chunk`` units
    of work, ``None`` for the answers of a request that ``wanted`` says is gone)."""
    settings: ServeSettings = field(default_factory=ServeSettings)
    resolve: Callable[[list[Answer]], list[Answer]] | None = None
    """Run on the worker thread over answers ``TO_WRITE``: they come back with their rubric and cost
    (``written``)."""
    whole: bool = False
    """Never split a request between batches: a ``listwise`` judge lists a request's answers together."""
    batches: int = 0
    answers: int = 0
    dropped: int = 0  # requests given up (deadline, client gone) before all their answers were scored
    busy_s: float = 0.0  # seconds spent in judge calls, all batches
    last_batch_s: float = 0.0
    last_batch_work: int = 0
    unit_s: float = 0.0  # seconds per unit of work of recent judge calls (a moving average; 0 before any)
    write_s: float = 0.0  # seconds per question of recent writer calls (a moving average; 0 before the first)
    jobs: list[Job] = field(default_factory=list)  # admitted requests, in arrival order
    load: dict[str, float] = field(default_factory=dict)  # work given each client waiting (``fairness``)
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

    def queued(self, client: str | None = None) -> int:
        """Requests with answers not yet sent to the judge (what ``max_queue`` bounds), or ``client``'s."""
        return sum(j.waiting for j in self.jobs if client is None or j.client == client)

    def _refuse(self, client: str) -> RequestRejected | None:
        """503 when ``client`` has ``max_client_queue`` requests waiting, or any while ``max_queue`` are; with
        a Retry-After of about the time its queue (or the whole queue) takes to drain at the last batch's
        rate."""
        mine, waiting = self.queued(client), self.queued()
        per = self.last_batch_s / max(1, self.last_batch_work)
        if mine >= self.settings.max_client_queue:
            clients = len({j.client for j in self.jobs if j.waiting})
            left = sum(j.work_left for j in self.jobs if j.waiting and j.client == client) * clients
            why = f"{mine} requests of yours queued (--max-client-queue)"
        elif waiting >= self.settings.max_queue and mine:
            left = sum(j.work_left for j in self.jobs if j.waiting)
            why = f"{waiting} requests queued (--max-queue)"
        else:
            return None
        wait = min(600, max(1, math.ceil(left * per)))
        return RequestRejected(503, f"{why}; retry later", {"Retry-After": str(wait)})

    async def submit(self, answers: list[Answer], client_gone: asyncio.Future | None = None,
                     deadline_s: float | None = None, client: str = "") -> list[Scored]:
        """The scores of ``answers``; ``RequestRejected`` 503 when the queue is full, 504 past the deadline.

        ``client_gone`` (an awaitable that finishes when the client disconnects) drops the request
        early, 499. ``deadline_s`` is what is left of the request's deadline (default: all of it).
        ``client`` says who sent it (``app.client_of``): queue limits and fair shares count by it.
        """
        assert self._wake is not None, "Batcher.start() runs at server startup"
        if (refused := self._refuse(client)) is not None:
            raise refused
        deadline = self.settings.deadline_s if deadline_s is None else deadline_s
        self._requests += 1
        future = asyncio.get_running_loop().create_future()
        job = Job([replace(a, request=self._requests) for a in answers], future, self._requests, client,
                  time.monotonic() + deadline)
        self.jobs.append(job)
        self._wake.set()
        watch = {job.future} | ({client_gone} if client_gone is not None else set())
        try:
            done, _ = await asyncio.wait(watch, timeout=max(0.0, deadline),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not job.future.done():  # past the deadline, the client gone, or this task cancelled: drop it
                job.future.cancel()
                self.dropped += 1
        if job.future in done:
            return job.future.result()
        if client_gone is not None and client_gone in done:
            raise RequestRejected(499, "the client closed the connection; its answers were dropped")
        raise RequestRejected(504, f"not scored within the {self.settings.deadline_s:g} s deadline "
                              "(--deadline-s)")

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            self.jobs = [j for j in self.jobs if j.waiting]
            if not self.jobs:
                self._wake.clear()
                await self._wake.wait()
                continue
            if not _at_least(self.jobs, self.settings.max_batch):
                await asyncio.sleep(self.settings.max_wait_ms / 1000)  # room left: let others join
                self.jobs = [j for j in self.jobs if j.waiting]
            self.load = level(self.load, self.jobs)
            # rubrics first (what is shared is costed by them); while other requests have work ready, or
            # another client waits, a quarter of a batch's time of writing a round, so that writing cannot
            # hold them up long
            others = any(j.head_ready() for j in self.jobs) or len(self.load) > 1
            if self.resolve is not None:
                todo = pick_questions(self.jobs, self.write_room(others), self.load, self.write_cost())
                if todo:
                    await self._write(loop, todo)
            jobs = [j for j in self.jobs if j.waiting]
            parts: list[tuple[Job, int, int]] = []
            for j, n in pick_batch(jobs, self.room(), self.whole, self.load):
                parts.append((j, j.sent, j.sent + n))
                j.sent += n
                j.work_sent += sum(a.cost for a in j.answers[j.sent - n : j.sent])
            if parts:
                await self._score(loop, parts)

    def chunk(self) -> int:
        """Work in one judge call within a batch: what the judge does in about ``max_batch_s / CHUNKS``
        seconds at its measured rate, so the work of a request that passes its deadline (or whose client
        leaves) during a batch stops within about that; 0 (the batch in one call) before any call has been
        timed, when a batch holds ``COLD_BATCH`` units at most. A fast judge's whole batch is one call."""
        if self.unit_s <= 0:
            return 0
        return max(1, int(self.settings.max_batch_s / CHUNKS / self.unit_s))

    def room(self) -> int:
        """Work in the next batch: ``max_batch`` units, or fewer if the judge would take past ``max_batch_s``
        on them; ``COLD_BATCH`` at most before any call has been timed (a cold server's first call of 64
        answers took 17 s on a loaded CPU, and a request arriving then waited for all of it)."""
        if self.unit_s <= 0:
            return min(self.settings.max_batch, COLD_BATCH)
        return max(1, min(self.settings.max_batch, int(self.settings.max_batch_s / self.unit_s)))

    def write_room(self, others: bool) -> int:
        """Questions in the next writer call: what the writer writes in ``max_batch_s`` at its measured rate,
        a quarter of that when ``others`` (other answers ready to judge, or other clients waiting) (``CHUNKS``
        questions, or a batch's ``room``, before a call has been timed); at least one."""
        if self.write_s <= 0:
            return CHUNKS if others else self.room()
        return max(1, int(self.settings.max_batch_s / (CHUNKS if others else 1) / self.write_s))

    def write_cost(self) -> float:
        """What writing one rubric counts against its client's share, in judge units: the writer's seconds per
        question over the judge's per unit, once both are measured (1 before)."""
        return self.write_s / self.unit_s if self.write_s > 0 and self.unit_s > 0 else 1.0

    async def _write(self, loop: asyncio.AbstractEventLoop, todo: list[tuple[Job, int]]) -> None:
        """The writer's rubrics for ``todo`` (a request's answer k) in one call; if it fails, each request's
        alone, so one bad request fails alone (500)."""
        error = await self._write_some(loop, todo)
        if error is None:
            return
        by_job: dict[Job, list[tuple[Job, int]]] = {}
        for j, k in todo:
            by_job.setdefault(j, []).append((j, k))
        for j, own in by_job.items():
            if len(by_job) > 1 and not j.future.done():
                error = await self._write_some(loop, own)
            if error is not None and not j.future.done():
                why = f"writing rubrics failed: {type(error).__name__}: {error}"
                j.future.set_exception(RequestRejected(500, why))

    async def _write_some(self, loop: asyncio.AbstractEventLoop,
                          todo: list[tuple[Job, int]]) -> Exception | None:
        todo = [(j, k) for j, k in todo if j.wanted()]  # one dropped since it was picked: not written for
        if not todo:
            return None
        questions = len({j.answers[k].question for j, k in todo})
        t0 = time.perf_counter()
        try:
            out = await loop.run_in_executor(self._executor, self.resolve, [j.answers[k] for j, k in todo])
        except Exception as e:  # noqa: BLE001 - the requests get the error, the server goes on
            return e
        per = (time.perf_counter() - t0) / questions
        self.write_s = per if self.write_s <= 0 else 0.5 * self.write_s + 0.5 * per
        for (j, k), answer in zip(todo, out, strict=True):
            j.written(k, answer)
        return None

    async def _score(self, loop: asyncio.AbstractEventLoop, parts: list[tuple[Job, int, int]]) -> None:
        """Judge calls for all ``parts`` (a request's answers start:end) in chunks (``chunk``), leaving out a
        request dropped meanwhile; if scoring fails, each request's part alone, so one bad request fails
        alone."""
        t0 = time.perf_counter()
        outs: list[list[Scored | None] | Exception | None] = []
        answers = [a for j, start, end in parts for a in j.answers[start:end]]
        jobs = {j.request: j for j, _, _ in parts}
        chunk = self.chunk()

        def wanted(request: int | None) -> bool:  # on the worker thread: done() and the clock are reads
            return request not in jobs or jobs[request].wanted()

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
            if len(j.results) == len(j.answers):  # all its parts are back: fill its missing scores from it
                j.future.set_result(fill_within_request(j.results))

    async def _alone(self, loop: asyncio.AbstractEventLoop, answers: list[Answer], chunk: int,
                     wanted: Callable[[int | None], bool]) -> list[Scored | None] | Exception:
        try:
            return await loop.run_in_executor(self._executor, self.score, answers, chunk, wanted)
        except Exception as e:  # noqa: BLE001
            return e


def _at_least(jobs: Sequence[Job], work: int) -> bool:
    """Whether ``jobs`` have ``work`` units left to send, counting no further than that."""
    total = 0
    for j in jobs:
        for a in j.answers[j.sent :]:
            total += a.cost
            if total >= work:
                return True
    return False
