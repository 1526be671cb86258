"""Judging a step's rows (docs/METHOD.md §2.3): each row's judgment as its raw reward, by the ground floor's maths
(``evolm.rewards``), what judging cost, and the step's rewards and numbers made from them (missing rewards filled
with their group's mean, flat criteria dropped, ``rewards.extra`` added). The step that calls it: ``step.py``.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evolm.config import INVALID_RUBRICS
from evolm.errors import RunError
from evolm.rewards import FLAT_SPREAD, fill_missing_with_group_mean, multi_judge_reward, policy_reward, rubric_reward
from evolm.scores import CriterionScore, Judgment, aggregate_scores, is_missing, scores_of

# ----------------------------------------------------------------------------- one step's rows, both roles


@dataclass(frozen=True)
class RowReward:
    """A row's raw reward (``None``: missing) and what it was computed from."""

    reward: float | None
    score: float | None = None  # policy rows: the judge's score
    s_pos: float | None = None  # rubric rows: the judge's scores of the better and the worse answer
    s_neg: float | None = None
    rubric_valid: float | None = None  # rubric rows: format validity of the written rubric
    parsed: dict[str, Any] | None = None  # rubric rows: the written rubric, parsed
    # per judged answer (policy: its own; rubric: a+ then a-), the criteria of its judgment (``Judgment.criteria``:
    # yesno P(Yes), generative ratings; several judges: values averaged); () where the mode has none
    criteria: tuple[tuple[CriterionScore, ...], ...] = ()
    extras: tuple[tuple[str, float, float | None], ...] = ()  # policy rows: (label, weight, value) per rewards.extra

    def criteria_json(self, answer: int) -> list[dict[str, Any]] | None:
        """The ``answer``-th judged answer's criteria as samples files write them (``None``: the mode reads none)."""
        crit = self.criteria[answer] if len(self.criteria) > answer else ()
        return [{"text": c.text, "weight": c.weight, "value": c.value} for c in crit] or None


@dataclass(frozen=True)
class JudgeCost:
    """What judging took: one process's batch of rows (``judge_rows``), or a whole step (``JudgeCost.total`` of every
    process's). ``None``: not counted (no backend counts tokens; nothing was judged)."""

    seconds: float | None = None  # wall seconds
    tokens: int | None = None  # prompt + generated
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    requests: int | None = None  # backend requests (server attempts, retries included; local: prompts run)
    cache_hits: int | None = None  # judgments the judge cache answered
    lookups: int | None = None  # judgments asked of cached judges
    sent: int | None = None  # judge requests (prompts) sent (``Judge.requests``)
    failures: int | None = None  # of those, failed after their retries
    error: str | None = None  # the first failure's one-line error

    @staticmethod
    def total(costs: Sequence[JudgeCost]) -> JudgeCost:
        """Several processes' costs as one step's: counts add up, the seconds are the slowest process's.

        >>> JudgeCost.total([JudgeCost(1.5, tokens=10, sent=2), JudgeCost(0.5, failures=1, error="HTTP 500")])
        JudgeCost(seconds=1.5, tokens=10, prompt_tokens=None, generated_tokens=None, requests=None, cache_hits=None, \
lookups=None, sent=2, failures=1, error='HTTP 500')
        """
        def summed(key: str) -> int | None:
            counts = [getattr(c, key) for c in costs if getattr(c, key) is not None]
            return sum(counts) if counts else None
        seconds = [c.seconds for c in costs if c.seconds is not None]
        return JudgeCost(max(seconds) if seconds else None, *(summed(k) for k in (
            "tokens", "prompt_tokens", "generated_tokens", "requests", "cache_hits", "lookups", "sent", "failures")),
            next((c.error for c in costs if c.error), None))


