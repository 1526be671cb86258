"""Reading a run's settings: a YAML file (``extends:`` names a config it changes), dotted ``key=value`` overrides,
and writing them back. pydantic checks the settings (``schema``); every error is one line naming the setting
(docs/ARCHITECTURE.md says why the reading is evolm's own)."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel

from evolm.config.messages import kinds
from evolm.config.schema import RunConfig
from evolm.config.settings import leaves
from evolm.errors import InputError


def to_dict(cfg: BaseModel) -> dict[str, Any]:
    return cfg.model_dump()


# settings that existed and were removed: a saved run's config.yaml holding their old default still loads
RETIRED = {"rubric.with_answers": (False, "the one-pass generation path was removed (slower on CPU, unmeasured on "
                                          "GPU: dev/performance.md)")}


class _Loader(yaml.SafeLoader):
    """YAML as users read it: PyYAML follows YAML 1.1, which reads ``1e-6`` (no dot) as a string; YAML 1.2 and every
    user read it as a number."""


_EXPONENT = re.compile(r"^[-+]?(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)[eE][-+]?\d+$")
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT, list("-+0123456789."))


def _yaml(text: str, where: str) -> Any:
    """``text`` read as YAML; a value YAML resolves but Python cannot build (a 5,000-digit integer, over
    Python's ``sys.get_int_max_str_digits()``; a date like ``2024-13-45``) is a one-line ``InputError``
    naming its key."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except ValueError as e:
        key, why = _unbuildable(text) or ("", str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise InputError(f"{where}{f': {key!r}' if key else ''}: {why}") from None


def _unbuildable(text: str) -> tuple[str, str] | None:
    """The dotted key of the first value in ``text`` that YAML resolves but Python cannot build, and why;
    found by building each scalar of the composed document alone (walked without recursion, a shared node
    once)."""
    loader = _Loader(text)
    try:
        stack: list[tuple[Any, str]] = [(loader.get_single_node(), "")]
        seen: set[int] = set()
        while stack:
            node, path = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, yaml.MappingNode):
                for k, v in reversed(node.value):
                    stack += [(v, _join(path, k.value if isinstance(k, yaml.ScalarNode) else "?")), (k, path)]
            elif isinstance(node, yaml.SequenceNode):
                stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(node.value))))
            else:
                try:
                    loader.construct_object(node)
                except ValueError as e:
                    return path, _why(node, e)
        return None
    except (yaml.YAMLError, RecursionError):
        return None
    finally:
        loader.dispose()


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _why(node: Any, e: ValueError) -> str:
    if node.tag == "tag:yaml.org,2002:int":
        return (f"a number of {sum(c.isdigit() for c in node.value):,} digits (Python reads at most "
                f"{sys.get_int_max_str_digits():,})")
    detail = str(e).splitlines()[0] if str(e) else type(e).__name__
    return f"{node.value[:40]!r} is not a {node.tag.rsplit(':', 1)[-1]} ({detail})"


def refuse_unprintable_numbers(value: Any, where: str) -> None:
    """Refuse, naming its key, an integer too long for Python to print (over ``sys.get_int_max_str_digits()``
    digits, as ``0x`` and 5,000 ``f`` read): any message showing it would end in a traceback. Walked without
    recursion (after ``check_tree``), a shared node once.

    >>> refuse_unprintable_numbers({"seed": 16 ** 5000}, "c.yaml")
    Traceback (most recent call last):
    ...
    evolm.errors.InputError: c.yaml: 'seed': a number of over 4,300 digits (Python prints at most that many)
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if isinstance(node, int) and not isinstance(node, bool) and not _printable(node):
            raise InputError(f"{where}{f': {path!r}' if path else ''}: a number of over "
                             f"{sys.get_int_max_str_digits():,} digits (Python prints at most that many)")
        if isinstance(node, (dict, list)) and id(node) not in seen:
            seen.add(id(node))
            for k, v in node.items() if isinstance(node, dict) else enumerate(node):
                if isinstance(node, list):
                    stack.append((v, f"{path}[{k}]"))
                    continue
                stack.append((k, path))  # a key that cannot be printed names its mapping, not itself
                stack.append((v, _join(path, k if _printable(k) else "?")))


def _printable(n: Any) -> bool:
    if not isinstance(n, int):
        return True
    try:
        str(n)
    except ValueError:
        return False
    return True


def _drop_retired(data: dict[str, Any]) -> None:
    """Remove a ``RETIRED`` setting that holds its old default; one that asks for anything else is an error."""
    for key, (default, why) in RETIRED.items():
        *sections, name = key.split(".")
        node: Any = data
        for section in sections:
            node = node.get(section) if isinstance(node, dict) else None
        if isinstance(node, dict) and name in node and node.pop(name) != default:
            raise InputError(f"'{key}' is no longer a setting: {why}; remove it")


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
        data = _yaml(p.read_text(encoding="utf-8"), str(p)) or {}
    except UnicodeDecodeError:
        raise InputError(f"{p}: not UTF-8 text") from None
    except yaml.YAMLError as e:
        raise InputError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise InputError(f"{p}: YAML nested too deeply") from None
    check_tree(data, str(p))
    refuse_unprintable_numbers(data, str(p))
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
            value = _yaml(raw, f"override '{key}'") if raw != "" else ""
        except (yaml.YAMLError, RecursionError):
            value = raw
        except InputError:  # a value Python cannot build (5,000 digits): as typed for a text setting
            if not _is_text_field(parts):
                raise
            value = raw
        check_tree(value, f"override '{key}'")
        if _is_text_field(parts) and value is not None and not isinstance(value, str):
            value = raw  # model.name=2024, model.system_prompt=yes: the text as typed, not YAML's int or bool
        refuse_unprintable_numbers(value, f"override '{key}'")
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError(f"override '{item}': '{part}' is not a section")
        node[parts[-1]] = value
    if isinstance(data.get("grpo"), dict):  # grpo: changes the default mapping, key by key
        data["grpo"] = {**RunConfig.model_fields["grpo"].get_default(call_default_factory=True), **data["grpo"]}
    _drop_retired(data)
    return RunConfig.checked(data)


def _is_text_field(parts: list[str]) -> bool:
    """True if the dotted key names a text setting (``str``, a ``Literal`` of names, or ``str | None``)."""
    field = dict(leaves(RunConfig)).get(".".join(parts))
    allowed = kinds(field.annotation) if field else []
    return bool(allowed) and all(k is str or typing.get_origin(k) is Literal for k in allowed)  # str | list: a list


def describe() -> str:
    """Every setting with its default and help, for ``evolm train --help``."""
    return "\n".join(f"  {key} (default {'{...}' if key == 'grpo' else field.get_default(call_default_factory=True)!r})"
                     f"\n      {field.description or ''}" for key, field in leaves(RunConfig))
