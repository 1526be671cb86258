"""Several run directories -> one self-contained HTML page that overlays them (``evolm report RUN_A RUN_B ...``).

A comparison reads only each run's ``metrics.jsonl`` and ``config.yaml`` and shows, one colour per run, the training
curves against the global step (held-out lines never enter them), the held-out evaluations with 95% interval bars,
and a table of final values with their intervals. A metric a run does not log is "—", never an error; a torn line
or an odd value is skipped and listed under "What is missing".
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

import yaml
from markupsafe import Markup

from evolm.errors import InputError, RunError
from evolm.report import plots
from evolm.report.intervals import HELDOUT, Estimate, fmt_estimate, heldout_change, heldout_estimate, heldout_points
from evolm.report.page import duration, flatten, plot_html, render_page
from evolm.report.report import HIGHLIGHTS
from evolm.report.rundata import EVAL_ROLE, SEQUENTIAL_STAGES, Phase, _nansum, _split_phases, read_metric_rows
from evolm.runs.files import atomic_writer, check_outputs_differ
from evolm.runs.records import METRICS_FILE
from evolm.stats import sample_interval

DEFAULT_OUTPUT = "comparison.html"  # in the current directory: never inside one of the runs being compared
CONFIG_FILE = "config.yaml"

# (title, roles, key, y label, y limits): the overlaid training curves; a second role is drawn dashed
CURVES = (
    ("Policy reward (mean per policy step)", ("policy",), "reward_mean", "reward", None),
    ("Rubric reward (mean per rubric step)", ("rubric",), "reward_mean", "reward", None),
    ("Judge accuracy on temporal pairs (rubric steps)", ("rubric",), "pair_accuracy", "pair accuracy", (-0.03, 1.03)),
    ("Rubric validity (solid: rubric steps, dashed: policy steps)", ("rubric", "policy"), "rubric_validity",
     "valid share", (-0.03, 1.03)),
    ("Within-group reward std (solid: policy steps, dashed: rubric steps)", ("policy", "rubric"), "reward_std",
     "reward std", None),
)
# (name, role, key): the training metrics of the final-values table (mean over the role's last phase)
FINAL_TRAINING = (
    ("policy reward", "policy", "reward_mean"),
    ("rubric reward", "rubric", "reward_mean"),
    ("judge pair accuracy (temporal pairs)", "rubric", "pair_accuracy"),
    ("rubric validity, rubric steps", "rubric", "rubric_validity"),
    ("rubric validity, policy steps", "policy", "rubric_validity"),
    ("reward std, policy steps", "policy", "reward_std"),
    ("reward std, rubric steps", "rubric", "reward_std"),
)


# ----------------------------------------------------------------------------- loading


@dataclass
class CompareRun:
    """What the comparison reads from one run directory (for a sequential run, both stages joined)."""

    label: str
    path: Path
    rows: list[dict[str, Any]]  # training steps in step order (global steps; no "eval" lines)
    heldout: list[dict[str, Any]]  # role "eval" lines in step order
    phases: list[Phase]
    config: Any = None
    config_text: str | None = None
    stages: tuple[str, ...] = ()  # the stage directories read, for a sequential top directory
    notes: list[str] = field(default_factory=list)


def run_stages(path: str | Path) -> tuple[str, ...]:
    """``()`` for a run directory (it holds metrics.jsonl), else the sequential stages that hold one.

    Raises ``RunError`` when the path is neither.
    """
    root = Path(path)
    if not root.is_dir():
        raise RunError(f"{root}: no such run directory")
    if (root / METRICS_FILE).is_file():
        return ()
    stages = tuple(s for s in SEQUENTIAL_STAGES if (root / s / METRICS_FILE).is_file())
    if not stages:
        raise RunError(f"{root}: not a run directory (no {METRICS_FILE}, and no {' or '.join(SEQUENTIAL_STAGES)}/ "
                       f"holding one)")
    return stages


def run_inputs(path: str | Path) -> list[Path]:
    """The files a comparison reads from a run directory (for refusing an output that would replace one)."""
    root = Path(path)
    dirs = [root] + [root / s for s in SEQUENTIAL_STAGES]
    return [d / name for d in dirs for name in (METRICS_FILE, CONFIG_FILE)]


def load_compare_run(path: str | Path, label: str) -> CompareRun:
    """Read one run (or a sequential run's two stages) for the comparison.

    A sequential run's top directory (no ``metrics.jsonl``, but ``stage1-writer/`` and ``stage2-policy/`` holding
    one) reads as one run: stage 1, then stage 2 with its steps shifted after stage 1's last step and its phases
    after stage 1's last phase, so the writer's training comes first on the step axis and the last values are
    stage 2's. Raises ``RunError`` when ``path`` is not a run directory or its metrics hold no readable line.
    """
    root = Path(path)
    stages = run_stages(root)
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    step_offset = phase_offset = 0
    for stage in stages or ("",):
        stage_notes: list[str] = []
        try:
            stage_rows = read_metric_rows(root / stage / METRICS_FILE, stage_notes)
        except OSError as e:
            raise RunError(f"{root / stage / METRICS_FILE}: cannot read ({e.strerror})") from None
        notes += [f"{stage}/{n}" if stage else n for n in stage_notes]
        for r in stage_rows:  # stage 2 starts where stage 1 ended, on the step axis and in phase numbers
            r["step"] += step_offset
            if r["phase"] is not None:
                r["phase"] += phase_offset
        if stage_rows:
            step_offset = max(r["step"] for r in stage_rows)
            phase_offset = max((r["phase"] for r in stage_rows if r["phase"] is not None), default=phase_offset - 1) + 1
        rows += stage_rows
    if not rows:
        raise RunError(f"{root}: {METRICS_FILE} holds no readable line; nothing to compare")
    if stages and len(stages) < len(SEQUENTIAL_STAGES):
        missing = [s for s in SEQUENTIAL_STAGES if s not in stages]
        notes.append(f"sequential run without {', '.join(missing)}/{METRICS_FILE}: only {', '.join(stages)} shown.")
    train = [r for r in rows if r["role"] != EVAL_ROLE]
    run = CompareRun(label, root, train, [r for r in rows if r["role"] == EVAL_ROLE], _split_phases(train),
                     stages=stages, notes=notes)
    if not train:
        notes.append("no training step logged yet.")
    if not run.heldout:
        notes.append("no held-out evaluation (role \"eval\" lines: eval.pairs / eval.questions not set).")
    for cfg in [root / CONFIG_FILE] + [root / s / CONFIG_FILE for s in stages]:
        if cfg.is_file():
            try:
                run.config_text = cfg.read_text(encoding="utf-8", errors="replace")
                run.config = yaml.safe_load(run.config_text)
            except (OSError, yaml.YAMLError) as e:
                notes.append(f"{cfg.relative_to(root)} is unreadable ({str(e).splitlines()[0]}).")
            break
    else:
        notes.append("no config.yaml.")
    return run


def default_labels(paths: Sequence[str | Path]) -> list[str]:
    """Each run's directory name; names that repeat get their parent directory too, then a number."""
    names = [Path(p).resolve().name or str(p) for p in paths]
    counts = Counter(names)
    names = [f"{Path(p).resolve().parent.name}/{n}" if counts[n] > 1 else n for p, n in zip(paths, names, strict=True)]
    seen: Counter[str] = Counter()
    out = []
    for n in names:
        seen[n] += 1
        out.append(n if seen[n] == 1 else f"{n} ({seen[n]})")
    return out


