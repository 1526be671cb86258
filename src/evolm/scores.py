"""A judge's score: a float in [0, 1], or missing (``None``, or NaN once it has been in a tensor).

One place for what "missing" means, and for combining several judges' scores of one answer, so
that the judge, the rewards and the evaluations agree on it (docs/METHOD.md §2.2-2.3).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

AGGREGATIONS = ("mean", "majority")


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
