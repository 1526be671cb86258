"""The judge cache: a result comes back only for the same judge, mode, wording, question, rubric and answer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evolm.judge.cache import CachedJudge, JudgeCache, judge_identity, judgment_key
from evolm.judge.judge import Judge, JudgeItem
from evolm.rubrics import Rubric
from evolm.scores import Judgment, scores_of
from evolm.training.judging import judge_rows, step_rewards

RUBRIC = Rubric.from_obj({"criteria": [{"criterion": "Says 4.", "weight": 0.6},
                                       {"criterion": "Shows the sum.", "weight": 0.4}]})
ITEM = JudgeItem("What is 2 + 2?", "4", RUBRIC, rubric_text="Says 4 (0.6); shows the sum (0.4).", reference="4")


def test_no_result_for_a_different_judgment(tiny_backend) -> None:  # noqa: ANN001
    """Each part of the key, changed alone, is another key; the same parts give the same key."""
    judge = Judge(tiny_backend, mode="yesno")
    base = judgment_key(judge_identity(judge), ITEM)
    assert judgment_key(judge_identity(Judge(tiny_backend, mode="yesno")), replace(ITEM)) == base
    other_rubric = Rubric.from_obj({"criteria": [{"criterion": "Says 4.", "weight": 0.5},
                                                 {"criterion": "Shows the sum.", "weight": 0.5}]})
    for item in (replace(ITEM, question="What is 2 + 3?"), replace(ITEM, answer="4."), replace(ITEM, rubric=None),
                 replace(ITEM, rubric=other_rubric), replace(ITEM, rubric_text="other"),
                 replace(ITEM, reference="four")):
        assert judgment_key(judge_identity(judge), item) != base
    for other in (Judge(tiny_backend, mode="prob"), Judge(tiny_backend, mode="yesno", defences=False),
                  Judge(tiny_backend, mode="generative", prompt="reference"), Judge(tiny_backend, mode="generative")):
        assert judgment_key(judge_identity(other), ITEM) != base
    # the prompt template version: the same settings with other wording are another judge
    assert judge_identity(Judge(tiny_backend, mode="generative", prompt="evolm")) != judge_identity(
        Judge(tiny_backend, mode="generative", prompt="reference"))


@pytest.mark.slow
def test_cached_scores_equal_the_judges_and_repeats_are_not_sent(tiny_backend) -> None:  # noqa: ANN001
    judge = Judge(tiny_backend, mode="yesno")
    items = [ITEM, replace(ITEM, answer="five"), ITEM, replace(ITEM, question="What is 1 + 1?", answer="2")]
    plain = scores_of(judge.score(items))
    cached = CachedJudge(Judge(tiny_backend, mode="yesno"))
    before = tiny_backend.usage
    first = cached.score_with_hits(items)
    assert scores_of(first.results) == pytest.approx(plain, abs=1e-5)  # batched otherwise: float noise only
    assert first.cached == [False, False, True, False] and first.sent == 3 and first.results[2] == first.results[0]
    assert (tiny_backend.usage - before).requests == 3 * 2  # two criteria per distinct item; the repeat not sent
    assert len(first.results[0].criteria) == 2  # the whole judgment is kept, its criteria too
    before = tiny_backend.usage
    again = cached.score_with_hits(items[::-1])
    assert again.results == first.results[::-1] and again.hit_rate == 1.0 and again.sent == 0
    assert (tiny_backend.usage - before).requests == 0
    assert cached.cache.stats.hit_rate == pytest.approx(5 / 8)  # 1 duplicate + 4 stored of 8 lookups


class _Recorder:
    """A judge double that records what it was sent and scores by answer length (None for 'fail')."""

    mode = "prob"

    def __init__(self) -> None:
        self.sent: list[list[JudgeItem]] = []

    def score(self, items: list[JudgeItem], progress: bool = False) -> list[Judgment]:
        self.sent.append(list(items))
        return [Judgment(None if it.answer == "fail" else len(it.answer) / 10) for it in items]


def test_order_bound_and_missing_results() -> None:
    inner = _Recorder()
    judge = CachedJudge(inner, JudgeCache(max_entries=3))
    items = [JudgeItem("q2", "a"), JudgeItem("q1", "bb", RUBRIC), JudgeItem("q2", "ccc"), JudgeItem("q1", "fail"),
             JudgeItem("q1", "dddd")]
    assert scores_of(judge.score(items)) == [0.1, 0.2, 0.3, None, 0.4]
    # sent grouped by question then rubric, so answers that share a prompt prefix reach the judge together
    assert [(it.question, it.answer) for it in inner.sent[0]] == [
        ("q1", "fail"), ("q1", "dddd"), ("q1", "bb"), ("q2", "a"), ("q2", "ccc")]
    assert len(judge.cache) == 3  # bounded: the oldest of the 4 scored results is gone, the missing one not kept
    judge.score(items)
    assert [it.answer for it in inner.sent[1]] == ["fail", "dddd"]  # the missing one asked again; "dddd" evicted


def test_step_logs_the_hit_rate(tiny_backend) -> None:  # noqa: ANN001
    judge = CachedJudge(Judge(tiny_backend, mode="prob"))
    rows = [{"role": "policy", "question": "What is 2 + 2?", "rubric": "", "rubric_text": ""}] * 4
    scored, cost = judge_rows(rows, ["4", "4", "4", "five"], [judge])
    first = step_rewards(["policy"] * 4, scored, [0] * 4, cost=cost)
    assert first.judge_cache_hit_rate == 0.5 and first.judge_requests == 2  # identical completions judged once
    scored, cost = judge_rows(rows, ["4", "five", "4", "5"], [judge])
    second = step_rewards(["policy"] * 4, scored, [0] * 4, cost=cost)
    assert second.judge_cache_hit_rate == 0.75 and second.metrics()["judge_cache_hit_rate"] == 0.75
    assert second.rewards[0] == first.rewards[0]


def test_serve_answers_a_repeat_from_the_cache(tiny_backend) -> None:  # noqa: ANN001
    import httpx
    from reward_server import running

    from evolm.serve.app import create_app

    body = {"query": [f"What is {q} + {q}?" + f" It is {2 * q}." for q in range(6)],
            "prompts": [f"What is {q} + {q}?" for q in range(6)]}
    plain = CachedJudge(Judge(tiny_backend, mode="prob"))
    with running(create_app(plain)) as url:
        first = httpx.post(url + "/get_reward", json=body, timeout=60).json()
        second = httpx.post(url + "/get_reward", json=body, timeout=60).json()
        health = httpx.get(url + "/health").json()
    assert first["extra_logs"]["judge_cached"] == [0.0] * 6 and second["extra_logs"]["judge_cached"] == [1.0] * 6
    assert second["rewards"] == first["rewards"]
    assert health["judge_cache"]["hit_rate"] == 0.5 and health["judge_cache"]["sent"] == 6


def test_overlong_refuse_names_the_callers_row_not_the_reordered_one(tiny_backend) -> None:  # noqa: ANN001
    """The cache sends items ordered by question; a refused prompt is still named by its place in the caller's list."""
    from evolm.judge.context_guard import OverlongPrompt

    judge = CachedJudge(Judge(tiny_backend, mode="prob", max_context=256, overlong="refuse"))
    items = [JudgeItem("b: what is 2 + 2?", "4"), JudgeItem("a: what is 3 + 3?", "six " * 2000),
             JudgeItem("c: what is 1 + 1?", "2")]
    with pytest.raises(OverlongPrompt) as e:
        judge.score(items)
    assert e.value.index == 1


