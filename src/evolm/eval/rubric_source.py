"""Where an evaluation's rubrics come from: written by a model from the prompt alone, read from a file, or none.

RewardBench 2 and the preference-pair accuracy both need one rubric per distinct prompt, and
both report how many of those rubrics parsed (an unparsed one leaves the judge alone on that
prompt), so the three sources and that count live here once.

A written rubric that does not parse is written again, as the reference evaluation does: the
first attempt uses the given sampling (the paper's temperature 0.6), then the prompts still
without a parsed rubric are retried at temperature 0.3, then at 0.1 (``RETRY_TEMPERATURES``).
Cooler sampling mostly repairs broken JSON, so judging a prompt alone stays the exception.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evolm.backends.base import Backend, SamplingParams
from evolm.backends.replies import strip_thinking
from evolm.errors import InputError
from evolm.rubrics import Rubric, WrittenRubric, write_rubrics
from evolm.runs.jsonl import read_jsonl

RETRY_TEMPERATURES: tuple[float, ...] = (0.3, 0.1)  # after the first attempt, for prompts whose rubric did not parse
_CRITERIA_KEY = re.compile(r'\{\s*"criteria"\s*:')


def needs_retry(written: WrittenRubric, when: str = "unparsed") -> bool:
    """Whether a written rubric is written again: ``unparsed`` when it does not parse; ``no_criteria_key`` (the
    authors' evaluation judge, ``RubricJudge._is_valid_rubric``) when its text, thinking stripped, has no
    ``{"criteria":`` (a rubric with that key that still does not parse is kept; one that parses without it is not).

    >>> from evolm.rubrics import read_written
    >>> needs_retry(read_written('{"criteria": [oops'), "no_criteria_key"), needs_retry(read_written("none"))
    (False, True)
    """
    if when == "no_criteria_key":
        return not _CRITERIA_KEY.search(strip_thinking(written.text))
    return written.rubric is None


@dataclass(frozen=True)
class RubricCoverage:
    """Where the rubrics came from and how many prompts got one that parsed (the others: judge alone)."""

    source: str  # "written", "file" or "none"
    prompts: int  # distinct prompts
    parsed: int  # of which have a usable rubric
    valid: int | None = None  # of which are well-formed (format_validity), for written rubrics
    retried: int | None = None  # written rubrics whose first attempt did not parse (written again at 0.3, then 0.1)

    def to_dict(self) -> dict[str, Any]:
        out = {"source": self.source, "prompts": self.prompts, "parsed": self.parsed,
               "unparsed": self.prompts - self.parsed}
        if self.valid is not None:
            out["valid"] = self.valid
        if self.retried is not None:
            out["retried"] = self.retried
        return out


def write_prompt_rubrics(
    backend: Backend, prompts: Sequence[str], params: SamplingParams, progress: bool = False,
    texts: list[str | None] | None = None, prompt: str = "v3", retry_when: str = "unparsed",
) -> tuple[list[Rubric | None], RubricCoverage]:
    """One rubric per distinct prompt, aligned back to ``prompts``.

    One batched call with ``params``, then one batched call per temperature of
    ``RETRY_TEMPERATURES`` over the prompts whose rubric has not parsed yet (``retry_when``: ``needs_retry``;
    other settings kept).
    A prompt keeps its last attempt, so ``valid`` counts the rubrics finally used. ``texts``, when
    given, receives each prompt's rubric as the model wrote it (what a judge reading the raw text sees).
    """
    distinct = list(dict.fromkeys(prompts))
    written: list[WrittenRubric] = write_rubrics(backend, distinct, params, progress, prompt) if distinct else []
    retry = [i for i, w in enumerate(written) if needs_retry(w, retry_when)]
    retried = len(retry)
    for temperature in RETRY_TEMPERATURES:
        if not retry:
            break
        cooler = replace(params, temperature=temperature)
        again = write_rubrics(backend, [distinct[i] for i in retry], cooler, progress, prompt)
        for i, w in zip(retry, again, strict=True):
            written[i] = w
        retry = [i for i in retry if needs_retry(written[i], retry_when)]
    by_prompt = {p: w.rubric for p, w in zip(distinct, written, strict=True)}
    if texts is not None:
        as_written = {p: w.text for p, w in zip(distinct, written, strict=True)}
        texts[:] = [as_written[p] for p in prompts]
    coverage = RubricCoverage("written", len(distinct), sum(r is not None for r in by_prompt.values()),
                              valid=int(sum(w.valid for w in written)), retried=retried)
    return [by_prompt[p] for p in prompts], coverage


@dataclass(frozen=True)
class RubricTable:
    """Rubrics written earlier (``evolm rubric`` output), looked up by row id, then by prompt text."""

    by_id: dict[str, Rubric | None]
    by_prompt: dict[str, Rubric | None]
    source: str = "<rubrics>"

    def lookup(self, row_id: str | None, prompt: str) -> Rubric | None:
        if row_id is not None and row_id in self.by_id:
            return self.by_id[row_id]
        if prompt in self.by_prompt:
            return self.by_prompt[prompt]
        label = f"id {row_id!r}, " if row_id is not None else ""
        raise InputError(f"{self.source}: no rubric for {label}prompt {prompt[:60]!r}")


def read_rubric_table(path: str | Path) -> RubricTable:
    """JSONL lines with ``rubric`` (object, JSON string or null) and ``id`` and/or ``prompt``."""
    by_id: dict[str, Rubric | None] = {}
    by_prompt: dict[str, Rubric | None] = {}
    for n, obj in enumerate(read_jsonl(path, required=["rubric"]), start=1):
        if obj.get("id") is None and not isinstance(obj.get("prompt"), str):
            raise InputError(f"{path}: row {n} has neither 'id' nor 'prompt'")
        rubric = None if obj["rubric"] is None else Rubric.from_obj(obj["rubric"])
        if obj.get("id") is not None:
            by_id[str(obj["id"])] = rubric
        if isinstance(obj.get("prompt"), str):
            by_prompt[obj["prompt"]] = rubric
    return RubricTable(by_id, by_prompt, str(path))


def table_rubrics(
    table: RubricTable, ids: Sequence[str | None], prompts: Sequence[str]
) -> tuple[list[Rubric | None], RubricCoverage]:
    """The rubric of each prompt from ``table``; ``InputError`` when one has none."""
    rubrics = [table.lookup(i, p) for i, p in zip(ids, prompts, strict=True)]
    distinct = {p: r for p, r in zip(prompts, rubrics, strict=True)}
    return rubrics, RubricCoverage("file", len(distinct), sum(r is not None for r in distinct.values()))


def prompt_rubrics(
    ids: Sequence[str | None],
    prompts: Sequence[str],
    *,
    rubric_backend: Backend | None = None,
    rubric_params: SamplingParams | None = None,
    rubric_table: RubricTable | None = None,
    progress: bool = False,
    texts: list[str | None] | None = None,
    prompt: str = "v3",
    retry_when: str = "unparsed",
) -> tuple[list[Rubric | None], RubricCoverage]:
    """The rubric of each prompt: written by ``rubric_backend`` (with the rubric prompt ``prompt``; a rubric
    ``needs_retry(retry_when)`` says to write again is), read from ``rubric_table``, or none.

    ``texts``, when given, receives the written rubrics as the model wrote them (``None`` each for a
    file's rubrics or none)."""
    if texts is not None:
        texts[:] = [None] * len(prompts)
    if rubric_backend is not None and rubric_table is not None:
        raise InputError("give either a rubric model or a rubric file, not both")
    if rubric_backend is not None:
        params = rubric_params or SamplingParams(0.6, 0.95, 1024, 0)
        return write_prompt_rubrics(rubric_backend, prompts, params, progress, texts, prompt, retry_when)
    if rubric_table is not None:
        return table_rubrics(rubric_table, ids, prompts)
    return [None] * len(prompts), RubricCoverage("none", len(set(prompts)), 0)
