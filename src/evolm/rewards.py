"""Rewards (SPEC §2.3): what the rubric writer and the policy are trained to maximise.

All functions here are pure and work on plain floats, so the same code scores a row inside
TRL's reward function, in an evaluation, or when recomputing a logged phase from its samples.
A missing judge score is ``None`` and stays ``None`` through a reward: it is never read as 0.
Inside a GRPO group a missing reward becomes the group mean (zero advantage), see
``fill_missing_with_group_mean``.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal

RubricRewardKind = Literal["binary", "margin_format", "separation"]
RUBRIC_REWARDS: tuple[str, ...] = ("binary", "margin_format", "separation")
Aggregation = Literal["mean", "majority"]


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def rubric_reward(
    s_pos: float | None, s_neg: float | None, kind: str = "binary", validity: float = 1.0
) -> float | None:
    """Reward of a rubric from the judge's scores of the better (s+) and worse (s-) answer.

    - ``binary``: 1 if s+ > s- strictly, else 0 (workshop version, reference default).
    - ``margin_format``: 0.7 (s+ - s-) + 0.3 format_validity (paper's main run).
    - ``separation``: 0.7 [s+ > s-] + 0.3 clamp(s+ - s-, 0, 1).

    ``None`` if either score is missing.

    >>> rubric_reward(0.8, 0.3, "binary"), rubric_reward(0.5, 0.5, "binary")
    (1.0, 0.0)
    >>> round(rubric_reward(0.8, 0.3, "margin_format", validity=1.0), 4)
    0.65
    >>> round(rubric_reward(0.2, 0.6, "separation"), 4)
    0.0
    >>> rubric_reward(None, 0.6) is None
    True
    """
    if kind not in RUBRIC_REWARDS:  # checked first: a typo must not hide behind missing scores
        raise ValueError(f"unknown rubric reward '{kind}' (choose from {', '.join(RUBRIC_REWARDS)})")
    if _missing(s_pos) or _missing(s_neg):
        return None
    assert s_pos is not None and s_neg is not None
    better = 1.0 if s_pos > s_neg else 0.0
    if kind == "binary":
        return better
    if kind == "margin_format":
        return 0.7 * (s_pos - s_neg) + 0.3 * float(validity)
    return 0.7 * better + 0.3 * min(max(s_pos - s_neg, 0.0), 1.0)  # separation


def policy_reward(score: float | None) -> float | None:
    """The policy's reward is the judge's rubric-conditioned score itself (no reference, no length term)."""
    return None if _missing(score) else float(score)  # type: ignore[arg-type]


def fill_missing_with_group_mean(
    rewards: Sequence[float | None], groups: Sequence[Hashable]
) -> list[float]:
    """Replace each missing reward by the mean of its group's present rewards (zero advantage).

    A group with no present reward gets 0.0 for all members: all equal, so zero advantage too.

    >>> fill_missing_with_group_mean([1.0, None, 0.0, None], ["a", "a", "a", "b"])
    [1.0, 0.5, 0.0, 0.0]
    """
    if len(rewards) != len(groups):
        raise ValueError("rewards and groups differ in length")
    present: dict[Hashable, list[float]] = defaultdict(list)
    for r, g in zip(rewards, groups, strict=True):
        if not _missing(r):
            present[g].append(float(r))  # type: ignore[arg-type]
    means = {g: sum(v) / len(v) for g, v in present.items()}
    return [float(r) if not _missing(r) else means.get(g, 0.0) for r, g in zip(rewards, groups, strict=True)]  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- several judges


def aggregate_scores(scores: Sequence[float | None], how: str = "mean") -> float | None:
    """One score from several judges' scores of the same answer; missing scores are ignored.

    ``mean`` averages; ``majority`` takes the median, the value a majority of judges is at or
    beyond on both sides (the pointwise analogue of a vote). ``None`` if every judge is missing.

    >>> aggregate_scores([0.2, None, 0.6]), aggregate_scores([0.1, 0.9, 0.8], "majority")
    (0.4, 0.8)
    """
    present = [float(s) for s in scores if not _missing(s)]  # type: ignore[arg-type]
    if not present:
        return None
    if how == "mean":
        return sum(present) / len(present)
    if how == "majority":
        return float(statistics.median(present))
    raise ValueError(f"unknown aggregation '{how}' (choose from mean, majority)")


def majority_prefers(pos: Sequence[float | None], neg: Sequence[float | None]) -> float | None:
    """Share of judges (with both scores) that score the better answer strictly higher.

    >>> majority_prefers([0.9, 0.4, 0.7], [0.5, 0.6, 0.2])
    0.6666666666666666
    """
    votes = [1.0 if p > n else 0.0 for p, n in zip(pos, neg, strict=True) if not _missing(p) and not _missing(n)]  # type: ignore[operator]
    return sum(votes) / len(votes) if votes else None


def fleiss_kappa(ratings: Sequence[Sequence[int]]) -> float:
    """Fleiss' kappa for items rated by the same number of judges into categories.

    ``ratings[i][k]`` is how many judges put item i in category k. Returns 1.0 for perfect
    agreement (also when every item lands in one category, where kappa is undefined).

    >>> fleiss_kappa([[3, 0], [0, 3], [3, 0]])
    1.0
    """
    n_items = len(ratings)
    if n_items == 0:
        return 1.0
    n = sum(ratings[0])
    if n < 2 or any(sum(r) != n for r in ratings):
        raise ValueError("every item needs the same number (>= 2) of ratings")
    if any(len(r) != len(ratings[0]) for r in ratings):  # else extra categories would be silently dropped
        raise ValueError("every item needs a count for the same categories")
    p_items = [(sum(c * c for c in r) - n) / (n * (n - 1)) for r in ratings]
    p_bar = sum(p_items) / n_items
    totals = [sum(r[k] for r in ratings) for k in range(len(ratings[0]))]
    p_e = sum((t / (n_items * n)) ** 2 for t in totals)
    if math.isclose(p_e, 1.0):
        return 1.0
    return (p_bar - p_e) / (1 - p_e)


# ----------------------------------------------------------------------------- for your own TRL runs


def make_trl_reward(judge: Any, rubric_column: str = "rubric") -> Callable[..., list[float | None]]:
    """A TRL ``GRPOTrainer`` reward function: the judge's score of each completion against its row's rubric.

    The rubric comes from the dataset column ``rubric_column`` (object or JSON string; empty or
    missing: the judge scores alone), so rows are self-contained and TRL may split groups across
    processes. Returns ``None`` for a missing score (TRL then gives it zero advantage).
    """
    from evolm.judge import JudgeItem
    from evolm.rubrics import Rubric

    def evolm_rubric_reward(prompts: list[Any], completions: list[Any], **cols: Any) -> list[float | None]:
        rubrics = cols.get(rubric_column) or [None] * len(prompts)
        items = [
            JudgeItem(_question_of(p), completion_text(c), Rubric.from_obj(r) if r else None)
            for p, c, r in zip(prompts, completions, rubrics, strict=True)
        ]
        return [policy_reward(s) for s in judge.score(items)]

    return evolm_rubric_reward


def _question_of(prompt: Any) -> str:
    if isinstance(prompt, list):  # conversational: the last user message is the question
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return str(prompt)


def completion_text(completion: Any) -> str:
    """The text of a TRL completion (a string, or a conversational list of messages)."""
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)
