"""Plots for the report, of one run or of several runs overlaid: each function takes plain series, returns a PNG.

Figures are built with ``matplotlib.figure.Figure`` and rendered by Agg, never through ``pyplot``,
so that no global backend or figure registry is touched (the report may run inside another
program). Each role has its own line style and marker as well as its own colour, so the plots stay
readable printed in greyscale. NaN values leave gaps instead of failing.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

# role -> (colour, line style, marker); colour-blind-safe hues that also differ in grey value
STYLE = {
    "policy": ("#1f4e9c", "-", "o"),
    "rubric": ("#c2410c", "--", "s"),
    "pairs": ("#111111", "-.", "^"),
}
_PHASE_SHADE = "0.90"
_DENSE = 60  # points above which a per-step curve is drawn thin and without markers


@dataclass(frozen=True)
class Series:
    """One curve: x (global steps), y, optional ±band, and the phase of each point (lines break between phases)."""

    x: Sequence[float]
    y: Sequence[float]
    band: Sequence[float] | None = None
    phase: Sequence[int] | None = None


@dataclass(frozen=True)
class PhaseSpan:
    """A phase's extent in global steps, for shading (rubric phases are shaded, policy phases are not)."""

    index: int
    role: str
    first: float
    last: float


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _broken(s: Series, values: Sequence[float]) -> tuple[list[float], list[float]]:
    """x, y with a NaN inserted wherever the phase changes, so a line never bridges the other role's phase."""
    xs: list[float] = []
    ys: list[float] = []
    for i, (x, y) in enumerate(zip(s.x, values, strict=True)):
        if i and s.phase is not None and s.phase[i] != s.phase[i - 1]:
            xs.append(math.nan)
            ys.append(math.nan)
        xs.append(x)
        ys.append(y)
    return xs, ys


def _shade_phases(ax, phases: Sequence[PhaseSpan]) -> None:
    for i, p in enumerate(phases):
        if p.role == "rubric":
            ax.axvspan(p.first - 0.5, p.last + 0.5, color=_PHASE_SHADE, zorder=0, linewidth=0)
        if i:
            ax.axvline(p.first - 0.5, color="0.6", linewidth=0.6, linestyle=":", zorder=0)


def _line(ax, s: Series, style: str, label: str, values: Sequence[float] | None = None) -> None:
    """A per-step curve; dense ones (long runs) get thin, lighter lines without markers so trends stay visible."""
    colour, ls, marker = STYLE[style]
    xs, ys = _broken(s, values if values is not None else s.y)
    if len(s.x) > _DENSE:
        ax.plot(xs, ys, color=colour, linestyle=ls, linewidth=0.8, alpha=0.6, label=label)
    else:
        ax.plot(xs, ys, color=colour, linestyle=ls, marker=marker, markersize=4, linewidth=1.4, label=label)


def _means(ax, style: str, label: str, xs: Sequence[float], ys: Sequence[float]) -> None:
    """Phase means as large hollow markers joined by a dotted line."""
    colour, _, marker = STYLE[style]
    ax.plot(xs, ys, color=colour, linestyle=(0, (1, 1)), marker=marker, markersize=9, markerfacecolor="white",
            markeredgewidth=1.8, linewidth=1.0, label=label)


