"""Mixed rewards (``rewards.extra``) and the judge's per-criterion readings, at the reward-function level.

The reward function TRL calls (``step.TrainingSteps`` itself) is driven here with TRL's keyword
arguments, its judging and its step reduced (``TrainingSteps.score`` / ``TrainingSteps.finish`` reduced to
``step_rewards``), so the sum, the policy-only rule and what reaches ``log_metric`` / ``log_extra``
are checked by hand without a training run (``lora_run`` in tests/training/conftest.py has one).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from tiny_run import G, P, row_rewards

from evolm.config import load_config
from evolm.errors import InputError
from evolm.judge.judge import Judge, JudgeItem
from evolm.rubrics import Rubric
from evolm.runs.jsonl import read_jsonl
from evolm.training.contrast import ReplayBuffer
from evolm.training.extra_rewards import ExtraReward, extra_rewards
from evolm.training.judging import JudgeCost, RowReward, step_rewards
from evolm.training.plan import Plan
from evolm.training.step import TrainingSteps

SOFT = "trl.rewards.get_soft_overlong_punishment"


def length_reward(completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
    """A reward function as TRL calls one: one value per completion (here its token count)."""
    return [float(len(ids)) for ids in completion_ids]


# ----------------------------------------------------------------------------- resolving rewards.extra


def test_factories_take_kwargs_and_functions_do_not() -> None:
    extras = extra_rewards([
        {"name": SOFT, "kwargs": {"max_completion_len": 10, "soft_punish_cache": 4}, "weight": 0.5},
        {"name": "trl.rewards.think_format_reward"},  # a reward function itself: no kwargs
        {"name": "trl.rewards:get_repetition_penalty_reward", "kwargs": {}},  # a factory with its defaults
        {"name": "trl.rewards:think_format_reward", "weight": 2},  # the same function twice: labels stay apart
    ])
    assert [(e.label, e.weight) for e in extras] == [
        ("soft_overlong_punishment_reward", 0.5), ("think_format_reward", 1.0), ("repetition_penalty_reward", 1.0),
        ("think_format_reward_2", 2.0)]
    assert extras[0].fn(completion_ids=[[1] * 6, [1] * 8, [1] * 11]) == [0.0, -0.5, -1.0]  # the factory's function


@pytest.mark.parametrize(("entry", "message"), [
    ("{name: trl.rewards.no_such_reward}", "rewards.extra[0]: trl.rewards has no 'no_such_reward'"),
    ("{name: no_such_package.mod:fn}", "rewards.extra[0]: cannot import no_such_package.mod (ModuleNotFoundError"),
    ("{name: noimportpath}", "rewards.extra[0]: 'noimportpath' is not an import path"),
    (f"{{name: {SOFT}}}", "does not take **kwargs (TRL passes every row column as a keyword); if it is a factory"),
    (f"{{name: {SOFT}, kwargs: {{max_len: 3}}}}", "(**kwargs) failed: TypeError: get_soft_overlong_punishment() got"),
    ("{name: trl.rewards.think_format_reward, weight: heavy}", "rewards.extra[0]: weight must be a finite number"),
    ("{name: trl.rewards.think_format_reward, kwargs: 3}", "rewards.extra[0]: kwargs must be a mapping"),
    ("{name: trl.rewards.think_format_reward, scale: 2}", "rewards.extra[0]: unknown key 'scale'"),
    ("trl.rewards.think_format_reward", "rewards.extra[0] must be a mapping with a 'name'"),
])
def test_bad_extra_rewards_are_one_line_errors_when_resolved(entry: str, message: str) -> None:
    """A bad shape is refused when the config loads; a bad name when the functions are imported (the trainer's build
    and the dry run), never by merely loading a config."""
    with pytest.raises(InputError) as err:
        extra_rewards(load_config(None, [f"rewards.extra=[{entry}]"]).rewards.extra)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_loading_a_config_imports_no_reward_function() -> None:
    cfg = load_config(None, ["rewards.extra=[{name: no_such_package.mod:fn}]"])
    assert cfg.rewards.extra == [{"name": "no_such_package.mod:fn"}]
    with pytest.raises(InputError, match="weight must be a finite number"):
        load_config(None, ["rewards.extra=[{name: no_such_package.mod:fn, weight: heavy}]"])


def test_extra_rewards_are_off_by_default_and_saved_as_written(tmp_path: Path) -> None:
    from evolm.runs.rundir import save_config

    assert load_config(None).rewards.extra == []
    entry = {"name": SOFT, "kwargs": {"max_completion_len": 480, "soft_punish_cache": 64}, "weight": 0.5}
    cfg = load_config(None, [f"rewards.extra=[{{name: {SOFT}, weight: 0.5, "
                             "kwargs: {max_completion_len: 480, soft_punish_cache: 64}}]"])
    assert cfg.rewards.extra == [entry]
    save_config(cfg, tmp_path / "c.yaml")  # the config keeps the import path, not a function: it saves and reloads
    assert load_config(tmp_path / "c.yaml").rewards.extra == [entry]


# ----------------------------------------------------------------------------- the sum


def test_step_rewards_add_weighted_extras_after_group_filling() -> None:
    raw = [RowReward(0.8, extras=(("len", 0.5, -1.0), ("fmt", 2.0, 1.0))),
           RowReward(None, extras=(("len", 0.5, 0.0), ("fmt", 2.0, None))),  # judge missing: its group's mean, 0.8
           RowReward(0.2, extras=(("len", 0.5, -0.5), ("fmt", 2.0, 0.0)))]
    r = step_rewards(["policy"] * 3, raw, ["a", "a", "b"])
    expected = [0.8 - 0.5 + 2.0, 0.8 + 0.0, 0.2 - 0.25 + 0.0]
    assert r.rewards == pytest.approx(expected)
    assert r.reward_mean == pytest.approx(sum(expected) / 3)  # what GRPO uses
    assert r.reward_components == pytest.approx({"judge": (0.8 + 0.8 + 0.2) / 3, "len": -0.5, "fmt": 0.5})
    assert r.metrics()["reward/len"] == pytest.approx(-0.5) and "reward/judge" in r.metrics()
    plain = step_rewards(["policy"] * 2, [RowReward(0.8), RowReward(0.4)], ["a", "a"])
    assert plain.reward_components is None and not any(k.startswith("reward/") for k in plain.metrics())


class _Steps(TrainingSteps):
    """``step.TrainingSteps`` as TRL's reward function, on fixed judge scores (``scores``) and the given extras."""

    scores: tuple[float | None, ...] | list[float | None] = ()

    def score(self, rows: list[dict], completions: list[str]) -> tuple[list[RowReward], JudgeCost]:
        return [RowReward(s, score=s, criteria=(_crit(0.9, 0.2),)) if r["role"] == "policy" else
                RowReward(s, s_pos=0.7, s_neg=0.3, criteria=(_crit(0.7), _crit(0.3)))
                for r, s in zip(rows, self.scores, strict=True)], JudgeCost()

    def finish(self, rows, completions, scored, lengths, is_main, costs=()):  # noqa: ANN001, ANN201
        result = step_rewards([r["role"] for r in rows], scored, [r["slot"] for r in rows])
        return result.rewards, result.metrics()


