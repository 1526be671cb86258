"""The value probe: each question with a criterion naming its expected value, a right and a wrong answer, judged in
that order; the gap is right minus wrong."""

from __future__ import annotations

import doctest
import math

from evolm.eval import value_probe
from evolm.eval.value_probe import VALUE_PROBES, value_probe_gaps, value_probe_items


def test_the_docstring_examples_hold() -> None:
    assert doctest.testmod(value_probe).failed == 0


def test_each_probe_is_judged_right_then_wrong_under_its_one_criterion() -> None:
    items = value_probe_items()
    assert len(items) == 2 * len(VALUE_PROBES) == 24
    assert len({p.question for p in VALUE_PROBES}) == len(VALUE_PROBES)
    for probe, right, wrong in zip(VALUE_PROBES, items[0::2], items[1::2], strict=True):
        assert (right.question, right.answer, wrong.answer) == (probe.question, probe.right, probe.wrong)
        assert right.rubric == wrong.rubric and [(c.criterion, c.weight) for c in right.rubric.criteria] == [
            (probe.criterion, 1.0)]


def test_a_missing_score_makes_its_gap_nan_not_an_error() -> None:
    gaps = value_probe_gaps([0.8, 0.3, None, 0.1, 0.2, 0.6])
    assert gaps[0] == 0.8 - 0.3 and math.isnan(gaps[1]) and gaps[2] == 0.2 - 0.6
