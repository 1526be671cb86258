"""Does a rubric name a checkable constraint? The words a criterion naming an IFEval constraint family uses, and a
program reward built on them for the rubric role: the writer's learnability check (docs/RESULTS.md), where a rubric
earns 1 when it names the constraint its pair's answers differ in, no judge asked (``rewards.judge_weight: 0``).

>>> names("2. The response ends with a postscript", {"id": "detectable_content:postscript"})
True
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from evolm.eval.constraints import Constraint, checked_row, constraints_json, parse_constraints

NAMING_WORDS: dict[str, tuple[str, ...]] = {
    "detectable_content:postscript": ("p.s", "postscript"), "detectable_format:title": ("title", "<<"),
    "startend:quotation": ("quot",), "change_case:english_capital": ("capital", "uppercase", "upper case"),
    "change_case:english_lowercase": ("lowercase", "lower case"), "punctuation:no_comma": ("comma",),
    "startend:end_checker": ("phrase",),  # or the phrase itself; not "ends with": a postscript's criterion says it
    "detectable_content:number_placeholders": ("placeholder", "square bracket"),
    "detectable_format:number_highlighted_sections": ("highlight",),
    "detectable_format:number_bullet_lists": ("bullet",),
    "detectable_format:json_format": ("json",), "combination:two_responses": ("two responses", "******", "asterisk"),
    "length_constraints:number_words": ("word",), "length_constraints:number_sentences": ("sentence",),
}
"""Per IFEval family, words (lower case) that a criterion naming the constraint uses; a family not listed is named
by its id's words (``number_words`` -> "number words")."""


def names(text: str, constraint: Constraint) -> bool:
    """Whether ``text`` (a rubric, a criterion) names ``constraint``: one of its family's words, or an end phrase.

    >>> names("1. The answer ends with a postscript (P.S.)", {"id": "detectable_content:postscript"})
    True
    >>> names("1. The answer is correct", {"id": "detectable_format:title"})
    False
    >>> names("Ends with: any other questions", {"id": "startend:end_checker",
    ...                                          "kwargs": {"end_phrase": "Any other questions?"}})
    True
    """
    low = text.lower()
    family = str(constraint["id"])
    words = NAMING_WORDS.get(family, (family.split(":", 1)[-1].replace("_", " "),))
    phrase = str((constraint.get("kwargs") or {}).get("end_phrase") or "").lower().rstrip(".?! ")
    return any(w in low for w in words) or bool(phrase) and phrase in low


def differing(a_pos: str, a_neg: str, question: str, constraints: str) -> tuple[dict[str, Any], ...]:
    """The constraints (a row's JSON column) that one answer of a pair follows and the other does not (each answer
    checked once: ``checked_row`` remembers it for the step's samples and records too)."""
    pos, neg = checked_row(a_pos, question, constraints), checked_row(a_neg, question, constraints)
    return tuple(c for c, p, n in zip(parse_constraints(constraints), pos.followed, neg.followed, strict=True)
                 if p != n)


def pair_rows(completions: Sequence[Any], a_pos: Sequence[str | None], a_neg: Sequence[str | None],
              constraints: Sequence[str | None], question: Sequence[str] | None
              ) -> Iterator[tuple[str, str, str, str, str] | None]:
    """Per rubric row of a TRL reward call: ``(rubric text, a+, a-, constraints JSON, question)``, or ``None`` for a
    row with no pair or no constraints (columns shorter than the completions count as missing)."""
    for i, completion in enumerate(completions):
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        pos, neg = (a_pos[i] if i < len(a_pos) else None), (a_neg[i] if i < len(a_neg) else None)
        cs = constraints[i] if i < len(constraints) else None
        if pos is None or neg is None or not cs:
            yield None
            continue
        yield (text, str(pos), str(neg), cs if isinstance(cs, str) else constraints_json(parse_constraints(cs)),
               question[i] if question is not None and i < len(question) else "")


def named_difference_reward(completions: Sequence[Any], a_pos: Sequence[str | None] = (),
                            a_neg: Sequence[str | None] = (), constraints: Sequence[str | None] = (),
                            question: Sequence[str] | None = None, **_: Any) -> list[float | None]:
    """A TRL-style reward for rubric rows (``rewards.extra`` with ``role: rubric``): the share of the constraints its
    pair's answers differ in that the written rubric names (``names``), ``None`` for a row with no pair, no
    constraints, or answers that follow the same ones. A program's stand-in for a judge that reads every stated
    constraint perfectly: the writer's learnability check (docs/RESULTS.md). With weight -1, the reverse arm.

    >>> cs = constraints_json([{"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}])
    >>> named_difference_reward(["1. Ends with a P.S.", "1. Is correct", "1. P.S."], a_pos=["Hi.\\nP.S. Bye."] * 3,
    ...                         a_neg=["Hi.", "Hi.", "Hi.\\nP.S. x"], constraints=[cs] * 3, question=["q"] * 3)
    [1.0, 0.0, None]
    """
    out: list[float | None] = []
    for row in pair_rows(completions, a_pos, a_neg, constraints, question):
        if row is None:
            out.append(None)
            continue
        text, pos, neg, cs, asked = row
        diff = differing(pos, neg, asked, cs)
        out.append(sum(names(text, c) for c in diff) / len(diff) if diff else None)
    return out
