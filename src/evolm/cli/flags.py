"""Flags made from settings, as transformers' ``HfArgumentParser`` makes them: a flag that sets a config field takes
its type, default, choices and help from that field (``metadata={"help": ..., "choices": ...}``). A command states
only the flag's name, a stricter parser of the field's type (``positive_int``) and, where the command departs from
training's default, its own default with the reason (``Flag.why``). tests/cli/test_rubric_and_judge_commands.py
walks every such flag of every command and compares it with its field.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

_MISSING: Any = dataclasses.MISSING
_FIELD: Any = type("_Field", (), {"__repr__": lambda self: "<the field's>"})()  # no default of a command's own


@dataclass(frozen=True)
class Flag:
    """One flag that sets field ``name`` of a settings dataclass."""

    name: str  # the field
    flag: str = ""  # default: --name-with-dashes (a bool field that is on by default: --no-name-with-dashes)
    dest: str = ""  # default: the flag's name with underscores (without the --no- of a bool)
    type: Callable[[str], Any] | None = None  # a stricter parser of the field's type; default: the type itself
    default: Any = _FIELD  # a command's own default (then ``why`` says why it is not training's)
    why: str = ""
    choices: Iterable[Any] | None = None  # a command that offers fewer names than the field (then ``why``)
    metavar: str | None = None
    action: str | None = None  # "append": a field that takes a list, given by repeating the flag
    note: str = ""  # what the command adds to the field's help

    def option(self, field: dataclasses.Field) -> str:
        if self.flag:
            return self.flag
        dashed = self.name.replace("_", "-")
        return f"--no-{dashed}" if field.default is True else f"--{dashed}"

    def destination(self, field: dataclasses.Field) -> str:
        option = self.option(field).removeprefix("--")
        return self.dest or (option.removeprefix("no-") if field.default is True else option).replace("-", "_")


def field_of(cls: type, name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def field_default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not _MISSING else f.default  # type: ignore[misc]


def _base_type(cls: type, name: str) -> Any:
    hint = typing.get_type_hints(cls)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def add_flags(p: argparse._ActionsContainer, cls: type, flags: Iterable[Flag]) -> None:
    """Add a flag per ``Flag``, each made from its field of ``cls``; the action remembers both (``config_field``)."""
    for spec in flags:
        f = field_of(cls, spec.name)
        default = field_default(f) if spec.default is _FIELD else spec.default
        help_text = f.metadata.get("help", "") + (f". {spec.note}" if spec.note else "")
        if spec.why and default != field_default(f):
            help_text += f". Here {'unset' if default is None else default}, not {field_default(f)}: {spec.why}"
        kw: dict[str, Any] = {"dest": spec.destination(f), "default": default, "help": help_text.replace("%", "%%")}
        if _base_type(cls, spec.name) is bool:
            kw["action"] = "store_false" if default is True else "store_true"
            if default is True:  # the flag turns the setting off: say so after what the setting does
                kw["help"] += ". This flag turns it off (on by default)"
        else:
            if (parse := spec.type or _base_type(cls, spec.name)) is not str:  # argparse keeps text as it is
                kw["type"] = parse
            choices = spec.choices if spec.choices is not None else f.metadata.get("choices")
            if choices is not None:
                kw["choices"] = choices
            if spec.metavar:
                kw["metavar"] = spec.metavar
            if spec.action:
                kw["action"] = spec.action
        action = p.add_argument(spec.option(f), **kw)
        action.config_field = (cls, spec.name, spec)  # type: ignore[attr-defined]


def field_values(args: argparse.Namespace, cls: type, flags: Iterable[Flag]) -> dict[str, Any]:
    """The fields ``flags`` set, read back from parsed ``args`` (those the command has)."""
    out = {}
    for spec in flags:
        dest = spec.destination(field_of(cls, spec.name))
        if hasattr(args, dest):
            out[spec.name] = getattr(args, dest)
    return out
