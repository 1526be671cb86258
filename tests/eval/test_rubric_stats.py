"""Rubric statistics (docs/METHOD.md §3.3): criterion classes on hand-written criteria, aggregates, per-phase, CLI."""

from __future__ import annotations

import doctest
import json
import math

import pytest

from evolm.cli import main
from evolm.eval import rubric_stats as rs
from evolm.eval.rubric_stats import (
    RunSamples,
    has_specific_value,
    is_constraint,
    is_label_only,
    phase_rubric_stats,
    read_samples,
    rubric_stats,
)

# criterion -> (label-only, specific value, constraint), classified by hand
CRITERIA = {
    "Accuracy": (True, False, False),
    "Clarity and coherence": (True, False, False),
    "Helpfulness of the response": (True, False, False),
    "The final answer is correct.": (True, False, False),
    "Formatting": (True, False, False),
    "Appropriate length": (True, False, False),
    "The response directly addresses every part of the question": (False, False, False),
    "The final answer is equivalent to x = 3.": (False, True, False),
    "The final answer is Paris.": (False, True, False),
    "Identifies option C as the correct choice.": (False, True, False),
    "States that the treaty was signed in 1919.": (False, True, False),
    "Uses the term 'photosynthesis' correctly.": (False, True, False),
    "Gives $\\frac{1}{2}$ as the probability.": (False, True, False),
    "Explains the answer's reasoning clearly and in logical order.": (False, False, False),
    "The response is at most 100 words.": (False, True, True),
    "Includes the keyword \"ocean\" at least twice.": (False, True, True),
    "The whole response is in lowercase letters.": (False, False, True),
    "Uses bullet points": (False, False, True),
    "Does not mention the competitor by name.": (False, False, True),
    "Must cite at least three sources.": (False, False, True),
    "Written in the same language as the question.": (False, False, True),
    "Responds entirely in Spanish.": (False, False, True),
    "Ends with a question to the reader.": (False, False, True),
    "Wraps the title in double angular brackets.": (False, False, True),
    "Lists the main causes of the First World War.": (False, False, False),
    "Avoids harmful content": (False, False, True),
    "Gives three examples of renewable energy sources.": (False, False, True),
}


@pytest.mark.parametrize("criterion,expected", CRITERIA.items())
def test_criterion_classes(criterion, expected):
    assert (is_label_only(criterion), has_specific_value(criterion), is_constraint(criterion)) == expected


def test_doctests():
    result = doctest.testmod(rs)
    assert result.attempted >= 15 and result.failed == 0


def _rubric(*pairs: tuple[str, float]) -> dict:
    return {"criteria": [{"criterion": c, "weight": w, "scoring_levels": {"1.0": "yes", "0.0": "no"}} for c, w in pairs]}


def test_rubric_stats_hand_computed():
    rubrics = [
        _rubric(("Accuracy", 0.4), ("Clarity", 0.3), ("Completeness", 0.3)),  # 3 labels, max 0.4
        _rubric(("The final answer is equivalent to 408.", 0.8), ("Uses at most three sentences.", 0.2)),  # max 0.8
        json.dumps(_rubric(("Mentions the year 1969 for the landing.", 3), ("Clear", 1))),  # string; weights -> 0.75
        None,
        "no rubric in this text",
        {"criteria": []},
    ]
    s = rubric_stats(rubrics)
    assert (s.n_rubrics, s.n_unparsed, s.n_criteria) == (3, 3, 7)
    assert s.criteria_per_rubric == pytest.approx(7 / 3)
    lengths = [8, 7, 12, 38, 29, 39, 5]
    assert s.criterion_chars == pytest.approx(sum(lengths) / 7)
    assert s.label_only == pytest.approx(4 / 7)  # Accuracy, Clarity, Completeness, Clear
    assert s.specific_value == pytest.approx(2 / 7)  # 408, 1969
    assert s.constraint == pytest.approx(1 / 7)  # at most three sentences
    assert s.max_weight == pytest.approx((0.4 + 0.8 + 0.75) / 3)
    assert s.dominant == pytest.approx(2 / 3)
    assert s.max_weight_hist == {"0.0-0.3": 0, "0.3-0.5": 1, "0.5-0.7": 0, "0.7-0.9": 2, "0.9-1.0": 0}


def test_dominant_threshold_is_inclusive_and_empty_input_is_nan():
    s = rubric_stats([_rubric(("a b c d e f", 0.7), ("g h i j k l", 0.2), ("m n o p q r", 0.1))])
    assert s.dominant == 1.0 and s.max_weight_hist["0.7-0.9"] == 1
    empty = rubric_stats([None])
    assert empty.n_rubrics == 0 and math.isnan(empty.label_only) and math.isnan(empty.max_weight)
    assert empty.to_json()["label_only"] is None


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn', encoding="utf-8")


