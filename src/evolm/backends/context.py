"""The context guard: a prompt longer than its model's context is cut from the middle of its answer, or refused.

A judge prompt holds the instructions, the question, the rubric and the answer; the answer is the
policy's text and has no length limit of its own. Without a guard a 27k-character answer is scored
past an 8192-token context (silently, 93 s on CPU) and a 200k-character one runs for an hour. With
it, a prompt that does not leave the judge room to reply is either

- ``truncate`` (the default): the answer is cut from its middle (head and tail kept, a visible
  marker in place of what was cut, ``cut_middle``) until the prompt fits, and the row says so; when
  the question and rubric alone do not fit, the row gets no score and a reason; or
- ``refuse``: an error naming the row.

The room a reply needs: the generation budget (``max_new_tokens``) in the generative modes, at most
half the context (``reply_reserve``: a budget larger than the context would otherwise leave room for
no prompt at all); ``PROBE_RESERVE`` tokens in the probability modes, which read one token.

Counting tokens: a backend that can render and tokenize the prompt itself (``hf``: ``count_tokens``,
the exact ids it would run) counts exactly; any other (``openai``, ``vllm``) is estimated from the
text: ``ESTIMATE_BYTES_PER_TOKEN`` UTF-8 bytes per token plus ``ESTIMATE_MESSAGE_TOKENS`` per message
for the template, an overestimate for English prose (about 4.5 bytes per token) and code (3.5 to 4),
about right for CJK text (3 bytes per character, about one token each). The context is
``max_context`` when set, else the backend's own (``context_length``: the model's
``max_position_embeddings``, else the tokenizer's ``model_max_length`` when it is a real number);
a server's context is not known here, so a server judge has no guard until ``max_context`` is set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from evolm.backends.base import Conversation

PROBE_RESERVE = 8
"""Tokens left free after a probability-mode prompt (one is read; the rest is margin)."""
ESTIMATE_BYTES_PER_TOKEN = 3
ESTIMATE_MESSAGE_TOKENS = 16
_SANE_MAX_LENGTH = 10_000_000  # tokenizers without a limit report 1e30 as model_max_length
CUT_MARKER = "\n[... {n} characters cut by evolm: the answer exceeded the judge's context ...]\n"
_MAX_ROUNDS = 12  # shrink steps before falling back to the marker alone (each step cuts at least 5% more)


def model_context_length(model: Any, tokenizer: Any = None) -> int | None:
    """A transformers model's context in tokens: its config's ``max_position_embeddings``, else the tokenizer's
    ``model_max_length`` when that is a real limit (unset, it is 1e30); ``None`` when neither says.

    >>> from types import SimpleNamespace as NS
    >>> model_context_length(NS(config=NS(max_position_embeddings=8192)))
    8192
    >>> model_context_length(NS(config=NS()), NS(model_max_length=int(1e30))) is None
    True
    """
    config = getattr(model, "config", None)
    text_config = getattr(config, "get_text_config", None)
    if callable(text_config):
        try:
            config = text_config()
        except Exception:  # noqa: BLE001 - an odd config: read the top level
            pass
    for value, limit in ((getattr(config, "max_position_embeddings", None), None),
                         (getattr(tokenizer, "model_max_length", None), _SANE_MAX_LENGTH)):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0 and (limit is None or value <= limit):
            return value
    return None


def context_length(backend: Any, max_context: int = 0) -> int | None:
    """The context a prompt must fit: ``max_context`` when > 0, else the backend's own (``None``: unknown, no guard)."""
    if max_context and max_context > 0:
        return int(max_context)
    own = getattr(backend, "context_length", None)
    return own if isinstance(own, int) and not isinstance(own, bool) and own > 0 else None


