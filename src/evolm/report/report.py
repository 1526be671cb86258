"""Run directory -> one self-contained HTML report.

The report is a reader: it loads what training appended (``metrics.jsonl``, ``samples/``,
``eval/*.json``, ``config.yaml``) and never the other way round; training does not import this
module. It must work on the run a user actually has: a crash leaves a torn last line, a short run
has only one role, a judge that failed to score leaves nulls. None of these stops the report; each
is listed at the top under "What is missing". Held-out evaluations (role "eval" lines of
``metrics.jsonl``) are kept apart from the training steps: they get a section of their own, with 95%
intervals, and never enter a training curve, a phase or a step count. Plots are PNG embedded as
base64, and the HTML has no external CSS or JS, so the file can be mailed or archived alone. This
module computes what each section shows; the words and markup are in ``templates/report.html.j2``.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from markupsafe import Markup

from evolm.eval.constraints import precondition
from evolm.eval.rubric_stats import (
    DOMINANT_WEIGHT,
    RunSamples,
    has_specific_value,
    is_constraint,
    is_label_only,
)
from evolm.report import plots
from evolm.report.intervals import HELDOUT, fmt_estimate, heldout_estimate, heldout_points
from evolm.report.page import MIN_PLOT_POINTS, duration, figure, flatten, fmt, plot_html, render_page
from evolm.report.rundata import EVAL_ROLE, RunData, _nansum, load_run
from evolm.rubrics import Rubric
from evolm.runs.files import atomic_writer
from evolm.runs.records import StepRecord, read_metrics
from evolm.stats import sign_p
from evolm.training.monitor import LENGTH_FACTOR, hacking_flags

# RunConfig settings shown in the header (dotted paths; tests check each exists in RunConfig, so a renamed
# setting cannot silently drop out); the whole config is shown collapsed below them
HIGHLIGHTS = ("model.name", "model.dtype", "judge.model", "judge.mode", "judge.backend", "judge.dtype",
              "schedule.regime", "schedule.cycles", "schedule.steps_per_phase", "schedule.prompts_per_step",
              "schedule.samples_per_prompt", "rubric.reward", "contrast.pairs", "contrast.min_age", "contrast.max_age",
              "contrast.buffer_size", "grpo.learning_rate", "grpo.beta", "grpo.max_completion_length", "seed")
_MAX_EVAL_ROWS = 300
# ----------------------------------------------------------------------------- sections: what each one shows


def _summary(d: RunData) -> list[list[Any]]:
    m = d.metrics
    per_role = Counter(r["role"] for r in m)
    seconds = _nansum([r["seconds"] for r in m])
    times = [r["time"] for r in m + d.heldout if not math.isnan(r["time"])]
    # a record is written when its step ends: the span starts when the first step started, not when it ended
    starts = [r["time"] - r["seconds"] for r in m + d.heldout if not math.isnan(r["time"] - r["seconds"])]
    rows: list[list[Any]] = [
        ["steps logged", sum(per_role.values())],
        *[[f"{role} steps", n] for role, n in sorted(per_role.items())],
        ["global steps", f"{m[0]['step']}–{m[-1]['step']}" if m else "–"],
        ["phases / cycles", f"{len(d.phases)} / {len({r['cycle'] for r in m if r['cycle'] is not None})}"],
        ["training time (sum of step times)", duration(seconds)],
        ["wall-clock span (start of the first step to the last record; adds checkpoints, held-out evaluation and "
         "any time stopped before a resume)", duration(max(times) - min(starts + times)) if times else "–"],
    ]
    if d.heldout:
        at = steps_text([r["step"] for r in d.heldout])
        rows[5:5] = [["held-out evaluations", f"{len(d.heldout)} (at steps {at})"],
                     ["held-out evaluation time", duration(_nansum([r["seconds"] for r in d.heldout]))]]
    if times:
        try:
            last = dt.datetime.fromtimestamp(max(times), dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        except (OverflowError, OSError, ValueError):  # a corrupt or hand-edited "time"
            last = "unreadable"
        rows.append(["last record", last])
    return rows


def _highlights(d: RunData) -> list[list[str]]:
    flat = dict(flatten(d.config)) if isinstance(d.config, dict) else {}
    return [[k, str(flat[k])] for k in HIGHLIGHTS if k in flat][:24]


def _series(d: RunData, role: str, key: str, band: str | None = None) -> plots.Series | None:
    rows = [r for r in d.metrics if r["role"] == role]
    if not rows or all(math.isnan(r[key]) for r in rows):
        return None
    return plots.Series([r["step"] for r in rows], [r[key] for r in rows],
                        [r[band] for r in rows] if band else None, [r["phase"] for r in rows])


def _spans(d: RunData) -> list[plots.PhaseSpan]:
    return [plots.PhaseSpan(p.index, p.role, p.first, p.last) for p in d.phases]


def _phase_means(d: RunData, role: str, key: str) -> tuple[list[float], list[float]] | None:
    """(mid-step, mean of ``key``) of each phase of ``role`` that has a value; None when none has."""
    pts = [((p.first + p.last) / 2, p.mean(key)) for p in d.phases if p.role == role]
    pts = [(x, y) for x, y in pts if not math.isnan(y)]
    return ([x for x, _ in pts], [y for _, y in pts]) if pts else None


def _rewards(d: RunData) -> Markup | None:
    series = {r: s for r in ("policy", "rubric") if (s := _series(d, r, "reward_mean", "reward_std"))}
    if not series:
        return None
    means = {r: pm for r in series if (pm := _phase_means(d, r, "reward_mean")) is not None}
    columns: dict[str, tuple[plots.Series, float]] = {}
    for role, s in series.items():
        columns[f"{role} reward (mean)"] = (s, 1.0)
        if s.band is not None:
            columns[f"{role} reward std"] = (replace(s, y=s.band), 1.0)
    return figure(d.notes, "reward curves", columns, plots.reward_plot, series, _spans(d), means)


def _age_window(d: RunData) -> str:
    """How old the pairs' older answers were meant to be, from the run's own config (contrast.min_age / max_age)."""
    flat = dict(flatten(d.config)) if isinstance(d.config, dict) else {}
    lo, hi = flat.get("contrast.min_age"), flat.get("contrast.max_age")
    if not isinstance(lo, int) or not isinstance(hi, int):
        return "some policy steps earlier"
    steps = "policy step" if (lo, hi) == (1, 1) else "policy steps"
    return (f"{lo}–{hi} {steps} earlier in this run (contrast.min_age–max_age; when the buffer holds no answer that "
            "old, the window is relaxed: docs/METHOD.md §2.4)")


def _pairs(d: RunData) -> dict[str, Any]:
    """Pair accuracy beside the policy's reward, their first and last phase means, and whether the reward fell."""
    out: dict[str, Any] = {"age_window": _age_window(d), "plot": None}
    acc = _series(d, "rubric", "pair_accuracy")
    if acc is None:
        return out
    pol = _series(d, "policy", "reward_mean")
    means: dict[str, tuple[list[float], list[float]]] = {}
    for name, role, key in (("pair accuracy", "rubric", "pair_accuracy"), ("policy reward", "policy", "reward_mean")):
        if (pm := _phase_means(d, role, key)) is not None:
            means[name] = pm
    columns = {"pair accuracy (rubric steps)": (acc, 1.0), **({"policy reward": (pol, 1.0)} if pol else {})}
    out["plot"] = figure(d.notes, "pair accuracy and policy reward", columns, plots.pairs_plot, acc, pol, _spans(d),
                         means)
    out["trend"] = [f"{name} {ys[0]:.3f} → {ys[-1]:.3f} (first → last phase)"
                    for name in ("pair accuracy", "policy reward") if len(ys := means.get(name, ([], []))[1]) > 1]
    rubric = [r for r in d.metrics if r["role"] == "rubric" and not math.isnan(r["pair_accuracy"])]
    counted = [r for r in rubric if r.get("pair_judgements") is not None]
    if counted and len(counted) == len(rubric):  # n of the whole run's pair accuracy: every step logged its own
        judged = sum(r["pair_judgements"] for r in counted)
        acc = sum(r["pair_accuracy"] * r["pair_judgements"] for r in counted) / judged
        pairs = sum(r["pairs"] for r in counted) if all(r.get("pairs") is not None for r in counted) else None
        steps = f"{len(counted)} rubric step{'s' * (len(counted) != 1)}"
        out["trend"].insert(0, f"pair accuracy over the run: {acc:.3f}, n = {pair_n(judged, pairs)} in {steps}")
        if all(r.get(k) is not None for r in counted for k in ("pairs_for", "pairs_against")):  # a vote per pair
            for_, against = (int(sum(r[k] for r in counted)) for k in ("pairs_for", "pairs_against"))
            p = sign_p(for_, against)
            out["trend"].insert(1, f"counted per pair (its rubrics' majority): the better answer preferred in {for_}, "
                                   f"the other in {against}, two-sided sign test p = {p:.3f}")
    out["precondition"] = precondition_lines(d.metrics)
    policy_means = means.get("policy reward", ([], []))[1]
    out["fell"] = len(policy_means) > 1 and policy_means[-1] < policy_means[0]
    return out


