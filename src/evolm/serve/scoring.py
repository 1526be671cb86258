"""Judging a batch: ``score_answers`` sends a batch's answers to the judge in calls of about ``chunk`` units
of work, answers to one question adjacent (they share the judge's prompt prefix), and leaves out, before each
call, the answers of a request no longer wanted (past its deadline, its client gone); ``fill_within_request``
fills a missing score from the same request's answers once all are back, never from another client's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evolm.judge.cache import CachedJudge
from evolm.judge.judge import JudgeItem
from evolm.rewards import fill_missing_with_group_mean
from evolm.serve.protocols import Answer
from evolm.serve.sources import SOURCES, list_key, rubric_key


@dataclass(frozen=True)
class Scored:
    score: float | None  # the judge's; ``None`` (missing) until ``fill_within_request`` fills it
    logs: dict[str, float]
    group: tuple[str, str] = ("", "")  # (question, rubric): a missing score's fill, within its request


def fill_within_request(scored: Sequence[Scored]) -> list[Scored]:
    """One request's scores with each missing one filled by the mean of the same request's scores to the same
    question and rubric (0.0 when it has none: all equal, zero advantage), as training fills a group
    (``fill_missing_with_group_mean``). Only that request's scores are read: a client never gets a reward
    computed from another client's answers.

    >>> [s.score for s in fill_within_request([Scored(1.0, {}), Scored(None, {}), Scored(0.5, {})])]
    [1.0, 0.75, 0.5]
    """
    filled = fill_missing_with_group_mean([s.score for s in scored], [s.group for s in scored])
    return [replace(s, score=v) for s, v in zip(scored, filled, strict=True)]


def score_answers(judge: Any, answers: Sequence[Answer], listwise: bool = False, chunk: int = 0,
                  wanted: Callable[[int | None], bool] = lambda request: True) -> list[Scored | None]:
    """Score ``answers`` (their rubrics resolved: ``RubricSource.resolve``) in ``judge.score`` calls of about
    ``chunk`` units of work each (``Answer.cost``; 0: all in one call), answers to one question (and rubric)
    adjacent.

    An answer, or with a ``listwise`` judge one list (a request's answers to one question under one rubric),
    is never split between calls; one larger than ``chunk`` is a call of its own. Before each call ``wanted``
    is asked about the request (``Answer.request``) of each answer it would hold: a request no longer wanted
    (past its deadline, its client gone) has its answers left out, ``None`` here, so the judge's work for it
    stops within a call, and the answers still wanted fill the call instead. A missing score (an unreadable
    reply, a prompt over the judge's context) stays ``None`` in its ``Scored``, with ``missing_score`` saying
    so: the batcher fills it from the same request's answers once all of them are back
    (``fill_within_request``), never from the other requests of the batch.
    """
    key = [rubric_key(a.rubric) for a in answers]
    order = sorted(range(len(answers)), key=lambda i: (answers[i].question, key[i]))
    units: dict[Any, list[int]] = {}  # what one call never splits: an answer, or a listwise list
    for i in order:
        units.setdefault((answers[i].request, *list_key(answers[i]), key[i]) if listwise else i, []).append(i)
    out: list[Scored | None] = [None] * len(answers)
    left, at = list(units.values()), 0
    while at < len(left):
        call: list[int] = []
        work = 0
        while at < len(left) and (not call or not chunk
                                  or work + sum(answers[i].cost for i in left[at]) <= chunk):
            unit, at = left[at], at + 1
            if wanted(answers[unit[0]].request):
                call += unit
                work += sum(answers[i].cost for i in unit)
        for i, scored in zip(call, _judge_call(judge, [answers[i] for i in call]), strict=True):
            out[i] = scored
    return out


def _judge_call(judge: Any, answers: list[Answer]) -> list[Scored]:
    """One ``judge.score`` call for ``answers``, in order; each listwise group is a request's list
    (``list_key``)."""
    if not answers:
        return []
    key = [rubric_key(a.rubric) for a in answers]
    # listwise: a group is one request's answers to one question under one rubric (the other modes ignore it)
    items = [JudgeItem(a.question, a.response, a.rubric,
                       group=None if a.request is None else (a.request, *list_key(a), k))
             for a, k in zip(answers, key, strict=True)]
    if isinstance(judge, CachedJudge):  # results kept (--judge-cache, off by default here), said per answer
        call = judge.score_with_hits(items)
        raw, hits = call.results, call.cached
    else:
        raw, hits = judge.score(items), [False] * len(items)
    return [Scored(judgment.score, {**{s: float(s == a.source) for s in SOURCES},
                                    "missing_score": float(judgment.score is None),
                                    "prompt_mismatch": float(a.prompt_mismatch), "judge_cached": float(hit)},
                   (a.question, k))
            for judgment, hit, a, k in zip(raw, hits, answers, key, strict=True)]