def _samples_dir(tmp_path):
    early = _rubric(("Accuracy", 0.5), ("Clarity", 0.5))
    late = _rubric(("The final answer is equivalent to 408.", 0.8), ("Shows the steps", 0.2))
    pol = [{"step": 1, "role": "policy", "cycle": 0, "phase": 0, "question": q, "completion": str(i), "reward": 0.5,
            "rubric": r, "score": 0.5} for q, r in (("Q1", early), ("Q2", late)) for i in range(4)]
    rub = [{"step": 2, "role": "rubric", "cycle": 0, "phase": 1, "question": "Q1", "completion": "x", "reward": 1.0,
            "rubric": r, "rubric_valid": float(r is not None), "a_pos": "a", "a_neg": "b", "s_pos": 1, "s_neg": 0}
           for r in (late, late, None)]
    _write(tmp_path / "samples" / "phase-000-policy.jsonl", pol)
    _write(tmp_path / "samples" / "phase-001-rubric.jsonl", rub)
    (tmp_path / "samples" / "notes.txt").write_text("ignored", encoding="utf-8")
    return tmp_path


def test_phase_stats_from_run_samples(tmp_path):
    samples = read_samples(_samples_dir(tmp_path))
    assert samples.skipped_lines == 2 and set(samples.rows) == {(0, "policy"), (1, "rubric")}
    pol, rub = phase_rubric_stats(samples)
    # policy rows share one rubric per (step, question): 8 rows -> 2 rubrics
    assert (pol.phase, pol.cycle, pol.source, pol.stats.n_rubrics) == (0, 0, "policy", 2)
    assert pol.stats.label_only == pytest.approx(3 / 4)  # Accuracy, Clarity, Shows the steps
    # rubric rows: every completion is its own rubric; the null one counts as unparsed
    assert (rub.phase, rub.source, rub.stats.n_rubrics, rub.stats.n_unparsed) == (1, "rubric", 2, 1)
    assert rub.stats.dominant == 1.0
    assert rub.to_json()["phase"] == 1 and rub.to_json()["source"] == "rubric"
    assert phase_rubric_stats(RunSamples()) == []
    assert read_samples(tmp_path / "absent").rows == {}


def test_cli_stats_on_file_and_run_dir(tmp_path, capsys):
    f = tmp_path / "rubrics.jsonl"
    f.write_text(
        json.dumps({"prompt": "p", "rubric": _rubric(("Accuracy", 0.5), ("Clarity", 0.5))}) + "\n"
        + json.dumps({"prompt": "q", "rubric": json.dumps(_rubric(("Equals 4", 0.9), ("Short", 0.1)))}) + "\n"
        + json.dumps({"prompt": "r", "rubric": None}) + "\n", encoding="utf-8")
    out = tmp_path / "stats.json"
    assert main(["eval", "stats", str(f), "--output", str(out)]) == 0
    table = capsys.readouterr().out
    assert "label%" in table and "75.0%" in table  # Accuracy, Clarity, Short of 4 criteria
    result = json.loads(out.read_text())
    assert (result["n_rubrics"], result["n_unparsed"], result["dominant"]) == (2, 1, 0.5)

    run = _samples_dir(tmp_path / "run")
    (run / "metrics.jsonl").write_text("", encoding="utf-8")
    assert main(["eval", "stats", str(run), "--output", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:3] == ["phase", "cycle", "source"] and len(lines) == 3
    assert [p["source"] for p in json.loads(out.read_text())["phases"]] == ["policy", "rubric"]


def test_cli_stats_errors(tmp_path, capsys):
    assert main(["eval", "stats", str(tmp_path)]) == 2  # a folder without samples
    assert main(["eval", "stats", str(tmp_path / "missing.jsonl")]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p"}\n', encoding="utf-8")
    assert main(["eval", "stats", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "no rubrics found" in err[0] and "no such file" in err[1] and "missing field 'rubric'" in err[2]


def test_run_dir_stats_give_the_share_of_criteria_that_did_not_separate_answers(tmp_path):
    def crit(*values):
        return [{"text": f"c{k}", "weight": 0.5, "value": v} for k, v in enumerate(values)]
    # Q1's four answers: c0 separates them (0.1 .. 0.9), c1 does not (0.80 .. 0.83); Q2's rows carry no criteria
    pol = [{"step": 1, "role": "policy", "cycle": 0, "phase": 0, "slot": 0, "question": "Q1", "completion": str(i),
            "criteria": crit(0.1 + 0.8 * i / 3, 0.80 + 0.01 * i)} for i in range(4)]
    pol += [{"step": 1, "role": "policy", "cycle": 0, "phase": 0, "slot": 1, "question": "Q2", "completion": "x"}]
    rub = [{"step": 2, "role": "rubric", "cycle": 0, "phase": 1, "question": "Q1", "completion": "x",
            "criteria_pos": crit(0.9, 0.5, 0.7), "criteria_neg": crit(0.2, 0.52, 0.71)}]
    _write(tmp_path / "samples" / "phase-000-policy.jsonl", pol)
    _write(tmp_path / "samples" / "phase-001-rubric.jsonl", rub)
    by_source = {s.source: s for s in phase_rubric_stats(read_samples(tmp_path))}
    assert by_source["policy"].flat_criteria == 0.5 and by_source["rubric"].flat_criteria == pytest.approx(2 / 3)
    assert by_source["policy"].to_json()["flat_criteria"] == 0.5
