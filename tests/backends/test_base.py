"""match_candidates: the one candidate-matching rule shared by the openai and vllm backends."""

from __future__ import annotations

import doctest
import math

import pytest

import evolm.backends.base as base
from evolm.backends.base import match_candidates


def test_doctests() -> None:
    assert doctest.testmod(base).failed == 0


def test_variants_add_up_case_and_spaces_ignored() -> None:
    top = {" Yes": math.log(0.4), "yes": math.log(0.1), "YES ": math.log(0.05), "No": math.log(0.3)}
    got = match_candidates(top, ["Yes", "No"])
    assert got["Yes"] == pytest.approx(math.log(0.55))
    assert got["No"] == pytest.approx(math.log(0.3))


def test_missing_candidate_is_minus_inf_and_order_kept() -> None:
    got = match_candidates([("1", -0.1)], ["5", "1", "4"])
    assert list(got) == ["5", "1", "4"]
    assert got["5"] == -math.inf and got["4"] == -math.inf and got["1"] == -0.1


def test_pairs_may_repeat_a_string() -> None:
    # Two token ids that decode alike are two events: both count.
    got = match_candidates([("No", math.log(0.2)), ("No", math.log(0.2))], ["No"])
    assert got["No"] == pytest.approx(math.log(0.4))


def test_odd_values_never_raise() -> None:
    got = match_candidates([("Yes", float("nan")), ("No", -math.inf), ("No", -1e308)], ["Yes", "No"])
    assert got["Yes"] == -math.inf
    assert got["No"] == -1e308


def test_very_negative_logprobs_do_not_underflow() -> None:
    got = match_candidates([("A", -1000.0), (" a", -1000.0)], ["A"])
    assert got["A"] == pytest.approx(-1000.0 + math.log(2))
