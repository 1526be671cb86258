"""RewardBench 2 with a rubric writer and a judge as the reward model (docs/METHOD.md §3.1): its data, score files and
the run. One rubric per prompt, written from the prompt alone (all in one batched call, with retries for those that
did not parse: ``evolm.eval.rubric_source``); every completion is then judged separately reading that rubric (or
alone, the no-rubric baseline), all in one ``Judge.score`` call so that a backend shares a prompt's prefix across its
completions. The official scoring is ``evolm.eval.rb2_scoring``.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from evolm.backends.base import Backend, SamplingParams
from evolm.errors import InputError
from evolm.eval.rb2_scoring import SUBSETS, ScoredRow, canonical_subset, is_ties, ties_key
from evolm.eval.rubric_source import RubricCoverage, RubricTable, prompt_rubrics
from evolm.runs.jsonl import read_jsonl, read_records, write_jsonl

if TYPE_CHECKING:
    from evolm.judge.judge import Judge

HUB_ID = "allenai/reward-bench-2"


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
            pid = ties_key(r.id)[1]
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
