"""Fixtures for backend tests: a real local OpenAI-compatible server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai_server import RunningServer, serve


@pytest.fixture
def openai_server() -> Iterator[RunningServer]:
    """A fresh server per test, so in-flight counts and failure budgets never leak between tests."""
    with serve() as server:
        yield server