def judge_rows(rows: Sequence[Mapping[str, Any]], completions: Sequence[str], judges: Sequence[Any],
               rubric_reward_kind: str = "binary", aggregate: str = "majority_vote",
               invalid_rubrics: str = "judge_raw") -> tuple[list[RowReward], JudgeCost]:
    """Rewards of a batch of rows of either role, computed from each row alone (docs/METHOD.md §2.3), and what
    judging them took (``JudgeCost``: tokens, seconds, requests, cache hits, failures).

    A row is a mapping with ``role``, ``question``, ``rubric`` (policy: the shared rubric as JSON, or
    empty), ``rubric_text`` (policy: that rubric as the writer wrote it, thinking stripped),
    ``reference`` (policy, optional: the data's reference answer) and ``a_pos``/``a_neg`` (rubric: the
    pair). A policy row's reward is the judge's score of its completion. A rubric row's completion is a
    written rubric: its reward comes from the judge's scores of the pair under that rubric. The judge reads a
    rubric as it was written.

    A rubric that does not parse: with ``invalid_rubrics="judge_raw"`` (the reference) the judge
    reads its raw text in both roles and the format term of ``margin_format`` does the rest; with
    ``"zero"`` it earns a flat 0 in the rubric role and its policy question is judged without a
    rubric. An empty rubric earns 0 in the rubric role either way: there is nothing to read; in the policy role
    (``judge_raw``) the judge gets it as empty text, which ``judge.prompt: reference`` shows as an empty
    "Rubric:" (the authors' judge does) and evolm's prompts read as no rubric. With
    several judges, a policy score is their mean and a rubric's reward is ``multi_judge_reward``
    with ``aggregate``. All judging of the batch is one call per judge, so answers to one question
    share the judge's prefix; a ``listwise`` judge lists the policy answers of one GRPO group (the rows of one
    ``slot`` of one ``step``; rows without a slot: those sharing a question and rubric) in one prompt, and a rubric
    row's pair in another.
    """
    from evolm.backends.replies import strip_thinking
    from evolm.judge.cache import CachedJudge
    from evolm.judge.judge import JudgeItem
    from evolm.rubrics import Rubric, read_written

    if invalid_rubrics not in INVALID_RUBRICS:
        raise ValueError(f"unknown invalid_rubrics '{invalid_rubrics}' (choose from {', '.join(INVALID_RUBRICS)})")
    items: list[Any] = []
    judged_as: list[_Judged] = []  # per row, which items judge it
    for row, text in zip(rows, completions, strict=True):
        if row["role"] == "policy":
            rubric = Rubric.from_obj(row["rubric"]) if row.get("rubric") else None
            raw = strip_thinking(row.get("rubric_text") or "") or None
            if rubric is None and invalid_rubrics == "zero":
                raw = None
            elif raw is None and row.get("rubric_valid") is not None:  # a rubric was written, but nothing to read:
                raw = ""  # the authors' prompt shows it empty ("Rubric: "), as theirs does; evolm's judge alone
            judged_as.append(_Judged((len(items),)))
            # a listwise judge lists one GRPO group: the answers of one slot of one step, never two groups that
            # happen to share a question and rubric (rows without a slot: those sharing question and rubric)
            slot = ("slot", row.get("step"), row["slot"]) if row.get("slot") is not None else None
            items.append(JudgeItem(row["question"], text, rubric, rubric_text=raw,
                                   reference=row.get("reference") or None, group=slot))
            continue
        written, raw = read_written(text), strip_thinking(text)
        if written.rubric is None and (invalid_rubrics == "zero" or not raw):
            judged_as.append(_Judged((), written))
            continue
        judged_as.append(_Judged((len(items), len(items) + 1), written))
        pair = ("pair", len(judged_as))  # a listwise judge lists a rubric row's two answers together, alone
        items += [JudgeItem(row["question"], row["a_pos"], written.rubric, rubric_text=raw, group=pair),
                  JudgeItem(row["question"], row["a_neg"], written.rubric, rubric_text=raw, group=pair)]
    started, used, sent = time.monotonic(), judge_usage(judges), judge_requests(judges)
    judged: list[list[Judgment]] = []  # per judge, one judgment per item
    hits = lookups = 0
    for j in judges if items else []:
        if isinstance(j, CachedJudge):  # judge.cache: known and duplicate items are not sent
            call = j.score_with_hits(items)
            judged.append(call.results)
            hits, lookups = hits + sum(call.cached), lookups + len(items)
        else:
            judged.append(j.score(items))
    per_judge = [scores_of(js) for js in judged]
    failed = [j.failed for js in judged for j in js if j is not None and j.failed]
    scores = [aggregate_scores([s[k] for s in per_judge]) for k in range(len(items))]  # mean of the present ones
    criteria = [merged_criteria([js[k] for js in judged]) for k in range(len(items))]
    out: list[RowReward] = []
    for judged_by in judged_as:
        written = judged_by.written
        if written is None:  # a policy row: its answer
            (i,) = judged_by.items
            out.append(RowReward(policy_reward(scores[i]), score=scores[i], criteria=(criteria[i],)))
            continue
        if not judged_by.items:  # a rubric with nothing to read: 0
            out.append(RowReward(0.0, rubric_valid=written.valid))
            continue
        i_pos, i_neg = judged_by.items
        sp, sn = scores[i_pos], scores[i_neg]
        reward = rubric_reward(sp, sn, rubric_reward_kind, written.valid) if len(judges) == 1 else multi_judge_reward(
            [s[i_pos] for s in per_judge], [s[i_neg] for s in per_judge], aggregate, written.valid, rubric_reward_kind)
        out.append(RowReward(reward, s_pos=sp, s_neg=sn, rubric_valid=written.valid,
                             parsed=written.rubric.to_dict() if written.rubric else None,
                             criteria=(criteria[i_pos], criteria[i_neg])))
    if not items:
        return out, JudgeCost()
    now = judge_usage(judges)
    spent = None if now is None or used is None else now - used
    return out, JudgeCost(seconds=time.monotonic() - started, tokens=None if spent is None else spent.tokens,
                          prompt_tokens=None if spent is None else spent.prompt_tokens,
                          generated_tokens=None if spent is None else spent.completion_tokens,
                          requests=None if spent is None else spent.requests,
                          cache_hits=hits if lookups else None, lookups=lookups or None,
                          sent=judge_requests(judges)[0] - sent[0], failures=judge_requests(judges)[1] - sent[1],
                          error=failed[0] if failed else None)


