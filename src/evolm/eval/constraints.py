"""Checkable constraints: IFEval's instructions ("answer in all capital letters", "add a postscript starting with
P.S.") attached to a question, and lm-evaluation-harness's own IFEval checkers deciding whether an answer complies.

A prompt with constraints is a JSONL line ``{"prompt": ..., "question": ..., "constraints": [{"id": ..., "kwargs":
{...}}, ...]}``: ``prompt`` is the question followed by each constraint's instruction text (the checker's own
``build_description``), ``question`` the base question alone. The training prompts (``data.prompts``) carry the
constraints through a run: the policy's rows, the replay buffer's questions, the samples and the step records
(``constraint_counts``: how many temporal pairs have a newer answer passing more constraints than the older one).

The checks are lm-eval's ``test_instruction_following_strict`` (the IFEval paper's strict accuracy), not a second
implementation: ``check`` hands it the constraint ids and kwargs as IFEval's ``input_data.jsonl`` would.

>>> c = [{"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}]
>>> check("Paris.\\nP.S. It is lovely in May.", "Capital of France?", c), check("Paris.", "Capital of France?", c)
([True], [False])
>>> caps = constraints_json([{"id": "change_case:english_capital", "kwargs": {}}])
>>> constraint_reward(["The capital is Paris.", "THE CAPITAL OF FRANCE IS PARIS."], constraints=[caps, caps])
[0.0, 1.0]
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolm.errors import InputError
from evolm.runs.jsonl import read_jsonl

Constraint = Mapping[str, Any]  # {"id": an IFEval instruction id, "kwargs": its arguments}


def constraints_json(constraints: Sequence[Constraint]) -> str:
    """How a row carries its constraints (one string column, as TRL passes every row column to a reward)."""
    return json.dumps([{"id": c["id"], "kwargs": dict(c.get("kwargs") or {})} for c in constraints], sort_keys=True)


def parse_constraints(value: Any, where: str = "constraints") -> list[dict[str, Any]]:
    """A prompt line's ``constraints`` (a list, or that list as a JSON string) checked against lm-eval's registry;
    a bad value is a one-line ``InputError`` naming ``where``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise InputError(f"{where}: not a JSON list of constraints") from None
    if not isinstance(value, list):
        raise InputError(f"{where}: must be a list of {{id, kwargs}} objects")
    known = registry()
    out = []
    for i, c in enumerate(value):
        if not isinstance(c, dict) or not isinstance(c.get("id"), str) or not isinstance(c.get("kwargs", {}), dict):
            raise InputError(f"{where}[{i}]: must be an object {{id: str, kwargs: object}}")
        if c["id"] not in known:
            raise InputError(f"{where}[{i}]: unknown IFEval instruction id {c['id']!r}")
        out.append({"id": c["id"], "kwargs": dict(c.get("kwargs") or {})})
    return out


def prompt_constraints(spec: str) -> dict[str, str]:
    """question -> its constraints as JSON, from a prompts file's optional ``constraints`` field (``data.prompts``; a
    built-in set has none); a malformed entry is a one-line ``InputError`` naming its line."""
    if spec.startswith("builtin:"):
        return {}
    rows = read_jsonl(Path(spec), required=["prompt"])
    return {str(r["prompt"]): constraints_json(parse_constraints(r["constraints"], f"{spec}: line {i} constraints"))
            for i, r in enumerate(rows, start=1) if r.get("constraints")}


@functools.cache  # found once: NLTK's data path and the import stay set for the process
def registry() -> Mapping[str, Any]:
    """lm-eval's IFEval instruction registry (id -> checker class), imported without a download (NLTK's punkt_tab
    from an installed package: ``evolm.eval.offline``)."""
    from evolm.eval.offline import ensure_punkt_tab

    ensure_punkt_tab()
    try:
        from lm_eval.tasks.ifeval import instructions_registry
    except ImportError:
        raise InputError("checkable constraints need lm-evaluation-harness: pip install 'evolm[eval]'") from None
    return instructions_registry.INSTRUCTION_DICT


