"""Flags made from settings, as transformers' ``HfArgumentParser`` makes them from dataclasses: a flag that sets a
config field takes its type, range, default, choices and help from that pydantic field (its annotation, its
``Field(ge=...)`` bounds, a ``Literal``'s names, its ``description``). A command states only the flag's name and,
where the command departs from training's default, its own default with the reason (``Flag.why``).
tests/cli/test_rubric_and_judge_commands.py walks every such flag of every command and compares it with its field.
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from evolm.config.messages import choices as field_choices
from evolm.config.messages import in_range, kinds, range_text

_FIELD: Any = type("_Field", (), {"__repr__": lambda self: "<the field's>"})()  # no default of a command's own


@dataclass(frozen=True)
class Flag:
    """One flag that sets field ``name`` of a settings model."""

    name: str  # the field
    flag: str = ""  # default: --name-with-dashes (a bool field that is on by default: --no-name-with-dashes)
    dest: str = ""  # default: the flag's name with underscores (without the --no- of a bool)
    type: Callable[[str], Any] | None = None  # another parser; default: the field's type within its range
    default: Any = _FIELD  # a command's own default (then ``why`` says why it is not training's)
    why: str = ""
    choices: Iterable[Any] | None = None  # a command that offers fewer names than the field (then ``why``)
    metavar: str | None = None
    action: str | None = None  # "append": a field that takes a list, given by repeating the flag
    note: str = ""  # what the command adds to the field's help

    def option(self, field: FieldInfo) -> str:
        if self.flag:
            return self.flag
        dashed = self.name.replace("_", "-")
        return f"--no-{dashed}" if field.default is True else f"--{dashed}"

    def destination(self, field: FieldInfo) -> str:
        option = self.option(field).removeprefix("--")
        return self.dest or (option.removeprefix("no-") if field.default is True else option).replace("-", "_")


@functools.cache  # one parser per range: a flag that several commands declare is the same flag
def number(kind: type, *constraints: Any) -> Callable[[str], Any]:
    """An argparse type: a flag's text as ``kind`` (int, or a finite float) within ``constraints`` (annotated_types'
    ``Ge(1)``, ``Le(1)``: what a field's ``Field(ge=1)`` holds), else the one line argparse prints after the flag.

    >>> from annotated_types import Ge, Gt, Le
    >>> number(int, Ge(1))("3"), number(float, Gt(0), Le(1))("0.5")
    (3, 0.5)
    >>> number(float, Gt(0), Le(1))("7")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be in (0, 1], not 7
    >>> number(float, Ge(0))("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a finite number >= 0, not nan
    """
    bounds = range_text(constraints)
    wanted = bounds if bounds.startswith("in ") else f"{'an integer' if kind is int else 'a finite number'} {bounds}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not in_range(value, constraints):
            raise argparse.ArgumentTypeError(f"must be {wanted.strip()}, not {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def field_of(cls: type[BaseModel], name: str) -> FieldInfo:
    return cls.model_fields[name]


def field_default(f: FieldInfo) -> Any:
    return f.get_default(call_default_factory=True)


def _base_type(f: FieldInfo) -> Any:
    """The type a flag's text is parsed as: the field's (``int | None``: int); a ``Literal``'s names are text."""
    kind = kinds(f.annotation)[0]
    return str if field_choices(f) is not None else kind


def _parser(f: FieldInfo) -> Callable[[str], Any]:
    """The field's type; a number within the field's range (``number``)."""
    kind = _base_type(f)
    return number(kind, *f.metadata) if kind in (int, float) else kind


def add_flags(p: argparse._ActionsContainer, cls: type[BaseModel], flags: Iterable[Flag]) -> None:
    """Add a flag per ``Flag``, each made from its field of ``cls``; the action remembers both (``config_field``)."""
    for spec in flags:
        f = field_of(cls, spec.name)
        default = field_default(f) if spec.default is _FIELD else spec.default
        help_text = (f.description or "") + (f". {spec.note}" if spec.note else "")
        if spec.why and default != field_default(f):
            help_text += f". Here {'unset' if default is None else default}, not {field_default(f)}: {spec.why}"
        kw: dict[str, Any] = {"dest": spec.destination(f), "default": default, "help": help_text.replace("%", "%%")}
        if _base_type(f) is bool:
            kw["action"] = "store_false" if default is True else "store_true"
            if default is True:  # the flag turns the setting off: say so after what the setting does
                kw["help"] += ". This flag turns it off (on by default)"
        else:
            if (parse := spec.type or _parser(f)) is not str:  # argparse keeps text as it is
                kw["type"] = parse
            choices = spec.choices if spec.choices is not None else field_choices(f)
            if choices is not None:
                kw["choices"] = choices
            if spec.metavar:
                kw["metavar"] = spec.metavar
            if spec.action:
                kw["action"] = spec.action
        action = p.add_argument(spec.option(f), **kw)
        action.config_field = (cls, spec.name, spec)  # type: ignore[attr-defined]


def field_values(args: argparse.Namespace, cls: type[BaseModel], flags: Iterable[Flag]) -> dict[str, Any]:
    """The fields ``flags`` set, read back from parsed ``args`` (those the command has)."""
    out = {}
    for spec in flags:
        dest = spec.destination(field_of(cls, spec.name))
        if hasattr(args, dest):
            out[spec.name] = getattr(args, dest)
    return out
