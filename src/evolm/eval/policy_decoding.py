"""How a policy evaluation decodes (``evolm eval policy --protocol``).

``lm-eval`` (default): each lm-eval task's own generation settings (``generation_kwargs`` in its YAML: greedy, its
stop sequences and token budget; HFLM's 256 tokens where a task sets none), which keeps a small CPU run short.
``olmo3-adapt``: the paper's decoding on the same tasks (docs/METHOD.md §3.2): sampled at temperature 0.6, top-p
0.95, up to 16384 new tokens, each task keeping its stop sequences. Explicit settings override either; under both,
the token budget is capped so that a prompt still fits the model's context (lm-eval refuses a budget >= the context).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evolm.errors import InputError

PROTOCOLS = ("lm-eval", "olmo3-adapt")
DEFAULT_PROTOCOL = "lm-eval"


@dataclass(frozen=True)
class Decoding:
    """The decoding asked for. ``None`` (and ``greedy=False``) leaves a setting to each task's own config.

    Build it with ``resolve_decoding``, which fills in a protocol's values and checks the combination.
    """

    protocol: str = DEFAULT_PROTOCOL
    greedy: bool = False
    temperature: float | None = None
    top_p: float | None = None
    max_gen_toks: int | None = None
    seed: int = 0


# The paper's decoding (docs/METHOD.md §3.2): sampled, temperature 0.6, top-p 0.95, up to 16k new tokens.
OLMO3_ADAPT_DECODING = {"temperature": 0.6, "top_p": 0.95, "max_gen_toks": 16384}


def resolve_decoding(
    protocol: str = DEFAULT_PROTOCOL,
    *,
    greedy: bool = False,
    temperature: float | None = None,
    top_p: float | None = None,
    max_gen_toks: int | None = None,
    seed: int = 0,
) -> Decoding:
    """The decoding of ``protocol`` with the given settings on top (``None``: not given).

    ``lm-eval`` leaves everything not given to each task; ``olmo3-adapt`` fills in the paper's values.
    Raises ``InputError`` for an unknown protocol or settings that contradict each other.
    """
    if protocol not in PROTOCOLS:
        raise InputError(f"unknown protocol '{protocol}' (known: {', '.join(PROTOCOLS)})")
    if greedy and (temperature is not None or top_p is not None):
        raise InputError("--greedy contradicts --temperature/--top-p: give one or the other")
    if temperature is not None and temperature <= 0:
        raise InputError(f"temperature must be > 0, got {temperature} (for greedy decoding use --greedy)")
    if top_p is not None and not 0 < top_p <= 1:
        raise InputError(f"top-p must be in (0, 1], got {top_p}")
    if max_gen_toks is not None and max_gen_toks < 1:
        raise InputError(f"max-gen-toks must be >= 1, got {max_gen_toks}")
    if protocol == "olmo3-adapt":
        if not greedy:
            temperature = OLMO3_ADAPT_DECODING["temperature"] if temperature is None else temperature
            top_p = OLMO3_ADAPT_DECODING["top_p"] if top_p is None else top_p
        max_gen_toks = OLMO3_ADAPT_DECODING["max_gen_toks"] if max_gen_toks is None else max_gen_toks
    elif top_p is not None and temperature is None:
        raise InputError("--top-p needs --temperature under --protocol lm-eval (its tasks decode greedily)")
    return Decoding(protocol, greedy, temperature, top_p, max_gen_toks, seed)


def task_generation_kwargs(
    stock: Mapping[str, Any], decoding: Decoding, default_max_gen_toks: int, max_length: int
) -> tuple[dict[str, Any], str | None]:
    """The generation settings one lm-eval task runs with, and a note when its token budget was cut.

    ``stock`` is the task's own ``generation_kwargs``; ``decoding`` overrides what it sets. The
    budget is always made explicit (``default_max_gen_toks``, HFLM's default, where neither sets
    one) and capped by ``effective_max_gen_toks`` so that the prompt still fits ``max_length``.
    Stop sequences (``until``) always stay the task's.
    """
    out = dict(stock)
    if decoding.greedy:
        out.update(do_sample=False, temperature=0.0)
        out.pop("top_p", None)
    elif decoding.temperature is not None:
        out.update(do_sample=True, temperature=decoding.temperature)
        if decoding.top_p is not None:
            out["top_p"] = decoding.top_p
    if decoding.max_gen_toks is not None:
        requested = decoding.max_gen_toks
    else:
        requested = int(stock.get("max_gen_toks", default_max_gen_toks))
    out["max_gen_toks"] = effective_max_gen_toks(requested, max_length)
    note = None
    if out["max_gen_toks"] < requested:
        note = f"max_gen_toks lowered from {requested} to {out['max_gen_toks']}: the model's context is {max_length}"
    return out, note


def describe_generation(kwargs: Mapping[str, Any]) -> str:
    """A task's decoding in words: "greedy, max_gen_toks 1280" or "sampled T=0.6 top-p=0.95, max_gen_toks 7168"."""
    if not kwargs:
        return "log-likelihood (no generation)"
    if kwargs.get("do_sample"):
        mode = f"sampled T={kwargs.get('temperature')}" + (f" top-p={kwargs['top_p']}" if "top_p" in kwargs else "")
    else:
        mode = "greedy"
    return f"{mode}, max_gen_toks {kwargs.get('max_gen_toks')}"


def effective_max_gen_toks(requested: int, max_length: int) -> int:
    """Cap generation so that a prompt still fits: lm-eval refuses ``max_gen_toks >= max_length``.

    Keeps ``min(1024, max_length // 2)`` tokens for the prompt (IFEval and GSM8K prompts are far
    shorter). The paper's 16k exceeds small models' context (SmolLM2: 8192).

    >>> effective_max_gen_toks(16384, 8192), effective_max_gen_toks(256, 8192), effective_max_gen_toks(64, 64)
    (7168, 256, 32)
    """
    reserve = min(1024, max_length // 2)
    return max(1, min(requested, max_length - reserve))
