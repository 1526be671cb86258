"""Who the judge and the rubric writer work for next: fair queueing between clients, then between a client's
requests.

A client is a peer address (``app.client_of``: the server has no API keys, and a header a client sets could be
changed at will to pass for many clients). Each client with work waiting has a load: the units of work
(``Answer.cost``) the judge and the writer have taken for it while it had work waiting. A batch is filled one
answer at a time (``pick_batch``), always for the client with the least load, and within that client for its
request with the least work sent so far: a client flooding hundreds of requests gets the share of one client,
not one share per request, and a one-answer request from another client is in the next batch. The writer's
questions are taken the same way (``pick_questions``), each charged what writing a rubric costs in judge
units, so a client sending thousands of new questions cannot push another client's question back. A client
that comes back after having nothing waiting starts at the least load of those waiting (``level``): load is
not saved up while idle.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from evolm.serve.protocols import Answer
from evolm.serve.scoring import Scored
from evolm.serve.sources import TO_WRITE


@dataclass(eq=False)
class Job:
    """One request's answers; ``sent`` of them have gone to the judge, ``results`` came back in order."""

    answers: list[Answer]
    future: asyncio.Future
    request: int = 0  # the request's number, carried by its answers (``Answer.request``)
    client: str = ""  # who sent it (``app.client_of``): what queue limits and fair shares count by
    deadline: float = math.inf  # ``time.monotonic()`` past which its answers are left out (and it gets 504)
    sent: int = 0
    work_sent: int = 0  # the cost of the answers sent
    results: list[Scored] = field(default_factory=list)
    work: int = field(init=False)  # the cost of all its answers (kept up to date by ``written``)
    unwritten: int = field(init=False)  # its answers still ``TO_WRITE``

    def __post_init__(self) -> None:
        self.work = sum(a.cost for a in self.answers)
        self.unwritten = sum(a.source == TO_WRITE for a in self.answers)

    def written(self, k: int, answer: Answer) -> None:
        """Answer ``k`` as the writer gave it back: its rubric, and its cost from it."""
        old, self.answers[k] = self.answers[k], answer
        self.work += answer.cost - old.cost
        self.unwritten -= old.source == TO_WRITE and answer.source != TO_WRITE

    @property
    def waiting(self) -> bool:
        """Answers left to send, for a request still wanted (not answered, past its deadline or abandoned)."""
        return self.sent < len(self.answers) and self.wanted()

    def wanted(self) -> bool:
        """Neither answered, dropped (client gone) nor past its deadline; read from the worker thread too."""
        return not self.future.done() and time.monotonic() < self.deadline

    @property
    def work_left(self) -> int:
        """The cost (``Answer.cost``) of the answers not yet sent."""
        return self.work - self.work_sent

    def ready(self, whole: bool) -> int:
        """The cost of the next answers whose rubric is known (up to the first ``TO_WRITE``): what can be
        judged now; 0 for a ``whole`` request with any rubric still to write."""
        work = 0
        for a in self.answers[self.sent :]:
            if a.source == TO_WRITE:
                return 0 if whole else work
            work += a.cost
        return work

    def head_ready(self) -> bool:
        """Whether its next answer can be judged now (one is left and its rubric is known)."""
        return self.sent < len(self.answers) and self.answers[self.sent].source != TO_WRITE

    def to_write(self) -> list[int]:
        """Indices of the answers not yet sent whose rubric the writer has yet to write."""
        return [k for k in range(self.sent, len(self.answers)) if self.answers[k].source == TO_WRITE]


def level(load: dict[str, float], jobs: Sequence[Job]) -> dict[str, float]:
    """The loads of the clients with a request in ``jobs``: a client's own, or for one that had none, the
    least of the others' (0 when none has one), so that time spent idle is not credit.

    >>> jobs = [Job([], None, client="a"), Job([], None, client="b")]  # type: ignore[arg-type]
    >>> level({"a": 5.0, "gone": 1.0}, jobs)
    {'a': 5.0, 'b': 5.0}
    """
    clients = dict.fromkeys(j.client for j in jobs)
    floor = min((load[c] for c in clients if c in load), default=0.0)
    return {c: load.get(c, floor) for c in clients}


