"""The checker judge of the reading curve: a named constraint read by its checker, right with probability q; any
other criterion noise; EvoLM's own margin reward on top."""

import json

import pytest

from evolm.eval.checker_judge import checker_judge_reward, checker_score, reads_q065, reads_q100
from evolm.eval.constraints import constraints_json

PS = constraints_json([{"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}])
FOLLOWS, BREAKS = "Dear Sam,\nSee you soon.\nP.S. Bring the map.", "Dear Sam,\nSee you soon."


def rubric(*criteria: str) -> str:
    return json.dumps({"criteria": [{"criterion": c, "weight": 1} for c in criteria]})


def test_a_perfect_reader_scores_the_named_constraint_by_its_checker():
    naming = rubric("The letter ends with a postscript (P.S.)")
    assert checker_score(naming, FOLLOWS, "q", PS, q=1.0) == 1.0
    assert checker_score(naming, BREAKS, "q", PS, q=1.0) == 0.0
    assert checker_score(naming, FOLLOWS, "q", PS, q=0.0) == 0.0  # q = 0: always wrong


def test_a_criterion_naming_nothing_carries_no_information():
    other = rubric("The letter is friendly")
    draws = [checker_score(other, f"{FOLLOWS} {i}", "q", PS, q=1.0) for i in range(200)]
    draws_breaking = [checker_score(other, f"{BREAKS} {i}", "q", PS, q=1.0) for i in range(200)]
    assert 0.4 < sum(draws) / 200 < 0.6 and 0.4 < sum(draws_breaking) / 200 < 0.6
    assert checker_score(other, FOLLOWS, "q", PS, q=1.0) == checker_score(other, FOLLOWS, "q", PS, q=1.0)


def test_the_flip_rate_is_one_minus_q():
    naming = rubric("Has a P.S. at the end")
    right = sum(checker_score(naming, f"{FOLLOWS} {i}", "q", PS, q=0.65) == 1.0 for i in range(400))
    assert 0.58 < right / 400 < 0.72


def test_the_writer_reward_is_evolms_margin_and_prefers_naming_the_difference():
    rows = dict(a_pos=[FOLLOWS] * 3, a_neg=[BREAKS] * 3, constraints=[PS] * 3, question=["q"] * 3)
    naming = json.dumps({"criteria": [{"criterion": "Ends with a postscript", "weight": 0.5},
                                      {"criterion": "Has a P.S. line", "weight": 0.5}]})
    vague = rubric("Is polite")
    r_naming, r_vague, r_bad = reads_q100([naming, vague, "not a rubric"], **rows)
    assert r_naming == pytest.approx(0.7 * 1.0 + 0.3 * 1.0)  # margin_format: s+ - s- = 1, a valid format
    assert r_naming > r_vague
    assert r_bad < r_naming
    assert reads_q065([naming], a_pos=[None], a_neg=[BREAKS], constraints=[PS]) == [None]


def test_q_must_be_a_probability():
    with pytest.raises(ValueError, match="probability"):
        checker_judge_reward(1.5)