def unjudged_rubric(text: str) -> RowReward:
    """A rubric row that no judge read (``rewards.judge_weight`` 0): no reward of the judge's, its format kept."""
    from evolm.rubrics import read_written

    written = read_written(text)
    return RowReward(None, rubric_valid=written.valid, parsed=written.rubric.to_dict() if written.rubric else None)


def judge_requests(judges: Sequence[Any]) -> tuple[int, int]:
    """Requests the judges sent so far and how many of them failed after their retries (``Judge.requests``,
    ``Judge.failed_requests``; a cached judge reads its judge's; a reward model counts none)."""
    return (sum(getattr(j, "requests", 0) for j in judges), sum(getattr(j, "failed_requests", 0) for j in judges))


@dataclass(frozen=True)
class _Judged:
    """Which of a batch's judge items judge one row: a policy row's answer ``(i,)``; a rubric row's pair
    ``(i_pos, i_neg)`` under its ``written`` rubric, or ``()`` when that rubric gives nothing to read."""

    items: tuple[int, ...]
    written: Any = None  # rubric rows: the WrittenRubric (evolm.rubrics.read_written)


def merged_criteria(judgments: Sequence[Judgment]) -> tuple[CriterionScore, ...]:
    """One answer's criteria from several judges' judgments: each position's values averaged over the judges that
    read it (the first judge's texts and weights; judges whose criteria differ in number are left out); ``()`` when
    no judge gave criteria.

    >>> a, b = Judgment(0.5, (CriterionScore("c", 1.0, 0.2),)), Judgment(0.7, (CriterionScore("c", 1.0, 0.6),))
    >>> merged_criteria([a, b])[0].value, merged_criteria([Judgment(0.5)])
    (0.4, ())
    """
    given = [j.criteria for j in judgments if j is not None and j.criteria]
    if not given:
        return ()
    same = [c for c in given if len(c) == len(given[0])]
    if len(same) == 1:
        return tuple(same[0])
    return tuple(replace(c, value=aggregate_scores([other[k].value for other in same]))
                 for k, c in enumerate(same[0]))