PRECONDITION_FIRST = 40  # the first temporal pairs that differ, where a run's early check looks


def precondition_lines(metrics: list[dict[str, Any]]) -> list[str]:
    """Temporal contrast's precondition on prompts a program checks: per rubric step, the temporal pairs whose newer
    answer follows more of the question's constraints than the older one, fewer, and as many
    (``newer_passes_*``); then the run's totals and those of its first ``PRECONDITION_FIRST`` pairs that differ."""
    if (pre := precondition(metrics, PRECONDITION_FIRST)) is None:
        return []
    lines = [f"step {step}: newer better {m} / worse {f} / same {s}" for step, m, f, s in pre.steps]
    more, fewer, same, early = pre.more, pre.fewer, pre.same, pre.early
    decided = more + fewer
    p = sign_p(more, fewer)
    total = (f"over the run: the newer answer follows more constraints in {more} pairs, fewer in {fewer}, as many in "
             f"{same} ({more / decided:.0%} of those that differ; two-sided sign test p = {p:.3f})" if decided else
             f"over the run: no temporal pair differed in constraints followed ({same} the same)")
    if early is not None:
        total += f"; the first {early[0] + early[1]} that differ (to step {early[2]}): {early[0]} / {early[1]}"
    return [total, *lines]


def _validity(d: RunData) -> Markup | None:
    series = {r: s for r in ("policy", "rubric") if (s := _series(d, r, "rubric_validity"))}
    columns = {f"valid share ({role} steps)": (s, 1.0) for role, s in series.items()}
    return figure(d.notes, "rubric validity", columns, plots.validity_plot, series, _spans(d)) if series else None


