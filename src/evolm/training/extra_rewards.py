"""``rewards.extra``: TRL-style reward functions added, with weights, to a role's reward. Resolved (imported, a
factory called) when the run's steps are made; the config only checks the entries' shape. Called at each step of
their role (``score_extra``)."""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evolm.config import extra_reward_problems
from evolm.errors import InputError


@dataclass(frozen=True)
class ExtraReward:
    """A TRL-style reward function added, times ``weight``, to one role's reward (``rewards.extra``)."""

    label: str  # its name in the logs: the function's ``__name__`` (made unique within the run)
    weight: float
    fn: Callable[..., Sequence[Any]]
    role: str = "policy"  # the steps it adds to: "policy" or "rubric"


def extra_rewards(entries: Sequence[Any]) -> list[ExtraReward]:
    """``rewards.extra`` resolved: each ``{name, weight, kwargs, role}`` imported (and its factory called).

    ``name`` is an import path, ``pkg.mod.attr`` or ``pkg.mod:attr``; ``weight`` defaults to 1. The
    ``kwargs`` convention: an entry *with* ``kwargs`` (a mapping, ``{}`` included) names a factory, called
    once here as ``name(**kwargs)``, whose result is the reward function (TRL's
    ``get_soft_overlong_punishment(max_completion_len, soft_punish_cache)``, ``get_repetition_penalty_reward``);
    an entry without names the reward function itself (TRL's ``think_format_reward``). A reward function
    must take ``**kwargs``: TRL's contract passes every row column as a keyword. A bad entry, a failed
    import or factory call, or a result that is no such function is a one-line ``InputError``.

    >>> soft = {"name": "trl.rewards.get_soft_overlong_punishment", "weight": 0.5,
    ...         "kwargs": {"max_completion_len": 10, "soft_punish_cache": 4}}
    >>> [(e.label, e.weight, e.role, e.fn(completion_ids=[[1] * 6, [1] * 8])) for e in extra_rewards([soft])]
    [('soft_overlong_punishment_reward', 0.5, 'policy', [0.0, -0.5])]
    """
    if problems := extra_reward_problems(entries):
        raise InputError(problems[0])
    out: list[ExtraReward] = []
    for i, entry in enumerate(entries):
        where = f"rewards.extra[{i}]"
        name, weight, kwargs = entry["name"].strip(), entry.get("weight", 1.0), entry.get("kwargs")
        fn = _import(name, where)
        if kwargs is not None:
            try:
                fn = fn(**kwargs)
            except Exception as e:  # noqa: BLE001 - any failure of the user's factory is a config error
                raise InputError(f"{where}: {name}(**kwargs) failed: {_first_line(e)}") from None
        _check_reward_fn(fn, name, where)
        label = str(getattr(fn, "__name__", "") or name.replace(":", ".").rsplit(".", 1)[-1])
        taken = {e.label for e in out}
        if label in taken:
            label = next(f"{label}_{k}" for k in range(2, len(taken) + 3) if f"{label}_{k}" not in taken)
        out.append(ExtraReward(label, float(weight), fn, entry.get("role", "policy")))
    return out


def _import(path: str, where: str) -> Any:
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise InputError(f"{where}: '{path}' is not an import path (pkg.mod.fn or pkg.mod:fn)")
    try:
        obj = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - a missing package or a module that fails to import
        raise InputError(f"{where}: cannot import {module} ({_first_line(e)})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(f"{where}: {module} has no '{attr}'")
        obj = getattr(obj, part)
    return obj


def _check_reward_fn(fn: Any, name: str, where: str) -> None:
    if not callable(fn):
        raise InputError(f"{where}: {name} is not callable (a factory's result must be a reward function)")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        raise InputError(f"{where}: {name} is async; rewards.extra takes plain functions")
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return  # a builtin without a signature: its first call will tell
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        raise InputError(f"{where}: {name} does not take **kwargs (TRL passes every row column as a keyword); if it "
                         "is a factory, give its arguments as kwargs: {...}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{e.__class__.__name__}: {text[0]}" if text else e.__class__.__name__


def score_extra(extras: Sequence[ExtraReward], n: int, kwargs: Mapping[str, Any]
                ) -> list[tuple[tuple[str, float, float | None], ...]]:
    """Each extra reward function on ``n`` rows, called with TRL's keyword arguments ``kwargs`` (``prompts``,
    ``completions``, ``completion_ids``, the row columns, ...): per row, (label, weight, value).

    A ``None`` or non-finite value is "no reward" (it adds nothing); a wrong count or a non-number is an ``InputError``.
    """
    columns: list[list[float | None]] = []
    for e in extras:
        values = list(e.fn(**kwargs))
        if len(values) != n:
            raise InputError(f"rewards.extra: {e.label} returned {len(values)} values for {n} completions")
        col: list[float | None] = []
        for v in values:
            if v is not None and (isinstance(v, str) or not isinstance(v, int | float) and not hasattr(v, "__float__")):
                raise InputError(f"rewards.extra: {e.label} returned {v!r}, not a number")
            col.append(None if v is None or not math.isfinite(float(v)) else float(v))
        columns.append(col)
    return [tuple((e.label, e.weight, col[i]) for e, col in zip(extras, columns, strict=True)) for i in range(n)]
