"""Rubrics: the weighted, instance-specific checklists the model writes for a question (docs/METHOD.md §2.1).

A rubric is written from the question alone. This module holds the data model, the prompt that
asks for one, a parser that never raises on model output, the format-validity score used as a
reward term, and the text rendering the judge reads.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evolm.backends.base import Backend, Conversation, SamplingParams
from evolm.backends.constrained import RUBRIC_SCHEMA as RUBRIC_SCHEMA  # the reply format below, as a JSON schema
from evolm.backends.replies import remove_reasoning, repaired_json, strip_thinking
from evolm.config import RUBRIC_PROMPTS

# ----------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class Criterion:
    """One atomic aspect of a good answer, its weight, and what each score level means."""

    criterion: str
    weight: float
    scoring_levels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rubric:
    """A list of criteria whose weights sum to 1 (the parser normalises them)."""

    criteria: tuple[Criterion, ...]

    def to_dict(self) -> dict[str, Any]:
        """As JSON; weights rounded to 12 decimals, so the float noise of normalising (0.3 read as
        0.29999999999999993) never reaches a file or a reader: reading it back renormalises, far below that digit."""
        return {
            "criteria": [
                {"criterion": c.criterion, "weight": round(c.weight, 12), "scoring_levels": dict(c.scoring_levels)}
                for c in self.criteria
            ]
        }

    @staticmethod
    def from_obj(obj: Any) -> Rubric | None:
        """A rubric from a parsed JSON value or a JSON string; ``None`` when it holds no usable criterion."""
        if isinstance(obj, Rubric):
            return obj
        if isinstance(obj, str):
            return parse_rubric(obj)
        return _rubric_from_value(obj)


# ----------------------------------------------------------------------------- prompt

RUBRIC_SYSTEM_PROMPT = """\
You design grading rubrics. Given a user's question, you write a short checklist that a grader \
will use to score any answer to that question. You never see an answer: the rubric must come \
from the question alone."""

_RUBRIC_INSTRUCTIONS = """\
For each question you receive, first think about it:
- What is the single most important thing a good answer must get right?
- Which explicit requirements does it state (format, length, content, style, language)?
- Which implicit requirements would a careful expert expect?

Then write 2 to 5 criteria:
- Each criterion checks exactly one aspect, is objective, and does not assume one particular wording of the answer.
- Give each criterion a weight; the weights sum to 1.0 and the most important criteria weigh most.
- For questions with a short verifiable answer (math, multiple choice, a fact), you may use one \
dealbreaker criterion of the form "The final answer is equivalent to X" with most of the weight \
(about 0.8). For open-ended or long-form tasks, no single criterion should dominate.
- Every criterion has scoring levels from "1.0" (fully met) to "0.0" (not met), with at least one \
level in between.

Reply with the JSON object only: {"criteria": [{"criterion": ..., "weight": ..., "scoring_levels": {...}}, ...]}"""

# The one-shot example is a long-form request with balanced weights, on purpose: the pattern the
# paper reports as *emerging* with training (one answer check holding ~0.8 of the weight) must not
# be taught by the prompt, or the rubric statistics would measure the example (docs/METHOD.md §2.1). Its texts fit the
# rubric grammar's bounds (evolm.backends.constrained: criteria <= 80, levels <= 30 characters).
_EXAMPLE_QUESTION = "Write a short note asking my neighbour to water my plants while I am away next week."
_EXAMPLE = {
    "criteria": [
        {
            "criterion": "Makes the request clear: water the plants while the writer is away next week.",
            "weight": 0.4,
            "scoring_levels": {"1.0": "Request and dates are clear.", "0.5": "Request clear, timing vague.",
                               "0.0": "Request missing or unclear."},
        },
        {
            "criterion": "Gives the details the neighbour needs (which plants, how often, access).",
            "weight": 0.3,
            "scoring_levels": {"1.0": "All needed details.", "0.5": "Some details.", "0.0": "No details."},
        },
        {
            "criterion": "Is polite and short, as a note to a neighbour should be.",
            "weight": 0.3,
            "scoring_levels": {"1.0": "Polite and brief.", "0.5": "Polite but long, or curt.",
                               "0.0": "Rude or rambling."},
        },
    ]
}