def _call(reward_fn: Any, role: str, ids: list[list[int]]) -> tuple[list[float], dict[str, float], dict[str, list]]:
    metrics: dict[str, float] = {}
    extra: dict[str, list] = {}
    n = len(ids)
    rows = {"role": [role] * n, "slot": [i // 2 for i in range(n)], "question": ["q"] * n,
            "rubric_text": ["- be right" if role == "policy" else ""] * n,
            "a_pos": ["" if role == "policy" else "good"] * n, "a_neg": ["" if role == "policy" else "bad"] * n}
    out = reward_fn(prompts=[[{"role": "user", "content": "q"}]] * n,
                    completions=[[{"role": "assistant", "content": "x" * len(i)}] for i in ids], completion_ids=ids,
                    trainer_state=None, log_metric=metrics.__setitem__,
                    log_extra=lambda column, values: extra.setdefault(column, []).extend(values), **rows)
    return out, metrics, extra


def _steps(tmp_path: Path, scores: list[float | None], extras: list[ExtraReward]) -> TrainingSteps:
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    steps = _Steps(cfg, Plan(cfg, ["q"]), ReplayBuffer(4), tmp_path, judges=[])
    steps.scores, steps.extras = scores, extras
    return steps


def test_the_reward_function_adds_extras_on_policy_steps_only(tmp_path: Path) -> None:
    reward_fn = _steps(tmp_path, [0.5, 0.7, 0.2, None], [ExtraReward("length", 0.1, length_reward)])
    ids = [[1, 2], [1, 2, 3, 4], [1], [1, 2, 3]]
    out, metrics, extra = _call(reward_fn, "policy", ids)
    assert out == pytest.approx([0.5 + 0.2, 0.7 + 0.4, 0.2 + 0.1, 0.2 + 0.3])  # the missing one: its group's mean
    assert metrics["evolm/reward/judge"] == pytest.approx((0.5 + 0.7 + 0.2 + 0.2) / 4)
    assert metrics["evolm/reward/length"] == pytest.approx(2.5)  # each component's mean, before its weight
    assert metrics["evolm/judge_p_yes"] == pytest.approx(0.55) and metrics["evolm/judge_pass_rate"] == 0.5
    assert sorted(extra) == ["a_neg", "a_pos", "role", "rubric", "s_neg", "s_pos", "score"]
    assert extra["rubric"] == ["- be right"] * 4 and extra["score"] == [0.5, 0.7, 0.2, None]

    out, metrics, extra = _call(reward_fn, "rubric", ids)  # a rubric step: no extra reward is even called
    assert out == pytest.approx([0.5, 0.7, 0.2, 0.2])
    assert not any(k.startswith("evolm/reward/") for k in metrics) and metrics["evolm/judge_pass_rate"] == 0.5
    assert sorted(extra) == ["a_neg", "a_pos", "role", "rubric", "s_neg", "s_pos", "score"]  # the same columns
    assert extra["a_pos"] == ["good"] * 4 and extra["s_pos"] == [0.7] * 4 and extra["rubric"] == [""] * 4


def test_a_misbehaving_extra_reward_is_an_error_naming_it(tmp_path: Path) -> None:
    reward_fn = _steps(tmp_path, [0.5, 0.5], [ExtraReward("short", 1.0, lambda **kw: [1.0])])
    with pytest.raises(InputError, match="rewards.extra: short returned 1 values for 2 completions"):
        _call(reward_fn, "policy", [[1], [2]])
    nan = _steps(tmp_path, [0.5, 0.5], [ExtraReward("nan", 1.0, lambda **kw: [math.nan, None])])
    assert _call(nan, "policy", [[1], [2]])[0] == [0.5, 0.5]  # NaN and None: no reward from that term


# ----------------------------------------------------------------------------- the judge's per-criterion readings


RUBRIC = Rubric.from_obj({"criteria": [
    {"criterion": "The answer says 4.", "weight": 0.75, "scoring_levels": {"1.0": "says 4", "0.0": "does not"}},
    {"criterion": "The answer is short.", "weight": 0.25, "scoring_levels": {"1.0": "yes", "0.0": "no"}}]})


def test_the_yesno_judgment_is_the_weighted_sum_of_its_criteria(tiny_backend: Any) -> None:
    judge = Judge(tiny_backend, mode="yesno")
    items = [JudgeItem("What is 2 + 2?", "4", RUBRIC), JudgeItem("What is 2 + 2?", "five", None)]
    judged = judge.score(items)
    assert [len(j.criteria) for j in judged] == [2, 1]  # two criteria; the judge alone: one generic criterion
    first = judged[0].criteria
    assert [c.text for c in first] == [c.criterion for c in RUBRIC.criteria]
    assert [c.weight for c in first] == pytest.approx([0.75, 0.25])  # each criterion's share of the rubric's weight
    assert all(0.0 < c.value < 1.0 for c in first)  # P(Yes) / (P(Yes) + P(No)) of a random model
    assert judged[0].score == pytest.approx(sum(c.weight * c.value for c in first))  # the score is their weighted sum
    assert judged[1].score == pytest.approx(judged[1].criteria[0].value)
    assert judged[0].reasoning is None and judged[0].to_dict()["criteria"][1] == {
        "text": "The answer is short.", "weight": first[1].weight, "value": first[1].value}

    rows = [{"role": "policy", "question": "What is 2 + 2?", "rubric": RUBRIC.to_dict(), "rubric_text": ""},
            {"role": "policy", "question": "What is 2 + 2?", "rubric": "", "rubric_text": ""}]
    scored = row_rewards(rows, ["4", "five"], [judge])
    assert [r.criteria for r in scored] == [(j.criteria,) for j in judged]
    result = step_rewards(["policy"] * 2, scored, ["q", "q"])
    readings = [c.value for j in judged for c in j.criteria]
    assert result.judge_p_yes == pytest.approx(sum(readings) / 3)
    assert result.judge_pass_rate == pytest.approx(sum(p > 0.5 for p in readings) / 3)
    by_position = [[first[0].value, judged[1].criteria[0].value], [first[1].value]]
    assert result.criterion_pass_rates == pytest.approx({str(k): sum(v > 0.5 for v in vs) / len(vs)
                                                         for k, vs in enumerate(by_position, 1)})
    assert result.metrics()["judge_pass_rate/c2"] == float(first[1].value > 0.5)

    prob = Judge(tiny_backend, mode="prob")
    assert [j.criteria for j in prob.score(items)] == [None, None]  # one reading per answer, no criteria
    assert step_rewards(["policy"] * 2, row_rewards(rows, ["4", "five"], [prob]), ["q", "q"]).judge_p_yes is None


def _crit(*values: float | None) -> tuple:
    from evolm.scores import CriterionScore

    return tuple(CriterionScore(f"c{k}", 1 / len(values), v) for k, v in enumerate(values))


def test_flat_criteria_are_counted_per_group_and_per_pair_and_can_be_dropped_from_the_policy_reward() -> None:
    # group a: criterion 1 separates the answers, criterion 2 does not (0.90 vs 0.93); group b: both separate
    rows = [RowReward(0.55, score=0.55, criteria=(_crit(0.2, 0.90),)), RowReward(0.865, score=0.865,
            criteria=(_crit(0.8, 0.93),)), RowReward(0.5, score=0.5, criteria=(_crit(0.1, 0.9),)),
            RowReward(0.5, score=0.5, criteria=(_crit(0.9, 0.1),))]
    groups = ["a", "a", "b", "b"]
    kept = step_rewards(["policy"] * 4, rows, groups)
    assert kept.flat_criteria == pytest.approx(1 / 4) and kept.criteria_per_rubric == 2.0
    assert kept.rewards == pytest.approx([0.55, 0.865, 0.5, 0.5])  # off by default: the rewards as judged
    dropped = step_rewards(["policy"] * 4, rows, groups, drop_flat_criteria=True)
    assert dropped.rewards == pytest.approx([0.2, 0.8, 0.5, 0.5])  # group a scored by its separating criterion only
    assert dropped.flat_criteria == kept.flat_criteria  # the share is measured before any dropping

    pair = [RowReward(1.0, s_pos=0.6, s_neg=0.5, rubric_valid=1.0,
                      criteria=(_crit(0.9, 0.3, 0.5), _crit(0.4, 0.31, None)))]
    rubric = step_rewards(["rubric"], pair, ["q"])
    assert rubric.flat_criteria == pytest.approx(1 / 2)  # c1 separates the pair, c2 does not, c3 has one reading
    assert rubric.criteria_per_rubric == 3.0 and rubric.metrics()["flat_criteria"] == pytest.approx(0.5)


def test_drop_flat_criteria_needs_the_yesno_judge() -> None:
    with pytest.raises(InputError, match="judge.mode=yesno"):
        load_config(None, ["rewards.drop_flat_criteria=true", "judge.mode=prob"])
    assert load_config(None, ["rewards.drop_flat_criteria=true", "judge.mode=yesno"]).rewards.drop_flat_criteria
    assert not load_config(Path(__file__).parents[2] / "configs" / "paper-qwen3-8b.yaml").rewards.drop_flat_criteria


@pytest.mark.slow
def test_extra_rewards_are_summed_and_logged_per_step(lora_run: Path) -> None:
    policy, rubric = read_jsonl(lora_run / "metrics.jsonl")
    parts = policy["reward_components"]
    assert set(parts) == {"judge", "soft_overlong_punishment_reward"}
    assert -1.0 <= parts["soft_overlong_punishment_reward"] <= 0.0
    assert policy["reward_mean"] == pytest.approx(parts["judge"] + 0.5 * parts["soft_overlong_punishment_reward"])
    samples = read_jsonl(lora_run / "samples" / "phase-000-policy.jsonl")
    assert len(samples) == P * G and parts["judge"] == pytest.approx(sum(s["reward"] for s in samples) / len(samples))
    assert rubric["reward_components"] is None  # rubric steps are untouched
    for r in (policy, rubric):  # the yesno judge's per-criterion readings, both roles
        assert 0.0 <= r["judge_p_yes"] <= 1.0 and 0.0 <= r["judge_pass_rate"] <= 1.0