def _monitor(d: RunData, length_factor: float = LENGTH_FACTOR) -> dict[str, Any] | None:
    """The reward-hacking monitor: its curves, and the flags of ``evolm.training.monitor.hacking_flags``."""
    keys = [key for _, key, _ in plots.MONITOR_PANELS]
    series = {k: s for k in keys if (s := _series(d, "policy", k)) is not None}
    flags = hacking_flags(d.metrics, d.heldout, length_factor)
    if not series and not d.heldout and not flags:
        return None
    plot = figure(d.notes, "reward-hacking monitor", _panel_columns(series, plots.MONITOR_PANELS), plots.panels_plot,
                  series, plots.MONITOR_PANELS,
                     sorted({f.step for f in flags})) if series else None
    return {"plot": plot, "flags": flags, "length_factor": length_factor}


COST_PANELS = (
    ("judge prompt tokens", "judge_prompt_tokens", 1.0),
    ("judge generated tokens", "judge_generated_tokens", 1.0),
    ("judge seconds (slowest process)", "judge_latency_s", 1.0),
    ("judge requests", "judge_requests", 1.0),
    ("judge failures (missing scores)", "judge_failures", 1.0),
    ("judge cache hits (%)", "judge_cache_hit_rate", 100.0),
)


def _panel_series(d: RunData, panels: tuple[tuple[str, str, float], ...]) -> dict[str, plots.Series]:
    """Each panel's key over the steps of both roles that logged it (steps without it left out)."""
    series = {}
    for _, key, _ in panels:
        rows = [r for r in d.metrics if not math.isnan(r.get(key, math.nan))]
        if rows:
            series[key] = plots.Series([r["step"] for r in rows], [r[key] for r in rows], None,
                                       [r["phase"] for r in rows])
    return series