def judge_usage(judges: Sequence[Any]) -> Any:
    """What the judges' backends counted so far (``evolm.backends.pool.Usage``, summed): a server's usage as it
    reported it (``OpenAIBackend.stats``), a local model's as ``HFBackend.usage`` counts it; ``None`` if no
    judge's backend counts."""
    found = []
    for j in judges:
        backend = getattr(getattr(j, "judge", j), "backend", None)  # a cached judge wraps the judge
        if callable(stats := getattr(backend, "stats", None)):
            found.append(stats().total)
        elif (usage := getattr(backend, "usage", None)) is not None and hasattr(usage, "prompt_tokens"):
            found.append(usage)
    return sum(found[1:], found[0]) if found else None


@dataclass(frozen=True)
class StepRewards:
    """A whole step's rewards as GRPO uses them, and the numbers the step record logs."""

    rewards: list[float]  # missing rewards replaced by their group's mean
    reward_mean: float
    reward_std: float  # mean over groups of the within-group standard deviation
    missing_rewards: float  # share of rows with a missing reward
    pair_accuracy: float | None  # rubric steps: share of rows whose rubric made the judge score a+ > a-
    rubric_validity: float | None  # rubric steps: per sample; policy steps: per group (one shared rubric)
    pair_judgements: int | None = None  # rubric steps: n of pair_accuracy (rows: one rubric judging one pair)
    pairs: int | None = None  # rubric steps: distinct pairs those rows judged (one per group)
    pairs_for: int | None = None  # rubric steps: pairs more of whose rubrics scored a+ > a- than a- > a+
    pairs_against: int | None = None  # rubric steps: pairs more of whose rubrics scored a- > a+ (ties: neither)
    tied_groups: float = 0.0  # share of groups whose rewards are all equal (zero advantage: no gradient signal)
    reward_components: dict[str, float | None] | None = None  # with rewards.extra: "judge" and each extra's mean value
    judge_p_yes: float | None = None  # mean per-criterion value of the step's judging (yesno: P(Yes); see RowReward)
    judge_pass_rate: float | None = None  # share of those criteria with a value > 0.5
    criterion_pass_rates: dict[str, float] | None = None  # per criterion position ("1", "2", ...): its pass rate
    criteria_per_rubric: float | None = None  # mean number of criteria per judged rubric
    flat_criteria: float | None = None  # share of criteria whose value does not vary across the answers it judged
    judge_tokens: int | None = None  # the judges' prompt + generated tokens for the step, all processes
    judge_latency_s: float | None = None  # wall seconds of the step's judging (the slowest process's)
    judge_prompt_tokens: int | None = None  # the judges' prompt tokens (servers: their usage; local: counted)
    judge_generated_tokens: int | None = None  # the judges' generated tokens (a probability read counts one)
    judge_requests: int | None = None  # judge requests (server attempts, retries included; local: prompts run)
    judge_cache_hit_rate: float | None = None  # share of the step's judgments the judge cache answered (judge.cache)
    judge_failures: int | None = None  # judge requests that failed after their retries (their scores: missing)
    judge_failure_share: float | None = None  # their share of the step's judge requests (judge.max_failure_share)
    judge_error: str | None = field(default=None, compare=False)  # the first failure's error line (not logged)

    def metrics(self) -> dict[str, float]:
        """The step's numbers for TRL's loggers (the reward function's ``log_metric``); absent ones left out."""
        named = {"pair_accuracy": self.pair_accuracy, "rubric_validity": self.rubric_validity,
                 "missing_rewards": self.missing_rewards, "tied_groups": self.tied_groups,
                 "judge_p_yes": self.judge_p_yes, "judge_pass_rate": self.judge_pass_rate,
                 "criteria_per_rubric": self.criteria_per_rubric, "flat_criteria": self.flat_criteria,
                 **{f"judge_pass_rate/c{k}": v for k, v in (self.criterion_pass_rates or {}).items()},
                 "judge_tokens": self.judge_tokens, "judge_latency_s": self.judge_latency_s,
                 "judge_prompt_tokens": self.judge_prompt_tokens, "judge_generated_tokens": self.judge_generated_tokens,
                 "judge_requests": self.judge_requests, "judge_cache_hit_rate": self.judge_cache_hit_rate,
                 "judge_failures": self.judge_failures, "judge_failure_share": self.judge_failure_share,
                 **{f"reward/{k}": v for k, v in (self.reward_components or {}).items()}}
        return {k: v for k, v in named.items() if v is not None}


