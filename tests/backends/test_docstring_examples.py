"""The examples in the backends' docstrings hold (reading replies, the chat-completion wire format, shared prefixes,
devices)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["replies", "completions", "prefix", "devices"])
def test_the_docstring_examples_hold(module: str) -> None:
    assert doctest.testmod(importlib.import_module(f"evolm.backends.{module}")).failed == 0
