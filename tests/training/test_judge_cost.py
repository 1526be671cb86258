"""Judge cost per step: a local judge's tokens, generated tokens and requests reach the step's numbers."""

from __future__ import annotations

from evolm.backends.base import SamplingParams
from evolm.training.judging import judge_rows, step_rewards


def test_local_judge_cost_reaches_the_step(tiny_backend) -> None:  # noqa: ANN001
    from evolm.judge.judge import Judge

    judge = Judge(tiny_backend, mode="prob")
    rows = [{"role": "policy", "question": "What is 2 + 2?", "rubric": "", "rubric_text": ""}] * 3
    before = tiny_backend.usage
    scored, cost = judge_rows(rows, ["4", "four", "5"], [judge])
    spent = tiny_backend.usage - before
    assert spent.requests == 3 and spent.completion_tokens == 3  # one prompt and one next-token read per answer
    assert spent.prompt_tokens > 3 * 10  # the judge's instructions, question and answer, counted from the ids
    result = step_rewards(["policy"] * 3, scored, [0, 0, 0], cost=cost)
    assert (result.judge_requests, result.judge_prompt_tokens, result.judge_generated_tokens) == (
        3, spent.prompt_tokens, 3)
    assert result.judge_tokens == spent.prompt_tokens + 3 and result.judge_latency_s > 0
    assert result.metrics()["judge_prompt_tokens"] == spent.prompt_tokens


def test_local_generation_counts_generated_tokens(tiny_backend) -> None:  # noqa: ANN001
    before = tiny_backend.usage
    tiny_backend.generate([[{"role": "user", "content": "hi"}]] * 2, SamplingParams(0.0, 1.0, 5, 0))
    spent = tiny_backend.usage - before
    assert spent.requests == 2 and 0 < spent.completion_tokens <= 10 and spent.latency_s > 0