# ``rubric.prompt: older``: the instructions of the authors' older rubric prompt (the one their rubric-training
# steps hard-code), in our own words: explicit and implicit requirements, then 5 to 10 criteria, no dealbreaker.
_OLDER_INSTRUCTIONS = """\
For each question you receive, first think about it:
- Which explicit requirements does it state (format, length, content, style, language)?
- Which implicit requirements follow from its context, though it does not state them?

Then write 5 to 10 criteria:
- Each criterion checks exactly one aspect, is objective, and does not assume one particular wording of the answer.
- Give each criterion a weight for its importance; the weights sum to 1.0.
- Every criterion has scoring levels from "1.0" (fully met) to "0.0" (not met); add levels in between wherever \
they help tell better answers from worse. A grader rates each criterion and multiplies by its weight.

Reply with the JSON object only: {"criteria": [{"criterion": ..., "weight": ..., "scoring_levels": {...}}, ...]}"""
_OLDER_EXAMPLE = {
    "criteria": [
        {"criterion": "Makes the request clear: water the plants while the writer is away.", "weight": 0.3,
         "scoring_levels": {"1.0": "Request is clear.", "0.5": "Request implied.", "0.0": "No request."}},
        {"criterion": "Gives the dates of the absence (next week).", "weight": 0.2,
         "scoring_levels": {"1.0": "Dates given.", "0.5": "Timing vague.", "0.0": "No timing."}},
        {"criterion": "Says which plants need water and how often.", "weight": 0.2,
         "scoring_levels": {"1.0": "Both given.", "0.5": "One given.", "0.0": "Neither."}},
        {"criterion": "Explains how the neighbour gets in (key, access).", "weight": 0.15,
         "scoring_levels": {"1.0": "Access explained.", "0.0": "Not mentioned."}},
        {"criterion": "Is polite and short, as a note to a neighbour should be.", "weight": 0.15,
         "scoring_levels": {"1.0": "Polite and brief.", "0.5": "Polite but long, or curt.",
                            "0.0": "Rude or rambling."}},
    ]
}


def rubric_messages(question: str, prompt: str = "v3") -> Conversation:
    """The chat conversation that asks the model (in its rubric role) for a rubric of ``question``.

    The instructions sit in the system prompt and one worked example is given as a previous turn
    of the conversation: small models copy the format of a turn far more reliably than that of an
    example quoted inside the instructions. ``prompt``: ``v3`` (the paper's instructions, in our
    words) or ``older`` (the authors' older prompt's, in our words: 5-10 criteria, no dealbreaker).
    """
    if prompt not in RUBRIC_PROMPTS:
        raise ValueError(f"unknown rubric prompt '{prompt}' (choose from {', '.join(RUBRIC_PROMPTS)})")
    v3 = prompt == "v3"
    instructions, example = (_RUBRIC_INSTRUCTIONS, _EXAMPLE) if v3 else (_OLDER_INSTRUCTIONS, _OLDER_EXAMPLE)
    return [
        {"role": "system", "content": f"{RUBRIC_SYSTEM_PROMPT}\n\n{instructions}"},
        {"role": "user", "content": f"Question:\n{_EXAMPLE_QUESTION}"},
        {"role": "assistant", "content": json.dumps(example)},
        {"role": "user", "content": f"Question:\n{question}"},
    ]


# ----------------------------------------------------------------------------- parsing

_MAX_OBJECT_STARTS = 256  # bound the scan on adversarial text full of braces
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_OPENER = re.compile(r"[{\[]")