def parse_labels(text: str, n_runs: int) -> list[str]:
    """``--labels a,b,c``: one non-empty, distinct label per run, in order."""
    labels = [x.strip() for x in text.split(",")]
    if len(labels) != n_runs:
        raise InputError(f"--labels: {len(labels)} label(s) for {n_runs} run(s); give one per run, comma-separated")
    if not all(labels):
        raise InputError("--labels: a label is empty")
    if len(set(labels)) != len(labels):
        raise InputError("--labels: labels must be distinct")
    return labels


# ----------------------------------------------------------------------------- final values


def last_phase_estimate(run: CompareRun, role: str, key: str) -> tuple[Phase, Estimate | None] | None:
    """The mean of ``key`` over the last phase of ``role`` with a t-interval over its steps (n = steps with a value).

    None when the run has no phase of that role; ``(phase, None)`` when that phase logged no value.
    """
    phase = next((p for p in reversed(run.phases) if p.role == role), None)
    if phase is None:
        return None
    values = [r[key] for r in phase.rows if not math.isnan(r[key])]
    if not values:
        return phase, None
    mean, ci = sample_interval(values)
    return phase, Estimate(mean, ci, len(values), phase.last)


def first_last_heldout(run: CompareRun, key: str) -> tuple[Estimate, Estimate] | None:
    """The first and the last eval line that hold ``key`` (the first is normally step 0, before training)."""
    ests = [e for r in run.heldout if (e := heldout_estimate(r, key)) is not None]
    return (ests[0], ests[-1]) if ests else None


