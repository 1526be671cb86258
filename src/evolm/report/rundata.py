"""A run directory read for the pages: ``metrics.jsonl`` as rows (values outside their bounds read as missing,
held-out evaluations apart), split into phases, with the config, samples and evaluations beside them (``load_run``).
Lenient as the report is: a torn line, a missing file or a null is a note, never an error."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evolm.errors import RunError
from evolm.eval.rubric_stats import PhaseRubricStats, RunSamples, phase_rubric_stats, read_samples
from evolm.runs.records import METRIC_FIELDS as METRIC_KEYS
from evolm.runs.records import METRICS_FILE, SEQUENTIAL_STAGES, StepRecord, read_lenient

EVAL_ROLE = "eval"  # metrics.jsonl lines of held-out evaluations: not training steps
# values outside these bounds are read as missing (a corrupt or hand-edited line must not bend a curve or a CI)
_SHARES = {"pair_accuracy", "rubric_validity", "missing_rewards", "tied_groups", "heldout_pair_accuracy",
           "heldout_validity", "judge_p_yes", "judge_pass_rate", "rubric_copy_share", "score_string_share",
           "judge_cache_hit_rate", "flat_criteria", "judge_failure_share"}
_CORRELATIONS = {"length_reward_corr"}
_COST = ("judge_tokens", "judge_prompt_tokens", "judge_generated_tokens", "judge_requests",
         "judge_failures")  # counts, read as floats
_STDS = {"reward_std", "heldout_policy_score_std"}
_MAX_ABS = 1e15  # time and seconds are exempt: the header shows a corrupt time as "unreadable"
_COUNTS = ("heldout_pairs", "heldout_questions", "pair_judgements", "pairs")
_VOTES = ("pairs_for", "pairs_against", "newer_passes_more", "newer_passes_fewer",
          "newer_passes_same")  # counts that may be 0


# ----------------------------------------------------------------------------- loading


def _num(v: Any) -> float:
    """A finite float, or NaN for null, text, booleans and infinities (a partial run logs all of these)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return math.nan
    f = float(v)
    return f if math.isfinite(f) else math.nan


def _nanmean(xs: list[float]) -> float:
    ok = [x for x in xs if not math.isnan(x)]
    return sum(ok) / len(ok) if ok else math.nan


def _nansum(xs: list[float]) -> float:
    ok = [x for x in xs if not math.isnan(x)]
    return sum(ok) if ok else math.nan


@dataclass
class Phase:
    """A run of consecutive metric rows with the same phase and role."""

    index: int
    role: str
    cycle: int | None
    rows: list[dict[str, Any]]

    @property
    def first(self) -> int:
        return self.rows[0]["step"]

    @property
    def last(self) -> int:
        return self.rows[-1]["step"]

    def mean(self, key: str) -> float:
        return _nanmean([r[key] for r in self.rows])

    def count(self, key: str) -> int | None:
        """The sum of a count column (``pair_judgements``, ``pairs``) over the phase; None when no step logged it."""
        ns = [r.get(key) for r in self.rows if r.get(key) is not None]
        return sum(ns) if ns else None


@dataclass
class RunData:
    """Everything the report reads from a run directory, plus notes on what was missing or unreadable."""

    run_dir: Path
    metrics: list[dict[str, Any]]
    phases: list[Phase]
    samples: RunSamples
    rubric_stats: list[PhaseRubricStats]
    heldout: list[dict[str, Any]] = field(default_factory=list)  # role "eval" lines, in step order
    config: Any = None
    config_text: str | None = None
    evals: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _sane(key: str, v: float) -> bool:
    if math.isnan(v) or key in ("time", "seconds"):
        return True
    if key in _SHARES:
        return 0.0 <= v <= 1.0
    if key in _CORRELATIONS:
        return -1.0 <= v <= 1.0
    if key in _COST:
        return 0.0 <= v <= _MAX_ABS
    return abs(v) <= _MAX_ABS and (key not in _STDS or v >= 0)


