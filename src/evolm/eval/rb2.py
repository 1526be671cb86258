"""RewardBench 2 with a rubric writer and a judge as the reward model (docs/METHOD.md §3.1).

Protocol: one rubric per prompt, written from the prompt alone; every completion is then scored
separately by the judge reading that rubric (or alone, for the no-rubric baseline). All rubrics
are written in one batched call (plus retries for the ones that did not parse, see
``evolm.eval.rubric_source``) and all completions are judged in one ``Judge.score`` call, so a
backend can share the prompt prefix across the completions of a prompt.

Scoring reproduces the released official code, the ``rewardbench`` package 0.1.4 on PyPI
(Apache-2.0; the same files as allenai/reward-bench commit fdc742df60491235b7f37a8fa9b31b4c116fd40b):
``reroll_and_score_dataset`` (non-Ties rows), ``sample_stats`` and ``process_single_model``
(Ties) in ``rewardbench/utils.py``, and the per-subset loop of ``scripts/run_v2.py``. The tests
run those functions themselves (vendored in ``tests/eval/rewardbench_official.py``) on random
score files and require equality to 1e-9.

- non-Ties row: with s_0 the score of the first completion (the chosen one) and k the number of
  completions sharing the maximum, the row earns 1/k if s_0 is the maximum, else 0; a subset
  scores the mean over its rows.
- Ties: rows ``ref:<pid>`` / ``tied:<pid>`` (pid an integer, so ``07`` and ``7`` are one prompt),
  the first ``num_correct`` completions correct. Per prompt: accurate = worst_correct >
  best_incorrect, ci = worst_correct - best_incorrect, and diff_corr = best_correct -
  worst_correct, which is *undefined* (None) when the prompt has a single correct answer.
  Score = 0.30 acc(tied) + 0.30 acc(ref) + 0.20 P + 0.20 H + 0.01 M, where the accuracies are
  over all tied (ref) prompts and, over the prompt ids with both a ref and a tied row:
  P = mean(ci_tied > diff_corr) and H = mean(min(ci_ref, ci_tied) > diff_corr), both only over
  the prompts whose tied diff_corr is defined; M = mean(tanh(min(ci_ref, ci_tied) / diff_corr - 1))
  only over those with diff_corr > 0 (0 when there are none). diff_corr is the tied prompt's.
  With no paired prompt id at all, P, H and M are 0.
- overall: plain mean of the six subset scores (the leaderboard's; ``run_v2.py`` prints the
  subsets only).

The later GitHub rewrite (commits 5822f16 and a009692, June 2025, not released on PyPI) differs
at the edges: it averages P, H and M over every paired prompt, counting tanh(±inf) = ±1 for a
zero diff_corr, and fails on a tied prompt with a single correct answer. We follow the release.

Where the official code has no answer, we decide (and test):

- Missing score (the judge gave none, or NaN): it ranks below every present score, i.e. it is
  read as -inf and the official arithmetic follows (-inf - -inf is NaN, and a comparison with
  NaN is false). Two exceptions: a non-Ties row whose chosen score is missing earns 0 (the
  official code, given -inf everywhere, would give 1/k to a row with every score missing), and a
  margin-term ratio that is NaN (e.g. -inf / inf) counts 0 instead of turning M into NaN. So a
  missing correct score makes its Ties prompt inaccurate, a missing incorrect one cannot beat a
  present correct one, and ``min`` of the two ci keeps a NaN (Python's ``min`` depends on order).
- Every paired tied prompt has a single correct answer: P and H are 0 (the official mean of an
  empty list is NaN).
- Two Ties rows with the same kind and prompt id: ``InputError`` (the release keeps, per
  completion index, the later row's score; the GitHub rewrite pools both rows).
- A prompt id that is not an integer is kept as text (the official code raises on it).
- Subset names are the six above, in any case (written back in the official spelling); any other
  name, in the data, a score file or ``--subsets``, is an ``InputError``: a seventh subset must
  not slip into the overall mean. ``overall`` averages the subsets present; ``complete`` says
  whether all six were.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from evolm.backends.base import Backend, SamplingParams
from evolm.errors import InputError
from evolm.eval.rubric_source import RubricCoverage, RubricTable, prompt_rubrics
from evolm.runs.jsonl import read_jsonl, read_records, write_jsonl
from evolm.scores import is_missing

if TYPE_CHECKING:
    from evolm.judge.judge import Judge

HUB_ID = "allenai/reward-bench-2"
SUBSETS: tuple[str, ...] = ("Factuality", "Precise IF", "Math", "Safety", "Focus", "Ties")
TIES = "Ties"


def canonical_subset(name: str, where: str = "") -> str:
    """The official spelling of a RewardBench 2 subset name given in any case.

    Any other name is an error rather than a new subset, so it cannot enter the overall mean.
    """
    for known in SUBSETS:
        if str(name).strip().lower() == known.lower():
            return known
    raise InputError(f"{where}unknown RewardBench 2 subset {name!r} (known: {', '.join(SUBSETS)})")


# ----------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class RB2Row:
    """One RewardBench 2 prompt with its completions: ``chosen`` (correct) first, then ``rejected``."""

    id: str
    prompt: str
    subset: str
    chosen: tuple[str, ...]
    rejected: tuple[str, ...]
    num_correct: int

    @property
    def completions(self) -> tuple[str, ...]:
        return self.chosen + self.rejected


@dataclass(frozen=True)
class ScoredRow:
    """The judge's scores of one row's completions, in the row's order (chosen, then rejected).

    This is one line of ``--save-scores``; ``None`` is a missing score.
    """

    id: str
    subset: str
    num_correct: int
    scores: tuple[float | None, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "subset": self.subset, "num_correct": self.num_correct, "scores": list(self.scores)}


@dataclass(frozen=True)
class TiesBreakdown:
    """The five terms of the Ties score and the number of prompts behind each.

    ``n_spread`` counts the paired prompts whose tied row has two or more correct answers (the
    prompts behind the two "preferred" terms); ``n_margin`` those of them with diff_corr > 0 (the
    prompts behind the margin term).
    """

    tied_accuracy: float
    ref_accuracy: float
    correctness_preferred: float
    correctness_preferred_hard: float
    margin: float
    n_tied: int
    n_ref: int
    n_paired: int
    n_spread: int = 0
    n_margin: int = 0

    @property
    def score(self) -> float:
        return (
            0.3 * self.tied_accuracy
            + 0.3 * self.ref_accuracy
            + 0.2 * self.correctness_preferred
            + 0.2 * self.correctness_preferred_hard
            + 0.01 * self.margin
        )


@dataclass
class RB2Result:
    """Per-subset scores in [0, 1] (Ties may reach 1.01, as officially), their mean, and counts."""

    subsets: dict[str, float]
    counts: dict[str, int]
    overall: float
    complete: bool
    missing_scores: int
    ties: TiesBreakdown | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "benchmark": "RewardBench 2",
            "subsets": dict(self.subsets),
            "overall": self.overall,
            "complete": self.complete,
            "counts": dict(self.counts),
            "missing_scores": self.missing_scores,
        }
        if self.ties is not None:
            out["ties"] = {**asdict(self.ties), "score": self.ties.score}
        out.update(self.extra)
        return out


# ----------------------------------------------------------------------------- scoring (pure)


def _as_score(s: float | None) -> float:
    """A missing score (None or NaN) ranks below every present one."""
    return -math.inf if is_missing(s) else float(s)  # type: ignore[arg-type]


def row_credit(scores: Sequence[float | None]) -> float:
    """Credit of a non-Ties row: 1/k when the first (chosen) score ties k-way at the top, else 0.

    A missing score ranks below every present one; a missing chosen score earns 0.

    >>> row_credit([0.9, 0.1, 0.2, 0.3]), row_credit([0.9, 0.9, 0.2, 0.3]), row_credit([0.5] * 4)
    (1.0, 0.5, 0.25)
    >>> row_credit([None, 0.1, None, 0.2]), row_credit([0.4, None, None, 0.4])
    (0.0, 0.5)
    """
    if not scores:
        raise ValueError("a row needs at least one score")
    if is_missing(scores[0]):
        return 0.0
    values = [_as_score(s) for s in scores]
    top = max(values)
    return 1.0 / sum(v == top for v in values) if values[0] == top else 0.0


@dataclass(frozen=True)
class PromptStats:
    """Ties statistics of one prompt, as the official ``sample_stats`` computes them.

    NaN where missing scores leave a margin undefined.
    """

    accurate: bool
    diff_corr: float | None  # best_correct - worst_correct; None with a single correct answer
    ci: float  # worst_correct - best_incorrect


def prompt_stats(scores: Sequence[float | None], num_correct: int) -> PromptStats:
    """Accuracy and margins of one Ties prompt whose first ``num_correct`` scores are the correct answers.

    >>> prompt_stats([8, 7, 5, 2], 2)
    PromptStats(accurate=True, diff_corr=1.0, ci=2.0)
    >>> prompt_stats([8, 5, 2], 1).diff_corr is None
    True
    """
    return _stats([(i < num_correct, _as_score(s)) for i, s in enumerate(scores)])


def _stats(samples: Sequence[tuple[bool, float]]) -> PromptStats:
    correct = [s for ok, s in samples if ok]
    incorrect = [s for ok, s in samples if not ok]
    if not correct or not incorrect:
        raise ValueError("a Ties prompt needs at least one correct and one incorrect answer")
    worst_correct = min(correct)
    ci = worst_correct - max(incorrect)  # -inf - -inf is NaN: all missing
    diff = max(correct) - worst_correct if len(correct) > 1 else None
    return PromptStats(accurate=worst_correct > max(incorrect), diff_corr=diff, ci=ci)


def _nanmin(a: float, b: float) -> float:
    """``min`` that keeps a NaN whichever side it is on (Python's ``min`` depends on the order)."""
    return math.nan if math.isnan(a) or math.isnan(b) else min(a, b)


def _margin_term(m: float, diff: float) -> float:
    """tanh(m / diff - 1) for diff > 0; NaN (only from missing scores, e.g. -inf / inf) reads as 0."""
    value = math.tanh(m / diff - 1)
    return 0.0 if math.isnan(value) else value


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _ties_key(row_id: str) -> tuple[str, str]:
    kind, sep, pid = row_id.partition(":")
    if not sep or kind not in ("ref", "tied") or not pid.strip():
        raise InputError(f"Ties row id '{row_id}' is not 'ref:<prompt id>' or 'tied:<prompt id>'")
    pid = pid.strip()
    return kind, str(int(pid)) if re.fullmatch(r"[+-]?\d+", pid) else pid  # "07" and "7" are one prompt, as officially


def ties_breakdown(rows: Sequence[ScoredRow]) -> TiesBreakdown:
    """The official Ties score of ``rows`` (all from the Ties subset), term by term.

    Each kind and prompt id may appear once: the official release silently overwrites a
    duplicate's scores index by index, which no real data needs.
    """
    samples: dict[tuple[str, str], list[tuple[bool, float]]] = {}
    for row in rows:
        key = _ties_key(row.id)
        if key in samples:
            raise InputError(f"Ties row id '{row.id}' appears twice (as {key[0]}:{key[1]}); "
                             "give each prompt id one row per kind")
        samples[key] = [(i < row.num_correct, _as_score(s)) for i, s in enumerate(row.scores)]
    ref: dict[str, PromptStats] = {}
    tied: dict[str, PromptStats] = {}
    for (kind, pid), group in samples.items():
        (ref if kind == "ref" else tied)[pid] = _stats(group)
    paired = [pid for pid in tied if pid in ref]
    spread = [pid for pid in paired if tied[pid].diff_corr is not None]  # official: diff_corr is not None
    preferred, preferred_hard, margins = [], [], []
    for pid in spread:
        t, r = tied[pid], ref[pid]
        diff = t.diff_corr
        assert diff is not None
        hard = _nanmin(r.ci, t.ci)
        preferred.append(float(t.ci > diff))
        preferred_hard.append(float(hard > diff))
        if diff > 0:  # official: the margin term only over positive spreads
            margins.append(_margin_term(hard, diff))
    return TiesBreakdown(
        tied_accuracy=_mean([float(s.accurate) for s in tied.values()]),
        ref_accuracy=_mean([float(s.accurate) for s in ref.values()]),
        correctness_preferred=_mean(preferred),
        correctness_preferred_hard=_mean(preferred_hard),
        margin=_mean(margins),
        n_tied=len(tied),
        n_ref=len(ref),
        n_paired=len(paired),
        n_spread=len(spread),
        n_margin=len(margins),
    )


def is_ties(subset: str) -> bool:
    return subset.lower() == TIES.lower()


def score_rows(rows: Sequence[ScoredRow]) -> RB2Result:
    """Per-subset scores (in the official order of the six), their mean, and the Ties breakdown.

    A subset name outside the six is an ``InputError``.

    >>> r = score_rows([ScoredRow("1", "Math", 1, (0.9, 0.9, 0.1, 0.1)),
    ...                 ScoredRow("2", "Math", 1, (0.2, 0.7, 0.1, 0.1))])
    >>> r.subsets, r.overall
    ({'Math': 0.25}, 0.25)
    """
    by_subset: dict[str, list[ScoredRow]] = {name: [] for name in SUBSETS}
    for row in rows:
        by_subset[canonical_subset(row.subset, f"row id {row.id!r}: ")].append(row)
    subsets: dict[str, float] = {}
    ties = None
    for name, group in by_subset.items():
        if not group:
            continue
        if is_ties(name):
            ties = ties_breakdown(group)
            subsets[name] = ties.score
        else:
            subsets[name] = _mean([row_credit(r.scores) for r in group])
    return RB2Result(
        subsets=subsets,
        counts={name: len(group) for name, group in by_subset.items() if group},
        overall=_mean(list(subsets.values())),
        complete=len(subsets) == len(SUBSETS),
        missing_scores=sum(is_missing(s) for r in rows for s in r.scores),
        ties=ties,
    )


_Row = TypeVar("_Row", RB2Row, ScoredRow)


def filter_subsets(rows: Sequence[_Row], subsets: Sequence[str] | None, source: str = "<data>") -> list[_Row]:
    """The rows of the named subsets (any case); an unknown name, or a known one without rows, is an ``InputError``."""
    if not subsets:
        return list(rows)
    wanted = [canonical_subset(s, "--subsets: ") for s in subsets]
    present = {r.subset for r in rows}
    absent = [s for s in wanted if s not in present]
    if absent:
        raise InputError(f"{source}: no rows of subset(s) {', '.join(absent)} (present: "
                         f"{', '.join(s for s in SUBSETS if s in present) or 'none'})")
    return [r for r in rows if r.subset in wanted]


def format_table(result: RB2Result) -> str:
    """Plain aligned text: one line per subset, scores in percent (as RewardBench reports them)."""
    width = max([len("overall"), *(len(s) for s in result.subsets)])
    lines = [f"{'subset':<{width}}  {'rows':>5}  {'score':>6}"]
    for name, score in result.subsets.items():
        lines.append(f"{name:<{width}}  {result.counts[name]:>5}  {100 * score:>6.1f}")
    total = sum(result.counts.values())
    lines.append(f"{'overall':<{width}}  {total:>5}  {100 * result.overall:>6.1f}")
    if not result.complete:
        lines.append(f"(overall averages the {len(result.subsets)} subsets present, not all six)")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- score files


def write_scores(path: str | Path, rows: Iterable[ScoredRow]) -> None:
    """One JSON line per row: ``id``, ``subset``, ``num_correct``, ``scores`` (chosen first)."""
    write_jsonl(path, (r.to_dict() for r in rows))


def _score_value(x: Any) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        raise ValueError  # Infinity would win every row (overall 100.0); a missing score is null
    return float(x)


def read_scores(path: str | Path) -> list[ScoredRow]:
    """Rows written by ``write_scores``; malformed lines raise ``InputError`` naming the line."""
    required = ["id", "subset", "num_correct", "scores"]
    rows = []
    for n, obj in enumerate(read_jsonl(path, required=required), start=1):
        where = f"{path}: row {n} (id {obj.get('id')!r})"
        raw = obj["scores"]
        try:
            if not isinstance(raw, list) or not raw:
                raise ValueError
            scores = tuple(_score_value(x) for x in raw)
        except ValueError:
            raise InputError(f"{where}: 'scores' must be a non-empty list of finite numbers or nulls") from None
        num_correct = obj["num_correct"]
        if isinstance(num_correct, bool) or not isinstance(num_correct, int) or not 1 <= num_correct < len(scores):
            raise InputError(f"{where}: 'num_correct' must be an integer from 1 to len(scores) - 1")
        subset = canonical_subset(obj["subset"], f"{where}: ")
        rows.append(ScoredRow(str(obj["id"]), subset, num_correct, scores))
    _check_ids(rows, path)
    return rows


def _check_ids(rows: Sequence[ScoredRow], path: str | Path) -> None:
    """A score file names each row once."""
    seen: set[str] = set()
    for row in rows:
        if row.id in seen:
            raise InputError(f"{path}: id {row.id!r} appears twice (one row per id)")
        seen.add(row.id)


def unpaired_tied(rows: Sequence[ScoredRow]) -> list[str]:
    """Prompt ids of Ties ``tied:`` rows without their ``ref:`` row. The official release scores them (in the tied
    accuracy only, out of P, H and M), so they are scored, and the CLI says how many there were."""
    ties = [_ties_key(r.id) for r in rows if is_ties(r.subset)]
    refs = {pid for kind, pid in ties if kind == "ref"}
    return [pid for kind, pid in ties if kind == "tied" and pid not in refs]


# ----------------------------------------------------------------------------- data


def _looks_like_hub_id(source: str) -> bool:
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+", source)) and not source.endswith((".parquet", ".json", ".jsonl"))


def _read_source(source: str) -> list[dict[str, Any]]:
    path = Path(source)
    if path.is_dir():
        files = sorted(path.rglob("*.parquet")) or sorted(path.rglob("*.jsonl"))
        if not files:
            raise InputError(f"{source}: a directory without .parquet or .jsonl files")
        return [rec for f in files for rec in _read_source(str(f))]
    if path.is_file():
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            try:
                return pq.read_table(path).to_pylist()
            except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds
                raise InputError(f"{source}: cannot read parquet ({str(e).splitlines()[0]})") from None
        return read_records(path)
    if _looks_like_hub_id(source):
        return _read_hub(source)
    raise InputError(f"{source}: no such file (give a .parquet, .json or .jsonl file, or the hub id {HUB_ID})")


def _read_hub(hub_id: str) -> list[dict[str, Any]]:
    """The ``test`` split from the Hugging Face hub: only when the user names a hub id."""
    try:
        from datasets import load_dataset

        return load_dataset(hub_id, split="test").to_list()
    except Exception as e:  # noqa: BLE001 - network, auth and schema errors all end here
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"cannot load '{hub_id}' (split test) from the Hugging Face hub: {reason}") from None


