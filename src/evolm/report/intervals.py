"""The held-out metrics of a role "eval" line (a flat row as ``report.read_metric_rows`` gives it) as estimates with
95% intervals (``evolm.stats``), and how the report prints them ("—" where no interval exists)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from evolm.report import plots
from evolm.stats import mean_interval, newcombe_difference, welch_difference, wilson

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


def heldout_points(rows: list[dict[str, Any]], key: str, label: str, run: int) -> plots.RunPoints | None:
    """A run's held-out values of ``key`` for ``plots.interval_plot``; None when no eval line has the metric."""
    ests = [e for r in rows if (e := heldout_estimate(r, key)) is not None]
    if not ests:
        return None
    return plots.RunPoints(label, run, [e.step for e in ests], [e.value for e in ests],
                           [e.ci[0] if e.ci else math.nan for e in ests], [e.ci[1] if e.ci else math.nan for e in ests])