def _panel_columns(series: dict[str, plots.Series], panels: tuple[tuple[str, str, float], ...]
                   ) -> dict[str, tuple[plots.Series, float]]:
    return {title: (series[key], scale) for title, key, scale in panels if key in series}


def _cost(d: RunData) -> dict[str, Any] | None:
    """What judging cost per step, both roles: tokens read and generated, seconds, requests, failed judgments (after
    their retries: missing scores), cache hits."""
    series = _panel_series(d, COST_PANELS)
    if not series:
        return None
    totals = [[title, _nansum([r.get(key, math.nan) for r in d.metrics])] for title, key, _ in COST_PANELS[:5]]
    return {"plot": figure(d.notes, "judge cost per step", _panel_columns(series, COST_PANELS), plots.panels_plot,
                           series, COST_PANELS), "totals": totals}


CRITERIA_PANELS = (
    ("criteria that do not discriminate (%)", "flat_criteria", 100.0),
    ("criteria per rubric", "criteria_per_rubric", 1.0),
    ("criteria passed (%)", "judge_pass_rate", 100.0),
)


def _criteria(d: RunData) -> Markup | None:
    """What the judge read per criterion, per step of both roles: the share of criteria whose value does not vary
    across the answers they judged, criteria per rubric, and the share of criteria passed."""
    series = _panel_series(d, CRITERIA_PANELS)
    return figure(d.notes, "criteria per step", _panel_columns(series, CRITERIA_PANELS), plots.panels_plot, series,
                  CRITERIA_PANELS) if series else None


# ----------------------------------------------------------------------------- held-out evaluations

