"""What evolm hands TRL's ``GRPOConfig``: the keywords it sets itself (one generation batch = one optimizer step of
one role), the batch arithmetic per process count, the check of ``grpo:`` against the installed TRL's fields and
types, and the importance-sampling rule those settings give. Part of the door into TRL (``trl_adapter``)."""

from __future__ import annotations

import dataclasses
import enum
import typing
from pathlib import Path
from typing import Any

from evolm.config import RunConfig, grpo_setting


def evolm_grpo_settings(cfg: RunConfig, num_processes: int = 1) -> dict[str, Any]:
    """The ``GRPOConfig`` keywords evolm sets itself, from the schedule, the seed and the output_dir.

    These are what make one TRL generation batch exactly one optimizer step of one role, in plan
    order; ``RunConfig`` refuses them in ``grpo:`` (``config.EVOLM_GRPO_KEYS``, which a test holds to
    this function's keys).
    """
    s = cfg.schedule
    rows_per_step = s.prompts_per_step * s.samples_per_prompt
    per_device = int(grpo_setting(cfg.grpo, "per_device_train_batch_size"))
    accum = max(1, rows_per_step // max(1, per_device * num_processes))
    return {
        "output_dir": str(Path(cfg.output_dir) / "checkpoints"),
        "num_generations": s.samples_per_prompt,
        "gradient_accumulation_steps": accum,
        "steps_per_generation": accum,  # one generation batch == one optimizer step == one step of one role
        "generation_batch_size": None,
        "num_iterations": 1,  # one update per batch (paper); >1 would reuse a step's rows across plan steps
        "max_steps": cfg.total_steps,
        "shuffle_dataset": False,  # the dataset is the plan, read in order
        "remove_unused_columns": False,  # the reward reads the rows' evolm columns
        "save_strategy": "steps",
        "save_steps": s.save_every,
        "logging_strategy": "steps",
        "logging_steps": 1,
        "seed": cfg.seed,
        "disable_tqdm": True,  # evolm shows its own progress per step
        "chat_template_kwargs": dict(cfg.model.chat_template_kwargs) or None,
    }


def batch_error(cfg: RunConfig, num_processes: int) -> str | None:
    """Why the batch arithmetic fails for ``num_processes`` processes, or ``None``."""
    s = cfg.schedule
    rows_per_step = s.prompts_per_step * s.samples_per_prompt
    per_device = grpo_setting(cfg.grpo, "per_device_train_batch_size")
    if not isinstance(per_device, int) or isinstance(per_device, bool) or per_device < 1:
        return f"grpo.per_device_train_batch_size must be an integer >= 1, not {per_device!r}"
    if rows_per_step % (per_device * num_processes):
        return (f"schedule.prompts_per_step x schedule.samples_per_prompt ({rows_per_step}) must be a multiple of "
                f"grpo.per_device_train_batch_size x processes ({per_device} x {num_processes})")
    return None


def grpo_errors(grpo: dict[str, Any]) -> list[str]:
    """Why ``grpo:`` would not make the installed TRL's ``GRPOConfig``: unknown keys and values of the wrong type.

    Read from the installed TRL's dataclass fields and their type hints, so the dry run and the real
    launch (``run.check_launch``) refuse the same keys. A value is accepted when it matches one
    member of the field's type (an int where a float is expected; text where an enum is; anything where
    the hint is a class evolm does not know); TRL's own ``__post_init__`` checks stay TRL's.
    """
    import difflib
    from importlib.metadata import version

    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    names = [f.name for f in dataclasses.fields(GRPOConfig)]
    errors = []
    for key, value in grpo.items():
        if key not in hints:
            near = difflib.get_close_matches(key, names, n=1)
            errors.append(f"grpo.{key} is not a TRL GRPOConfig setting (trl {version('trl')})"
                          + (f": did you mean grpo.{near[0]}?" if near else ""))
        elif (wanted := _type_error(hints[key], value)) is not None:
            errors.append(f"grpo.{key} must be {wanted}, not {value!r}")
    return errors


def _type_error(hint: Any, value: Any) -> str | None:
    """What ``value`` should be for type ``hint`` (``"a number"``, ``"true or false"``...), or None if it fits."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, type(int | None)) else (hint,)
    kinds = {typing.get_origin(a) or a for a in args}
    if value is None:
        return None if type(None) in kinds else "set (null is not allowed)"
    if any(k is typing.Any or k is typing.Literal or not isinstance(k, type) for k in kinds):
        return None
    if isinstance(value, bool):
        return None if bool in kinds else _wanted(kinds)
    if isinstance(value, int | float):
        ok = float in kinds or (isinstance(value, int) and int in kinds)
        return None if ok else _wanted(kinds)
    if isinstance(value, str):  # text is also how YAML writes an enum member (SchedulerType, IntervalStrategy)
        return None if str in kinds or any(issubclass(k, enum.Enum) for k in kinds) else _wanted(kinds)
    if isinstance(value, list | dict):
        return None if type(value) in kinds else _wanted(kinds)
    return None


def _wanted(kinds: set[type]) -> str:
    if kinds & {int, float} and not kinds & {str, bool}:
        return "a number" if float in kinds else "an integer"
    if bool in kinds and not kinds & {str, int, float}:
        return "true or false"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "text", list: "a list",
             dict: "a mapping"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds if k is not type(None)))


def importance_sampling_rule(grpo: dict[str, Any]) -> str:
    """How TRL corrects the gap between vLLM's sampling log-probs and the trainer's, from the ``grpo`` settings.

    The reference's rule: per token, exp(trainer - vLLM log-prob) truncated at 2.0, multiplying the
    policy-gradient term only (TRL: ``vllm_importance_sampling_mode: token_truncate``,
    ``vllm_importance_sampling_clip_max: 2.0``). TRL's default masks whole sequences whose product of
    ratios leaves [0, 3.0]. ``use_bias_correction_kl`` (TRL's default true) also multiplies the KL term
    by the policy ratio, which changes its gradient; the reference's k3 term has no such factor. An unset key is
    TRL's default (``grpo_setting``), and the deprecated ``vllm_importance_sampling_cap``, when set, wins over
    ``vllm_importance_sampling_clip_max`` as in TRL's ``__post_init__``.

    >>> rule = importance_sampling_rule({"use_vllm": True, "vllm_importance_sampling_mode": "token_truncate",
    ...                                  "vllm_importance_sampling_clip_max": 2.0, "use_bias_correction_kl": False})
    >>> import textwrap
    >>> print(textwrap.fill(rule, 100))
    per token, ratio exp(trainer - vLLM log-prob) truncated at 2.0, on the policy-gradient term only
    (the reference's rule); KL term: k3, no ratio
    """
    def get(key: str) -> Any:
        return grpo_setting(grpo, key)

    if not get("use_vllm"):
        return "none: generation in the trainer, no vLLM/trainer log-prob gap to correct"
    if not get("vllm_importance_sampling_correction"):
        return "off (grpo.vllm_importance_sampling_correction: false)"
    mode = get("vllm_importance_sampling_mode")
    cap = get("vllm_importance_sampling_cap")
    high = get("vllm_importance_sampling_clip_max") if cap is None else cap
    low = get("vllm_importance_sampling_clip_min")
    level, how = mode.split("_", 1) if "_" in mode else (mode, "?")
    where = "per token, ratio" if level == "token" else "per sequence, product of token ratios"
    bounds = f"[{low}, {high}]" if low is not None else f"{high}"
    rule = (f"{where} exp(trainer - vLLM log-prob) truncated at {bounds}" if how == "truncate" else
            f"{where} exp(trainer - vLLM log-prob); outside {bounds if low is not None else f'[0, {high}]'} set to 0")
    reference = " (the reference's rule)" if (mode, high, low) == ("token_truncate", 2.0, None) else \
        " (the reference: per token, truncated at 2.0)"
    kl = "k3 x policy ratio (use_bias_correction_kl)" if get("use_bias_correction_kl") else "k3, no ratio"
    return f"{rule}, on the policy-gradient term only{reference}; KL term: {kl}"
