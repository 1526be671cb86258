"""A door for your own TRL runs: ``make_trl_reward`` turns an evolm judge into a ``GRPOTrainer`` reward function (the
rubric from a dataset column), async when the judge is served."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evolm.rewards import policy_reward
from evolm.training.judging import completion_text


def make_trl_reward(judge: Any, rubric_column: str = "rubric", asynchronous: bool | None = None
                    ) -> Callable[..., Any]:
    """A TRL ``GRPOTrainer`` reward function: the judge's score of each completion against its row's rubric.

    The rubric comes from the dataset column ``rubric_column`` (object or JSON string; empty or
    missing: the judge scores alone), so rows are self-contained and TRL may split groups across
    processes. Returns ``None`` for a missing score (TRL then gives it zero advantage).

    ``asynchronous`` (``None``: when the judge is served, ``backend="openai"``) makes it an ``async def``:
    TRL awaits its async reward functions together, after the synchronous ones (trl 1.16's
    reward step tells them apart with ``is_async_callable``), so two served
    judges, or a judge and another async reward (a verifier behind HTTP), wait on their servers at the same
    time instead of one after the other. The judge's call runs in a worker thread meanwhile
    (``asyncio.to_thread``); the scores are those of the synchronous function. A local judge stays
    synchronous: it computes on the trainer's own device, where nothing overlaps.
    """
    from evolm.judge.judge import JudgeItem
    from evolm.rubrics import Rubric

    def evolm_rubric_reward(prompts: list[Any], completions: list[Any], **cols: Any) -> list[float | None]:
        rubrics = cols.get(rubric_column) or [None] * len(prompts)
        items = [
            JudgeItem(_question_of(p), completion_text(c), Rubric.from_obj(r) if r else None)
            for p, c, r in zip(prompts, completions, rubrics, strict=True)
        ]
        return [policy_reward(j.score) for j in judge.score(items)]

    if not (is_served(judge) if asynchronous is None else asynchronous):
        return evolm_rubric_reward
    scored = evolm_rubric_reward

    async def evolm_rubric_reward_async(prompts: list[Any], completions: list[Any], **cols: Any) -> list[float | None]:
        import asyncio

        return await asyncio.to_thread(scored, prompts, completions, **cols)

    evolm_rubric_reward_async.__name__ = "evolm_rubric_reward"  # TRL's log name, the same either way
    return evolm_rubric_reward_async


def is_served(judge: Any) -> bool:
    """Whether ``judge`` (or the judge a cache wraps) scores on a server (``OpenAIBackend``)."""
    from evolm.backends.openai import OpenAIBackend

    return isinstance(getattr(getattr(judge, "judge", judge), "backend", None), OpenAIBackend)


def _question_of(prompt: Any) -> str:
    if isinstance(prompt, list):  # conversational: the last user message is the question
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return str(prompt)
