"""The numbers of the ``grpo`` mapping that cannot train: NaN or infinite anywhere, or out of the range of a setting
evolm knows the meaning of (``RunConfig.problems`` reports them)."""

from __future__ import annotations

import math
from typing import Any

# Ranges of the numeric grpo.* settings evolm knows the meaning of (every number there must also be finite).
_GRPO_RANGES: dict[str, tuple[Any, str]] = {
    "learning_rate": (lambda v: v > 0, "> 0"),
    "beta": (lambda v: v >= 0, ">= 0 (0: no KL term)"),
    "epsilon": (lambda v: v >= 0, ">= 0"),
    "epsilon_high": (lambda v: v >= 0, ">= 0"),
    "delta": (lambda v: v > 0, "> 0"),
    "temperature": (lambda v: v > 0, "> 0"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "top_k": (lambda v: v >= 0, ">= 0"),
    "min_p": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "repetition_penalty": (lambda v: v > 0, "> 0"),
    "max_completion_length": (lambda v: v >= 1, ">= 1"),
    "max_prompt_length": (lambda v: v >= 1, ">= 1"),
    "weight_decay": (lambda v: v >= 0, ">= 0"),
    "max_grad_norm": (lambda v: v >= 0, ">= 0"),
    "warmup_ratio": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "warmup_steps": (lambda v: v >= 0, ">= 0"),
    "adam_beta1": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "adam_beta2": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "adam_epsilon": (lambda v: v > 0, "> 0"),
    "vllm_gpu_memory_utilization": (lambda v: 0 < v <= 1, "in (0, 1]"),
}


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
    (a NaN learning rate, an infinite beta). Types and unknown keys are ``trl_adapter.check_launch``'s."""
    errors = []
    for key, value in grpo.items():
        if _non_finite(value):
            errors.append(f"grpo.{key} must be a finite number, not {value!r}")
        elif key in _GRPO_RANGES and _is_number(value) and not _GRPO_RANGES[key][0](value):
            errors.append(f"grpo.{key} must be {_GRPO_RANGES[key][1]}, not {value!r}")
    return errors