# ----------------------------------------------------------------------------- the page


def _swatch(run: int, label: str) -> Markup:
    colour, _ = plots.run_style(run)
    return Markup("<span class='sw' style='background:{}'></span>{}").format(colour, label)


def _run_rows(runs: list[CompareRun]) -> list[list[Any]]:
    rows = []
    for i, r in enumerate(runs):
        roles = Counter(x["role"] for x in r.rows)
        schedule = r.config.get("schedule") if isinstance(r.config, dict) else None
        regime = schedule.get("regime") if isinstance(schedule, dict) else None
        where = str(r.path) + (f" ({' + '.join(r.stages)})" if r.stages else "")
        steps = f"{r.rows[0]['step']}–{r.rows[-1]['step']}" if r.rows else "—"
        seconds = _nansum([x["seconds"] for x in r.rows])
        time = "—" if math.isnan(seconds) else duration(seconds)
        rows.append([_swatch(i, r.label), where, regime if isinstance(regime, str) else "—", roles.get("policy", 0),
                     roles.get("rubric", 0), steps, len(r.heldout), time])
    return rows


def _settings(runs: list[CompareRun]) -> list[list[Any]]:
    """The header settings any run has, one column per run; a setting whose values differ in bold."""
    flat = [dict(flatten(r.config)) if isinstance(r.config, dict) else {} for r in runs]
    rows = []
    for k in HIGHLIGHTS:
        if any(k in f for f in flat):
            values = [str(f[k]) if k in f else "—" for f in flat]
            rows.append([Markup("<b>{}</b> ≠").format(k) if len(set(values)) > 1 else k, *values])
    return rows


def _final_heldout(runs: list[CompareRun]) -> list[list[Any]]:
    rows = []
    for key, title, _, _ in HELDOUT:
        for i, r in enumerate(runs):
            fl = first_last_heldout(r, key)
            if fl is None:
                rows.append([title, _swatch(i, r.label), *["—"] * 7])
                continue
            first, last = fl
            change = "—"
            if last.step != first.step:
                d, ci = heldout_change(first, last, key)
                change = fmt_estimate(Estimate(d, ci, None))
            rows.append([title, _swatch(i, r.label), first.step, fmt_estimate(first), first.n if first.n else "—",
                         last.step, fmt_estimate(last), last.n if last.n else "—", change])
    return rows


def _final_training(runs: list[CompareRun]) -> list[list[Any]]:
    rows = []
    for name, role, key in FINAL_TRAINING:
        for i, r in enumerate(runs):
            got = last_phase_estimate(r, role, key)
            if got is None:
                rows.append([name, _swatch(i, r.label), "—", "—", "—"])
                continue
            phase, est = got
            rows.append([name, _swatch(i, r.label), f"{phase.index} (steps {phase.first}–{phase.last})",
                         est.n if est else "—", fmt_estimate(est)])
    return rows