def _finish(ax, phases: Sequence[PhaseSpan], ylabel: str) -> None:
    ax.set_xlabel("global step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.grid(True, color="0.85", linewidth=0.5)
    handles, labels = ax.get_legend_handles_labels()
    if any(p.role == "rubric" for p in phases):
        handles.append(Patch(facecolor=_PHASE_SHADE, edgecolor="0.6", label="rubric phase (shaded)"))
        labels.append("rubric phase (shaded)")
    if handles:
        ax.legend(handles, labels, loc="best", fontsize=8, framealpha=0.9)


def band(ax, s: Series, colour: str, hatch: str | None = None) -> None:
    """The ±``s.band`` band around ``s.y``, broken between phases. A phase of one step has no width to fill: its
    point gets a vertical ± bar with caps instead, so every phase shows the spread the legend names."""
    xs, ys = _broken(s, s.y)
    _, bs = _broken(s, s.band if s.band is not None else [math.nan] * len(s.x))
    lo = [y - b if not math.isnan(b) else math.nan for y, b in zip(ys, bs, strict=True)]
    hi = [y + b if not math.isnan(b) else math.nan for y, b in zip(ys, bs, strict=True)]
    ax.fill_between(xs, lo, hi, color=colour, alpha=0.18, linewidth=0, hatch=hatch)
    for i, (x, y, b) in enumerate(zip(xs, ys, bs, strict=True)):
        alone = (i == 0 or math.isnan(xs[i - 1])) and (i == len(xs) - 1 or math.isnan(xs[i + 1]))
        if alone and not math.isnan(x) and not math.isnan(y) and not math.isnan(b):
            ax.errorbar([x], [y], yerr=[b], color=colour, alpha=0.6, capsize=6, elinewidth=6, linestyle="none")


def reward_plot(series: dict[str, Series], phases: Sequence[PhaseSpan],
                phase_means: dict[str, tuple[list[float], list[float]]] | None = None) -> bytes:
    """Mean reward ± std per step for each role (``series`` and ``phase_means`` keyed by role)."""
    fig = Figure(figsize=(8.5, 3.6))
    ax = fig.add_subplot()
    _shade_phases(ax, phases)
    for role, s in series.items():
        colour, _, _ = STYLE.get(role, STYLE["pairs"])
        if s.band is not None:
            band(ax, s, colour, "///" if role == "rubric" else None)
        _line(ax, s, role if role in STYLE else "pairs", f"{role} reward (mean ± std)")
    for role, (xs, ys) in (phase_means or {}).items():
        _means(ax, role if role in STYLE else "pairs", f"{role} reward, phase mean", xs, ys)
    ax.set_title("Reward per step")
    _finish(ax, phases, "reward")
    return _png(fig)


def pairs_plot(pair_acc: Series, policy_reward: Series | None, phases: Sequence[PhaseSpan],
               phase_means: dict[str, tuple[list[float], list[float]]]) -> bytes:
    """The judge's pair accuracy on temporal pairs (rubric steps) beside the policy's reward (docs/METHOD.md §4).

    Per-step values are thin lines; ``phase_means`` (name -> (phase mid-steps, means)) are joined
    large markers, so the trend across cycles reads at a glance.
    """
    fig = Figure(figsize=(8.5, 3.6))
    ax = fig.add_subplot()
    _shade_phases(ax, phases)
    _line(ax, pair_acc, "pairs", "pair accuracy (rubric steps)")
    if policy_reward is not None:
        _line(ax, policy_reward, "policy", "policy reward (policy steps)")
    names = {"pair accuracy": "pairs", "policy reward": "policy"}
    for name, (xs, ys) in phase_means.items():
        _means(ax, names[name], f"{name}, phase mean", xs, ys)
    ax.axhline(0.5, color="0.4", linewidth=0.8, linestyle=":")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("Judge accuracy on temporal pairs vs policy reward")
    _finish(ax, phases, "accuracy / reward")
    return _png(fig)


def validity_plot(series: dict[str, Series], phases: Sequence[PhaseSpan]) -> bytes:
    """Share of format-valid rubrics per step, for each role."""
    fig = Figure(figsize=(8.5, 3.2))
    ax = fig.add_subplot()
    _shade_phases(ax, phases)
    for role, s in series.items():
        label = "rubrics being trained" if role == "rubric" else "rubrics judging the policy"
        _line(ax, s, role if role in STYLE else "pairs", f"{label} ({role} steps)")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("Rubric format validity")
    _finish(ax, phases, "valid share")
    return _png(fig)


# (title, key, scale) of each small multiple; scale 100 shows a share as a percentage
STAT_PANELS = (
    ("label-only criteria (%)", "label_only", 100.0),
    ("specific-value criteria (%)", "specific_value", 100.0),
    ("constraint criteria (%)", "constraint", 100.0),
    ("criterion length (chars)", "criterion_chars", 1.0),
    ("criteria per rubric", "criteria_per_rubric", 1.0),
    ("rubrics with a weight >= 0.7 (%)", "dominant", 100.0),
)


def rubric_stats_plot(rows: Sequence[dict]) -> bytes:
    """Small multiples of rubric statistics by phase; ``rows`` are ``PhaseRubricStats.to_json()`` dicts."""
    fig = Figure(figsize=(9.5, 5.0))
    axes = fig.subplots(2, 3)
    sources = sorted({r["source"] for r in rows})
    for ax, (title, key, scale) in zip(axes.flat, STAT_PANELS, strict=True):
        for source in sources:
            pts = [(r["phase"], r[key]) for r in rows if r["source"] == source and r.get(key) is not None]
            if not pts:
                continue
            colour, ls, marker = STYLE.get(source, STYLE["pairs"])
            ax.plot([p for p, _ in pts], [v * scale for _, v in pts], color=colour, linestyle=ls, marker=marker,
                    markersize=5, linewidth=1.3, label=f"{source}-phase rubrics")
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(True, color="0.85", linewidth=0.5)
        ax.set_xlabel("phase", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.subplots_adjust(hspace=0.55, wspace=0.3, bottom=0.16)
    return _png(fig)


# ----------------------------------------------------------------------------- several runs on one axes

# run index -> (colour, marker): Okabe-Ito hues (colour-blind safe) and a marker each, so runs stay apart in grey
RUN_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C564B")
RUN_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def run_style(run: int) -> tuple[str, str]:
    """(colour, marker) of the ``run``-th run; more than 8 runs reuse colours with another marker."""
    return RUN_COLOURS[run % len(RUN_COLOURS)], RUN_MARKERS[(run + run // len(RUN_COLOURS)) % len(RUN_MARKERS)]


def _legend_text(label: str) -> str:
    """A run label as matplotlib shows it verbatim: ``$`` would start mathtext, a leading ``_`` hides the entry."""
    label = label.replace("$", r"\$")
    return "\u200b" + label if label.startswith("_") else label


@dataclass(frozen=True)
class RunCurve:
    """One run's per-step curve; ``dashed`` draws a second curve of the same run (its other role)."""

    label: str
    run: int
    series: Series
    dashed: bool = False


@dataclass(frozen=True)
class RunPoints:
    """One run's held-out values with their 95% intervals (``lo``/``hi`` NaN: no interval, a bare marker)."""

    label: str
    run: int
    x: Sequence[float]
    y: Sequence[float]
    lo: Sequence[float]
    hi: Sequence[float]


def _overlay_finish(ax, title: str, ylabel: str, ylim: tuple[float, float] | None, entries: int) -> None:
    ax.set_title(title)
    ax.set_xlabel("global step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.grid(True, color="0.85", linewidth=0.5)
    if entries:  # below the axes, so that a legend of many runs never covers the curves
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(entries, 3), fontsize=8, frameon=False)


def overlay_plot(curves: Sequence[RunCurve], title: str, ylabel: str,
                 ylim: tuple[float, float] | None = None) -> bytes:
    """Per-step curves of several runs on one axes, one colour and marker per run (lines break between phases)."""
    fig = Figure(figsize=(8.5, 3.6))
    ax = fig.add_subplot()
    for c in curves:
        colour, marker = run_style(c.run)
        xs, ys = _broken(c.series, c.series.y)
        ls = "--" if c.dashed else "-"
        if len(c.series.x) > _DENSE:
            ax.plot(xs, ys, color=colour, linestyle=ls, linewidth=0.9, alpha=0.75, label=_legend_text(c.label))
        else:
            ax.plot(xs, ys, color=colour, linestyle=ls, marker=marker, markersize=4, linewidth=1.3,
                    markerfacecolor="white" if c.dashed else colour, label=_legend_text(c.label))
    _overlay_finish(ax, title, ylabel, ylim, len(curves))
    return _png(fig)


def interval_plot(points: Sequence[RunPoints], title: str, ylabel: str,
                  ylim: tuple[float, float] | None = None) -> bytes:
    """Held-out values of runs with 95% interval bars; runs are nudged sideways so that bars do not hide each other."""
    fig = Figure(figsize=(8.5, 3.6))
    ax = fig.add_subplot()
    xs_all = [x for p in points for x in p.x]
    span = (max(xs_all) - min(xs_all)) if xs_all else 0.0
    width = 0.012 * (span or 1.0)
    for i, p in enumerate(points):
        colour, marker = run_style(p.run)
        dx = (i - (len(points) - 1) / 2) * width
        xs = [x + dx for x in p.x]
        lower = [y - lo if not math.isnan(lo) else 0.0 for y, lo in zip(p.y, p.lo, strict=True)]
        upper = [hi - y if not math.isnan(hi) else 0.0 for y, hi in zip(p.y, p.hi, strict=True)]
        ax.errorbar(xs, p.y, yerr=[lower, upper], color=colour, marker=marker, markersize=5, linewidth=1.2,
                    capsize=3, elinewidth=1.0, label=_legend_text(p.label))
    _overlay_finish(ax, title, ylabel, ylim, len(points))
    return _png(fig)


# ----------------------------------------------------------------------------- reward-hacking monitor and judge cost

MONITOR_PANELS = (
    ("length–reward correlation (within groups)", "length_reward_corr", 1.0),
    ("mean answer length (tokens)", "completion_length", 1.0),
    ("answers copying rubric text (%)", "rubric_copy_share", 100.0),
    ("answers with a score-like string (%)", "score_string_share", 100.0),
)


def panels_plot(series: dict[str, Series], panels: Sequence[tuple[str, str, float]],
                flagged: Sequence[float] = ()) -> bytes:
    """Small multiples of per-step values (``series`` keyed by the panels' keys; a missing key: an empty panel),
    with the ``flagged`` steps marked by a red vertical line in every panel."""
    fig = Figure(figsize=(9.5, 5.0))
    axes = fig.subplots(2, (len(panels) + 1) // 2)
    for ax, (title, key, scale) in zip(axes.flat, panels, strict=False):
        s = series.get(key)
        if s is not None:
            xs, ys = _broken(s, [y * scale for y in s.y])
            dense = len(s.x) > _DENSE
            ax.plot(xs, ys, color=STYLE["policy"][0], linewidth=0.8 if dense else 1.3,
                    marker=None if dense else "o", markersize=3)
        for x in flagged:
            ax.axvline(x, color="#b91c1c", linewidth=1.0, linestyle="--", zorder=0)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(True, color="0.85", linewidth=0.5)
        ax.set_xlabel("global step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.subplots_adjust(hspace=0.55, wspace=0.3)
    return _png(fig)
