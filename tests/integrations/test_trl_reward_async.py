"""make_trl_reward is async for a served judge, so TRL awaits it beside its other async rewards (real servers)."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from openai_server import MODEL_ID, serve
from trl.trainer.utils import is_async_callable

from evolm.backends.openai import OpenAIBackend
from evolm.integrations.trl import make_trl_reward
from evolm.judge.cache import CachedJudge
from evolm.judge.judge import Judge

PROMPTS = [[{"role": "user", "content": f"What is {k} + {k}?"}] for k in range(4)]
COMPLETIONS = [[{"role": "assistant", "content": f"It is {2 * k}."}] for k in range(4)]


@pytest.mark.slow
def test_served_judge_rewards_are_async_and_overlap(tiny_backend) -> None:  # noqa: ANN001
    with serve() as a, serve() as b:
        a.state.delay_s = b.state.delay_s = 0.4  # seconds per request: the judge servers' work
        judges = [Judge(OpenAIBackend(MODEL_ID, base_url=s.base_url), mode="prob") for s in (a, b)]
        sync = [make_trl_reward(j, asynchronous=False) for j in judges]
        fns = [make_trl_reward(CachedJudge(j) if k else j) for k, j in enumerate(judges)]
        assert all(is_async_callable(f) and inspect.iscoroutinefunction(f) for f in fns)  # how TRL tells them apart
        assert fns[0].__name__ == sync[0].__name__ == "evolm_rubric_reward"
        assert not is_async_callable(make_trl_reward(Judge(tiny_backend, mode="prob")))  # local: stays synchronous

        expected = [f(prompts=PROMPTS, completions=COMPLETIONS) for f in sync]  # TRL: one sync reward after another
        sync_spans = [list(s.state.spans) for s in (a, b)]
        for s in (a, b):
            s.state.spans.clear()

        async def gathered() -> list:  # TRL: its async rewards gathered on one event loop
            return await asyncio.gather(*(f(prompts=PROMPTS, completions=COMPLETIONS) for f in fns))

        got = asyncio.run(gathered())
        async_spans = [list(s.state.spans) for s in (a, b)]
    assert got == expected and all(v is not None for v in got[0])

    def overlap(x: list, y: list) -> bool:  # some request of one server was in flight while one of the other was
        return any(s1 < e2 and s2 < e1 for s1, e1 in x for s2, e2 in y)

    # synchronous: the second reward's requests start after the first's end; async: both servers work at once
    assert all(sync_spans) and not overlap(*sync_spans)
    assert all(async_spans) and overlap(*async_spans)