def describe(constraint: Constraint) -> str:
    """The instruction text IFEval's checker writes for this constraint (what the prompt asks for)."""
    checker = registry()[constraint["id"]](constraint["id"])
    return str(checker.build_description(**{k: v for k, v in (constraint.get("kwargs") or {}).items() if v}))


def check(answer: str, prompt: str, constraints: Sequence[Constraint]) -> list[bool]:
    """Whether ``answer`` follows each constraint: lm-eval's strict IFEval check (an empty answer follows none)."""
    registry()
    from lm_eval.tasks.ifeval.utils import InputExample, test_instruction_following_strict

    example = InputExample(key=0, instruction_id_list=[c["id"] for c in constraints], prompt=prompt,
                           kwargs=[dict(c.get("kwargs") or {}) for c in constraints])
    return list(test_instruction_following_strict(example, answer).follow_instruction_list)


def passed(answer: str, prompt: str, constraints: Sequence[Constraint]) -> int:
    """How many of ``constraints`` the answer follows."""
    return sum(check(answer, prompt, constraints))


@functools.lru_cache(maxsize=4096)
def passed_row(answer: str, question: str, constraints: str) -> int:
    """``passed`` for a row's ``constraints`` column (JSON), remembered: a step checks the same answer for its reward,
    its samples and its precondition count, and a rubric step's pair once per sampled rubric."""
    return passed(answer, question, parse_constraints(constraints))


def constraint_reward(completions: Sequence[Any], constraints: Sequence[str | None] = (), prompts: Any = None,
                      question: Sequence[str] | None = None, **_: Any) -> list[float | None]:
    """A TRL-style reward (``rewards.extra``): the share of its row's constraints an answer follows, ``None`` for a
    row without constraints (TRL's "no reward from this function"). Reads the rows' ``constraints`` column (JSON)
    and, for the checkers that need it, ``question``; a conversational completion is read as its last message."""
    out: list[float | None] = []
    for i, completion in enumerate(completions):
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        cs = constraints[i] if i < len(constraints) and constraints[i] else None
        cs = cs if cs is None or isinstance(cs, str) else constraints_json(parse_constraints(cs))  # a list as given
        q = question[i] if question is not None and i < len(question) else ""
        out.append(passed_row(text, q, cs) / len(parse_constraints(cs)) if cs else None)
    return out


# ----------------------------------------------------------------------------- does a rubric name a constraint?

NAMING_WORDS: dict[str, tuple[str, ...]] = {
    "detectable_content:postscript": ("p.s", "postscript"), "detectable_format:title": ("title", "<<"),
    "startend:quotation": ("quot",), "change_case:english_capital": ("capital", "uppercase", "upper case"),
    "change_case:english_lowercase": ("lowercase", "lower case"), "punctuation:no_comma": ("comma",),
    "startend:end_checker": ("phrase",),  # or the phrase itself; not "ends with": a postscript's criterion says it
    "detectable_content:number_placeholders": ("placeholder", "square bracket"),
    "detectable_format:number_highlighted_sections": ("highlight",),
    "detectable_format:number_bullet_lists": ("bullet",),
    "detectable_format:json_format": ("json",), "combination:two_responses": ("two responses", "******", "asterisk"),
    "length_constraints:number_words": ("word",), "length_constraints:number_sentences": ("sentence",),
}
"""Per IFEval family, words (lower case) that a criterion naming the constraint uses; a family not listed is named
by its id's words (``number_words`` -> "number words")."""


def names(text: str, constraint: Constraint) -> bool:
    """Whether ``text`` (a rubric, a criterion) names ``constraint``: one of its family's words, or an end phrase.

    >>> names("1. The answer ends with a postscript (P.S.)", {"id": "detectable_content:postscript"})
    True
    >>> names("1. The answer is correct", {"id": "detectable_format:title"})
    False
    >>> names("Ends with: any other questions", {"id": "startend:end_checker",
    ...                                          "kwargs": {"end_phrase": "Any other questions?"}})
    True
    """
    low = text.lower()
    family = str(constraint["id"])
    words = NAMING_WORDS.get(family, (family.split(":", 1)[-1].replace("_", " "),))
    phrase = str((constraint.get("kwargs") or {}).get("end_phrase") or "").lower().rstrip(".?! ")
    return any(w in low for w in words) or bool(phrase) and phrase in low


