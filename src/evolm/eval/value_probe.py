"""Does a judge read the value a criterion names? Short questions, each with a criterion naming the expected answer,
a right and a wrong one-line answer: a judge that scores the two alike under that criterion cannot use a rubric, however
good (dev/results.md, "The judges: which one reads a rubric"). The writers study probes its judges with it, and the
judge benchmarks report it beside their timings."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from evolm.judge.judge import JudgeItem
from evolm.rubrics import Criterion, Rubric


class ValueProbe(NamedTuple):
    """A question, a criterion naming its expected value, a right answer and a wrong one."""

    question: str
    criterion: str
    right: str
    wrong: str


VALUE_PROBES: tuple[ValueProbe, ...] = tuple(ValueProbe(*p) for p in (
    ("How many integers are in the solution of the inequality |x + 5| < 10 ?",
     "The final answer is 19 integers (from -14 to 4).", "There are 19 integers.", "There are 10 integers."),
    ("Given a base number and a power, calculate the result.\n\nBase:5   Power:3", "The final answer is 125.",
     "5 to the power 3 is 125.", "5 to the power 3 is 15."),
    ("Convert from celsius to fahrenheit. Temperature in Celsius: 15", "The final answer is 59 degrees Fahrenheit.",
     "15 degrees Celsius is 59 degrees Fahrenheit.", "15 degrees Celsius is 27 degrees Fahrenheit."),
    ("Given a sequence of numbers, calculate the average 1, 2, 3, 4, 5", "The final answer is 3.",
     "The average is 3.", "The average is 2.5."),
    ("Detect if the following item is a prime number: 17", "Says 17 is a prime number.",
     "Yes, 17 is a prime number.", "No, 17 is not a prime number."),
    ("Which word does not belong to others?\n\nInch\nKilogram\nCentimeter\nYard", "The answer is Kilogram.",
     "Kilogram does not belong.", "Yard does not belong."),
    ("Find out what is the closest star to Earth.", "Says the Sun is the closest star to Earth.",
     "The closest star to Earth is the Sun.", "The closest star to Earth is Sirius."),
    ("What is the smallest positive integer number that is divisible by 5?", "The final answer is 5.",
     "The smallest such number is 5.", "The smallest such number is 10."),
    ("What is an antonym for the word \"cogent\"?", "Gives an antonym such as 'unconvincing', 'weak' or 'illogical'.",
     "An antonym of cogent is unconvincing.", "An antonym of cogent is persuasive."),
    ("List 10 synonyms for 'sad'.", "Lists exactly 10 words.",
     "unhappy, sorrowful, gloomy, miserable, downcast, dejected, melancholy, glum, blue, forlorn",
     "unhappy, gloomy, blue"),
    ("Complete the following sentence: \"Yesterday it was raining, so I put on my ____.\"",
     "Completes the blank with rain gear such as 'raincoat', 'umbrella' or 'rain boots'.",
     "Yesterday it was raining, so I put on my raincoat.", "Yesterday it was raining, so I put on my sunglasses."),
    ("Name three elements in the periodic table.",
     "Names three real chemical elements (e.g. hydrogen, oxygen, carbon).",
     "Hydrogen, oxygen and carbon.", "Water, air and fire."),
))


def value_probe_items(probes: Sequence[ValueProbe] = VALUE_PROBES) -> list[JudgeItem]:
    """Each probe's right answer, then its wrong one, judged against a rubric of its one criterion (weight 1)."""
    items = []
    for p in probes:
        rubric = Rubric((Criterion(p.criterion, 1.0),))
        items += [JudgeItem(p.question, answer, rubric) for answer in (p.right, p.wrong)]
    return items


def value_probe_gaps(scores: Sequence[float | None]) -> list[float]:
    """Right minus wrong per probe, from the scores of ``value_probe_items`` in order; NaN where either is missing.

    >>> value_probe_gaps([1.0, 0.25, 0.5, None])
    [0.75, nan]
    """
    pairs = zip(scores[0::2], scores[1::2], strict=True)
    return [math.nan if r is None or w is None else r - w for r, w in pairs]