def test_each_reward_model_has_its_own_identity() -> None:
    """A reward model's model, reading and length limit are in its identity: two reward models never share results."""
    from types import SimpleNamespace

    from evolm.judge.reward_model import RewardModel

    def model(name: str) -> SimpleNamespace:
        return SimpleNamespace(config=SimpleNamespace(name_or_path=name))

    a = model("rm-a")
    base = judge_identity(RewardModel(a, None))
    assert judge_identity(RewardModel(a, None)) == base
    for other in (RewardModel(model("rm-b"), None), RewardModel(a, None, reading="reference"),
                  RewardModel(a, None, max_length=512)):
        assert judge_identity(other) != base


def test_memory_is_bounded_in_bytes() -> None:
    """Results with long reasoning (a generative judge) fill the byte bound long before the entry bound."""
    cache = JudgeCache(max_entries=1000, max_mb=1.0)
    for k in range(40):
        cache.put(f"key{k}", Judgment(0.5, reasoning="x" * 100_000))
    assert 5 <= len(cache) <= 10 and cache.bytes <= 2**20
    assert cache.get("key39")[0] and not cache.get("key0")[0]  # the least recently used went first
    cache.put("huge", Judgment(0.5, reasoning="x" * 2_000_000))  # larger than the whole bound: not kept
    assert not cache.get("huge")[0] and cache.get("key39")[0]
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0