def _not_logged_by(runs: list[CompareRun], logged: set[int]) -> list[str]:
    """The labels of the runs (by index) that have nothing in a plot."""
    return [r.label for i, r in enumerate(runs) if i not in logged]


def _curves(runs: list[CompareRun], notes: list[str]) -> list[tuple[str, list[str], Markup | None]]:
    """Per curve of ``CURVES``: its title, the runs that did not log it, the overlaid plot (None: no run logged it)."""
    out = []
    for title, roles, key, ylabel, ylim in CURVES:
        curves = []
        for i, r in enumerate(runs):
            for j, role in enumerate(roles):
                rows = [x for x in r.rows if x["role"] == role]
                if rows and not all(math.isnan(x[key]) for x in rows):
                    steps = [x["step"] for x in rows]
                    # a line breaks only where the role pauses (the other role's phase), not between its own phases
                    segment = list(accumulate(int(b - a > 1) for a, b in zip([steps[0]] + steps, steps)))
                    series = plots.Series(steps, [x[key] for x in rows], None, segment)
                    text = r.label if len(roles) == 1 else f"{r.label} ({role} steps)"
                    curves.append(plots.RunCurve(text, i, series, dashed=j > 0))
        plot = plot_html(notes, title, plots.overlay_plot, curves, title, ylabel, ylim) if curves else None
        out.append((title, _not_logged_by(runs, {c.run for c in curves}), plot))
    return out


def _heldout(runs: list[CompareRun], notes: list[str]) -> list[tuple[str, list[str], Markup | None]]:
    """Per held-out metric: its title, the runs that did not log it, the plot with 95% intervals (or None)."""
    out = []
    for key, title, _, _ in HELDOUT:
        points = [p for i, r in enumerate(runs) if (p := heldout_points(r.heldout, key, r.label, i)) is not None]
        ylim = None if key == "heldout_policy_score" else (-0.03, 1.03)
        plot = plot_html(notes, title, plots.interval_plot, points, f"{title.capitalize()} (95% CI)", title,
                         ylim) if points else None
        out.append((title.capitalize(), _not_logged_by(runs, {p.run for p in points}), plot))
    return out


def render_comparison(runs: list[CompareRun]) -> str:
    """The comparison page's HTML for loaded runs: training curves (policy and rubric reward, pair accuracy, rubric
    validity, within-group reward std; a second role of a run dashed), held-out evaluations, and final values: per
    held-out metric its first and last evaluation and their change (an approximate, unpaired interval), per training
    metric the mean over its role's last phase with a t-interval over that phase's steps."""
    notes = [f"{r.label}: {n}" for r in runs for n in r.notes]
    heldout, curves = _heldout(runs, notes), _curves(runs, notes)  # drawn before the page: a failed plot adds a note
    return render_page("compare.html.j2", runs=runs, notes=notes, run_rows=_run_rows(runs), settings=_settings(runs),
                       final_heldout=_final_heldout(runs), final_training=_final_training(runs), heldout=heldout,
                       curves=curves)


def write_comparison(run_dirs: Sequence[str | Path], output: str | Path | None = None,
                     labels: Sequence[str] | None = None) -> Path:
    """Write the comparison page of ``run_dirs`` (default ``./comparison.html``) and return its path.

    Raises ``RunError`` for a path that is not a run directory or holds no readable metrics line,
    ``InputError`` for labels that do not match the runs or an output that is one of the inputs.
    """
    labels = list(labels) if labels is not None else default_labels(run_dirs)
    if len(labels) != len(run_dirs):
        raise InputError(f"{len(labels)} label(s) for {len(run_dirs)} run(s)")
    target = Path(output) if output is not None else Path(DEFAULT_OUTPUT)
    check_outputs_differ([target], [f for d in run_dirs for f in run_inputs(d)])
    runs = [load_compare_run(d, label) for d, label in zip(run_dirs, labels, strict=True)]
    text = render_comparison(runs)
    try:
        with atomic_writer(target) as f:
            f.write(text)
    except OSError as e:
        raise InputError(f"{target}: cannot write ({e.strerror or e})") from None
    return target
