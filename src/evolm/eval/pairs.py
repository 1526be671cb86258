"""Pairwise accuracy of a rubric writer + judge (or the judge alone) on preference pairs.

Each answer of a pair is scored separately, from the same rubric (written once per distinct
prompt, from the prompt alone), like in training and in RewardBench 2. A pair earns 1 when the
better answer scores strictly higher, 0 when it scores lower, and 1/2 on a tie; a missing score
(either answer) also counts as a tie, 1/2: the judge expressed no preference, and reading it as
a loss or a win would move the accuracy for reasons unrelated to the rubric. Chance is 0.5.

Accepted records (formats may mix within a file; ``.gz`` files are read too):

- LLMBar: ``{input, output_1, output_2, label}`` with ``label`` 1 or 2 naming the better output
  (a JSON list, as in ``princeton-nlp/LLMBar``);
- ``{prompt, chosen, rejected}`` (UltraFeedback-style; a message list keeps its last message);
- temporal pairs saved by a training run: ``{question, a_pos, a_neg}``;
- HH-RLHF: ``{chosen, rejected}`` whole dialogues, split at the last ``\\n\\nAssistant:``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolm.backends.base import Backend, SamplingParams
from evolm.errors import InputError
from evolm.eval.rubric_source import RubricCoverage, prompt_rubrics
from evolm.runs.jsonl import read_records
from evolm.scores import is_missing
from evolm.stats import wilson

if TYPE_CHECKING:
    from evolm.judge.judge import Judge


@dataclass(frozen=True)
class PreferencePair:
    """A prompt and two answers, the first one better (labelled data, unlike training's ``contrast.Pair``)."""

    prompt: str
    better: str
    worse: str


# ----------------------------------------------------------------------------- scoring (pure)


def pair_credit(s_better: float | None, s_worse: float | None) -> float:
    """1 if the better answer scores higher, 0 if lower, 1/2 on a tie or a missing score.

    >>> pair_credit(0.8, 0.3), pair_credit(0.3, 0.8), pair_credit(0.5, 0.5), pair_credit(None, 0.2)
    (1.0, 0.0, 0.5, 0.5)
    """
    if is_missing(s_better) or is_missing(s_worse):
        return 0.5
    assert s_better is not None and s_worse is not None
    return 1.0 if s_better > s_worse else 0.0 if s_better < s_worse else 0.5


@dataclass(frozen=True)
class FileResult:
    """Accuracy on one file, with its wins, ties and losses (a missing score is a tie)."""

    pairs: int
    accuracy: float
    wins: int
    ties: int
    losses: int
    missing: int  # pairs with at least one missing score (counted among the ties)

    @property
    def interval(self) -> tuple[float, float] | None:
        """95% interval of the accuracy (Wilson, ``report.intervals.wilson``, over the pairs); ``None`` for no pairs.

        >>> [round(x, 3) for x in FileResult(10, 0.8, 8, 0, 2, 0).interval]
        [0.49, 0.943]
        """
        return wilson(self.accuracy, self.pairs)

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "accuracy": self.accuracy,
                "ci95": list(self.interval) if self.interval else None, "wins": self.wins, "ties": self.ties,
                "losses": self.losses, "missing": self.missing}


def summarize(scores: Sequence[tuple[float | None, float | None]]) -> FileResult:
    """Accuracy of (better score, worse score) pairs.

    >>> summarize([(0.9, 0.1), (0.2, 0.4), (0.5, 0.5), (None, 0.3)]).accuracy
    0.5
    """
    credits = [pair_credit(b, w) for b, w in scores]
    return FileResult(
        pairs=len(credits),
        accuracy=sum(credits) / len(credits) if credits else 0.0,
        wins=sum(c == 1.0 for c in credits),
        ties=sum(c == 0.5 for c in credits),
        losses=sum(c == 0.0 for c in credits),
        missing=sum(is_missing(b) or is_missing(w) for b, w in scores),
    )


@dataclass
class PairsResult:
    """Accuracy per file and in total (over all pairs pooled); ``mean_of_files`` weighs files equally."""

    files: dict[str, FileResult]
    total: FileResult
    rubrics: RubricCoverage
    items: list[dict[str, Any]] = field(default_factory=list)
    """One row per pair, in input order: its file, prompt, answers, both scores and its credit (``--save-scores``)."""

    @property
    def mean_of_files(self) -> float:
        return sum(f.accuracy for f in self.files.values()) / len(self.files) if self.files else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": {name: f.to_dict() for name, f in self.files.items()},
            "total": self.total.to_dict(),
            "mean_of_files": self.mean_of_files,
            "rubrics": self.rubrics.to_dict(),
        }


def format_table(result: PairsResult) -> str:
    """Plain aligned text: one line per file (by base name), then the total; accuracy in percent."""
    names = {name: Path(name).name for name in result.files}
    if len(set(names.values())) < len(names):
        names = {name: name for name in result.files}
    width = max([len("total"), *(len(n) for n in names.values())])
    lines = [f"{'file':<{width}}  {'pairs':>6}  {'accuracy':>8}  {'95% CI':>13}  {'ties':>5}"]
    for name, f in [*((names[n], f) for n, f in result.files.items()), ("total", result.total)]:
        lines.append(f"{name:<{width}}  {f.pairs:>6}  {100 * f.accuracy:>8.1f}  {percent_interval(f.interval):>13}  "
                     f"{f.ties:>5}")
    return "\n".join(lines)


