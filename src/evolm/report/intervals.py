"""95% confidence intervals for the numbers the report puts side by side.

Plain functions on summary values (a share and its n, a mean with its standard deviation and n),
because that is what a run logs: ``metrics.jsonl`` keeps ``heldout_pair_accuracy`` with
``heldout_pairs``, not the pairs themselves. No SciPy: the t quantiles are tabulated up to 30
degrees of freedom and taken from the Cornish-Fisher expansion above (error below 1e-7 there). The
end of the module turns the held-out metrics of a role "eval" line (a flat row as
``report.read_metric_rows`` gives it) into such estimates.

Each function returns ``None`` where no interval exists (n below 1 or 2, a share outside [0, 1], a
negative standard deviation) rather than raising: the report prints "—" for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Z95 = 1.959963984540054  # two-sided 95% normal quantile

# two-sided 95% Student t quantiles (t_{0.975, df}) for df = 1..30
_T95 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788, 2.1604,
        2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555,
        2.0518, 2.0484, 2.0452, 2.0423)

Interval = tuple[float, float]


def t95(df: float) -> float:
    """The two-sided 95% Student t quantile for ``df`` degrees of freedom (df >= 1; fractional df round down).

    >>> t95(9), round(t95(120), 4)
    (2.2622, 1.9799)
    """
    if df < 1:
        raise ValueError(f"t95 needs df >= 1, got {df}")
    if df <= 30:
        return _T95[int(df) - 1]
    z = Z95
    return (z + (z**3 + z) / 4 / df + (5 * z**5 + 16 * z**3 + 3 * z) / 96 / df**2
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384 / df**3)


def _ok_share(p: float, n: float) -> bool:
    return math.isfinite(p) and 0.0 <= p <= 1.0 and math.isfinite(n) and n >= 1


def wilson(p: float, n: float) -> Interval | None:
    """Wilson score interval of a share ``p`` observed on ``n`` items (n may be fractional: a tie counts 1/2).

    Unlike p ± 1.96·sqrt(p(1-p)/n) it stays inside [0, 1] and does not collapse to a point at 0 or 1.

    >>> [round(x, 3) for x in wilson(0.8, 10)]
    [0.49, 0.943]
    """
    if not _ok_share(p, n):
        return None
    z2 = Z95 * Z95
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = Z95 / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(mean: float, std: float, n: float) -> Interval | None:
    """mean ± t_{n-1} · std / sqrt(n): the interval of a mean of ``n`` values whose standard deviation is ``std``.

    >>> [round(x, 4) for x in mean_interval(0.5, 0.2, 10)]
    [0.3569, 0.6431]
    """
    if not (math.isfinite(mean) and math.isfinite(std) and std >= 0 and math.isfinite(n) and n >= 2):
        return None
    half = t95(n - 1) * std / math.sqrt(n)
    return mean - half, mean + half


def sample_interval(values: list[float]) -> tuple[float, Interval | None]:
    """(mean, t-interval of the mean) of ``values`` (sample standard deviation, n - 1); no interval below 2 values.

    >>> m, (lo, hi) = sample_interval([1.0, 2.0, 3.0])
    >>> m, round(lo, 4), round(hi, 4)
    (2.0, -0.4842, 4.4842)
    """
    n = len(values)
    if n == 0:
        return math.nan, None
    mean = sum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, mean_interval(mean, sd, n)


def newcombe_difference(p1: float, n1: float, p2: float, n2: float) -> Interval | None:
    """Interval of ``p2 - p1`` for two independent shares (Newcombe's hybrid score method, from two Wilson intervals).

    Approximate when the two shares come from the same items (a held-out set evaluated twice): it
    ignores the pairing, so it is wider than a paired interval would be.

    >>> [round(x, 4) for x in newcombe_difference(48 / 80, 80, 56 / 70, 70)]
    [0.0524, 0.3339]
    """
    w1, w2 = wilson(p1, n1), wilson(p2, n2)
    if w1 is None or w2 is None:
        return None
    (l1, u1), (l2, u2) = w1, w2
    d = p2 - p1
    return d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2), d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)


def welch_difference(m1: float, s1: float, n1: float, m2: float, s2: float, n2: float) -> Interval | None:
    """Interval of ``m2 - m1`` for two independent means given their standard deviations (Welch's t).

    >>> [round(x, 4) for x in welch_difference(0.4, 0.2, 10, 0.6, 0.2, 10)]
    [0.0121, 0.3879]
    """
    if not all(math.isfinite(v) for v in (m1, s1, n1, m2, s2, n2)) or min(s1, s2) < 0 or min(n1, n2) < 2:
        return None
    v1, v2 = s1 * s1 / n1, s2 * s2 / n2
    d = m2 - m1
    if v1 + v2 == 0:
        return d, d
    df = (v1 + v2) ** 2 / (v1 * v1 / (n1 - 1) + v2 * v2 / (n2 - 1))
    half = t95(max(1.0, df)) * math.sqrt(v1 + v2)
    return d - half, d + half


# ----------------------------------------------------------------------------- held-out evaluation lines

# (key, title, key of its n, kind): a "share" gets a Wilson interval, a "mean" a t-interval from its logged std.
# Validity has no n of its own in the record: it averages one rubric per distinct eval.pairs prompt and per
# eval.questions question, at least ``heldout_questions`` of them, so that n gives a conservative (wider) interval.
HELDOUT = (("heldout_pair_accuracy", "held-out judge pair accuracy", "heldout_pairs", "share"),
           ("heldout_validity", "held-out rubric validity", "heldout_questions", "share"),
           ("heldout_policy_score", "held-out policy score", "heldout_questions", "mean"))


@dataclass(frozen=True)
class Estimate:
    """A value with its 95% interval (``ci`` None: none can be given), over ``n`` items (or steps), at ``step``."""

    value: float
    ci: tuple[float, float] | None
    n: int | None
    step: int | None = None
    std: float = math.nan  # a mean's sample standard deviation over its items (for the interval of a change)


def heldout_estimate(row: dict[str, Any], key: str) -> Estimate | None:
    """The value of held-out metric ``key`` in an eval line with its 95% interval; None when the line lacks it.

    Shares (pair accuracy, validity) get a Wilson interval on ``heldout_pairs`` / ``heldout_questions``
    items; the policy score gets mean ± t_{n-1}·s/sqrt(n), where s is the logged standard deviation
    (``evolm.training.heldout`` logs the population one, over n) made a sample one: std·sqrt(n/(n-1)). Without a
    logged n there is no interval.
    """
    _, _, n_key, kind = next(h for h in HELDOUT if h[0] == key)
    value, n = row.get(key, math.nan), row.get(n_key)
    if value is None or math.isnan(value):
        return None
    if kind == "share":
        return Estimate(value, wilson(value, n) if n else None, n, row["step"])
    pstd = row.get("heldout_policy_score_std", math.nan)
    std = pstd * math.sqrt(n / (n - 1)) if n and n > 1 and not math.isnan(pstd) else math.nan
    return Estimate(value, mean_interval(value, std, n) if n else None, n, row["step"], std)


def heldout_change(first: Estimate, last: Estimate, key: str) -> tuple[float, tuple[float, float] | None]:
    """``last - first`` and an approximate 95% interval that treats the two evaluations as independent samples.

    The same held-out items are scored both times, so a paired interval would usually be narrower; a
    share uses Newcombe's hybrid score interval, a mean Welch's t.
    """
    kind = next(h for h in HELDOUT if h[0] == key)[3]
    if first.n is None or last.n is None:
        return last.value - first.value, None
    if kind == "share":
        return last.value - first.value, newcombe_difference(first.value, first.n, last.value, last.n)
    return last.value - first.value, welch_difference(first.value, first.std, first.n, last.value, last.std, last.n)


def fmt_num(v: float | None) -> str:
    """Three decimals for everyday values, three significant digits for tiny or huge ones, "—" for none."""
    if v is None or math.isnan(v):
        return "—"
    return f"{v:.3f}" if v == 0 or 1e-3 <= abs(v) < 1e4 else f"{v:.3g}"


def fmt_estimate(e: Estimate | None) -> str:
    """``0.800 [0.490, 0.943]``: a value with its 95% interval (the value alone when it has none, "—" for none)."""
    if e is None:
        return "—"
    return fmt_num(e.value) + (f" [{fmt_num(e.ci[0])}, {fmt_num(e.ci[1])}]" if e.ci else "")