def step_rewards(roles: Sequence[str], raw: Sequence[RowReward], groups: Sequence[Hashable],
                 policy_rubric_valid: Sequence[float | None] = (), drop_flat_criteria: bool = False,
                 cost: JudgeCost = JudgeCost(), judge_weight: float = 1.0) -> StepRewards:  # noqa: B008 - frozen
    """Fill missing rewards with their group's mean and summarise one step (all processes' rows; ``cost``: what
    judging them took, ``JudgeCost.total`` of every process's).

    Criteria (``RowReward.criteria``): pass rate per criterion position, criteria per rubric, and the share of
    criteria that do not separate the answers they judged (``flat_criteria``: a policy group's answers, a rubric
    row's pair; ``FLAT_SPREAD``). ``drop_flat_criteria`` (policy steps; ``rewards.drop_flat_criteria``, for a judge
    whose score is the weighted mean of its criteria's values: ``yesno``) re-weights each policy answer's score
    over its group's other criteria before anything else (``drop_flat``).

    The judge's reward counts ``judge_weight`` times (``rewards.judge_weight``; 0: nothing was judged, and the judge's
    numbers, pair accuracy and missing rewards included, are not reported). Extra rewards (``RowReward.extras``,
    ``rewards.extra``) are added after the filling, each times its weight (a ``None`` value adds nothing): the
    reward GRPO uses, which ``reward_mean``, ``reward_std`` and ``tied_groups`` describe; ``reward_components``
    keeps each term's own mean.

    >>> r = step_rewards(["rubric"] * 2, [RowReward(1.0, s_pos=0.9, s_neg=0.1, rubric_valid=1.0),
    ...                                    RowReward(None, rubric_valid=0.0)], ["q", "q"])
    >>> r.rewards, r.pair_accuracy, r.pair_judgements, r.pairs, r.rubric_validity, r.missing_rewards
    ([1.0, 1.0], 0.5, 2, 1, 0.5, 0.5)
    >>> r.pairs_for, r.pairs_against  # the pair's one readable rubric scored a+ higher: one pair for
    (1, 0)
    >>> r = step_rewards(["policy"] * 2, [RowReward(0.8, extras=(("len", 0.5, -1.0),)),
    ...                                    RowReward(None, extras=(("len", 0.5, 0.0),))], ["q", "q"])
    >>> r.rewards, r.reward_components
    ([0.30000000000000004, 0.8], {'judge': 0.8, 'len': -0.5})
    """
    policy = not (roles and roles[0] == "rubric")
    flat = flat_positions(raw, groups, policy)
    if drop_flat_criteria and policy:
        raw = drop_flat(raw, groups, flat)
    judging = judge_weight > 0
    judged = fill_missing_with_group_mean([r.reward for r in raw], groups) if judging else [0.0] * len(raw)
    filled = [judge_weight * f + sum(w * v for _, w, v in r.extras if v is not None)
              for f, r in zip(judged, raw, strict=True)]
    n = len(filled)
    by_group: dict[Hashable, list[float]] = defaultdict(list)
    for g, r in zip(groups, filled, strict=True):
        by_group[g].append(r)
    stds = [statistics.pstdev(v) if len(v) > 1 else 0.0 for v in by_group.values()]
    tied = sum(1 for v in by_group.values() if max(v) - min(v) <= 1e-12) / len(by_group) if by_group else 0.0
    if roles and roles[0] == "rubric" and judging:
        pair_acc: float | None = sum(1.0 for r in raw if not is_missing(r.s_pos) and not is_missing(r.s_neg)
                                     and r.s_pos > r.s_neg) / n  # type: ignore[operator]
        validity: float | None = sum(float(r.rubric_valid or 0.0) for r in raw) / n
        votes: dict[Hashable, int] = defaultdict(int)  # per pair (group): rubrics for a+ minus rubrics for a-
        for g, r in zip(groups, raw, strict=True):
            if not is_missing(r.s_pos) and not is_missing(r.s_neg):
                votes[g] += (r.s_pos > r.s_neg) - (r.s_pos < r.s_neg)  # type: ignore[operator]
        pairs_for: int | None = sum(v > 0 for v in votes.values())
        pairs_against: int | None = sum(v < 0 for v in votes.values())
    elif roles and roles[0] == "rubric":  # nothing judged (rewards.judge_weight 0): the rubrics' format alone
        pair_acc = pairs_for = pairs_against = None
        validity = sum(float(r.rubric_valid or 0.0) for r in raw) / n
    else:
        pair_acc = pairs_for = pairs_against = None
        present = [float(v) for v in policy_rubric_valid if v is not None]
        validity = sum(present) / len(present) if present else None
    readings = [c.value for r in raw for crit in r.criteria for c in crit if c.value is not None]
    positions: dict[str, list[float]] = defaultdict(list)
    for r in raw:
        for crit in r.criteria:
            for k, c in enumerate(crit, 1):
                positions[str(k)] += [] if c.value is None else [c.value]
    sizes = [len(r.criteria[0]) for r in raw if r.criteria and r.criteria[0]]
    if policy:  # one rubric per group
        sizes = list({g: len(r.criteria[0]) for g, r in zip(groups, raw, strict=True)
                      if r.criteria and r.criteria[0]}.values())
    flat_n, flat_total = sum(sum(f) for f in flat.values()), sum(len(f) for f in flat.values())
    asked, failures = cost.sent, cost.failures
    return StepRewards(rewards=filled, reward_mean=sum(filled) / n if n else 0.0,
                       reward_std=sum(stds) / len(stds) if stds else 0.0,
                       missing_rewards=sum(is_missing(r.reward) for r in raw) / n if n and judging else 0.0,
                       pair_accuracy=pair_acc, rubric_validity=validity, tied_groups=tied,
                       pair_judgements=n if pair_acc is not None else None,
                       pairs=len(by_group) if pair_acc is not None else None,
                       pairs_for=pairs_for, pairs_against=pairs_against,
                       reward_components=_components(judged, raw),
                       judge_p_yes=sum(readings) / len(readings) if readings else None,
                       judge_pass_rate=sum(p > 0.5 for p in readings) / len(readings) if readings else None,
                       criterion_pass_rates={k: sum(v > 0.5 for v in vs) / len(vs) for k, vs in positions.items()
                                             if vs} or None,
                       criteria_per_rubric=sum(sizes) / len(sizes) if sizes else None,
                       flat_criteria=flat_n / flat_total if flat_total else None,
                       judge_tokens=cost.tokens, judge_latency_s=cost.seconds,
                       judge_prompt_tokens=cost.prompt_tokens, judge_generated_tokens=cost.generated_tokens,
                       judge_requests=cost.requests,
                       judge_cache_hit_rate=(cost.cache_hits or 0) / cost.lookups if cost.lookups else None,
                       judge_failures=failures, judge_failure_share=failures / asked if asked else None,
                       judge_error=cost.error)