def _texts(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def parse_rows(records: Sequence[dict[str, Any]], source: str = "<data>") -> list[RB2Row]:
    """RewardBench 2 rows from records in its schema; raises ``InputError`` naming the bad row."""
    rows = []
    for n, rec in enumerate(records, start=1):
        where = f"{source}: row {n}"
        for key in ("id", "prompt", "chosen", "rejected", "subset"):
            if key not in rec or rec[key] is None:
                raise InputError(f"{where}: missing field '{key}'")
        where = f"{source}: row {n} (id {rec['id']!r})"
        chosen, rejected = _texts(rec["chosen"]), _texts(rec["rejected"])
        if not chosen or not rejected:
            raise InputError(f"{where}: 'chosen' and 'rejected' must be non-empty lists of strings")
        if not isinstance(rec["prompt"], str):
            raise InputError(f"{where}: 'prompt' must be a string")
        num_correct = rec.get("num_correct", len(chosen))
        total = len(chosen) + len(rejected)
        if isinstance(num_correct, bool) or not isinstance(num_correct, int) or not 1 <= num_correct < total:
            raise InputError(f"{where}: 'num_correct' must be an integer from 1 to the number of completions - 1")
        subset = canonical_subset(rec["subset"], f"{where}: ")
        rows.append(RB2Row(str(rec["id"]), rec["prompt"], subset, chosen, rejected, num_correct))
    return rows


def select_rows(rows: Sequence[RB2Row], subsets: Sequence[str] | None = None, limit: int | None = None) -> list[RB2Row]:
    """Rows of the named subsets (case-insensitive), at most ``limit`` per subset, in file order.

    For Ties, ``limit`` counts prompt ids, keeping both the ref and the tied row of each, so that
    the paired terms stay defined.
    """
    rows = filter_subsets(rows, subsets)
    if limit is None:
        return list(rows)
    if limit < 1:
        raise InputError("--limit must be at least 1")
    taken: dict[str, int] = defaultdict(int)
    ties_ids: list[str] = []
    out = []
    for r in rows:
        if is_ties(r.subset):
            pid = _ties_key(r.id)[1]
            if pid not in ties_ids:
                if len(ties_ids) >= limit:
                    continue
                ties_ids.append(pid)
            out.append(r)
        elif taken[r.subset] < limit:
            taken[r.subset] += 1
            out.append(r)
    return out


def load_rb2(source: str, subsets: Sequence[str] | None = None, limit: int | None = None) -> list[RB2Row]:
    """RewardBench 2 rows from a local .parquet/.json/.jsonl file (or a folder of them), or a hub id.

    The hub is tried only when ``source`` is not a local path and looks like ``owner/name``
    (e.g. ``allenai/reward-bench-2``).
    """
    return select_rows(filter_subsets(parse_rows(_read_source(source), source), subsets, source), None, limit)


# ----------------------------------------------------------------------------- runner


def run_rb2(
    rows: Sequence[RB2Row],
    judge: Judge,
    *,
    rubric_backend: Backend | None = None,
    rubric_params: SamplingParams | None = None,
    rubric_table: RubricTable | None = None,
    progress: bool = False,
    rubric_as_written: bool = False,
    rubric_prompt: str = "v3",
    rubric_retry_when: str = "unparsed",
) -> tuple[list[ScoredRow], RubricCoverage]:
    """Write (or look up) one rubric per prompt, then judge every completion in one batched call.

    ``rubric_as_written`` (``evolm eval rb2 --protocol paper``): the judge reads a written rubric as
    the model wrote it, as the authors' evaluation does, rather than the parsed rubric re-rendered.

    With neither ``rubric_backend`` nor ``rubric_table`` the judge scores alone (no-rubric
    baseline). A written rubric that does not parse (``rubric_retry_when="no_criteria_key"``, the paper protocol: whose
    text has no ``{"criteria":``) is written again at lower temperatures
    (``evolm.eval.rubric_source.RETRY_TEMPERATURES``); one that still does not parse leaves the
    judge alone for that prompt (or, ``rubric_as_written``, reads its raw text). Both counts are in the returned
    ``RubricCoverage``.
    """
    from evolm.judge.judge import JudgeItem

    texts: list[str | None] = []
    rubrics, coverage = prompt_rubrics(
        [r.id for r in rows], [r.prompt for r in rows], rubric_backend=rubric_backend,
        rubric_params=rubric_params, rubric_table=rubric_table, progress=progress, texts=texts, prompt=rubric_prompt,
        retry_when=rubric_retry_when,
    )
    shown = texts if rubric_as_written else [None] * len(rows)
    items = [JudgeItem(row.prompt, c, rubric, rubric_text=text)
             for row, rubric, text in zip(rows, rubrics, shown, strict=True) for c in row.completions]
    flat = [j.score for j in judge.score(items, progress=progress)] if items else []
    if len(flat) != len(items):
        raise RuntimeError(f"the judge returned {len(flat)} scores for {len(items)} completions")
    scored, i = [], 0
    for row in rows:
        n = len(row.completions)
        scored.append(ScoredRow(row.id, row.subset, row.num_correct, tuple(flat[i : i + n])))
        i += n
    return scored, coverage