def _json_values(text: str) -> list[Any]:
    """Every JSON object or array that starts at a '{' or '[' in ``text``, outermost first.

    A value that does not decode as written is retried with trailing commas removed. That repair
    is done once for the whole text, not per start: it deletes only commas and blanks, never a
    bracket, so the k-th '{' or '[' of the repaired text is the k-th of the original. Each start
    then costs one decode from an offset (no copy), and degenerate output full of braces and
    commas stays linear in its length times the bounded number of starts.
    """
    decoder = json.JSONDecoder()
    repaired = _TRAILING_COMMA.sub(r"\1", text)
    starts = [m.start() for m in itertools.islice(_OPENER.finditer(text), _MAX_OBJECT_STARTS)]
    repaired_starts = [m.start() for m in itertools.islice(_OPENER.finditer(repaired), _MAX_OBJECT_STARTS)]
    sources = [(text, starts)] if repaired == text else [(text, starts), (repaired, repaired_starts)]
    covered = [-1] * len(sources)  # per source: end of the last value decoded from it
    values: list[Any] = []
    for k in range(len(starts)):
        if any(k < len(st) and st[k] < covered[s] for s, (_, st) in enumerate(sources)):
            continue  # inside a value already found
        for s, (src, st) in enumerate(sources):
            try:
                value, end = decoder.raw_decode(src, st[k])
            except (json.JSONDecodeError, RecursionError, ValueError):
                continue
            values.append(value)
            covered[s] = end
            break
    return values


def _find_criteria_object(value: Any, depth: int = 0) -> dict | None:
    """The first dict (searching nested values) that has a ``criteria`` list."""
    if depth > 6:
        return None
    if isinstance(value, dict):
        if isinstance(value.get("criteria"), list):
            return value
        for v in value.values():
            found = _find_criteria_object(v, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list):
        for v in value:
            found = _find_criteria_object(v, depth + 1)
            if found is not None:
                return found
    return None


def _as_float(x: Any) -> float | None:
    """A weight as a finite float, else ``None``: an int past a float's range (``1`` and 400 zeros) too.

    >>> _as_float("40%"), _as_float(10**400), _as_float("1e400"), _as_float(True)
    (0.4, None, None, None)
    """
    if isinstance(x, bool):
        return None
    if isinstance(x, int | float):
        f = float(x) if isinstance(x, float) or abs(x) < 2**1023 else math.inf  # float(10**400) raises
    elif isinstance(x, str):
        s = x.strip()
        try:
            f = float(s[:-1]) / 100 if s.endswith("%") else float(s)  # "40%" is 0.4, like 0.4 beside it
        except ValueError:
            return None
    else:
        return None
    return f if math.isfinite(f) else None


def _rubric_from_value(value: Any) -> Rubric | None:
    obj = _find_criteria_object(value)
    if obj is not None:
        entries = obj["criteria"]
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        entries = value  # a bare list of criteria
    else:
        return None
    texts, weights, levels = [], [], []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        text = next(
            (entry[k] for k in ("criterion", "description", "name", "text") if isinstance(entry.get(k), str)), None
        )
        if not text or not text.strip():
            continue
        w = _as_float(entry.get("weight"))
        texts.append(text.strip())
        weights.append(w if w is not None and w > 0 else None)
        raw_levels = entry.get("scoring_levels")
        levels.append(
            {str(k): str(v) for k, v in raw_levels.items()} if isinstance(raw_levels, dict) else {}
        )
    if not texts:
        return None
    known = [w for w in weights if w is not None]
    scale = max(known) if known else 1.0  # scaled to <= 1 first: 1e308 + 1e308 must not overflow to inf
    known = [w / scale for w in known]
    fill = (sum(known) / len(known)) if known else 1.0
    weights = [w / scale if w is not None else fill for w in weights]
    total = sum(weights)
    return Rubric(tuple(Criterion(t, w / total, lv) for t, w, lv in zip(texts, weights, levels, strict=True)))


