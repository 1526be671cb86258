"""A judge's score: a float in [0, 1], or missing (``None``, or NaN once it has been in a tensor).

One place for what "missing" means, for what a judge returns per answer (``Judgment``: the score and
what it is made of), and for combining several judges' scores of one answer, so that the judge, the
rewards and the evaluations agree on it (docs/METHOD.md §2.2-2.3).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

AGGREGATIONS = ("mean", "majority")


@dataclass(frozen=True)
class CriterionScore:
    """One criterion of a judgment: its text, its share of the rubric's weight, and the judge's reading of it."""

    text: str
    weight: float
    """The criterion's weight over the rubric's total (the weights of a judgment's criteria sum to 1)."""
    value: float | None
    """``yesno`` and ``rar_explicit``: P(Yes) / (P(Yes) + P(No)); ``generative``: the satisfaction (0 to 1) the
    reply's reasoning gives the criterion. ``None`` when the judge gave no reading."""


@dataclass(frozen=True)
class Judgment:
    """What a judge says about one item: the score, and what it is made of where the mode shows it.

    In ``yesno`` the score is the weighted sum of the criteria's values (``sum(c.weight * c.value)``); in
    ``rar_explicit`` that of their verdicts (value > 0.5); in ``generative`` the score is the judge's own
    total, and ``criteria`` holds the ratings its reasoning gives when it gives one per criterion
    (``parse_criterion_ratings``).

    >>> j = Judgment(0.7, (CriterionScore("Correct.", 0.5, 0.9), CriterionScore("Short.", 0.5, 0.5)))
    >>> round(sum(c.weight * c.value for c in j.criteria), 6) == j.score
    True
    """

    score: float | None
    """In [0, 1] (``judge.parse: reference``: the authors' unclipped number), or ``None``: missing (an unreadable
    reply, a server that reported no score token, a prompt that cannot fit the judge's context)."""
    criteria: tuple[CriterionScore, ...] | None = None
    """Per criterion, in the rubric's order (``yesno``, ``rar_explicit``; ``generative`` where the reply rates
    each criterion); ``None`` in the modes that read one holistic score."""
    reasoning: str | None = None
    """The reasoning a generative reply gives with its score, when it gives one."""
    cut: int = 0
    """Characters cut from the middle of the answer to fit the judge's context (``Judge.fit_to_context``)."""
    unscored: str | None = None
    """Why the item was not sent to the judge: its prompt does not fit even with the answer cut entirely."""
    failed: str | None = None
    """A judge request for this item that failed after its retries (``Judge.failures="missing"``): the error line;
    the score is then missing."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form: ``score``, ``criteria`` as ``{"text", "weight", "value"}`` lists, ``reasoning``."""
        out: dict[str, Any] = {"score": self.score}
        if self.criteria is not None:
            # weights without the float noise of normalising, as Rubric.to_dict writes them
            out["criteria"] = [{"text": c.text, "weight": round(c.weight, 12) if isinstance(c.weight, float)
                                else c.weight, "value": c.value} for c in self.criteria]
        if self.reasoning is not None:
            out["reasoning"] = self.reasoning
        return out


def scores_of(judgments: Sequence[Judgment]) -> list[float | None]:
    """The scores of ``judgments``, in order.

    >>> scores_of([Judgment(0.5), Judgment(None)])
    [0.5, None]
    """
    return [j.score for j in judgments]


def is_missing(x: Any) -> bool:
    """True for ``None`` and NaN: the judge gave no readable score.

    >>> is_missing(None), is_missing(float("nan")), is_missing(0.0)
    (True, True, False)
    """
    return x is None or (isinstance(x, float) and math.isnan(x))


def aggregate_scores(scores: Sequence[float | None], how: str = "mean") -> float | None:
    """One score from several judges' scores of the same answer; missing scores are ignored.

    ``mean`` averages; ``majority`` takes the median, the value a majority of judges is at or
    beyond on both sides (the pointwise analogue of a vote). ``None`` if every judge is missing.

    >>> aggregate_scores([0.2, None, 0.6]), aggregate_scores([0.1, 0.9, 0.8], "majority")
    (0.4, 0.8)
    """
    present = [float(s) for s in scores if not is_missing(s)]  # type: ignore[arg-type]
    if not present:
        return None
    if how == "mean":
        return sum(present) / len(present)
    if how == "majority":
        return float(statistics.median(present))
    raise ValueError(f"unknown aggregation '{how}' (choose from {', '.join(AGGREGATIONS)})")