def read_metric_rows(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Every readable line of a ``metrics.jsonl`` as a flat dict, training steps and held-out evaluations alike.

    Floats are finite or NaN; a value outside its bounds (a share outside [0, 1], a negative std,
    a magnitude above 1e15, a count below 1) is read as missing and counted in ``notes``.
    Sorted by step, stably: an evaluation keeps its place after the step it follows.
    """
    read = read_lenient(path)
    rows: list[dict[str, Any]] = []
    absurd = 0
    for obj in read.rows:
        rec = StepRecord.from_json(obj)
        if not isinstance(obj.get("step"), int) or isinstance(obj.get("step"), bool):
            rec.step = rows[-1]["step"] + 1 if rows else 1  # keep the row in order rather than drop its values
        row = {"step": rec.step, "role": rec.role, "cycle": rec.cycle, "phase": rec.phase}
        for k in METRIC_KEYS:
            v = _num(getattr(rec, k))
            if not _sane(k, v):
                absurd, v = absurd + 1, math.nan
            row[k] = v
        for k in _COST:
            v = _num(getattr(rec, k))
            if not _sane(k, v):
                absurd, v = absurd + 1, math.nan
            row[k] = v
        for k in _COUNTS:
            n = getattr(rec, k)
            if n is not None and n < 1:
                absurd, n = absurd + 1, None
            row[k] = n
        for k in _VOTES:
            n = getattr(rec, k)
            if n is not None and n < 0:
                absurd, n = absurd + 1, None
            row[k] = n
        rows.append(row)
    if read.skipped:
        torn = " (the last line is torn: the run crashed or is still writing)" if read.torn_last else ""
        notes.append(f"{path.name}: {read.skipped} unreadable line(s) skipped{torn}.")
    if absurd:
        notes.append(f"{path.name}: {absurd} out-of-range value(s) read as missing (a share outside [0, 1], a "
                     f"negative std, a magnitude above {_MAX_ABS:g}, a count below 1).")
    rows.sort(key=lambda r: r["step"])
    return rows


def _split_phases(rows: list[dict[str, Any]]) -> list[Phase]:
    """Consecutive rows sharing (phase, role); rows without a phase index get a running one."""
    phases: list[Phase] = []
    for row in rows:
        key = (row["phase"], row["role"])
        if phases and (phases[-1].rows[-1]["phase"], phases[-1].role) == key:
            phases[-1].rows.append(row)
        else:
            index = row["phase"] if row["phase"] is not None else (phases[-1].index + 1 if phases else 0)
            phases.append(Phase(index, row["role"], row["cycle"], [row]))
    return phases


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory; raises ``RunError`` only when it has no ``metrics.jsonl`` at all."""
    root = Path(run_dir)
    if not (root / "metrics.jsonl").is_file():
        stages = [s for s in SEQUENTIAL_STAGES if (root / s / METRICS_FILE).is_file()]
        hint = (f": a sequential run's top directory; report a stage ({', '.join(f'{root / s}' for s in stages)}), "
                "or give it with other runs to compare") if stages else ""
        raise RunError(f"{root}: not a run directory (no metrics.jsonl){hint}")
    notes: list[str] = []
    rows = read_metric_rows(root / "metrics.jsonl", notes)
    metrics = [r for r in rows if r["role"] != EVAL_ROLE]
    if not metrics:
        notes.append("metrics.jsonl holds no readable step yet.")
    roles = {r["role"] for r in metrics}
    for role in ("policy", "rubric"):
        if metrics and role not in roles:
            notes.append(f"no {role} steps in metrics.jsonl (the run stopped early or trains one role).")
    samples = read_samples(root)
    if not samples.rows:
        notes.append("no samples/phase-XXX-<role>.jsonl files: no rubric statistics or example rubrics.")
    if samples.skipped_lines:
        notes.append(f"samples: {samples.skipped_lines} unreadable line(s) skipped.")
    data = RunData(root, metrics, _split_phases(metrics), samples, phase_rubric_stats(samples),
                   heldout=[r for r in rows if r["role"] == EVAL_ROLE], notes=notes)
    cfg = root / "config.yaml"
    if cfg.is_file():
        data.config_text = cfg.read_text(encoding="utf-8", errors="replace")
        try:
            data.config = yaml.safe_load(data.config_text)
        except yaml.YAMLError as e:
            notes.append(f"config.yaml is not valid YAML ({str(e).splitlines()[0]}); shown as text.")
    else:
        notes.append("no config.yaml.")
    eval_dir = root / "eval"
    for path in sorted(eval_dir.glob("*.json")) if eval_dir.is_dir() else []:
        try:
            data.evals[path.name] = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError) as e:  # malformed or not UTF-8 (both ValueErrors), nested too deeply
            notes.append(f"eval/{path.name}: unreadable JSON ({e.__class__.__name__}).")
    return data  # no eval/*.json is not missing: training writes none (the section says how to add them)
