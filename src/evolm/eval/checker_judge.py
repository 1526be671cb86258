"""A judge of known reading skill, for studies: how well must a judge read a stated constraint for the writer's
GRPO to learn to state it? (docs/RESULTS.md, "How well a judge must read"). A criterion that names one of the row's
IFEval constraints (``rubric_naming.names``) is scored by that constraint's own checker, the verdict flipped with
probability 1 - q; any other criterion gets a score that carries no information about the constraints. The answer's
score is the criteria's weighted mean, as the yesno judge's, and the rubric's reward is EvoLM's own
(``rewards.rubric_reward``, margin_format by default) on the pair's better and worse answers.

Use it as the writer's reward with the judge skipped (``rewards.judge_weight: 0``)::

    rewards:
      extra:
        - {name: evolm.eval.checker_judge.reads_q080, role: rubric, weight: 1.0}
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from evolm.backends.replies import strip_thinking
from evolm.eval.constraints import checked_row, parse_constraints
from evolm.eval.rubric_naming import names, pair_rows
from evolm.rewards import rubric_reward
from evolm.rubrics import format_validity, parse_rubric


def _uniform(*parts: str) -> float:
    """A number in [0, 1) fixed by ``parts``: the same criterion on the same answer always reads the same, as a
    deterministic judge's would."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def checker_score(rubric: str, answer: str, question: str, constraints: str, q: float, seed: str = "0") -> float:
    """The checker judge's score of ``answer`` under ``rubric`` (0-1): per criterion, the checker's verdict on the
    constraints it names (1 when the answer follows them all), flipped with probability 1 - q; for a criterion that
    names none, a uniform draw. Weighted by the criteria's weights; a rubric that does not parse is one criterion.

    >>> from evolm.eval.constraints import constraints_json
    >>> cs = constraints_json([{"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}])
    >>> rubric = '{"criteria": [{"criterion": "Ends with a P.S.", "weight": 1}]}'
    >>> checker_score(rubric, "Hi.\\nP.S. Bye.", "q", cs, q=1.0), checker_score(rubric, "Hi.", "q", cs, q=1.0)
    (1.0, 0.0)
    """
    parsed = parse_rubric(strip_thinking(rubric))
    criteria = [(c.criterion, c.weight) for c in parsed.criteria] if parsed else [(rubric, 1.0)]
    listed = parse_constraints(constraints)
    followed = checked_row(answer, question, constraints).followed
    total = 0.0
    for criterion, weight in criteria:
        named = [ok for c, ok in zip(listed, followed, strict=True) if names(criterion, c)]
        if named:
            verdict = float(all(named))
            if _uniform(seed, "flip", criterion, answer) >= q:
                verdict = 1.0 - verdict
        else:
            verdict = _uniform(seed, "noise", criterion, answer)
        total += weight * verdict
    weights = sum(w for _, w in criteria)
    return total / weights if weights > 0 else 0.0


def checker_judge_reward(q: float, kind: str = "margin_format") -> Callable[..., list[float | None]]:
    """A TRL-style reward for rubric rows (``rewards.extra`` with ``role: rubric``): EvoLM's writer reward
    (``rubric_reward(s+, s-, kind, format_validity)``) with a checker judge that reads a named constraint right with
    probability ``q``. ``None`` for a row with no pair or no constraints."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q is a probability, not {q!r}")

    def reward(completions: Sequence[Any], a_pos: Sequence[str | None] = (), a_neg: Sequence[str | None] = (),
               constraints: Sequence[str | None] = (), question: Sequence[str] | None = None,
               **_: Any) -> list[float | None]:
        out: list[float | None] = []
        for row in pair_rows(completions, a_pos, a_neg, constraints, question):
            if row is None:
                out.append(None)
                continue
            text, pos, neg, cs, asked = row
            s_pos, s_neg = (checker_score(text, a, asked, cs, q) for a in (pos, neg))
            out.append(rubric_reward(s_pos, s_neg, kind, validity=format_validity(text)))
        return out

    reward.__name__ = f"checker_judge_q{round(q * 100):03d}"
    return reward


reads_q100 = checker_judge_reward(1.0)
"""The checker judge that reads every named constraint right."""
reads_q080 = checker_judge_reward(0.8)
"""Reads a named constraint right 4 times in 5."""
reads_q065 = checker_judge_reward(0.65)
"""Reads a named constraint right about 2 times in 3: near the 1.5B judge's measured reading of a stated postscript
or title (docs/RESULTS.md)."""
