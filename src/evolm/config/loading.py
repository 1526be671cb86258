"""Reading a run's settings: a YAML file (``extends:`` names a config it changes), dotted ``key=value`` overrides,
and writing them back. Every error is one line naming the setting (docs/ARCHITECTURE.md says why this loader is
evolm's own)."""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from pathlib import Path
from typing import Any

import yaml

from evolm.config.schema import RunConfig
from evolm.errors import InputError


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


# settings that existed and were removed: a saved run's config.yaml holding their old default still loads
RETIRED = {"rubric.with_answers": (False, "the one-pass generation path was removed (slower on CPU, unmeasured on "
                                          "GPU: dev/performance.md)")}


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in [k for k in data if f"{where}{k}" in RETIRED]:
        default, why = RETIRED[f"{where}{key}"]
        if data[key] != default:
            raise InputError(f"'{where}{key}' is no longer a setting: {why}; remove it")
        data = {k: v for k, v in data.items() if k != key}
    unknown = set(data) - names
    if unknown:
        raise InputError(f"unknown setting '{where}{sorted(unknown)[0]}' (known: {', '.join(sorted(names))})")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise InputError(f"'{where}{f.name}' must be a mapping")
            kwargs[f.name] = _build(hint, value, f"{where}{f.name}.")
        else:
            kwargs[f.name] = _coerce(value, hint, f"{where}{f.name}")
    return cls(**kwargs)


# PyYAML follows YAML 1.1, which reads "1e-6" (no dot) as a string; YAML 1.2 and every user read it as a number.
_FLOAT_TEXT = re.compile(r"^[-+]?(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)[eE][-+]?\d+$")


def _number(value: Any) -> Any:
    """``value`` as a float if it is a string in exponent notation (``1e-6``), else unchanged."""
    return float(value.replace("_", "")) if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()) else value


def _coerce(value: Any, hint: Any, name: str) -> Any:
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if base in (int, float):
        value = _number(value)
    if base is bool and isinstance(value, bool):
        return value
    if base in (int, float) and isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"'{name}' must be a finite number, got {value}")
        if base is int and isinstance(value, float) and value != int(value):  # (a big int is no float)
            raise InputError(f"'{name}' must be an integer, got {value}")
        return base(value)
    if base is str and isinstance(value, str):
        return value
    if base in (dict, list) and isinstance(value, base) or list in args and isinstance(value, list):
        return value
    raise InputError(f"'{name}' must be {getattr(base, '__name__', base)}, got {value!r}")


MAX_DEPTH = 64  # mappings and lists in a config nest at most this deep (the deepest setting is a few levels)


def check_tree(value: Any, where: str) -> None:
    """Refuse, in one line, a value read from YAML that holds itself (a recursive alias: ``a: &x [*x]``) or nests
    deeper than ``MAX_DEPTH``; walked without recursion, each shared node once (aliases may share a node many times).

    >>> import yaml
    >>> check_tree(yaml.safe_load("a: &x [1, *x]"), "c.yaml")
    Traceback (most recent call last):
    ...
    evolm.errors.InputError: c.yaml: a YAML alias that holds itself (a recursive '&anchor' / '*alias')
    """
    done: set[int] = set()
    stack: list[tuple[Any, int, bool]] = [(value, 0, False)]
    open_: set[int] = set()  # the containers on the path being walked
    while stack:
        node, depth, leaving = stack.pop()
        if leaving:
            open_.discard(id(node))
            done.add(id(node))
            continue
        if not isinstance(node, (dict, list)) or id(node) in done:
            continue
        if id(node) in open_:
            raise InputError(f"{where}: a YAML alias that holds itself (a recursive '&anchor' / '*alias')")
        if depth >= MAX_DEPTH:
            raise InputError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        open_.add(id(node))
        stack.append((node, depth, True))
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        stack.extend((child, depth + 1, False) for child in children)


def _read_yaml(p: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML config as a mapping; ``extends: FILE`` (relative to this file) names a config it changes.

    The baselines under configs/baselines/ extend the paper config, so each states only how it differs.
    """
    if not p.is_file():
        raise InputError(f"{p}: no such config file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError:
        raise InputError(f"{p}: not UTF-8 text") from None
    except yaml.YAMLError as e:
        raise InputError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise InputError(f"{p}: YAML nested too deeply") from None
    check_tree(data, str(p))
    if not isinstance(data, dict):
        raise InputError(f"{p}: the config must be a mapping")
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise InputError(f"{p}: 'extends' must be a file name")
    target = (p.parent / base).resolve()
    if target in seen:
        raise InputError(f"{p}: 'extends' loops back to {target}")
    return _merge(_read_yaml(target, (*seen, p.resolve())), data)


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in change.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "combined_weights" \
            else v
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """The run config from a YAML file (or the defaults) with dotted ``key=value`` overrides applied."""
    data: dict[str, Any] = _read_yaml(Path(path)) if path is not None else {}
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise InputError(f"override '{item}' must look like section.key=value")
        parts = key.split(".")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except (yaml.YAMLError, RecursionError):
            value = raw
        check_tree(value, f"override '{key}'")
        if _is_text_field(parts) and value is not None and not isinstance(value, str):
            value = raw  # model.name=2024, model.system_prompt=yes: the text as typed, not YAML's int or bool
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError(f"override '{item}': '{part}' is not a section")
        node[parts[-1]] = value
    if "grpo" in data and isinstance(data["grpo"], dict):
        merged = dict(RunConfig.__dataclass_fields__["grpo"].default_factory())  # type: ignore[misc]
        merged.update({k: _number(v) for k, v in data["grpo"].items()})
        data["grpo"] = merged
    return _build(RunConfig, data, "")


def _is_text_field(parts: list[str]) -> bool:
    """True if the dotted key names a ``str`` (or ``str | None``) setting."""
    cls: Any = RunConfig
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            return False
        hint = typing.get_type_hints(cls).get(part)
        if hint is None:
            return False
        if i == len(parts) - 1:
            return hint is str or (str in typing.get_args(hint) and list not in typing.get_args(hint)
                                   and not dataclasses.is_dataclass(hint))  # str | list: YAML reads the list
        cls = hint
    return False


def describe() -> str:
    """Every setting with its default and help, for ``evolm train --help``."""
    lines = []

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{prefix}{f.name}.")
                continue
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]
            if f.name == "grpo":
                default = "{...}"
            lines.append(f"  {prefix}{f.name} (default {default!r})\n      {f.metadata.get('help', '')}")

    walk(RunConfig, "")
    return "\n".join(lines)