@functools.lru_cache(maxsize=4096)  # a rubric step judges each pair once per sampled rubric
def differing(a_pos: str, a_neg: str, question: str, constraints: str) -> tuple[dict[str, Any], ...]:
    """The constraints (a row's JSON column) that one answer of a pair follows and the other does not."""
    cs = parse_constraints(constraints)
    return tuple(c for c, p, n in zip(cs, check(a_pos, question, cs), check(a_neg, question, cs), strict=True) if p != n)


def named_difference_reward(completions: Sequence[Any], a_pos: Sequence[str | None] = (),
                            a_neg: Sequence[str | None] = (), constraints: Sequence[str | None] = (),
                            question: Sequence[str] | None = None, **_: Any) -> list[float | None]:
    """A TRL-style reward for rubric rows (``rewards.extra`` with ``role: rubric``): the share of the constraints its
    pair's answers differ in that the written rubric names (``names``), ``None`` for a row with no pair, no
    constraints, or answers that follow the same ones. A program's stand-in for a judge that reads every stated
    constraint perfectly: the writer's learnability check (docs/RESULTS.md). With weight -1, the reverse arm.

    >>> cs = constraints_json([{"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}])
    >>> named_difference_reward(["1. Ends with a P.S.", "1. Is correct", "1. P.S."], a_pos=["Hi.\\nP.S. Bye."] * 3,
    ...                         a_neg=["Hi.", "Hi.", "Hi.\\nP.S. x"], constraints=[cs] * 3, question=["q"] * 3)
    [1.0, 0.0, None]
    """
    out: list[float | None] = []
    for i, completion in enumerate(completions):
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        pos, neg = (a_pos[i] if i < len(a_pos) else None), (a_neg[i] if i < len(a_neg) else None)
        cs = constraints[i] if i < len(constraints) else None
        if pos is None or neg is None or not cs:
            out.append(None)
            continue
        diff = differing(str(pos), str(neg), question[i] if question is not None and i < len(question) else "",
                         cs if isinstance(cs, str) else constraints_json(parse_constraints(cs)))
        out.append(sum(names(text, c) for c in diff) / len(diff) if diff else None)
    return out


# ----------------------------------------------------------------------------- families: the study's constraints

KwargsMaker = Callable[[random.Random], dict[str, Any]]

FAMILIES: dict[str, KwargsMaker] = {
    "detectable_content:postscript": lambda r: {"postscript_marker": "P.S."},
    "detectable_format:title": lambda r: {},
    "startend:quotation": lambda r: {},
    "change_case:english_capital": lambda r: {},
    "change_case:english_lowercase": lambda r: {},
    "punctuation:no_comma": lambda r: {},
    "length_constraints:number_words": lambda r: {"relation": "less than", "num_words": r.choice([40, 60, 80])},
    "startend:end_checker": lambda r: {"end_phrase": r.choice(["Is there anything else I can help with?",
                                                               "Any other questions?", "That is all."])},
    "detectable_format:number_highlighted_sections": lambda r: {"num_highlights": r.choice([1, 2])},
    "detectable_format:json_format": lambda r: {},
    "detectable_format:number_bullet_lists": lambda r: {"num_bullets": r.choice([2, 3])},
    "detectable_content:number_placeholders": lambda r: {"num_placeholders": r.choice([1, 2])},
    "combination:two_responses": lambda r: {},
    "length_constraints:number_sentences": lambda r: {"relation": "less than", "num_sentences": r.choice([2, 3])},
}
"""IFEval families a short chat answer can meet, with arguments drawn for each prompt (seeded: the same sets on any
machine)."""


def with_constraints(question: str, family_ids: Sequence[str], rng: random.Random) -> dict[str, Any]:
    """A prompt line: ``question`` and the families' instructions (IFEval's own text), with their ids and kwargs."""
    constraints = [{"id": f, "kwargs": FAMILIES[f](rng)} for f in family_ids]
    text = " ".join(describe(c) for c in constraints)
    return {"prompt": f"{question.strip()}\n\n{text}", "question": question.strip(), "constraints": constraints}