def reply_reserve(context: int, max_new_tokens: int) -> int:
    """Tokens kept free for a sampled reply: its budget, at most half the context.

    >>> reply_reserve(40960, 16384), reply_reserve(8192, 16384)
    (16384, 4096)
    """
    return max(1, min(int(max_new_tokens), context // 2))


def estimate_tokens(conversation: Conversation) -> int:
    """An overestimate of a conversation's prompt tokens from its text (module docstring)."""
    total = 0
    for message in conversation:
        content = message.get("content")
        size = len(content.encode("utf-8", "surrogatepass")) if isinstance(content, str) else 0
        total += math.ceil(size / ESTIMATE_BYTES_PER_TOKEN) + ESTIMATE_MESSAGE_TOKENS
    return total


def prompt_tokens(backend: Any, conversations: Sequence[Conversation],
                  chat_template_kwargs: dict[str, Any] | None = None, *, reads_one_token: bool = False) -> list[int]:
    """Prompt length in tokens of each conversation: exact where the backend counts (``count_tokens``), else estimated.

    ``reads_one_token``: the prompt as the probability modes send it (after an empty think block for
    a thinking template).
    """
    count = getattr(backend, "count_tokens", None)
    if callable(count):
        return [int(n) for n in count(conversations, chat_template_kwargs, after_thinking=reads_one_token)]
    return [estimate_tokens(c) for c in conversations]


def cut_middle(text: str, keep: int) -> str:
    """``text`` with all but ``keep`` characters cut from its middle (head and tail kept), ``CUT_MARKER`` between.

    >>> cut_middle("abcdefghij", 4)
    "ab\\n[... 6 characters cut by evolm: the answer exceeded the judge's context ...]\\nij"
    >>> cut_middle("short", 10)
    'short'
    """
    keep = max(0, int(keep))
    if keep >= len(text):
        return text
    head = (keep + 1) // 2
    return text[:head] + CUT_MARKER.format(n=f"{len(text) - keep:,}") + text[len(text) - (keep - head):]


def fit_middle(text: str, tokens_of: Callable[[str], int], budget: int, tokens: int | None = None
               ) -> tuple[str | None, int, int]:
    """Cut ``text`` from its middle until ``tokens_of(result) <= budget``: ``(result, characters cut, fixed tokens)``.

    ``tokens_of`` gives the whole prompt's length with that text in it; ``tokens`` is its value for
    ``text`` when already known. ``fixed`` is the prompt's length with the text cut entirely (the
    rest of the prompt and the marker); when even that exceeds the budget the result is ``None``.
    Each round keeps the share of characters that the tokens still free allow, measured on the text
    kept so far, less 5%, so it ends in a few rounds (one or two on ordinary text).
    """
    n = tokens_of(text) if tokens is None else tokens
    if n <= budget:
        return text, 0, n
    fixed = tokens_of(cut_middle(text, 0))
    if fixed > budget:
        return None, 0, fixed
    keep = len(text)
    for _ in range(_MAX_ROUNDS):
        keep = min(keep - 1, int(keep * (budget - fixed) / max(1, n - fixed) * 0.95))
        if keep <= 0:
            break
        candidate = cut_middle(text, keep)
        n = tokens_of(candidate)
        if n <= budget:
            return candidate, len(text) - keep, fixed
    return cut_middle(text, 0), len(text), fixed


def over_context(backend: Any, conversations: Sequence[Conversation], *, max_context: int = 0, reply_tokens: int,
                 chat_template_kwargs: dict[str, Any] | None = None, what: str = "prompt") -> dict[int, str]:
    """Indices of the conversations that leave no room for a sampled reply of ``reply_tokens``, each with why.

    For prompts with nothing to cut (the rubric writer's: the question is all there is).
    """
    context = context_length(backend, max_context)
    if context is None or not conversations:
        return {}
    budget = context - reply_reserve(context, reply_tokens)
    counts = prompt_tokens(backend, conversations, chat_template_kwargs)
    return {i: f"the {what} is {n:,} tokens, over the {budget:,} that a {context:,}-token context leaves beside "
               f"the reply" for i, n in enumerate(counts) if n > budget}
