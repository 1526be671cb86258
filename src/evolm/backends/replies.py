"""Reading a model's reply: its reasoning removed (``strip_thinking``, evolm's reading; ``remove_reasoning``, the
authors'), and the JSON object in it as the authors read one (``repaired_json``). Never raises, and linear in the
text's length: these run on every judged answer, written rubric and judge reply, so output full of tags must not
stall a reward."""

from __future__ import annotations

import json
import re
from typing import Any

_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


def strip_thinking(text: str) -> str:
    """Text without ``<think>...</think>`` blocks; an unclosed ``<think>`` swallows the rest.

    A lone ``</think>`` (chat templates that open the block in the prompt) keeps what follows it.
    Linear time: one left-to-right scan pairs each ``<think>`` with the next ``</think>`` (the
    non-greedy ``<think>.*?</think>`` it replaces rescanned the rest of the text from every
    unclosed tag: 15 s on ``"<think>" * 20000``). It runs on every judged answer and every written
    rubric, so policy output full of tags must not stall the reward.

    >>> strip_thinking("<think>a</think>B<THINK>c</think>D"), strip_thinking("x</think>y"), strip_thinking("x<think>y")
    ('BD', 'y', 'x')
    """
    if not isinstance(text, str):
        return ""
    kept: list[str] = []
    pos = 0
    while True:
        opened = _THINK_OPEN.search(text, pos)
        if opened is None:
            break
        closed = _THINK_CLOSE.search(text, opened.end())
        if closed is None:
            break  # no block closes after here: the rest stays for the unclosed-tag rule below
        kept.append(text[pos : opened.start()])
        pos = closed.end()
    kept.append(text[pos:])
    out = "".join(kept)
    last_close = None
    for last_close in _THINK_CLOSE.finditer(out):  # noqa: B007 - the last one is wanted
        pass
    if last_close is not None:
        out = out[last_close.end() :]
    first_open = _THINK_OPEN.search(out)
    if first_open is not None:
        out = out[: first_open.start()]
    return out.strip()


_TAG_THINK_BLOCK = re.compile(r"<\s*think\s*>|<\s*/\s*think\s*>", re.IGNORECASE)
# ``<\s*(?:/\s*)?``: ``<\s*/?\s*`` tried each split of a run of blanks (7 s on "<" and 20,000 spaces).
_TAG_THINK_ANY = re.compile(r"<\s*(?:/\s*)?think\s*>", re.IGNORECASE)
_TAG_STRUCTURED = re.compile(r"<\s*(?:/\s*)?(?:RUBRIC|EVALUATION)\s*>", re.IGNORECASE)
_CRITERIA_START = re.compile(r'\{\s*"criteria"\s*:')
LONG_TEXT_CHARS = 16000
"""A text still longer than this once its reasoning is removed is cut to its last ``LONG_TEXT_KEEP`` characters."""
LONG_TEXT_KEEP = 8000


def remove_reasoning(text: str) -> str:
    """``text`` as the authors' code reads a rubric or an answer before format checking and judging. Never raises.

    Closed ``<think>...</think>`` blocks go; after a ``<think>`` left open, only what precedes it is
    kept (unless a ``<RUBRIC>`` or ``<EVALUATION>`` tag follows it: then from that tag on); stray
    think tags are dropped (the text on both sides stays). A ``{"criteria": ...`` object starting
    more than 200 characters in (reasoning written without tags) is kept alone when it decodes.
    Finally a text still over ``LONG_TEXT_CHARS`` characters keeps its last ``LONG_TEXT_KEEP``.
    ``strip_thinking`` differs: it keeps only what follows a stray ``</think>`` and never cuts.

    >>> remove_reasoning("<think>plan</think>{}"), remove_reasoning("A</think>B"), remove_reasoning("A<think>B")
    ('{}', 'AB', 'A')
    >>> len(remove_reasoning("x" * 16001))
    8000
    """
    if not isinstance(text, str) or not text:
        return text if isinstance(text, str) else ""
    kept, pos, open_at = [], 0, None
    for m in _TAG_THINK_BLOCK.finditer(text):  # one pass: each opening tag pairs with the next closing one
        closing = "/" in m.group(0)
        if open_at is None and not closing:
            open_at = m.start()
            kept.append(text[pos:open_at])
        elif open_at is not None and closing:
            open_at, pos = None, m.end()
    if open_at is None:
        kept.append(text[pos:])
        cleaned = "".join(kept)
    else:  # an opening tag never closed: the model did not finish reasoning
        before, tail = "".join(kept), text[open_at:]
        tail = tail[_TAG_THINK_ANY.match(tail).end():]  # type: ignore[union-attr]
        tag = _TAG_STRUCTURED.search(tail)
        cleaned = tail[tag.start():] if tag else before.strip()
    cleaned = _TAG_THINK_ANY.sub("", cleaned)
    m = _CRITERIA_START.search(cleaned)
    if m and m.start() > 200:
        depth = 0
        for j in range(m.start(), len(cleaned)):  # braces counted as written (strings not skipped), as the authors do
            depth += {"{": 1, "}": -1}.get(cleaned[j], 0)
            if depth == 0:
                try:
                    json.loads(cleaned[m.start() : j + 1])
                    return cleaned[m.start() : j + 1]
                except (ValueError, RecursionError):
                    break
    return cleaned[-LONG_TEXT_KEEP:] if len(cleaned) > LONG_TEXT_CHARS else cleaned


def repaired_json(text: str) -> Any:
    """The value ``json_repair`` reads from the first ``{`` to the last ``}`` of ``text``; ``None`` without one.

    The authors' reading of a rubric (and of a judge reply): prose around the object is ignored,
    single quotes, unquoted keys, trailing commas and a cut-off end are repaired. Never raises.

    >>> repaired_json("Sure: {'score': 0.5} done")
    {'score': 0.5}
    """
    import json_repair

    start = text.find("{") if isinstance(text, str) else -1
    if start == -1:
        return None
    try:
        return json_repair.loads(text[start : text.rfind("}") + 1])
    except Exception:  # noqa: BLE001 - model output must never crash the caller
        return None