# ----------------------------------------------------------------------------- what a run records


def newer_passes(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Temporal contrast's precondition where a program can check it: of a rubric step's temporal pairs (one row per
    question) whose question has constraints, how many have a newer answer (a+) following more constraints than
    the older one (a-), fewer, and as many. Empty when the step has no such pair (ordinary data: the judge's own
    preference, ``pairs_for`` / ``pairs_against``, is what a run records there).

    >>> c = constraints_json([{"id": "startend:quotation", "kwargs": {}}])
    >>> row = {"pair_source": "temporal:window", "constraints": c, "question": "q", "a_pos": '"Hi."', "a_neg": "Hi."}
    >>> newer_passes([row, {**row, "a_pos": "Hi."}, {**row, "pair_source": "labelled"}])
    {'newer_passes_more': 1, 'newer_passes_fewer': 0, 'newer_passes_same': 1}
    """
    diffs = []
    for r in rows:
        if r.get("constraints") and str(r.get("pair_source") or "").startswith("temporal"):
            cs, q = r["constraints"], str(r["question"])
            diffs.append(passed_row(str(r["a_pos"]), q, cs) - passed_row(str(r["a_neg"]), q, cs))
    if not diffs:
        return {}
    return {"newer_passes_more": sum(d > 0 for d in diffs), "newer_passes_fewer": sum(d < 0 for d in diffs),
            "newer_passes_same": sum(d == 0 for d in diffs)}


def constraint_fields(row: Mapping[str, Any], completion: str) -> dict[str, Any]:
    """A sample's constraint columns: the constraints, and how many of them the answer follows (a policy row's
    completion; a rubric row's pair, ``passed_pos`` / ``passed_neg``). Empty for a question without constraints."""
    if not row.get("constraints"):
        return {}
    js, q = row["constraints"], str(row["question"])
    fields: dict[str, Any] = {"constraints": parse_constraints(js)}
    if row.get("role") == "policy":
        return {**fields, "constraints_passed": passed_row(completion, q, js)}
    return {**fields, **{f"passed_{k}": passed_row(str(row[f"a_{k}"]), q, js) if row.get(f"a_{k}") is not None else None
                         for k in ("pos", "neg")}}


@dataclass(frozen=True)
class Precondition:
    """A run's ``newer_passes_*`` records added up: per rubric step (step, more, fewer, same), the run's totals, and
    the totals at the first step by which ``first`` pairs differed (``None`` until then; a step is taken whole)."""

    steps: list[tuple[int, int, int, int]]
    more: int
    fewer: int
    same: int
    early: tuple[int, int, int] | None  # (more, fewer, step)


def precondition(metrics: Sequence[Mapping[str, Any]], first: int = 40) -> Precondition | None:
    """The run's precondition from its step records (metrics.jsonl rows); ``None`` when no rubric step counted one.

    >>> rows = [{"role": "rubric", "step": 2, "newer_passes_more": 3, "newer_passes_fewer": 1, "newer_passes_same": 0},
    ...         {"role": "policy", "step": 3}, {"role": "rubric", "step": 4, "newer_passes_more": 1,
    ...         "newer_passes_fewer": 2, "newer_passes_same": 1}]
    >>> precondition(rows, first=5)
    Precondition(steps=[(2, 3, 1, 0), (4, 1, 2, 1)], more=4, fewer=3, same=1, early=(4, 3, 4))
    """
    steps = [(int(r["step"]), *(int(r.get(f"newer_passes_{k}") or 0) for k in ("more", "fewer", "same")))
             for r in metrics if r.get("role") == "rubric" and r.get("newer_passes_more") is not None]
    if not steps:
        return None
    more = fewer = same = 0
    early = None
    for step, m, f, s in steps:
        more, fewer, same = more + m, fewer + f, same + s
        if early is None and more + fewer >= first:
            early = (more, fewer, step)
    return Precondition(steps, more, fewer, same, early)