def rubric_repairs(obj: Any) -> list[str]:
    """What reading ``obj`` (a rubric as a JSON value or text) into a ``Rubric`` changed, in words; [] when nothing.

    ``Rubric.from_obj`` uses what it can rather than refuse: a criterion without text is dropped, a weight that is
    missing, not a number or not positive takes the mean of the others, and JSON that does not decode is repaired
    (a cut-off rubric closed, single quotes read). Weights scaled to sum to 1 are not a change. This says what was
    changed, so a caller can report a rubric that was not used as written (``evolm judge``: ``rubric_used:
    "repaired"``). Never raises.

    >>> rubric_repairs({"criteria": [{"criterion": "Correct", "weight": "heavy"}, {"criterion": "Clear", "weight": 2}]})
    ["criterion 1: weight 'heavy' is not a positive number (took the others' mean)"]
    >>> rubric_repairs('{"criteria": [{"criterion": "Correct", "weight": 0.8}, {"criterion": "Clear", "weight": 0.2}]}')
    []
    """
    try:
        value = obj
        if isinstance(obj, str):
            value = next((v for v in _json_values(strip_thinking(obj)) if _rubric_from_value(v) is not None), None)
            if value is None:
                return ["its JSON did not decode as written and was repaired"] if parse_rubric(obj) is not None else []
        found = _find_criteria_object(value)
        entries = found["criteria"] if found is not None else value if isinstance(value, list) else []
        out = []
        for i, entry in enumerate(entries, start=1):
            text = next((entry[k] for k in ("criterion", "description", "name", "text")
                         if isinstance(entry.get(k), str)), None) if isinstance(entry, dict) else None
            if not text or not text.strip():
                out.append(f"criterion {i}: no text (dropped)")
            elif "weight" not in entry:
                out.append(f"criterion {i}: no weight (took the others' mean)")
            elif (w := _as_float(entry["weight"])) is None or w <= 0:
                shown = repr(entry["weight"])
                shown = shown if len(shown) <= 40 else f"{shown[:24]}... ({len(shown)} characters)"
                out.append(f"criterion {i}: weight {shown} is not a positive number (took the others' mean)")
        return out
    except Exception:  # noqa: BLE001 - like parse_rubric: a rubric from a file or a model never crashes the caller
        return ["unreadable"]


def parse_rubric(text: str) -> Rubric | None:
    """The rubric in a model's output, or ``None``. Never raises.

    Strips thinking, then finds the first JSON value holding a ``criteria`` list anywhere in the text
    (prose before or after, code fences, trailing commas, nesting are tolerated). Criteria without
    text are dropped; missing or non-positive weights get the mean of the others; weights are
    normalised to sum to 1. Strictness lives in ``format_validity``, not here.

    >>> text = '{"criteria": [{"criterion": "Correct", "weight": 3}, {"criterion": "Clear", "weight": 1}]}'
    >>> r = parse_rubric('Sure!\\n```json\\n' + text + '\\n```')
    >>> [round(c.weight, 2) for c in r.criteria]
    [0.75, 0.25]
    >>> parse_rubric("no rubric here") is None
    True
    """
    try:
        body = strip_thinking(text)
        for value in _json_values(body):
            rubric = _rubric_from_value(value)
            if rubric is not None:
                return rubric
        found = _rubric_from_value(_repair_truncated(body))
        if found is None and "{" in body:  # last resort: the authors' reading (single quotes, bare keys, ...)
            found = _rubric_from_value(repaired_json(remove_reasoning(text)))
        return found
    except Exception:  # noqa: BLE001 - model output must never crash the caller
        return None


_MAX_REPAIRS = 64  # closing braces tried, from the end, when repairing a cut-off rubric


def _repair_truncated(text: str) -> Any:
    """The longest whole prefix of a cut-off ``{"criteria": [...`` object, closed, or ``None``.

    A rubric cut off by the token limit (or a small model that never closes its JSON) keeps its
    complete criteria: this closes the open brackets after the last complete object. Only parsing
    uses it; ``format_validity`` still scores such output 0.

    >>> _repair_truncated('{"criteria": [{"criterion": "A", "weight": 0.8}, {"criterion": "B", "wei')
    {'criteria': [{'criterion': 'A', 'weight': 0.8}]}
    """
    m = re.search(r'\{\s*"criteria"\s*:', text)
    if m is None:
        return None
    start = m.start()
    stack: list[str] = []
    ends: list[tuple[int, str]] = []  # (index after a closing '}', the closers still needed there)
    in_string = escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return None  # the object closed normally: nothing to repair
            if ch == "}":
                ends.append((i + 1, "".join(reversed(stack))))
    for end, closers in reversed(ends[-_MAX_REPAIRS:]):
        try:
            return json.loads(_TRAILING_COMMA.sub(r"\1", text[start:end] + closers))
        except (json.JSONDecodeError, RecursionError, ValueError):
            continue
    return None




