"""Checks of one setting's value, read by the settings models (``schema``): endpoint URLs, ``rewards.extra``'s
entries, and where a run directory may not go."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def endpoint_urls(base_url: str | Sequence[str] | None) -> list[str | None]:
    """The endpoints a ``base_url`` setting names: a URL, comma-separated URLs, or a list of either.

    ``None`` is one endpoint, the ``openai`` client's default.

    >>> endpoint_urls("http://a:8000/v1, http://b:8000/v1/")
    ['http://a:8000/v1', 'http://b:8000/v1/']
    >>> endpoint_urls(["http://a/v1", "http://b/v1,http://c/v1"]), endpoint_urls(None)
    (['http://a/v1', 'http://b/v1', 'http://c/v1'], [None])
    """
    if base_url is None:
        return [None]
    parts = [base_url] if isinstance(base_url, str) else list(base_url)
    return [url.strip() for part in parts for url in str(part).split(",") if url.strip()]


EXTRA_ROLES = ("policy", "rubric")  # rewards.extra[].role: the steps an extra reward adds to


def extra_reward_problems(entries: Any) -> list[str]:
    """What is wrong with the shape of ``rewards.extra`` (no import: the functions are imported when the trainer is
    built, ``training.extra_rewards``)."""
    if not isinstance(entries, list | tuple):
        return ["rewards.extra must be a list of {name, weight, kwargs, role} entries"]
    for i, entry in enumerate(entries):
        where = f"rewards.extra[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
            return [f"{where} must be a mapping with a 'name' (an import path such as mypkg.mod:fn)"]
        if unknown := sorted(set(entry) - {"name", "weight", "kwargs", "role"}):
            return [f"{where}: unknown key '{unknown[0]}' (known: name, weight, kwargs, role)"]
        if entry.get("role", "policy") not in EXTRA_ROLES:
            return [f"{where}: role must be one of {', '.join(EXTRA_ROLES)}, not {entry['role']!r}"]
        weight, kwargs = entry.get("weight", 1.0), entry.get("kwargs")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            return [f"{where}: weight must be a finite number, not {weight!r}"]
        if kwargs is not None and not isinstance(kwargs, Mapping):
            return [f"{where}: kwargs must be a mapping of the factory's arguments, not {kwargs!r}"]
    return []


def url_error(name: str, url: Any) -> str | None:
    """Why ``url`` is no http(s)://host[:port]/path URL (``None``: it is one)."""
    from urllib.parse import urlparse

    try:
        u = urlparse(url)
        u.port  # noqa: B018 - parses the port: 'http://h:x' is refused here, not at the first request
    except (ValueError, TypeError, AttributeError):
        return f"{name} '{url}' is not a URL"
    if u.scheme not in ("http", "https") or not u.hostname:
        return f"{name} '{url}' is not an http(s)://host[:port]/path URL"
    return None


def system_dir(path: str) -> bool:
    """Whether ``path`` is the filesystem root or under /proc, /sys or /dev: no place for a run directory."""
    try:
        p = Path(path).resolve()
    except (OSError, RuntimeError):
        return False
    return p == Path(p.anchor) or any(p == Path(d) or Path(d) in p.parents for d in ("/proc", "/sys", "/dev"))
