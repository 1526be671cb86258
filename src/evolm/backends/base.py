"""The one small interface every generation backend implements.

A backend turns batches of chat conversations into texts (``generate``) and, for the judge's
probability modes, into next-token log-probabilities of a few candidate strings
(``next_token_logprobs``). Three implementations exist: local transformers (``hf``), any
OpenAI-compatible HTTP server (``openai``) and in-process vLLM (``vllm``, lazy import).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]
Conversation = list[Message]


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings shared by all backends.

    ``temperature == 0`` means greedy decoding. ``seed`` makes sampling repeatable where the backend
    allows it (transformers: always; servers: when they honour the ``seed`` field).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    """Batches of chat conversations in, texts (or candidate log-probabilities) out."""

    name: str

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams, *, progress: bool = False
    ) -> list[str]:
        """One completion per conversation, in order. Never drops a row: a failed row raises."""
        ...

    def next_token_logprobs(
        self,
        conversations: Sequence[Conversation],
        candidates: Sequence[str],
        *,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> list[dict[str, float]]:
        """For each conversation, the log-probability that the assistant's reply starts with each candidate.

        The value for a candidate is the log-probability of its first token (a candidate that is not
        among the tokens the backend can report gets ``-inf``). Candidates that share a first token
        get the same value, so callers choose candidates that differ in their first token (digits,
        "Yes"/"No").
        """
        ...


def chat_kwargs(params_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """Copy of the chat-template kwargs (e.g. ``{"enable_thinking": False}`` for Qwen3)."""
    return dict(params_kwargs or {})


# ----------------------------------------------------------------------------- thinking templates

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
EMPTY_THINK_BLOCK = "<think>\n\n</think>\n\n"
"""What Qwen3's template writes after the assistant header when thinking is off: the model was
trained to answer right after it, so a one-token read placed there reads the answer itself."""


def template_thinks(template: Any) -> bool:
    """Whether a chat template (a string, or a dict of named templates) mentions think blocks at all.

    A cheap first test; ``renders_thinking`` says whether it actually makes the reply think.

    >>> template_thinks("{{ '<think>\\n\\n</think>\\n\\n' }}"), template_thinks("{{ messages }}"), template_thinks(None)
    (True, False, False)
    """
    if isinstance(template, dict):
        return any(template_thinks(t) for t in template.values())
    return isinstance(template, str) and THINK_OPEN in template and THINK_CLOSE in template


def renders_thinking(render: Callable[..., str]) -> bool:
    """Whether a chat template makes the reply think, judged by what it renders.

    ``render(**kwargs)`` renders a one-message conversation with the generation prompt. A template
    thinks when it opens ``<think>`` for the reply (Qwen3-Thinking-2507, QwQ, newer R1 distills) or
    writes a closed think block when told ``enable_thinking=False`` (Qwen3's switch, SmolLM3).
    Templates that only strip think blocks from past turns (Qwen3-Instruct-2507) do not: their
    model never thinks, and an empty think block would be a prompt it never saw. A template that
    fails to render is taken as not thinking.

    >>> qwen3 = lambda enable_thinking=True: "<|im_start|>assistant\\n" + ("" if enable_thinking else EMPTY_THINK_BLOCK)
    >>> renders_thinking(qwen3), renders_thinking(lambda **kw: "<|im_start|>assistant\\n")
    (True, False)
    """
    try:
        default = render().rstrip()
        off = render(enable_thinking=False).rstrip()
    except Exception:  # noqa: BLE001 - any template error: no think handling
        return False
    return default.endswith(THINK_OPEN) or (off.endswith(THINK_CLOSE) and not default.endswith(THINK_CLOSE))


def tokenizer_thinks(tokenizer: Any) -> bool:
    """Whether a transformers tokenizer's chat template makes the reply think (``hf`` and ``vllm`` backends)."""
    if not template_thinks(getattr(tokenizer, "chat_template", None)):
        return False
    hello = [{"role": "user", "content": "Hello"}]
    return renders_thinking(
        lambda **kwargs: tokenizer.apply_chat_template(hello, tokenize=False, add_generation_prompt=True, **kwargs)
    )


def close_thinking(prompt: str) -> str:
    """A rendered prompt of a thinking template, ended so that the next token comes after a closed think block.

    The probability modes read one token. A thinking model (Qwen3 with thinking on, R1-style or
    "Thinking-2507" templates that open ``<think>`` themselves) wants to start its reply with
    ``<think>`` or with reasoning; the score it would give comes only after ``</think>``. So:
    a prompt that already ends after ``</think>`` (Qwen3 with ``enable_thinking=False``) is kept
    (with a blank line added if nothing follows the tag); one that ends inside an opened block is
    closed empty; any other gets the empty block Qwen3 uses when thinking is off.

    >>> close_thinking("<|im_start|>assistant\\n")
    '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'
    >>> close_thinking("<|im_start|>assistant\\n<think>\\n")
    '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'
    >>> close_thinking("<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n")
    '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'
    """
    tail = prompt.rstrip()
    if tail.endswith(THINK_CLOSE):
        return prompt if len(tail) < len(prompt) else prompt + "\n\n"
    if tail.endswith(THINK_OPEN):
        return tail[: -len(THINK_OPEN)] + EMPTY_THINK_BLOCK
    return prompt + EMPTY_THINK_BLOCK


def opened_thinking(prompt: str) -> str:
    """The start of a think block that a rendered prompt opened for the reply (``"<think>\\n"``), else ``""``.

    Templates such as Qwen3-Thinking-2507's end the prompt with ``<think>\\n``, so the model's
    reply carries only the closing tag. Backends put this opening back in front of the reply: a
    reply cut before ``</think>`` then reads as unfinished thinking (no answer, a missing score),
    not as an answer made of reasoning.

    >>> opened_thinking("<|im_start|>assistant\\n<think>\\n"), opened_thinking("<|im_start|>assistant\\n")
    ('<think>\\n', '')
    """
    if not prompt.rstrip().endswith(THINK_OPEN):
        return ""
    return prompt[prompt.rstrip().rindex(THINK_OPEN) :]


def match_candidates(
    top: Mapping[str, float] | Iterable[tuple[str, float]], candidates: Sequence[str]
) -> dict[str, float]:
    """Log-probability of each candidate among a backend's top next tokens.

    A token matches a candidate when both are equal after ``strip().lower()``, so " Yes", "Yes"
    and "yes" all count for "Yes": tokenizers split the same word into different variants
    (leading space or not), and the judge means the word, not one spelling. The variants are
    disjoint events, so their probabilities add: the value is the logsumexp of the matching
    log-probabilities, not their max. A candidate with no matching token gets ``-inf`` (it was
    not among the reported tokens, so its probability is below what the backend showed).
    ``top`` is a mapping or a list of pairs; a list may repeat a string when two token ids
    decode alike, and both count. Never raises on odd tokens (NaN log-probabilities are ignored).

    >>> import math
    >>> top = [(" Yes", math.log(0.5)), ("Yes", math.log(0.25)), ("No", math.log(0.125))]
    >>> got = match_candidates(top, ["Yes", " no", "Maybe"])
    >>> round(math.exp(got["Yes"]), 6), round(math.exp(got[" no"]), 6), got["Maybe"]
    (0.75, 0.125, -inf)
    """
    pairs = top.items() if isinstance(top, Mapping) else top
    wanted = {candidate.strip().lower() for candidate in candidates}
    found: dict[str, list[float]] = {}
    for token, logprob in pairs:
        key = token.strip().lower()
        if key in wanted and not math.isnan(logprob):
            found.setdefault(key, []).append(float(logprob))
    return {candidate: _logsumexp(found.get(candidate.strip().lower(), [])) for candidate in candidates}


def _logsumexp(values: Sequence[float]) -> float:
    """log(sum(exp(v))) without overflow; ``-inf`` for no values (probability zero)."""
    if not values:
        return -math.inf
    peak = max(values)
    if peak == -math.inf:
        return -math.inf
    return peak + math.log(math.fsum(math.exp(v - peak) for v in values))
