"""The reward maths (docs/METHOD.md §2.3): what the rubric writer and the policy are trained to maximise, as pure
functions on plain floats, so the same code scores a row inside TRL's reward function, in the reward server, in an
evaluation, or when a logged phase is recomputed from its samples (as ``trl/rewards/``).

A missing judge score is ``None`` and stays ``None`` through a reward: it is never read as 0. Inside a GRPO group a
missing reward becomes the group mean (zero advantage), see ``fill_missing_with_group_mean``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence

from evolm.scores import is_missing

RUBRIC_REWARDS = ("binary", "margin_format", "separation")  # rubric.reward
"""The rubric rewards ``rubric_reward`` computes (the config's choices for ``rubric.reward``)."""
MULTI_JUDGE = ("majority_vote", "average_vote", "margin_kappa_format", "mean")  # judge.aggregate
"""How ``multi_judge_reward`` combines several judges (the config's choices for ``judge.aggregate``)."""
FLAT_SPREAD = 0.05
"""A criterion is flat (does not discriminate) when its values across the answers it judged differ by less than this."""


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
    if is_missing(s_pos) or is_missing(s_neg):
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
    return None if is_missing(score) else float(score)  # type: ignore[arg-type]


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
        if not is_missing(r):
            present[g].append(float(r))  # type: ignore[arg-type]
    means = {g: sum(v) / len(v) for g, v in present.items()}
    return [float(r) if not is_missing(r) else means.get(g, 0.0) for r, g in zip(rewards, groups, strict=True)]  # type: ignore[arg-type]


def multi_judge_reward(pos: Sequence[float | None], neg: Sequence[float | None], how: str = "majority_vote",
                       validity: float = 0.0, rubric_reward_kind: str = "binary") -> float | None:
    """A rubric's reward from several judges' scores of the better (``pos``) and worse (``neg``) answer.

    As the reference aggregates them (judges with a missing score are left out; none left: missing):

    - ``majority_vote``: 1 if most judges score a+ above a-, else 0; an even split goes to the side
      with the higher mean score.
    - ``average_vote``: the share of judges that score a+ above a-.
    - ``margin_kappa_format``: 0.5 mean(s+ - s-) + 0.3 format_validity + 0.2 clip(kappa, 0, 1), kappa
      being Fleiss' kappa of the judges' votes on this pair (1 when they all agree).
    - ``mean`` (evolm's): the judges' mean scores, then ``rubric_reward_kind`` as with one judge.

    With ``rubric_reward_kind="margin_format"`` (the paper's main run) the first three get the
    reference's format blend on top, as its code applies it to any rubric reward: 0.7 x the
    aggregate + 0.3 format_validity.

    >>> multi_judge_reward([0.8, 0.4, 0.7], [0.5, 0.6, 0.4], "majority_vote")
    1.0
    >>> round(multi_judge_reward([0.8, 0.9, 0.7], [0.3, 0.4, 0.2], "margin_kappa_format", validity=1.0), 4)
    0.75
    >>> round(multi_judge_reward([0.8, 0.4, 0.7], [0.5, 0.6, 0.4], "average_vote", 0.0, "margin_format"), 4)
    0.4667
    """
    reward = _multi_judge_aggregate(pos, neg, how, validity, rubric_reward_kind)
    if reward is None or how == "mean" or rubric_reward_kind != "margin_format":
        return reward
    return 0.7 * reward + 0.3 * float(validity)


def _multi_judge_aggregate(pos: Sequence[float | None], neg: Sequence[float | None], how: str, validity: float,
                           rubric_reward_kind: str) -> float | None:
    """``multi_judge_reward`` before the format blend."""
    both = [(float(p), float(n)) for p, n in zip(pos, neg, strict=True) if not is_missing(p) and not is_missing(n)]
    if not both:
        return None
    votes = [1 if p > n else 0 for p, n in both]
    if how == "mean":
        return rubric_reward(sum(p for p, _ in both) / len(both), sum(n for _, n in both) / len(both),
                             rubric_reward_kind, validity)
    if how == "majority_vote":
        yes, no = sum(votes), len(votes) - sum(votes)
        if yes != no:
            return 1.0 if yes > no else 0.0
        return 1.0 if sum(p for p, _ in both) > sum(n for _, n in both) else 0.0
    if how == "average_vote":
        return majority_prefers([p for p, _ in both], [n for _, n in both])
    if how == "margin_kappa_format":
        kappa = fleiss_kappa([[sum(votes), len(votes) - sum(votes)]]) if len(votes) >= 2 else 1.0
        margin = sum(p - n for p, n in both) / len(both)
        return 0.5 * margin + 0.3 * float(validity) + 0.2 * min(max(kappa, 0.0), 1.0)
    raise ValueError(f"unknown multi-judge aggregation '{how}' (choose from {', '.join(MULTI_JUDGE)})")


def majority_prefers(pos: Sequence[float | None], neg: Sequence[float | None]) -> float | None:
    """Share of judges (with both scores) that score the better answer strictly higher.

    >>> majority_prefers([0.9, 0.4, 0.7], [0.5, 0.6, 0.2])
    0.6666666666666666
    """
    votes = [1.0 if p > n else 0.0 for p, n in zip(pos, neg, strict=True) if not is_missing(p) and not is_missing(n)]  # type: ignore[operator]
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
