"""pydantic's ``ValidationError`` as the one line a user reads: the dotted setting, what it must be, what it got.

pydantic checks the settings (types, unknown keys, choices, ranges); this module only words its first error, from the
field it names: a choice lists the field's ``Literal`` names, a range says the field's bounds.
"""

from __future__ import annotations

import math
import operator
import types
import typing
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

_WRONG_TYPE = {"int_type", "int_parsing", "float_type", "float_parsing", "string_type", "bool_type", "bool_parsing",
               "dict_type", "list_type"}
_NOT_A_MAPPING = {"model_type", "model_attributes_type"}
_BOUNDS = (("gt", ">", operator.gt), ("ge", ">=", operator.ge), ("lt", "<", operator.lt), ("le", "<=", operator.le))


def error_line(error: ValidationError, model: type[BaseModel]) -> str:
    """The first error of ``error`` (raised validating ``model``) as one line naming the setting."""
    e = error.errors(include_url=False)[0]
    names, field, holder = _located(model, e["loc"])
    name, value, kind = ".".join(names), e.get("input"), e["type"]
    if kind == "extra_forbidden":
        return (f"unknown setting '{'.'.join(map(str, e['loc']))}' "
                f"(known: {', '.join(sorted(holder.model_fields)) if holder else ''})")
    if kind in _NOT_A_MAPPING:
        return f"'{name}' must be a mapping"
    if kind == "finite_number" or kind in _WRONG_TYPE and isinstance(value, float) and not math.isfinite(value):
        return f"'{name}' must be a finite number, got {value}"
    if kind == "int_type" and isinstance(value, float):
        return f"'{name}' must be an integer, got {value}"
    if kind in _WRONG_TYPE and field is not None:
        return f"'{name}' must be {_type_text(field.annotation)}, got {value!r}"
    if kind == "literal_error" and field is not None:
        return f"{name} must be one of {', '.join(map(str, choices(field) or ()))}, not '{value}'"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal") and field is not None:
        extra = field.json_schema_extra
        hint = extra.get("hint") if isinstance(extra, dict) else None
        return f"{name} must be {range_text(field.metadata)}, not {value!r}" + (f" ({hint})" if hint else "")
    if kind in ("value_error", "assertion_error"):  # a model's own check: its message names the settings
        return str(e["ctx"]["error"])
    return f"{name or 'the config'}: {e['msg']}"


def _located(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[list[str], FieldInfo | None, Any]:
    """The field names ``loc`` walks through (past them: a union's member, a list index), the last field, and the
    model whose fields the walk stopped in (``None`` past a setting)."""
    names: list[str] = []
    field, holder = None, model
    for part in loc:
        if holder is None or part not in holder.model_fields:
            break
        field, holder = holder.model_fields[part], None
        names.append(part)
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            holder = field.annotation
    return names, field, holder


def kinds(annotation: Any) -> list[Any]:
    """The types a setting's annotation allows, ``None`` left out: ``str | list | None`` is ``[str, list]``."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return [a for a in typing.get_args(annotation) if a is not type(None)] if union else [annotation]


def choices(field: FieldInfo) -> tuple[Any, ...] | None:
    """The names a ``Literal`` setting may take (``None``: not a choice)."""
    kind = kinds(field.annotation)[0]
    return typing.get_args(kind) if typing.get_origin(kind) is Literal else None


def _type_text(annotation: Any) -> str:
    return " or ".join(getattr(typing.get_origin(k) or k, "__name__", str(k)) for k in kinds(annotation))


def _bounds(constraints: Iterable[Any]) -> list[tuple[str, Any]]:
    """``(symbol, bound)`` of each bound in ``constraints`` (annotated_types' ``Gt``, ``Le``, ``Interval``, ...)."""
    return [(symbol, bound) for c in constraints for attr, symbol, _ in _BOUNDS
            if (bound := getattr(c, attr, None)) is not None]


def in_range(value: Any, constraints: Iterable[Any]) -> bool:
    """Whether number ``value`` keeps every bound in ``constraints``."""
    test = {symbol: op for _, symbol, op in _BOUNDS}
    return all(test[symbol](value, bound) for symbol, bound in _bounds(constraints))


def range_text(constraints: Iterable[Any]) -> str:
    """The bounds in words: ``in (0, 1]`` within the unit interval (a share, a probability), else ``>= 2 and <= 5``.

    >>> from annotated_types import Ge, Gt, Le, Lt
    >>> range_text([Gt(0), Le(1)]), range_text([Ge(0), Lt(2**32)]), range_text([Gt(0)])
    ('in (0, 1]', '>= 0 and < 2**32', '> 0')
    """
    bounds = sorted(_bounds(constraints), reverse=True)  # the lower bound (">", ">=") first
    if [s[0] for s, _ in bounds] == [">", "<"] and all(0 <= b <= 1 for _, b in bounds):
        (low_symbol, low), (high_symbol, high) = bounds
        return f"in {'(' if low_symbol == '>' else '['}{low}, {high}{']' if high_symbol == '<=' else ')'}"
    return " and ".join(f"{symbol} {_number(bound)}" for symbol, bound in bounds)


def _number(bound: Any) -> str:
    """A bound as written: a large power of two as ``2**32``."""
    if isinstance(bound, int) and bound >= 2**16 and bound & (bound - 1) == 0:
        return f"2**{bound.bit_length() - 1}"
    return str(bound)
