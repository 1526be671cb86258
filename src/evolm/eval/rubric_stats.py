"""How rubrics evolve: the criterion statistics the paper reports (docs/METHOD.md §3.3).

The paper finds that over training label-only criteria vanish (21.9% -> 0.3%), criteria with
embedded expected values and constraint criteria grow (6.9% -> 19.3%, 7.7% -> 20.3%), criteria
get longer (59 -> 112 characters), rubrics keep 3-4 criteria, and math rubrics put ~80% of the
weight on one answer check. This module measures the same things on any list of rubrics, and per
phase of a run from its samples.

The paper does not publish its classifier, so the three criterion classes are plain regexes,
written down here so that a number in a report can be traced to a rule:

- *specific value* (``SPECIFIC_VALUE``): the criterion names something an answer must match: a
  digit, quoted or code text, a LaTeX/math symbol, "equivalent/equal/identical to", "equals",
  "is exactly", "the final/correct answer is <value>", "option B".
- *constraint* (``CONSTRAINT``): the criterion checks an explicit requirement: must / must not /
  should not / never / avoid; exclude, omit, or include a keyword/phrase/section...; a length or
  count ("at most 100", "three paragraphs", "word count"); a concrete format (JSON, markdown,
  bullet points, table, uppercase, starts/ends with...); a named language.
- *label-only*: at most ``LABEL_MAX_WORDS`` whitespace-separated words and neither of the above
  ("Accuracy", "Clear explanation", "The final answer is correct").

Specific-value and constraint criteria may overlap ("At most 100 words" is both); label-only
excludes both. Rubrics are read with ``Rubric.from_obj``, so weights are normalised to sum to 1
before the largest weight is taken.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evolm.rubrics import Rubric
from evolm.runs.records import SAMPLES_DIR, read_lenient

LABEL_MAX_WORDS = 5
DOMINANT_WEIGHT = 0.7  # a rubric whose largest weight is >= this is "dominated" by one criterion
MAX_WEIGHT_BINS = (0.0, 0.3, 0.5, 0.7, 0.9)  # left edges of the largest-weight histogram

SPECIFIC_VALUE = re.compile(
    r"""
    \d                                         # any number: "408", "3.5 cm", "at most 100 words"
    | "[^"\n]+" | “[^”\n]+” | «[^»\n]+»        # double-quoted text
    | (?<![\w'])'[^'\n]+'(?![\w'])             # single-quoted text (apostrophes as in "answer's" are not quotes)
    | `[^`\n]+`                                # code span
    | \$[^$\n]+\$ | \\frac | \\sqrt | [=≈≤≥√π] # math written out
    | \b(?:equivalent|equal|identical)\s+to\b | \bequals\b | \bis\s+exactly\b
    | \b(?:final|expected|correct|right)\s+(?:answer|result|value|output)\s+(?:is|should\s+be|of|:)\s+
      (?!(?:correct|accurate|right|wrong|clear|valid|complete|clearly|explicitly|provided|given|stated|present|
          identified|reached|obtained|reasonable|consistent|justified|explained|supported|not|well|the\s+correct)\b)\w
    | \b(?:option|choice)\s+\(?[A-E]\)?(?!\w)   # a named multiple-choice answer
    """,
    re.VERBOSE | re.IGNORECASE,
)

_NUM = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|twenty|fifty|hundred)"
_LANGUAGES = r"(?:english|french|spanish|german|chinese|japanese|korean|italian|portuguese|russian|arabic|hindi|dutch)"

CONSTRAINT = re.compile(
    rf"""
    \bmust\b | \bmustn'?t\b | \bshould\s+not\b | \bshouldn'?t\b | \bnever\b      # modal requirements
    | \bavoid(?:s|ing)?\b | \brefrain(?:s|ing)?\b | \bwithout\s+(?:using|mentioning|any)\b
    | \bdo(?:es)?(?:\s+not|n'?t)\s+(?:use|include|contain|mention|exceed|repeat|add|start|end)\b
    | \bexclud\w* | \bomit\w*                                                       # exclude material
    | \b(?:includ|contain)\w*\b[^.]{{0,40}}?\b(?:keywords?|words?|phrases?|terms?|letters?|placeholders?|title
        |postscript|P\.S|sections?|highlights?|quotes?|quotations?|symbols?|emojis?|hashtags?)\b  # include material
    | \b(?:word\s+count|word\s+limit|character\s+limit|length\s+(?:limit|requirement|constraint)|limit(?:ed)?\s+to)\b
    | \b(?:at\s+(?:most|least)|no\s+(?:more|fewer|less)\s+than|fewer\s+than|less\s+than|more\s+than|exactly
        |under|up\s+to|maximum\s+of|minimum\s+of|between)\s+{_NUM}\b                # length and counts
    | \b{_NUM}\s+(?:words?|sentences?|paragraphs?|characters?|lines?|bullet|bullets|items?|sections?|pages?
        |stanzas?|examples?)\b
    | \b(?:json|markdown|yaml|csv|xml|html|bullet(?:ed)?\s+(?:points?|list)|bullets|numbered\s+list|table
        |headings?|headers?|bold|italics?|upper\s*case|lower\s*case|capital(?:s|ized|ization)?|all\s+caps
        |code\s+block|double\s+quotes|commas?|punctuation)\b  # concrete formats
    | \b(?:starts?|begins?|ends?|finish(?:es)?)\s+with\b
    | \b(?:wrap|enclos)\w*\b[^.]{{0,40}}?\b(?:brackets?|parenthes[ie]s|quotes|quotation\s+marks|asterisks|tags?)\b
    | \b{_LANGUAGES}\b | \bsame\s+language\b                                      # language
    """,
    re.VERBOSE | re.IGNORECASE,
)


def has_specific_value(criterion: str) -> bool:
    """Whether the criterion embeds a value an answer must match (see ``SPECIFIC_VALUE``).

    >>> has_specific_value("The final answer is equivalent to 408.")
    True
    >>> has_specific_value("Identifies the capital as 'Paris'.")
    True
    >>> has_specific_value("The final answer is Paris.")
    True
    >>> has_specific_value("The final answer is correct.")
    False
    >>> has_specific_value("Explains the answer's reasoning clearly.")
    False
    """
    return bool(SPECIFIC_VALUE.search(criterion))


def is_constraint(criterion: str) -> bool:
    """Whether the criterion checks an explicit format, length, inclusion or language requirement.

    >>> is_constraint("The response is at most 100 words long.")
    True
    >>> is_constraint("Uses bullet points for the list of steps.")
    True
    >>> is_constraint("Does not mention the company name.")
    True
    >>> is_constraint("Written entirely in French.")
    True
    >>> is_constraint("Explains photosynthesis accurately.")
    False
    >>> is_constraint("Formatting")
    False
    """
    return bool(CONSTRAINT.search(criterion))


def is_label_only(criterion: str) -> bool:
    """Whether the criterion is just a label: at most ``LABEL_MAX_WORDS`` words, no value, no constraint.

    >>> is_label_only("Accuracy")
    True
    >>> is_label_only("The final answer is correct")
    True
    >>> is_label_only("Answer equals 12")
    False
    >>> is_label_only("Uses bullet points")
    False
    >>> is_label_only("Explains each step of the derivation in order")
    False
    """
    return (
        len(criterion.split()) <= LABEL_MAX_WORDS and not has_specific_value(criterion) and not is_constraint(criterion)
    )


# ----------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class RubricStats:
    """Statistics of a set of rubrics. Shares are in [0, 1]; NaN where there is nothing to count."""

    n_rubrics: int  # rubrics that parsed
    n_unparsed: int  # inputs that held no rubric (null, invalid JSON, no criteria)
    n_criteria: int
    criteria_per_rubric: float
    criterion_chars: float  # mean characters per criterion text
    label_only: float  # share of criteria
    specific_value: float  # share of criteria
    constraint: float  # share of criteria
    max_weight: float  # mean over rubrics of the largest (normalised) weight
    dominant: float  # share of rubrics whose largest weight >= DOMINANT_WEIGHT
    max_weight_hist: dict[str, int] = field(default_factory=dict)  # bin label -> rubrics

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict (NaN becomes null)."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


def _bin_labels() -> list[str]:
    edges = [*MAX_WEIGHT_BINS, 1.0]
    return [f"{lo:.1f}-{hi:.1f}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def rubric_stats(rubrics: Iterable[Any]) -> RubricStats:
    """Statistics of rubrics given as ``Rubric``, dicts, JSON strings, or ``None`` (counted as unparsed).

    >>> s = rubric_stats([
    ...     {"criteria": [{"criterion": "Accuracy", "weight": 0.5}, {"criterion": "Clarity", "weight": 0.5}]},
    ...     {"criteria": [{"criterion": "The final answer is equivalent to 408.", "weight": 0.8},
    ...                   {"criterion": "Uses at most three sentences.", "weight": 0.2}]},
    ...     None,
    ... ])
    >>> (s.n_rubrics, s.n_unparsed, s.n_criteria, s.label_only, s.specific_value, s.constraint)
    (2, 1, 4, 0.5, 0.25, 0.25)
    >>> (round(s.max_weight, 2), s.dominant, s.max_weight_hist["0.7-0.9"])
    (0.65, 0.5, 1)
    """
    parsed: list[Rubric] = []
    n_unparsed = 0
    for obj in rubrics:
        r = None if obj is None else Rubric.from_obj(obj)
        if r is None or not r.criteria:
            n_unparsed += 1
        else:
            parsed.append(r)
    texts = [c.criterion for r in parsed for c in r.criteria]
    max_ws = [max(c.weight for c in r.criteria) for r in parsed]
    labels = _bin_labels()
    hist = dict.fromkeys(labels, 0)
    for w in max_ws:
        i = max(j for j, lo in enumerate(MAX_WEIGHT_BINS) if w >= lo - 1e-9)
        hist[labels[i]] += 1
    def share(pred: Callable[[str], bool]) -> float | None:
        return _mean([1.0 if pred(t) else 0.0 for t in texts])

    return RubricStats(
        n_rubrics=len(parsed),
        n_unparsed=n_unparsed,
        n_criteria=len(texts),
        criteria_per_rubric=_mean([len(r.criteria) for r in parsed]),
        criterion_chars=_mean([len(t) for t in texts]),
        label_only=share(is_label_only),
        specific_value=share(has_specific_value),
        constraint=share(is_constraint),
        max_weight=_mean(max_ws),
        dominant=_mean([1.0 if w >= DOMINANT_WEIGHT - 1e-9 else 0.0 for w in max_ws]),
        max_weight_hist=hist,
    )


# ----------------------------------------------------------------------------- run directories

_SAMPLE_FILE = re.compile(r"^phase-(\d+)-(\w+)\.jsonl$")


@dataclass
class RunSamples:
    """Sample rows of a run, by (phase, role), read leniently: a crash may leave a torn last line."""

    rows: dict[tuple[int, str], list[dict[str, Any]]] = field(default_factory=dict)
    skipped_lines: int = 0  # lines that were not a JSON object (torn by a crash, or corrupt)


def read_samples(run_dir: str | Path) -> RunSamples:
    """Every ``samples/phase-XXX-<role>.jsonl`` of a run; an absent folder gives no rows, never an error."""
    out = RunSamples()
    folder = Path(run_dir) / SAMPLES_DIR
    if not folder.is_dir():
        return out
    for path in sorted(folder.iterdir()):
        m = _SAMPLE_FILE.match(path.name)
        if not m:
            continue
        read = read_lenient(path)
        out.skipped_lines += read.skipped
        rows = read.rows
        out.rows[(int(m.group(1)), m.group(2))] = rows
    return out


@dataclass(frozen=True)
class PhaseRubricStats:
    """Rubric statistics of one phase. ``source`` says whose rubrics these are.

    ``rubric``: the rubrics being trained in a rubric phase (one per sampled completion, null ones
    counted as unparsed). ``policy``: the rubrics written to judge a policy phase's questions (one
    per step and question, however many answers shared it).
    """

    phase: int
    cycle: int | None
    source: str
    stats: RubricStats
    flat_criteria: float | None = None  # share of criteria that did not separate the answers they judged (samples)

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "cycle": self.cycle, "source": self.source, **self.stats.to_json(),
                "flat_criteria": self.flat_criteria}


def phase_rubric_stats(samples: RunSamples) -> list[PhaseRubricStats]:
    """Rubric statistics for each (phase, role) file of a run's samples, in phase order."""
    out = []
    for (phase, role), rows in sorted(samples.rows.items()):
        if role == "policy":
            seen: dict[tuple[Any, str], Any] = {}
            for row in rows:
                seen.setdefault((row.get("step"), str(row.get("question"))), row.get("rubric"))
            rubrics = list(seen.values())
        else:
            rubrics = [row.get("rubric") for row in rows]
        if not rubrics:
            continue
        cycle = next((row["cycle"] for row in rows if isinstance(row.get("cycle"), int)), None)
        out.append(PhaseRubricStats(phase, cycle, role, rubric_stats(rubrics), flat_share(rows, role)))
    return out


def flat_share(rows: Sequence[dict[str, Any]], role: str) -> float | None:
    """The share of criteria whose value spans less than ``rewards.FLAT_SPREAD`` across the answers they judged, from
    the per-criterion values samples keep (``criteria``; rubric rows: ``criteria_pos`` / ``criteria_neg``): a policy
    step's answers to one question, a rubric row's pair. ``None`` when the samples have no such values (a judge mode
    without criteria, or a run from before they were written). The samples files may hold only part of a step
    (``schedule.samples_logged_per_step``); training logs the whole step's share (``flat_criteria`` in metrics.jsonl).

    >>> c = lambda *v: [{"text": "c", "weight": 0.5, "value": x} for x in v]
    >>> flat_share([{"criteria_pos": c(0.9, 0.5), "criteria_neg": c(0.2, 0.52)}], "rubric")
    0.5
    """
    from evolm.rewards import FLAT_SPREAD

    units: dict[Any, list[list[Any]]] = {}
    for i, row in enumerate(rows):
        if role == "policy":
            answers = [row.get("criteria")]
            key: Any = (row.get("step"), row.get("slot"), str(row.get("question")))
        else:
            answers, key = [row.get("criteria_pos"), row.get("criteria_neg")], i
        for a in answers:
            if isinstance(a, list) and a:
                units.setdefault(key, []).append([c.get("value") if isinstance(c, dict) else None for c in a])
    flat = total = 0
    for answers in units.values():
        if len(answers) < 2 or len({len(a) for a in answers}) != 1:
            continue
        for k in range(len(answers[0])):
            values = [a[k] for a in answers if isinstance(a[k], int | float) and not isinstance(a[k], bool)]
            if len(values) >= 2:
                total += 1
                flat += max(values) - min(values) < FLAT_SPREAD
    return flat / total if total else None


def run_rubric_stats(run_dir: str | Path) -> list[PhaseRubricStats]:
    """``phase_rubric_stats`` of a run directory's samples."""
    return phase_rubric_stats(read_samples(run_dir))


# ----------------------------------------------------------------------------- text table

_COLUMNS = (
    ("rubrics", "n_rubrics", "{:d}"),
    ("crit/rub", "criteria_per_rubric", "{:.2f}"),
    ("chars", "criterion_chars", "{:.1f}"),
    ("label%", "label_only", "{:.1%}"),
    ("value%", "specific_value", "{:.1%}"),
    ("constr%", "constraint", "{:.1%}"),
    ("max w", "max_weight", "{:.2f}"),
    ("w>=0.7", "dominant", "{:.1%}"),
    ("flat%", "flat_criteria", "{:.1%}"),
)


def format_table(rows: Sequence[dict[str, Any]], keys: Sequence[str] = ()) -> str:
    """A fixed-width text table of ``RubricStats.to_json``-like rows, with leading ``keys`` columns."""
    header = [*keys, *(name for name, _, _ in _COLUMNS)]
    body = []
    for row in rows:
        cells = ["-" if row.get(k) is None else str(row[k]) for k in keys]
        for _, key, fmt in _COLUMNS:
            v = row.get(key)
            cells.append("-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v))
        body.append(cells)
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(str(c).rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in [header, *body]]
    return "\n".join(lines)
