"""A rubric's weight is untrusted text too: one past a float's range is an invalid weight, never an exception.

JSON allows an integer of any length: ``1`` followed by 400 zeros made ``float()`` raise ``OverflowError``
when a rubric was read (``evolm judge`` printed a traceback). It now reads as a weight that is not a positive
number: the criterion takes the others' mean, and ``rubric_repairs`` says so in one line.
"""

from __future__ import annotations

import json

from evolm.rubrics import Rubric, format_validity, parse_rubric, rubric_repairs

HUGE = "1" + "0" * 400
TEXT = ('{"criteria": [{"criterion": "Names Canberra.", "weight": ' + HUGE + '}, '
        '{"criterion": "Is one sentence.", "weight": 1}]}')


def test_a_weight_past_a_floats_range_is_an_invalid_weight() -> None:
    for rubric in (Rubric.from_obj(json.loads(TEXT)), parse_rubric(TEXT)):
        assert rubric is not None
        assert [c.weight for c in rubric.criteria] == [0.5, 0.5]  # the other's weight, then normalised
    (line,) = rubric_repairs(json.loads(TEXT))
    assert line.startswith("criterion 1: weight 1000") and "(401 characters)" in line and "\n" not in line
    assert len(line) < 120
    assert format_validity(TEXT) == 0.0


def test_large_weights_that_fit_still_count() -> None:
    rubric = Rubric.from_obj({"criteria": [{"criterion": "a", "weight": 10**300},
                                           {"criterion": "b", "weight": 10**300}]})
    assert rubric is not None and [c.weight for c in rubric.criteria] == [0.5, 0.5]
    (line,) = rubric_repairs({"criteria": [{"criterion": "a", "weight": -(10**400)}]})
    assert line.endswith("(took the others' mean)")