def steps_text(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 12 else f"{', '.join(map(str, steps[:10]))}, … {steps[-1]}"


def _heldout(d: RunData) -> dict[str, Any] | None:
    """Only for a run that logged held-out evaluations (a run without eval.* settings keeps its usual report)."""
    if not d.heldout:
        return None
    label = d.run_dir.resolve().name
    plot_list = [plot_html(d.notes, title, plots.interval_plot, [pts], title.capitalize(), title,
                           (-0.03, 1.03) if key != "heldout_policy_score" else None)
                 for key, title, _, _ in HELDOUT if (pts := heldout_points(d.heldout, key, label, 0)) is not None
                 and len(pts.x) >= MIN_PLOT_POINTS]  # fewer: the table below has every value
    rows = []
    for r in d.heldout:
        cells: list[Any] = [r["step"]]
        for key, _, _, _ in HELDOUT:
            e = heldout_estimate(r, key)
            cells += [fmt_estimate(e), e.n if e and e.n else "—"]
        rows.append(cells)
    return {"plots": plot_list, "rows": rows}


def pair_n(judgements: int | None, pairs: int | None) -> str:
    """The n of a pair accuracy in words: "4 judgements of 1 pair" (each rubric sampled for a pair judges it once)."""
    if judgements is None:
        return "–"
    return f"{judgements} judgement{'s' * (judgements != 1)}" + (
        "" if pairs is None else f" of {pairs} pair{'s' * (pairs != 1)}")


def _phase_rows(d: RunData) -> list[list[Any]]:
    return [[p.index, fmt(p.cycle), p.role, f"{p.first}–{p.last}", len(p.rows), p.mean("reward_mean"),
             p.mean("reward_std"), p.mean("pair_accuracy"),
             pair_n(p.count("pair_judgements"), p.count("pairs")) if p.role == "rubric" else "–",
             p.mean("rubric_validity"), p.mean("kl"), p.mean("completion_length"),
             duration(_nansum([r["seconds"] for r in p.rows]))] for p in d.phases]


def _stats(d: RunData) -> dict[str, Any] | None:
    if not d.rubric_stats:
        return None
    rows = [s.to_json() for s in d.rubric_stats]
    bins = list(rows[0]["max_weight_hist"])
    header = ["phase", "cycle", "source", "rubrics", "unparsed", "criteria per rubric", "chars per criterion",
              "label-only", "specific value", "constraint", "mean max weight", f"max weight ≥ {DOMINANT_WEIGHT}",
              f"rubrics by max weight: {' / '.join(bins)}"]
    table_rows = [[r["phase"], fmt(r["cycle"]), r["source"], r["n_rubrics"], r["n_unparsed"], r["criteria_per_rubric"],
                   r["criterion_chars"], fmt(r["label_only"], True), fmt(r["specific_value"], True),
                   fmt(r["constraint"], True), r["max_weight"], fmt(r["dominant"], True),
                   " / ".join(str(r["max_weight_hist"][b]) for b in bins)] for r in rows]
    phases = Counter(r["source"] for r in rows)
    plot = plot_html(d.notes, "rubric statistics by phase", plots.rubric_stats_plot, rows) \
        if max(phases.values()) >= MIN_PLOT_POINTS else None  # fewer phases per source: the table has every value
    return {"header": header, "rows": table_rows, "plot": plot}


@dataclass(frozen=True)
class _Example:
    phase: int
    role: str
    step: Any
    cycle: Any
    question: str
    rubric: Rubric

    def table_rows(self) -> list[list[Any]]:
        """#, weight, criterion, the classes of ``evolm.eval.rubric_stats`` it falls in."""
        rows = []
        for i, c in enumerate(self.rubric.criteria, start=1):
            tags = [t for t, f in (("label-only", is_label_only), ("value", has_specific_value),
                                   ("constraint", is_constraint)) if f(c.criterion)]
            rows.append([i, f"{c.weight:.2f}", c.criterion, ", ".join(tags) or "–"])
        return rows


def _examples(samples: RunSamples) -> list[_Example]:
    out = []
    for (phase, role), rows in sorted(samples.rows.items()):
        for row in rows:
            q, obj = row.get("question"), row.get("rubric")
            r = Rubric.from_obj(obj) if obj is not None else None
            if isinstance(q, str) and r is not None and r.criteria:
                out.append(_Example(phase, role, row.get("step"), row.get("cycle"), q, r))
    return out


def pick_early_late(samples: RunSamples, n: int = 2) -> tuple[list[tuple[_Example, _Example]], bool]:
    """Up to ``n`` (early, late) rubric pairs for the same question, farthest apart in phases first.

    Returns ``(pairs, shared)``; when no question has rubrics in two phases, falls back to the first
    and the last rubric of the run with ``shared=False``.
    """
    ex = _examples(samples)
    first: dict[str, _Example] = {}
    last: dict[str, _Example] = {}
    for e in ex:
        first.setdefault(e.question, e)
        if e.phase > first[e.question].phase and (e.question not in last or e.phase > last[e.question].phase):
            last[e.question] = e
    ranked = sorted(last, key=lambda q: -(last[q].phase - first[q].phase))  # stable: earlier questions win ties
    if ranked:
        return [(first[q], last[q]) for q in ranked[:n]], True
    return ([(ex[0], ex[-1])] if ex else []), False


def _eval_tables(value: Any) -> dict[str, Any]:
    """An eval/*.json file as tables: its ``subsets`` (and ``overall``) if it has them, then its numeric leaves."""
    subsets, rest = None, value
    if isinstance(value, dict) and isinstance(value.get("subsets"), dict):
        subsets = [[k, v if isinstance(v, int | float) and not isinstance(v, bool) else str(v)]
                   for k, v in value["subsets"].items()]
        if "overall" in value:
            subsets.append([Markup("<b>overall</b>"), value["overall"]])
        rest = {k: v for k, v in value.items() if k not in ("subsets", "overall")}
    leaves = [[k, v] for k, v in flatten(rest) if isinstance(v, int | float) and not isinstance(v, bool)]
    return {"subsets": subsets, "leaves": leaves}


# ----------------------------------------------------------------------------- entry point


def render_report(d: RunData, length_factor: float = LENGTH_FACTOR) -> str:
    """The report's HTML for loaded run data (``length_factor``: the monitor's length flag, ``hacking_flags``)."""
    sections = {  # drawn before the page is rendered: a failed plot adds a note to d.notes
        "summary": _summary(d), "highlights": _highlights(d), "config_text": d.config_text, "rewards": _rewards(d),
        "pairs": _pairs(d), "validity": _validity(d), "heldout": _heldout(d), "monitor": _monitor(d, length_factor),
        "cost": _cost(d), "criteria": _criteria(d), "phases": _phase_rows(d), "stats": _stats(d),
        "examples": dict(zip(("pairs", "shared"), pick_early_late(d.samples), strict=True)),
        "evals": {name: _eval_tables(v) for name, v in d.evals.items()}, "max_eval_rows": _MAX_EVAL_ROWS}
    return render_page("report.html.j2", run_name=d.run_dir.resolve().name, run_dir=d.run_dir, notes=d.notes,
                       **sections)


def write_report(run_dir: str | Path, output: str | Path | None = None, length_factor: float = LENGTH_FACTOR) -> Path:
    """Write the HTML report of ``run_dir`` (default ``RUN/report.html``) and return its path.

    Raises ``RunError`` if ``run_dir`` has no ``metrics.jsonl``; anything else missing or torn is
    reported inside the HTML instead.
    """
    data = load_run(run_dir)
    target = Path(output) if output is not None else Path(run_dir) / "report.html"
    text = render_report(data, length_factor)
    with atomic_writer(target) as f:
        f.write(text)
    return target


# ----------------------------------------------------------------------------- the summary table


def summarise(run_dir: str | Path) -> list[dict[str, Any]]:
    """Per phase: role, cycle, steps, mean reward, its within-group spread (the mean of the steps' reward_std),
    judge pair accuracy with its n (judgements and pairs, summed over the steps), rubric validity, seconds.

    Held-out evaluation lines are not steps of a phase and are left out."""
    phases: dict[int, list[StepRecord]] = {}
    for rec in read_metrics(run_dir):
        if rec.role == EVAL_ROLE:
            continue
        phases.setdefault(rec.phase if rec.phase is not None else -1, []).append(rec)

    def mean(recs: list[StepRecord], key: str) -> float | None:
        vals = [getattr(r, key) for r in recs if getattr(r, key) is not None]
        return sum(vals) / len(vals) if vals else None

    def total(recs: list[StepRecord], key: str) -> int | None:
        vals = [getattr(r, key) for r in recs if getattr(r, key) is not None]
        return sum(vals) if vals else None

    return [{"phase": p, "role": recs[0].role, "cycle": recs[0].cycle, "steps": len(recs),
             "reward": mean(recs, "reward_mean"), "reward_std": mean(recs, "reward_std"),
             "pair_accuracy": mean(recs, "pair_accuracy"), "pair_judgements": total(recs, "pair_judgements"),
             "pairs": total(recs, "pairs"),
             "rubric_validity": mean(recs, "rubric_validity"), "seconds": sum(r.seconds or 0.0 for r in recs)}
            for p, recs in sorted(phases.items())]