def check_failures(result: StepRewards, step: int, limit: float, run_dir: Path) -> None:
    """Stop the run (``RunError``, one line) when step ``step``'s share of failed judge requests exceeds ``limit``
    (``judge.max_failure_share``). Below it the failures stay missing scores: zero advantage, as the reference's NaN.

    Raised before the step touches the replay buffer or the logs, so ``evolm train --resume`` continues from the
    last checkpoint as if the step had not begun.
    """
    share = result.judge_failure_share
    if share is None or share <= limit:
        return
    from evolm.runs.rundir import checkpoint_state, complete_checkpoints

    done = complete_checkpoints(run_dir)
    then = (f"`evolm train --resume {run_dir}` continues it from step {checkpoint_state(done[-1]).step}" if done else
            f"it has no checkpoint yet: remove {run_dir} (or choose another output_dir) and start it again")
    raise RunError(f"step {step}: {result.judge_failures} of {round(result.judge_failures / share)} judge requests "
                   f"failed after their retries ({share:.0%}, over judge.max_failure_share={limit:g}); the run stops, "
                   f"{then}. First error: {result.judge_error}")


def flat_positions(raw: Sequence[RowReward], groups: Sequence[Hashable], policy: bool) -> dict[Any, list[bool]]:
    """Per unit of comparison (policy: a group, whose answers share a rubric; rubric: a row, judging its pair),
    per criterion position, whether the criterion is flat: its values (present ones, at least two) span less than
    ``FLAT_SPREAD``. Units whose answers' criteria differ in number, or have fewer than two, are left out.

    >>> crit = lambda *v: tuple(CriterionScore(str(k), 0.5, x) for k, x in enumerate(v))
    >>> flat_positions([RowReward(0.5, criteria=(crit(0.9, 0.2),)), RowReward(0.6, criteria=(crit(0.92, 0.8),))],
    ...                ["g", "g"], policy=True)
    {'g': [True, False]}
    """
    units: dict[Any, list[tuple[CriterionScore, ...]]] = defaultdict(list)
    for i, (g, r) in enumerate(zip(groups, raw, strict=True)):
        if policy:
            units[g] += [c for c in r.criteria[:1] if c]
        else:
            units[i] += [c for c in r.criteria if c]
    out: dict[Any, list[bool]] = {}
    for unit, answers in units.items():
        if len(answers) < 2 or len({len(a) for a in answers}) != 1:
            continue
        flags = []
        for k in range(len(answers[0])):
            values = [a[k].value for a in answers if a[k].value is not None]
            if len(values) >= 2:
                flags.append(max(values) - min(values) < FLAT_SPREAD)  # type: ignore[type-var,operator]
        out[unit] = flags
    return out


