"""Test helpers for ``evolm serve``: the app on a real uvicorn server, and a judge that tests steer.

``running(app)`` serves an app built by ``evolm.serve.app.create_app`` on a free port of 127.0.0.1 in
a background thread (lifespan on, so the batcher runs) until the block ends. ``FakeJudge`` stands
in for ``evolm.judge.judge.Judge`` where a test needs to control time or see the calls: it records every
``score`` call, can wait on a gate or fail on a marked answer, and scores deterministically.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from openai_server import run_app

from evolm.judge.judge import JudgeItem
from evolm.scores import Judgment


@contextmanager
def running(app) -> Iterator[str]:  # noqa: ANN001 - a FastAPI app
    from evolm.serve.http import uvicorn_options

    settings = getattr(app.state, "settings", None)  # an evolm serve app's limits; any other app runs plain
    with run_app(app, lifespan="on", start_timeout_s=20, what="evolm reward server",
                 **(uvicorn_options(settings) if settings is not None else {})) as port:
        yield f"http://127.0.0.1:{port}"


def fake_score(item: JudgeItem) -> float:
    """Deterministic: 0.9 with a rubric, else the answer's length / 100 (at most 1)."""
    return 0.9 if item.rubric is not None else min(1.0, len(item.answer) / 100)


@dataclass
class FakeJudge:
    mode: str = "fake"
    gate: threading.Event | None = None  # score() waits for it (up to 10 s) when set
    fail_on: str | None = None  # an answer holding this text makes the whole call raise
    missing_on: str | None = None  # an answer holding this text gets no score (None)
    calls: list[list[JudgeItem]] = field(default_factory=list)
    entered: threading.Event = field(default_factory=threading.Event)

    def score(self, items: list[JudgeItem]) -> list[Judgment]:
        self.calls.append(list(items))
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail_on is not None and any(self.fail_on in it.answer for it in items):
            raise RuntimeError("the judge failed")
        return [Judgment(None if self.missing_on and self.missing_on in it.answer else fake_score(it)) for it in items]


@dataclass
class FakeWriter:
    """A rubric writer (``Backend.generate``) that always writes ``RUBRIC`` and counts the prompts it saw."""

    name: str = "fake-writer"
    prompts: int = 0

    def generate(self, conversations, params, *, progress: bool = False) -> list[str]:  # noqa: ANN001
        self.prompts += len(conversations)
        return [RUBRIC_TEXT] * len(conversations)


RUBRIC = {"criteria": [
    {"criterion": "The answer is correct.", "weight": 0.7, "scoring_levels": {"1.0": "yes", "0.0": "no"}},
    {"criterion": "The answer is brief.", "weight": 0.3, "scoring_levels": {"1.0": "yes", "0.0": "no"}},
]}
RUBRIC_TEXT = '{"criteria": [{"criterion": "The answer is correct.", "weight": 0.7, "scoring_levels": ' \
              '{"1.0": "yes", "0.0": "no"}}, {"criterion": "The answer is brief.", "weight": 0.3, ' \
              '"scoring_levels": {"1.0": "yes", "0.0": "no"}}]}'
