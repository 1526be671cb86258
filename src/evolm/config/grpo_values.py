"""The values of the ``grpo`` mapping: what a setting is when the config leaves it out (``grpo_setting``: TRL's own
default, never restated), and the numbers that cannot train and that ``trl.GRPOConfig`` takes without a word: NaN or
infinite anywhere, or out of the range of a setting evolm knows the meaning of (``RunConfig``'s ``grpo`` validator
reports them). GRPOConfig cannot be built on a CPU with ``bf16: true``, so the dry run cannot lean on it; the checks
it makes itself (``warmup_steps >= 0``) and the keys and types it takes (``training.grpo_config.grpo_errors``) are not
repeated here."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

from annotated_types import Ge, Gt, Le, Lt

from evolm.config.messages import in_range, range_text

# Ranges of the numeric grpo.* settings evolm knows the meaning of, in pydantic's terms (Field(gt=...) is Gt(...)).
GRPO_RANGES: dict[str, tuple[Any, ...]] = {
    "learning_rate": (Gt(0),), "beta": (Ge(0),), "epsilon": (Ge(0),), "epsilon_high": (Ge(0),), "delta": (Gt(0),),
    "temperature": (Gt(0),), "top_p": (Gt(0), Le(1)), "top_k": (Ge(0),), "min_p": (Ge(0), Le(1)),
    "repetition_penalty": (Gt(0),), "max_completion_length": (Ge(1),), "weight_decay": (Ge(0),),
    "max_grad_norm": (Ge(0),), "adam_beta1": (Ge(0), Lt(1)), "adam_beta2": (Ge(0), Lt(1)), "adam_epsilon": (Gt(0),),
    "vllm_gpu_memory_utilization": (Gt(0), Le(1)),
}


def grpo_setting(grpo: Mapping[str, Any], key: str) -> Any:
    """``grpo[key]`` when the config sets it (``null`` included: TRL gets that too), else the installed TRL's
    ``GRPOConfig`` default for ``key``: its dataclass field's, as ``GRPOConfig()`` would start from.

    Every module that reads a setting evolm hands TRL reads it here, so a default is TRL's alone and moves with a TRL
    upgrade. TRL is imported only when a key is unset (``from trl import GRPOConfig`` takes seconds: loading a config
    that sets its keys never pays it). The keys evolm sets itself (``EVOLM_GRPO_KEYS``, from
    ``training.grpo_config.evolm_grpo_settings``) are not read here: ``grpo:`` may not set them, and TRL's default
    for them is not what a run uses. A name GRPOConfig does not have is a ``KeyError``.

    >>> grpo_setting({"beta": 0.001}, "beta"), grpo_setting({"save_total_limit": None}, "save_total_limit")
    (0.001, None)
    """
    return grpo[key] if key in grpo else trl_default(key)


def trl_default(key: str) -> Any:
    """The installed TRL's ``GRPOConfig`` default for ``key``, before its ``__post_init__`` (which resolves a few
    that depend on others, such as ``bf16``); a ``default_factory`` is called anew, so a caller may change it."""
    field = _trl_fields()[key]
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise KeyError(f"trl.GRPOConfig.{key} has no default")


@functools.cache  # the installed TRL's fields: the same for the whole process
def _trl_fields() -> dict[str, dataclasses.Field]:
    from trl import GRPOConfig

    return {f.name: f for f in dataclasses.fields(GRPOConfig)}


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _non_finite(value: Any, depth: int = 0) -> bool:
    """Whether a number anywhere in ``value`` (lists and mappings included) is NaN or infinite."""
    if _is_number(value):
        return not math.isfinite(value)
    if depth < 20 and isinstance(value, list | dict):
        return any(_non_finite(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


def grpo_value_errors(grpo: dict[str, Any]) -> list[str]:
    """Numbers in ``grpo`` that cannot train: NaN or infinite anywhere, or out of the range of a known setting
    (a NaN learning rate, an infinite beta).

    >>> grpo_value_errors({"learning_rate": -1e-6, "top_p": 7, "reward_weights": [1.0, float("nan")]})
    ['grpo.learning_rate must be > 0, not -1e-06', 'grpo.top_p must be in (0, 1], not 7', \
'grpo.reward_weights must be a finite number, not [1.0, nan]']
    """
    errors = []
    for key, value in grpo.items():
        if _non_finite(value):
            errors.append(f"grpo.{key} must be a finite number, not {value!r}")
        elif key in GRPO_RANGES and _is_number(value) and not in_range(value, GRPO_RANGES[key]):
            errors.append(f"grpo.{key} must be {range_text(GRPO_RANGES[key])}, not {value!r}")
    return errors