def format_validity(text: str) -> float:
    """1.0 if the output is a well-formed rubric, else 0.0: the authors' rule. Never raises.

    The text, reasoning removed (``remove_reasoning``), is read by ``repaired_json`` (first ``{`` to
    last ``}``, repaired by ``json_repair``); it is well-formed when that value is an object whose
    top-level ``criteria`` list has at least 2 entries, each an object with ``criterion`` and
    ``weight`` keys, every ``float(weight)`` finite and > 0 (so ``"0.5"`` counts), and the weights
    summing to 1 within 0.15. Nested ``criteria`` do not count (``parse_rubric`` still reads them).
    evolm adds one refusal: a non-finite weight (``"nan"``).

    >>> format_validity('{"criteria": [{"criterion": "a", "weight": "0.5"}, {"criterion": "b", "weight": 0.6}]}')
    1.0
    >>> format_validity("Rubric: {'criteria': [{'criterion': 'a', 'weight': 1.0}]}")
    0.0
    """
    try:
        value = repaired_json(remove_reasoning(text).strip())
        entries = value.get("criteria") if isinstance(value, dict) else None
        if not isinstance(entries, list) or len(entries) < 2:
            return 0.0
        total = 0.0
        for entry in entries:
            if not isinstance(entry, dict) or "criterion" not in entry or "weight" not in entry:
                return 0.0
            w = float(entry["weight"])
            if not math.isfinite(w) or w <= 0:
                return 0.0
            total += w
        return 0.0 if abs(total - 1.0) > 0.15 else 1.0
    except Exception:  # noqa: BLE001 - float() of a list, dict or text: not a weight
        return 0.0


# ----------------------------------------------------------------------------- rendering


def render_rubric(rubric: Rubric) -> str:
    """The rubric as numbered plain text for the judge's prompt.

    >>> print(render_rubric(Rubric((Criterion("Says 4", 1.0, {"1.0": "yes", "0.0": "no"}),))))
    1. (weight 1.00) Says 4
       - 1.0: yes
       - 0.0: no
    """
    lines = []
    for i, c in enumerate(rubric.criteria, start=1):
        lines.append(f"{i}. (weight {c.weight:.2f}) {c.criterion}")
        for level, desc in c.scoring_levels.items():
            lines.append(f"   - {level}: {desc}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class WrittenRubric:
    """A rubric as the model wrote it: raw text, the parsed rubric (or ``None``) and its format validity."""

    text: str
    rubric: Rubric | None
    valid: float

    def fields(self) -> dict[str, Any]:
        """The fields ``evolm rubric`` adds to its input row: ``rubric`` (parsed, or None), ``rubric_valid``,
        ``rubric_text``."""
        return {"rubric": self.rubric.to_dict() if self.rubric else None, "rubric_valid": self.valid,
                "rubric_text": self.text}


def read_written(text: str) -> WrittenRubric:
    """Parse one raw rubric output (never raises)."""
    return WrittenRubric(text, parse_rubric(text), format_validity(text))


def write_rubrics(
    backend: Backend, questions: Sequence[str], params: SamplingParams, progress: bool = False, prompt: str = "v3",
    on_rows: Callable[[int], None] | None = None, on_tokens: Callable[[int], None] | None = None,
) -> list[WrittenRubric]:
    """One rubric per question, written by ``backend`` in the rubric role (``rubric_messages(q, prompt)``), batched.

    ``on_rows(n)`` (a local ``HFBackend`` only: ``HFBackend.generate``) is told as ``n`` more rubrics are finished,
    ``on_tokens(n)`` as ``n`` more tokens are written.
    """
    extra = {k: f for k, f in (("on_rows", on_rows), ("on_tokens", on_tokens)) if f is not None}
    texts = backend.generate([rubric_messages(q, prompt) for q in questions], params, progress=progress, **extra)
    return [read_written(t) for t in texts]
