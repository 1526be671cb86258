"""The ``listwise`` judge mode's groups and orders (not the paper's: it judges pointwise).

The judge sees the question, the rubric and every answer of a group, and is asked for each answer in turn for one
digit 0-9 (the score is the expected digit / 9, as ``prob``; one forward pass per answer over a prefix the group
shares). A group is the items with the same question and rubric, or the same ``group``: a policy step's samples of
one question, the two answers of an evaluation pair, the rows of ``evolm judge`` with one prompt. The answers are
shown in a seeded shuffle, then in its reverse; an answer's score is the mean of its readings over the two orders
(against position bias), missing only when neither order gave one. Items are read by attribute (``ListItem``:
``evolm.judge.judge.JudgeItem`` is one), so this module imports no judge.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from evolm.backends.base import Conversation
from evolm.judge.parse import expected_digit
from evolm.judge.prompts import PromptItem, listwise_messages
from evolm.rubrics import render_rubric


class ListItem(PromptItem, Protocol):
    """What the grouping reads from an item beyond its prompt fields: the ``group`` it was put in, if any."""

    @property
    def group(self) -> Any: ...


def listwise_group(item: ListItem) -> Any:
    """The ``listwise`` group of an item: its ``group``, else its question and rubric (parsed and as written)."""
    if item.group is not None:
        return ("group", item.group)
    parsed = render_rubric(item.rubric) if item.rubric is not None else None
    return ("question", item.question, item.rubric_text, parsed)


def listwise_groups(items: Sequence[ListItem]) -> list[list[int]]:
    """Item indices by ``listwise`` group, groups in order of first appearance."""
    groups: dict[Any, list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault(listwise_group(it), []).append(i)
    return list(groups.values())


def listwise_blocks(items: Sequence[ListItem], size: int) -> list[list[int]]:
    """Item indices in blocks of whole ``listwise`` groups (in order of first appearance), each up to ``size``
    answers (a larger group is a block of its own): the progress bar's steps.

    >>> from evolm.judge.judge import JudgeItem
    >>> items = [JudgeItem(f"q{k % 70}", f"a{k}") for k in range(140)]  # 70 pairs, each pair 70 apart
    >>> blocks = listwise_blocks(items, 128)
    >>> [len(b) for b in blocks], blocks[0][:4], sorted(sum(blocks, [])) == list(range(140))
    ([128, 12], [0, 70, 1, 71], True)
    """
    blocks: list[list[int]] = [[]]
    for group in listwise_groups(items):
        if blocks[-1] and len(blocks[-1]) + len(group) > size:
            blocks.append([])
        blocks[-1] += group
    return blocks


def listwise_orders(items: Sequence[ListItem], seed: int | None) -> list[list[int]]:
    """The orders a ``listwise`` group is shown in: a seeded shuffle, then its reverse (one order for one answer).

    The shuffle is seeded by ``seed`` and the group's texts, so the same group is shown the same way whatever else
    is in the batch.

    >>> from evolm.judge.judge import JudgeItem
    >>> items = [JudgeItem("q", a) for a in "abcd"]
    >>> first, second = listwise_orders(items, 0)
    >>> sorted(first) == [0, 1, 2, 3] and second == first[::-1], listwise_orders(items[:1], 0)
    (True, [[0]])
    """
    digest = hashlib.sha256(json.dumps([seed, [(it.question, it.rubric_text, it.answer) for it in items]],
                                       ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()
    first = list(range(len(items)))
    random.Random(digest).shuffle(first)
    return [first] if len(first) < 2 else [first, first[::-1]]


def fit_group(group: list[int], fits: Callable[[list[int]], bool]) -> list[list[int]]:
    """``group`` (item indices) split in halves until each part's list prompt ``fits`` the judge's context.

    >>> fit_group([0, 1, 2, 3, 4], lambda part: len(part) <= 2)
    [[0, 1], [2], [3, 4]]
    """
    if len(group) < 2 or fits(group):
        return [group]
    half = len(group) // 2
    return fit_group(group[:half], fits) + fit_group(group[half:], fits)


def listwise_requests(items: Sequence[ListItem], seed: int | None, fits: Callable[[list[int]], bool],
                      defences: bool = True) -> tuple[list[Conversation], list[int]]:
    """Every prompt of a ``listwise`` call, and the item each asks about: per group (split to fit, ``fit_group``),
    per order (``listwise_orders``), one prompt per answer."""
    convs: list[Conversation] = []
    owners: list[int] = []
    for group in listwise_groups(items):
        for part in fit_group(group, fits):
            for order in listwise_orders([items[i] for i in part], seed):
                shown = [items[part[k]] for k in order]
                for pos, k in enumerate(order):
                    convs.append(listwise_messages(shown, pos, defences=defences))
                    owners.append(part[k])
    return convs, owners


def listwise_scores(logprobs: Sequence[dict[str, float]], owners: Sequence[int], n: int) -> list[float | None]:
    """Each of ``n`` items' score: the mean of its 0-9 readings (``expected_digit``) over the orders it was shown in;
    a reading with no score token is left out, and an item with none has no score.

    >>> listwise_scores([{"9": 0.0}, {"0": 0.0}, {}], [0, 0, 1], 2)
    [0.5, None]
    """
    readings: list[list[float]] = [[] for _ in range(n)]
    for i, lp in zip(owners, logprobs, strict=True):
        value = expected_digit(lp)
        if value is not None:
            readings[i].append(value)
    return [sum(r) / len(r) if r else None for r in readings]
