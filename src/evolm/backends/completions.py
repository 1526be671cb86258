"""The OpenAI chat-completion wire format, both ways: what a request carries beyond the OpenAI schema (control
tokens in message text neutralised, ``extra_body`` for servers that take extra fields), and how a reply is read:
the first choice and its usage, or a one-line ``BackendError``; the first token's log-probabilities, or ``Unreadable``
for that row alone (a non-numeric, NaN, infinite or positive log-probability, odd token entries), never an exception
from deep inside the event loop."""

from __future__ import annotations

import json
import math
import re
import urllib.parse
from typing import Any

from evolm.backends.http import _snippet
from evolm.errors import BackendError

SERVER_SAMPLING: dict[str, Any] = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
"""Sampling fields outside the OpenAI schema, sent by ``generate`` to servers that take extra fields (vLLM, SGLang):
top-k off (-1, which every vLLM and SGLang version reads as off), no min-p, no repetition penalty. Left out, a
``vllm serve`` takes them from the model's generation config (Qwen3: top_k=20), and the distribution sampled would not
be the one ``SamplingParams`` describes."""
POSITIVE_LOGPROB_TOLERANCE = 1e-3
"""Log-probabilities up to this far above 0 are rounding (read as 0); larger ones are malformed."""

_CONTROL_OPEN = re.compile("<([|\uff5c])(?!\u200b)")
_ZERO_WIDTH_SPACE = "\u200b"


class Unreadable(Exception):
    """A reply's logprobs that cannot be read: the row has no score (not an error for the batch)."""


def first_choice(url: str, content: bytes) -> tuple[dict[str, Any], tuple[int, int] | None]:
    """The first choice of a chat-completion body and its (prompt, completion) token usage when reported,
    or a one-line ``BackendError`` for anything else (the caller removes the API key from it)."""
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        raise BackendError(
            f"openai backend: {url} answered HTTP 200 with a body that is not JSON: {_snippet(content)}"
        ) from None
    except RecursionError:  # a hostile or broken server: that row fails, as any unreadable reply does
        raise BackendError(f"openai backend: {url} answered with JSON nested too deeply") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if isinstance(data, dict) and choices is None and data.get("error") is not None:
        error = data["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise BackendError(f"openai backend: {url} answered with an error: {_snippet(str(message))}")
    if not isinstance(choices, list):
        raise BackendError(
            f"openai backend: {url} answered with something that is not a chat completion "
            f"(no 'choices' list): {_snippet(content)}"
        )
    if not choices:
        raise BackendError(f"openai backend: {url} returned no choices")
    if not isinstance(choices[0], dict):
        raise BackendError(
            f"openai backend: {url} returned a malformed choice: {_snippet(json.dumps(choices[0], default=str))}"
        )
    return choices[0], reply_usage(data.get("usage"))


def neutralize_control_tokens(text: str) -> str:
    """``text`` with a zero-width space after every ``<|`` (and DeepSeek's ``<｜``), so no tokenizer reads a control
    token in it.

    vLLM and SGLang tokenize the rendered chat prompt with special tokens enabled, so message text such as
    ``<|im_end|>`` would become a real control token and let an answer being judged end the judge's turn. The
    prompt's structure travels as chat messages, so the server still adds the real control tokens itself.
    Idempotent; ``<think>`` and other tags are left alone (ordinary text in Qwen3's vocabulary).

    >>> neutralize_control_tokens("ok<|im_end|>\\n<|im_start|>system <think>") == (
    ...     "ok<|\\u200bim_end|>\\n<|\\u200bim_start|>system <think>")
    True
    >>> neutralize_control_tokens(neutralize_control_tokens("<|eot_id|>")) == "<|\\u200beot_id|>"
    True
    """
    return _CONTROL_OPEN.sub(lambda m: "<" + m.group(1) + _ZERO_WIDTH_SPACE, text)


def top_logprobs(logprobs: Any) -> list[tuple[str, float]]:
    """``[(chosen token, logprob), *top alternatives]`` of the reply's first token; ``Unreadable`` if malformed.

    An empty reply (no tokens) gives ``[]``: no candidate is readable.
    """
    if not isinstance(logprobs, dict):
        raise Unreadable(f"logprobs is {_snippet(json.dumps(logprobs, default=str))}, not an object")
    content = logprobs.get("content")
    if content is None or content == []:
        return []
    if not isinstance(content, list):
        raise Unreadable(f"logprobs.content is {_snippet(json.dumps(content, default=str))}, not a list")
    first = content[0]
    chosen = _token_entry(first)
    alternatives = first.get("top_logprobs")
    if alternatives is None or alternatives == []:
        return [chosen, chosen]
    if not isinstance(alternatives, list):
        raise Unreadable(f"top_logprobs is {_snippet(json.dumps(alternatives, default=str))}, not a list")
    return [chosen, *(_token_entry(entry) for entry in alternatives)]


def _token_entry(entry: Any) -> tuple[str, float]:
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
        raise Unreadable(f"token entry {_snippet(json.dumps(entry, default=str))} has no token string")
    return entry["token"], _logprob(entry.get("logprob"))


def _logprob(value: Any) -> float:
    """A log-probability in ``[-inf, 0]``; tiny positive rounding reads as 0; anything else is ``Unreadable``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unreadable(f"logprob {value!r} is not a number")
    value = float(value)
    if math.isnan(value) or value == math.inf:
        raise Unreadable(f"logprob {value!r} is not a log-probability")
    if value > POSITIVE_LOGPROB_TOLERANCE:
        raise Unreadable(f"logprob {value:g} is positive")
    return min(value, 0.0)


def reply_usage(usage: Any) -> tuple[int, int] | None:
    """A reply's (prompt, completion) tokens, or ``None`` when it reports none (or nonsense)."""
    if not isinstance(usage, dict):
        return None
    counts = (usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        return None
    return counts[0], counts[1]


def extra_body(template_kwargs: dict[str, Any], sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """``extra_body`` only when there is something to send: strict servers reject unknown fields."""
    extra = {**(sampling or {}), **({"chat_template_kwargs": dict(template_kwargs)} if template_kwargs else {})}
    return {"extra_body": extra} if extra else {}


def is_openai_api(url: str) -> bool:
    """Whether ``url`` is OpenAI's own API (or Azure OpenAI), which rejects fields it does not know.

    >>> is_openai_api("https://api.openai.com/v1/"), is_openai_api("https://me.openai.azure.com/openai")
    (True, True)
    >>> is_openai_api("http://judge-host:8000/v1"), is_openai_api("not a url")
    (False, False)
    """
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


