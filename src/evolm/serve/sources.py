"""Where each served answer's rubric comes from: its label, else the writer (once per question, an LRU) or a
rubric file, else none; and what judging an answer costs in the batcher's units of work (``costed``).

An answer costs its rubric's criteria (a forward pass each in ``yesno``, rubric text in every prompt of the
other modes) times the length of one pass, in started ``cost_chars`` characters of question, answer and
criterion text, so a 500,000-character answer costs what its forward passes take, not one unit; with a
``listwise`` judge, the size of its list times its length (a list of n answers is n passes over all n: about
n² of them). A label or file rubric is known when the request arrives; the writer writes before its answers
are shared (``written``), so those answers are costed by their rubric's criteria too.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evolm.backends.base import Backend, SamplingParams
from evolm.eval.rubric_source import RubricTable, write_prompt_rubrics
from evolm.rubrics import Rubric
from evolm.serve.protocols import Answer, RequestRejected
from evolm.serve.settings import ServeSettings

SOURCES = ("rubric_from_label", "rubric_written", "rubric_from_file", "no_rubric")
"""Where an answer's rubric came from; each is an ``extra_logs`` key (0/1 per answer), with
``missing_score``."""
TO_WRITE = "rubric_to_write"
"""An answer's ``source`` while the writer has yet to write its rubric (``RubricSource.known``,
``resolve``)."""


def label_rubric(label: Any) -> Rubric | None:
    """The rubric a label carries (an object, or JSON text, that ``Rubric.from_obj`` parses), else
    ``None``."""
    if label is None or (isinstance(label, str) and not label.strip()):
        return None
    return Rubric.from_obj(label)


def rubric_key(rubric: Rubric | None) -> str:
    """The rubric as canonical JSON ("" for none): answers under one key are judged under one rubric."""
    return json.dumps(rubric.to_dict(), sort_keys=True) if rubric is not None else ""


def answer_cost(answer: Answer, cost_chars: int, list_size: int = 0) -> int:
    """An answer's work: its rubric's criteria (at least 1; 1 while its rubric is unknown), or with a
    ``listwise`` judge its list's ``list_size``, times the started ``cost_chars`` characters of one pass
    (question, answer and one criterion's text on average).

    >>> answer_cost(Answer("Q?", "x" * 9_000), 4000), answer_cost(Answer("Q?", "short"), 4000, list_size=3)
    (3, 3)
    """
    rubric = answer.rubric
    criteria = max(1, len(rubric.criteria)) if rubric is not None else 1
    criterion_chars = sum(len(c.criterion) for c in rubric.criteria) / criteria if rubric is not None else 0
    length = max(1, math.ceil((len(answer.question) + len(answer.response) + criterion_chars) / cost_chars))
    return (list_size or criteria) * length


def list_key(answer: Answer) -> tuple[str, str]:
    """Which ``listwise`` list of its request an answer is in: its question, and its rubric when its label
    gave one (a written or file rubric is its question's, the same for all its answers, so it is known before
    it is written).
    """
    return answer.question, rubric_key(answer.rubric) if answer.source == "rubric_from_label" else ""


def costed(answers: Sequence[Answer], settings: ServeSettings, listwise: bool,
           rubrics: RubricSource | None = None) -> list[Answer]:
    """``answers`` (one request's) with the rubrics known before any writing (``RubricSource.known``: label,
    file) and their cost in the batcher's work units (``answer_cost``); ``RequestRejected`` 413 for an answer
    whose label rubric has over ``settings.max_label_criteria`` criteria, or a ``listwise`` list over
    ``settings.max_list``.

    An answer the writer has yet to write a rubric for is costed by its length alone until ``written`` costs
    it again; with a ``listwise`` judge, the size of its list (``list_key``: the request's answers to one
    question under one rubric) times its length. Run off the event loop: it parses labels.

    >>> [a.cost for a in costed([Answer("Q", "a", {"criteria": [{"criterion": "c", "weight": 1}] * 3})],
    ...                         ServeSettings(), listwise=False)]
    [3]
    >>> answers = [Answer("Q", "a"), Answer("Q", "b"), Answer("R", "c")]
    >>> [a.cost for a in costed(answers, ServeSettings(), True)]
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
        return [replace(a, cost=answer_cost(a, settings.cost_chars)) for a in answers]
    sizes: dict[tuple[str, str], int] = {}
    for a in answers:
        sizes[list_key(a)] = sizes.get(list_key(a), 0) + 1
    if (largest := max(sizes.values(), default=0)) > settings.max_list:
        raise RequestRejected(413, f"a listwise list of {largest} answers to one question; at most "
                              f"{settings.max_list} (--max-list)")
    return [replace(a, cost=answer_cost(a, settings.cost_chars, sizes[list_key(a)])) for a in answers]


def written(rubrics: RubricSource, answers: Sequence[Answer], listwise: bool,
            cost_chars: int) -> list[Answer]:
    """``answers`` (``TO_WRITE``) with the writer's rubrics (``RubricSource.resolve``) and, outside
    ``listwise``, the cost those rubrics give them (``answer_cost``; a listwise answer's cost, from its list's
    size, is known already)."""
    out = rubrics.resolve(answers)
    return out if listwise else [replace(a, cost=answer_cost(a, cost_chars)) for a in out]


@dataclass
class RubricSource:
    """Each answer's rubric: from its label, else the writer (cached per question) or the table, else none.

    Used from the scoring thread only, so the cache needs no lock. ``/health`` reports neither ``written`` nor
    the cache's size: both would tell a client whether another client had asked its question.
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
        """``answer`` with the rubric it has without the writer: its label's, else (with no writer) the
        file's, else none; with a writer, a label-less answer is left ``TO_WRITE`` for ``resolve``. Reads the
        label and the table only, so it runs off the scoring thread (``costed``)."""
        if (rubric := label_rubric(answer.label)) is not None:
            return replace(answer, rubric=rubric, source="rubric_from_label")
        if self.writer is not None:
            return replace(answer, rubric=None, source=TO_WRITE)
        if self.table is not None and (rubric := self.table.by_prompt.get(answer.question)) is not None:
            return replace(answer, rubric=rubric, source="rubric_from_file")
        return replace(answer, rubric=None, source="no_rubric")

    def resolve(self, answers: Sequence[Answer]) -> list[Answer]:
        """Each answer with its rubric and source (``SOURCES``): ``known``'s, and for one it leaves
        ``TO_WRITE`` the writer's, from the cache or written (the rubrics the cache lacks in one batch). On
        the scoring thread only."""
        answers = [a if a.source else self.known(a) for a in answers]
        keys = [hashlib.sha256(a.question.encode("utf-8")).hexdigest() for a in answers]
        fresh: dict[str, Rubric | None] = {}
        todo = {k: a.question for k, a in zip(keys, answers, strict=True)
                if a.source == TO_WRITE and k not in self.cache}
        if todo and self.writer is not None:  # write_prompt_rubrics retries unparsed ones cooler, as evals do
            params = self.params or SamplingParams()
            rubrics, _ = write_prompt_rubrics(self.writer, list(todo.values()), params)
            fresh = dict(zip(todo, rubrics, strict=True))
            self.written += len(todo)
        out: list[Answer] = []
        for key, answer in zip(keys, answers, strict=True):
            if answer.source == TO_WRITE:
                rubric = fresh[key] if key in fresh else self.cache[key]
                self.cache[key] = rubric
                self.cache.move_to_end(key)
                source = "rubric_written" if rubric is not None else "no_rubric"
                answer = replace(answer, rubric=rubric, source=source)
            out.append(answer)
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        return out