def percent_interval(interval: tuple[float, float] | None) -> str:
    """An interval in percent, one decimal: ``[47.1, 75.8]``; ``-`` for none.

    >>> percent_interval((0.471, 0.758)), percent_interval(None)
    ('[47.1, 75.8]', '-')
    """
    return f"[{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]" if interval else "-"


# ----------------------------------------------------------------------------- loading


def _text(value: Any) -> str | None:
    """A string, or the content of the last message of a chat message list."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[-1], dict) and isinstance(value[-1].get("content"), str):
        return value[-1]["content"]
    return None


_ASSISTANT = "\n\nAssistant:"


def _split_dialogue(text: str) -> tuple[str, str] | None:
    cut = text.rfind(_ASSISTANT)
    if cut < 0:
        return None
    return text[:cut].strip(), text[cut + len(_ASSISTANT) :].strip()


def pair_from_record(rec: dict[str, Any], where: str = "<record>") -> PreferencePair:
    """A ``PreferencePair`` from any accepted record format; ``InputError`` (naming ``where``) otherwise."""
    if {"input", "output_1", "output_2", "label"} <= rec.keys():
        label = rec["label"]
        label = int(label) if isinstance(label, str) and label.strip() in ("1", "2") else label
        if label not in (1, 2) or isinstance(label, bool):
            raise InputError(f"{where}: LLMBar 'label' must be 1 or 2, got {rec['label']!r}")
        a, b = rec["output_1"], rec["output_2"]
        better, worse = (a, b) if label == 1 else (b, a)
        fields = (rec["input"], better, worse)
    elif {"question", "a_pos", "a_neg"} <= rec.keys():
        fields = (rec["question"], rec["a_pos"], rec["a_neg"])
    elif {"prompt", "chosen", "rejected"} <= rec.keys():
        fields = (_text(rec["prompt"]), _text(rec["chosen"]), _text(rec["rejected"]))
    elif {"chosen", "rejected"} <= rec.keys() and isinstance(rec["chosen"], str) and isinstance(rec["rejected"], str):
        c, r = _split_dialogue(rec["chosen"]), _split_dialogue(rec["rejected"])
        if c is None or r is None:
            raise InputError(f"{where}: 'chosen'/'rejected' without 'prompt' must be HH-RLHF dialogues "
                             f"(with '{_ASSISTANT.strip()}')")
        fields = (c[0], c[1], r[1])
    else:
        raise InputError(
            f"{where}: unknown pair format (keys {sorted(rec)}); expected input/output_1/output_2/label, "
            "prompt/chosen/rejected or question/a_pos/a_neg"
        )
    if not all(isinstance(f, str) for f in fields):
        raise InputError(f"{where}: the prompt and both answers must be strings")
    return PreferencePair(*fields)  # type: ignore[arg-type]


def load_pairs(path: str | Path, limit: int | None = None) -> list[PreferencePair]:
    """The first ``limit`` pairs (all when ``None``) of one file."""
    if limit is not None and limit < 1:
        raise InputError("--limit must be at least 1")
    records = read_records(path)[:limit]
    if not records:
        raise InputError(f"{path}: no pairs (an empty file scores no accuracy at all)")
    return [pair_from_record(rec, f"{path}: record {n}") for n, rec in enumerate(records, start=1)]


# ----------------------------------------------------------------------------- runner


def run_pairs(
    files: Mapping[str, Sequence[PreferencePair]],
    judge: Judge,
    *,
    rubric_backend: Backend | None = None,
    rubric_params: SamplingParams | None = None,
    progress: bool = False,
    rubric_prompt: str = "v3",
) -> PairsResult:
    """Accuracy of the judge (with one rubric per distinct prompt, if ``rubric_backend``) on every file.

    All rubrics are written in one batched call and all answers of all files judged in one
    ``Judge.score`` call (the two answers of a pair next to each other, sharing their prefix).
    """
    from evolm.judge.judge import JudgeItem

    flat = [p for pairs in files.values() for p in pairs]
    prompts = [p.prompt for p in flat]
    rubrics, coverage = prompt_rubrics(
        [None] * len(flat), prompts, rubric_backend=rubric_backend, rubric_params=rubric_params, progress=progress,
        prompt=rubric_prompt,
    )
    items = [JudgeItem(p.prompt, a, r, group=n)  # group: a listwise judge lists the two answers of a pair together
             for n, (p, r) in enumerate(zip(flat, rubrics, strict=True)) for a in (p.better, p.worse)]
    scores = [j.score for j in judge.score(items, progress=progress)] if items else []
    if len(scores) != len(items):
        raise RuntimeError(f"the judge returned {len(scores)} scores for {len(items)} answers")
    pair_scores = list(zip(scores[0::2], scores[1::2], strict=True))
    results, i = {}, 0
    for name, pairs in files.items():
        results[name] = summarize(pair_scores[i : i + len(pairs)])
        i += len(pairs)
    names = [name for name, pairs in files.items() for _ in pairs]
    items_out = [{"file": name, "prompt": p.prompt, "chosen": p.better, "rejected": p.worse, "score_chosen": b,
                  "score_rejected": w, "credit": pair_credit(b, w)}
                 for name, p, (b, w) in zip(names, flat, pair_scores, strict=True)]
    return PairsResult(results, summarize(pair_scores), coverage, items_out)
