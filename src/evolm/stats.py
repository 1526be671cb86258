"""The statistics every part uses: 95% intervals of a share (Wilson) and of a mean (t), of the difference of two
(Newcombe, Welch), the exact sign test and a seeded bootstrap, with scipy.stats where it has the test.

Plain functions on summary values (a share and its n, a mean with its standard deviation and n), because that is
what a run logs: ``metrics.jsonl`` keeps ``heldout_pair_accuracy`` with ``heldout_pairs``, not the pairs themselves.
An interval function returns ``None`` where no interval exists (n below 1 or 2, a share outside [0, 1], a negative
standard deviation) rather than raising: a report prints "—" for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054  # two-sided 95% normal quantile

Interval = tuple[float, float]


def t95(df: float) -> float:
    """The two-sided 95% Student t quantile for ``df`` degrees of freedom (df >= 1; fractional df round down).

    >>> round(t95(9), 4), round(t95(120), 4)
    (2.2622, 1.9799)
    """
    from scipy import stats

    if df < 1:
        raise ValueError(f"t95 needs df >= 1, got {df}")
    return float(stats.t.ppf(0.975, math.floor(df)))


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
    (2.0, -0.4841, 4.4841)
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


def sign_p_worse(against: int, for_: int) -> float:
    """One-sided exact sign test: the chance that ``against`` or more of ``against + for_`` pairs favour the worse
    answer when the judge has no preference.

    >>> round(sign_p_worse(12, 3), 4), sign_p_worse(0, 0)
    (0.0176, 1.0)
    """
    from scipy import stats

    n = against + for_
    return float(stats.binomtest(against, n, alternative="greater").pvalue) if n else 1.0


def sign_test(a: Sequence[float], b: Sequence[float]) -> tuple[int, int, float]:
    """Exact two-sided sign test of paired values: (a better, b better, p); equal pairs are dropped.

    >>> sign_test([3, 2, 5, 1], [1, 1, 4, 1])
    (3, 0, 0.25)
    """
    up = sum(x > y for x, y in zip(a, b, strict=True))
    down = sum(x < y for x, y in zip(a, b, strict=True))
    return up, down, sign_p(up, down)


def sign_p(up: int, down: int) -> float:
    """The exact two-sided sign test's p of ``up`` pairs one way and ``down`` the other (``scipy.stats.binomtest``).

    >>> round(sign_p(12, 3), 3), sign_p(0, 0)
    (0.035, 1.0)
    """
    from scipy import stats

    return float(stats.binomtest(up, up + down).pvalue) if up + down else 1.0


def bootstrap_mean(xs: Sequence[float], reps: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Seeded percentile bootstrap 95% interval of the mean (``scipy.stats.bootstrap``); NaNs for no values.

    >>> bootstrap_mean([1.0, 1.0, 1.0])
    (1.0, 1.0)
    """
    import numpy as np
    from scipy import stats

    if not xs:
        return (math.nan, math.nan)
    if min(xs) == max(xs):  # scipy warns and gives NaN for data without spread
        return (float(xs[0]), float(xs[0]))
    ci = stats.bootstrap((np.asarray(xs, dtype=float),), np.mean, n_resamples=reps, method="percentile",
                         random_state=np.random.default_rng(seed)).confidence_interval
    return (float(ci.low), float(ci.high))
