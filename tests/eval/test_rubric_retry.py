"""The rubric-writing retry ladder: a rubric that does not parse is written again at 0.3, then 0.1."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from rb2_fakes import RUBRIC, FakeBackend

from evolm.backends.base import Conversation, SamplingParams
from evolm.eval import rb2
from evolm.eval.rubric_source import RETRY_TEMPERATURES, prompt_rubrics, write_prompt_rubrics
from evolm.judge.judge import Judge
from evolm.rubrics import RUBRIC_SYSTEM_PROMPT


class TemperatureBackend:
    """Writes a parseable rubric only when sampling is cool enough for the question.

    A question containing ``[parses at T]`` gets the rubric at temperatures <= T and broken JSON
    above; ``[never]`` never parses. Every call is recorded as (questions, params).
    """

    name = "temperature-fake"

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], SamplingParams]] = []

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams, *, progress: bool = False) -> list[str]:
        assert all(c[0]["content"].startswith(RUBRIC_SYSTEM_PROMPT) for c in conversations)
        questions = [c[-1]["content"] for c in conversations]
        self.calls.append((questions, params))
        out = []
        for q in questions:
            m = re.search(r"\[parses at ([\d.]+)\]", q)
            good = m is not None and params.temperature <= float(m.group(1)) + 1e-9
            out.append(json.dumps(RUBRIC) if good else '{"criteria": [ {"criterion": "cut off')
        return out


RB2_SMALL = Path(__file__).resolve().parents[1] / "fixtures" / "rb2_small.jsonl"
QUESTIONS = ["Q1 [parses at 0.6]", "Q2 [parses at 0.3]", "Q3 [parses at 0.1]", "Q4 [never]"]
PAPER = SamplingParams(0.6, 0.95, 1024, 7)


def test_unparsed_rubrics_are_retried_at_0_3_then_0_1():
    assert RETRY_TEMPERATURES == (0.3, 0.1)
    backend = TemperatureBackend()
    rubrics, coverage = write_prompt_rubrics(backend, QUESTIONS, PAPER)
    # one batched call per rung, each over the prompts still without a parsed rubric
    asked = [([re.search(r"Q\d", q).group() for q in qs], p.temperature) for qs, p in backend.calls]
    assert asked == [(["Q1", "Q2", "Q3", "Q4"], 0.6), (["Q2", "Q3", "Q4"], 0.3), (["Q3", "Q4"], 0.1)]
    # the retries change the temperature only
    assert all((p.top_p, p.max_new_tokens, p.seed) == (0.95, 1024, 7) for _, p in backend.calls)
    assert [r is not None for r in rubrics] == [True, True, True, False]
    assert coverage.to_dict() == {"source": "written", "prompts": 4, "parsed": 3, "unparsed": 1, "valid": 3, "retried": 3}


def test_paper_protocol_retries_only_replies_without_a_criteria_key():
    """As the authors' evaluation judge (RubricJudge._is_valid_rubric): a reply is written again when its text,
    thinking stripped, has no {"criteria": ; cut-off JSON that has one is kept, unparsed."""
    calls: list[tuple[list[str], float]] = []

    class Writer:
        name = "paper-retry-fake"

        def generate(self, conversations, params, *, progress=False):  # noqa: ANN001, ANN202
            questions = [c[-1]["content"].split("\n")[-1] for c in conversations]  # after "Question:"
            calls.append((questions, params.temperature))
            prose = '<think>{"criteria": only in thought</think>I would grade on clarity.'
            return ['{"criteria": [ {"criterion": "cut off' if q == "cut" else
                    json.dumps(RUBRIC) if q == "good" or params.temperature <= 0.3 else prose for q in questions]

    rubrics, coverage = write_prompt_rubrics(Writer(), ["good", "cut", "prose"], PAPER, retry_when="no_criteria_key")
    assert calls == [(["good", "cut", "prose"], 0.6), (["prose"], 0.3)]
    assert [r is not None for r in rubrics] == [True, False, True] and coverage.retried == 1


def test_no_retry_when_every_rubric_parses_and_duplicates_are_written_once():
    backend = TemperatureBackend()
    rubrics, coverage = write_prompt_rubrics(backend, ["A [parses at 0.6]", "B [parses at 0.6]", "A [parses at 0.6]"], PAPER)
    assert [p.temperature for _, p in backend.calls] == [0.6]
    assert (coverage.prompts, coverage.parsed, coverage.retried) == (2, 2, 0)
    assert rubrics[0] is rubrics[2]


def test_the_ladder_stops_as_soon_as_everything_parses():
    backend = TemperatureBackend()
    _, coverage = write_prompt_rubrics(backend, ["A [parses at 0.6]", "B [parses at 0.3]"], PAPER)
    assert [p.temperature for _, p in backend.calls] == [0.6, 0.3]
    assert (coverage.parsed, coverage.retried) == (2, 1)


def test_prompt_rubrics_defaults_to_the_paper_temperature_first():
    backend = TemperatureBackend()
    _, coverage = prompt_rubrics([None] * 4, QUESTIONS, rubric_backend=backend)
    assert [p.temperature for _, p in backend.calls] == [0.6, 0.3, 0.1]
    assert coverage.retried == 3


def test_run_rb2_uses_the_ladder_and_judges_with_the_retried_rubrics():
    rows = rb2.load_rb2(str(RB2_SMALL))
    writer = TemperatureBackend()
    # every prompt's rubric parses only at 0.1: the judge still gets a rubric for every prompt
    rows = [rb2.RB2Row(r.id, r.prompt + " [parses at 0.1]", r.subset, r.chosen, r.rejected, r.num_correct) for r in rows]
    scored, coverage = rb2.run_rb2(rows, Judge(FakeBackend(), mode="prob"), rubric_backend=writer, rubric_params=PAPER)
    assert [p.temperature for _, p in writer.calls] == [0.6, 0.3, 0.1]
    assert (coverage.prompts, coverage.parsed, coverage.retried) == (10, 10, 10)
    assert scored[0].scores == pytest.approx((1.0, 1 / 9, 1 / 9, 1 / 9))  # judged with the rubric, not alone
