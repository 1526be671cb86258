"""What a report page is made of, for one run's report and for a comparison alike: the templates (autoescaped),
cells and durations in words, plots embedded as PNG (or a table when a curve would have too few points)."""

from __future__ import annotations

import base64
import datetime as dt
import math
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from evolm.report import plots

MIN_PLOT_POINTS = 3  # fewer steps than this make no curve (a lone point gets ticks like 0.945-1.050): a table instead


def fmt(v: Any, pct: bool = False) -> Any:
    """A table cell or a number in words: text as given (the template escapes it; Markup stays), numbers rounded.

    >>> fmt(None), fmt(0.123456), fmt(0.5, pct=True), fmt(3)
    ('–', '0.1235', '50.0%', '3')
    """
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if pct:
        return f"{100 * v:.1f}%"
    return str(v) if isinstance(v, int) else f"{v:.4g}"


# the page markup lives in templates/*.html.j2 (docs/ARCHITECTURE.md, report/); autoescaped, so a
# rubric, a question or a label written by a model or a user is text, and only Markup built here is kept as HTML
_PAGES = Environment(loader=PackageLoader("evolm.report", "templates"), autoescape=True, undefined=StrictUndefined,
                    trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
_PAGES.filters["fmt"] = fmt


def render_page(template: str, **context: Any) -> str:
    """A page of templates/ with ``context`` and the time it was generated."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return _PAGES.get_template(template).render(now=now, **context)


def plot_html(notes: list[str], alt: str, fn, *args) -> Markup:  # noqa: ANN001 - a plots.* function
    """A plot as an embedded PNG <img>, or a line saying why it is missing (a note is added: one odd value in a
    partial run must not lose the whole page)."""
    try:
        png = base64.b64encode(fn(*args)).decode("ascii")
    except Exception as e:  # noqa: BLE001 - the report must survive any odd value in a partial run
        notes.append(f"plot '{alt}' could not be drawn: {type(e).__name__}: {e}")
        return Markup('<p class="muted">Plot "{}" could not be drawn ({}).</p>').format(alt, type(e).__name__)
    return Markup('<p><img alt="{}" src="data:image/png;base64,{}"></p>').format(alt, png)


def _points(s: plots.Series) -> int:
    return sum(not math.isnan(y) for y in s.y)


def figure(notes: list[str], alt: str, columns: dict[str, tuple[plots.Series, float]], fn, *args) -> Markup:  # noqa: ANN001
    """``plot_html(notes, alt, fn, *args)``, or, when no curve of ``columns`` (header -> (series, scale)) has
    ``MIN_PLOT_POINTS`` values, a small table of those values by step."""
    if max((_points(s) for s, _ in columns.values()), default=0) >= MIN_PLOT_POINTS:
        return plot_html(notes, alt, fn, *args)
    by_step: dict[float, dict[str, float]] = {}
    for name, (s, scale) in columns.items():
        for x, y in zip(s.x, s.y, strict=True):
            if not math.isnan(y):
                by_step.setdefault(x, {})[name] = y * scale
    rows = [[x, *[cells.get(name, math.nan) for name in columns]] for x, cells in sorted(by_step.items())]
    table = _PAGES.get_template("macros.html.j2").module.table(["step", *columns], rows, 1)
    return Markup('<p class="muted">{}: fewer than {} steps with a value, so a table instead of a plot.</p>{}').format(
        alt, MIN_PLOT_POINTS, table)


def duration(seconds: float) -> str:
    """Seconds as h:mm:ss.

    >>> duration(3725.4), duration(float("nan"))
    ('1:02:05 (h:mm:ss)', '–')
    """
    if math.isnan(seconds):
        return "–"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d} (h:mm:ss)"


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, leaf) pairs of a nested JSON/YAML value.

    >>> flatten({"judge": {"mode": "yesno"}, "seeds": [1, 2]})
    [('judge.mode', 'yesno'), ('seeds[0]', 1), ('seeds[1]', 2)]
    """
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list):
        return [kv for i, v in enumerate(value) for kv in flatten(v, f"{prefix}[{i}]")]
    return [(prefix, value)]
