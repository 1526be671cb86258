"""The judge's context guard: a prompt that leaves the judge no room to reply within its context has its answer cut
from the middle, a marker saying so in its place (``evolm.backends.context.fit_middle``), or is refused
(``overlong="refuse"``); one whose question and rubric alone do not fit is left unscored, with the reason. Items are
read by attribute and copied with ``dataclasses.replace`` (``evolm.judge.judge.JudgeItem``), so this module imports
no judge."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evolm.backends.base import Backend, Conversation
from evolm.backends.context import PROBE_RESERVE, fit_middle, prompt_tokens, reply_reserve
from evolm.errors import InputError
from evolm.judge.prompts import clean_answer


@dataclass
class ContextFit:
    """What the context guard did to one ``Judge.score`` call's items (indices into those items)."""

    cut: dict[int, int] = field(default_factory=dict)
    """Item index -> characters cut from the middle of its answer to fit the judge's context."""
    unscored: dict[int, str] = field(default_factory=dict)
    """Item index -> why it has no score (its prompt does not fit even with the answer cut entirely)."""

    @property
    def truncated(self) -> list[int]:
        """Indices of the items whose answer was cut, in order."""
        return sorted(self.cut)


class OverlongPrompt(InputError):
    """A judge prompt longer than the judge's context, with ``overlong="refuse"``; ``index`` is the item's."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"item {index + 1}: {reason}")
        self.index, self.reason = index, reason


def fit_items(items: Sequence[Any], backend: Backend, context: int | None, *,
              prompts: Callable[[Any], list[Conversation]], reads_one: bool, max_new_tokens: int,
              chat_template_kwargs: dict[str, Any], overlong: str = "truncate") -> tuple[list[Any], ContextFit]:
    """The items with every answer too long for the judge's context cut from its middle, and what was done.

    ``context`` in tokens (``None``: unknown, nothing is checked). ``prompts(item)`` are what the judge sends for an
    item; the longest counts (the per-criterion modes send one per criterion). A prompt must leave room for the
    reply: ``max_new_tokens`` (at most half the context) for a generated reply, ``PROBE_RESERVE`` tokens when the
    judge reads one token (``reads_one``). An item whose prompt fits is returned as it is (its prompt is
    byte-identical to an unguarded one). One that does not gets its answer (thinking stripped) cut from the middle,
    a marker saying how much in its place, until it fits (``ContextFit.cut``); when the question and rubric alone
    do not fit, it is left unscored with the reason (``ContextFit.unscored``). With ``overlong="refuse"`` the first
    item that does not fit raises ``OverlongPrompt`` instead.
    """
    items = list(items)
    fit = ContextFit()
    if context is None or not items:
        return items, fit
    budget = context - (PROBE_RESERVE if reads_one else reply_reserve(context, max_new_tokens))

    def tokens(batch: list[Any]) -> list[int]:
        """The longest prompt of each item (per-criterion modes: one prompt per criterion)."""
        convs, owner = [], []
        for i, it in enumerate(batch):
            for conv in prompts(it):
                convs.append(conv)
                owner.append(i)
        longest = [0] * len(batch)
        for i, n in zip(owner, prompt_tokens(backend, convs, chat_template_kwargs, reads_one_token=reads_one),
                        strict=True):
            longest[i] = max(longest[i], n)
        return longest

    for i, n in enumerate(tokens(items)):
        if n <= budget:
            continue
        where = (f"the judge prompt is {n:,} tokens, over the {budget:,} that the judge's {context:,}-token "
                 "context leaves beside the reply")
        if overlong == "refuse":
            raise OverlongPrompt(i, f"{where} (overlong=refuse; 'truncate' cuts the middle of the answer instead)")
        answer = clean_answer(items[i].answer)
        cut, chars, fixed = fit_middle(answer, lambda text, it=items[i]: tokens([replace(it, answer=text)])[0],
                                       budget, None if answer != items[i].answer else n)
        if cut is None:
            fit.unscored[i] = (f"{where}, and the question and rubric alone take {fixed:,}: no score "
                               "(a shorter rubric, or a judge with a longer context)")
        else:
            items[i] = replace(items[i], answer=cut)
            fit.cut[i] = chars
    return items, fit