def _turns(jobs: Sequence[Job], load: dict[str, float],
           ok: Callable[[Job], bool]) -> tuple[list, dict[str, list]]:
    """A heap of clients by load, and each client's heap of requests (those for which ``ok(job)``) by work
    sent."""
    own: dict[str, list] = {}
    for n, j in enumerate(jobs):
        if ok(j):
            own.setdefault(j.client, []).append((j.work_sent, n, j))
    for heap in own.values():
        heapq.heapify(heap)
    clients = [(load.get(c, 0.0), n, c) for n, c in enumerate(own)]
    heapq.heapify(clients)
    return clients, own


def pick_batch(jobs: Sequence[Job], room: int, whole: bool, load: dict[str, float]) -> list[tuple[Job, int]]:
    """The next batch: (request, answers taken from its next unsent one) pairs, at most ``room`` units of work
    but never empty while an answer is ready; ``load`` (per client) grows by what each client is given.

    Each answer goes to the client with the least load, from its request with the least work sent (both
    counting what this batch has given them). An answer larger than what is left of the room waits: its client
    sits out the rest of this batch and, its load still the least, goes first in the next one, where an answer
    larger than the whole room is a batch of its own. With ``whole`` (a ``listwise`` judge) a request's
    answers go together.

    >>> def job(client, n, cost=1):
    ...     answers = [Answer("Q", str(k), cost=cost) for k in range(n)]
    ...     return Job(answers, None, client=client)  # type: ignore[arg-type]
    >>> flood, other = [job("a", 100) for _ in range(50)], job("b", 1)
    >>> picked = pick_batch([*flood, other], 8, False, {})
    >>> sum(n for j, n in picked if j.client == "a"), [n for j, n in picked if j is other]
    (7, [1])
    >>> [n for _, n in pick_batch([job("a", 1, cost=100), job("b", 1)], 8, False, {"a": 0.0, "b": 5.0})]
    [1]
    """
    clients, own = _turns(jobs, load, lambda j: j.ready(True) > 0 if whole else j.head_ready())
    taken: dict[Job, int] = {}
    used = 0
    while clients and used < room:
        client_load, order, client = heapq.heappop(clients)
        work_sent, n, j = heapq.heappop(own[client])
        k = j.sent + taken.get(j, 0)
        if whole:
            count, cost = len(j.answers) - k, j.ready(whole)
        else:
            count, cost = 1, j.answers[k].cost
        if used and used + cost > room:
            continue  # it does not fit: this client's turn comes first in the next batch
        taken[j] = taken.get(j, 0) + count
        used += cost
        load[client] = client_load + cost
        k += count
        if not whole and k < len(j.answers) and j.answers[k].source != TO_WRITE:
            heapq.heappush(own[client], (work_sent + cost, n, j))
        if own[client]:
            heapq.heappush(clients, (client_load + cost, order, client))
    return list(taken.items())


def pick_questions(jobs: Sequence[Job], limit: int, load: dict[str, float],
                   cost: float) -> list[tuple[Job, int]]:
    """The answers (request, index) whose rubrics the writer writes next: those ``TO_WRITE`` of at most
    ``limit`` distinct questions, one question at a time for the client with the least load (each charged
    ``cost``: a rubric's writing in judge units), its requests' questions in the order they came (so that a
    client's requests are ready one after another, not all late together). A question's answers go together,
    whoever sent them: its rubric is written once (``RubricSource`` caches it).

    >>> def job(client, questions):
    ...     answers = [Answer(q, "a", source=TO_WRITE) for q in questions]
    ...     return Job(answers, None, client=client)  # type: ignore[arg-type]
    >>> flood = job("a", [f"F{k}" for k in range(100)])
    >>> sorted({flood.answers[k].question if j is flood else "mine" for j, k in
    ...         pick_questions([flood, job("b", ["Mine"])], 2, {}, 1.0)})
    ['F0', 'mine']
    """
    jobs = [j for j in jobs if j.unwritten]
    clients, own = _turns(jobs, load, lambda j: True)

    def questions(heap: list) -> Iterator[str]:  # a client's questions to write, its requests' in order
        for _, _, j in sorted(heap, key=lambda t: t[1]):
            yield from (j.answers[k].question for k in j.to_write())

    pending = {client: questions(heap) for client, heap in own.items()}
    chosen: dict[str, None] = {}
    while clients and len(chosen) < limit:
        client_load, order, client = heapq.heappop(clients)
        fresh = next((q for q in pending[client] if q not in chosen), None)
        if fresh is None:
            continue  # its questions are all chosen (another client's too): it is done
        chosen[fresh] = None
        load[client] = client_load + cost
        heapq.heappush(clients, (client_load + cost, order, client))
    return [(j, k) for j in jobs for k in j.to_write() if j.answers[k].question in chosen]