def drop_flat(raw: Sequence[RowReward], groups: Sequence[Hashable], flat: dict[Any, list[bool]]) -> list[RowReward]:
    """Policy rows, each score re-weighted over its group's criteria that are not flat (``rewards.drop_flat_criteria``).

    A flat criterion adds nearly the same amount to every answer of the group: it moves no advantage but, as its
    weight grows, squeezes the others' differences into a smaller range. A row keeps its reward when it has a
    missing value, when every criterion is flat, or when its group was not compared (``flat_positions``).

    >>> crit = lambda *v: tuple(CriterionScore(str(k), 0.5, x) for k, x in enumerate(v))
    >>> rows = [RowReward(0.55, score=0.55, criteria=(crit(0.9, 0.2),)),
    ...         RowReward(0.86, score=0.86, criteria=(crit(0.92, 0.8),))]
    >>> [round(r.reward, 2) for r in drop_flat(rows, ["g", "g"], {"g": [True, False]})]
    [0.2, 0.8]
    """
    out = []
    for g, r in zip(groups, raw, strict=True):
        flags = flat.get(g)
        crit = r.criteria[0] if r.criteria else ()
        kept = [c for c, f in zip(crit, flags or [], strict=False) if not f]
        total = sum(c.weight for c in kept)
        if (not flags or len(flags) != len(crit) or all(flags) or is_missing(r.reward) or not total > 0
                or any(c.value is None for c in kept)):
            out.append(r)
            continue
        score = sum(c.weight * c.value for c in kept) / total  # type: ignore[operator]
        out.append(replace(r, reward=score, score=score))
    return out


def _components(judged: Sequence[float], raw: Sequence[RowReward]) -> dict[str, float | None] | None:
    """The judge's mean reward and each extra reward's mean value (its rows' present values), or ``None``."""
    if not any(r.extras for r in raw):
        return None
    values: dict[str, list[float]] = defaultdict(list)
    for r in raw:
        for label, _, v in r.extras:
            values[label] += [] if v is None else [v]
    return {"judge": sum(judged) / len(judged), **{k: sum(v) / len(v) if v else None for k, v in values.items()}}


def completion_text(completion: Any) -> str:
    """The text of a TRL completion (a string, or a conversational list of messages)."""
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)
