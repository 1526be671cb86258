"""Checkable constraints: IFEval's instructions ("answer in all capital letters", "add a postscript starting with
P.S.") attached to a question, and lm-evaluation-harness's own IFEval checkers deciding whether an answer complies.

A prompt with constraints is a JSONL line ``{"prompt": ..., "question": ..., "constraints": [{"id": ..., "kwargs":
{...}}, ...]}``: ``prompt`` is the question followed by each constraint's instruction text (``describe``),
``question`` the base question alone. The training prompts carry the constraints through a run (the policy's rows,
the replay buffer, the samples and the step records). The answer is optimised against the checks, so they read it
defensively (``check_detailed``; ``STRICT`` where lm-eval's check is loose or slow, docs/FIDELITY.md).
"""
from __future__ import annotations

import functools
import json
import random
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, NamedTuple

from evolm.errors import InputError
from evolm.rubrics import Criterion, Rubric
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


@functools.cache  # found once: NLTK's data path, the import and langdetect's seed stay set for the process
def registry() -> Mapping[str, Any]:
    """lm-eval's IFEval instruction registry (id -> checker class), imported without a download (NLTK's punkt_tab
    from an installed package: ``evolm.eval.offline``). Seeds langdetect (``DetectorFactory.seed = 0``), which
    samples n-grams at random: unseeded, the same answer could pass a language check once and fail it next."""
    from evolm.eval.offline import ensure_punkt_tab

    ensure_punkt_tab()
    try:
        from langdetect import DetectorFactory
        from lm_eval.tasks.ifeval import instructions_registry
    except ImportError:
        raise InputError("checkable constraints need lm-evaluation-harness: pip install 'evolm[eval]'") from None
    DetectorFactory.seed = 0
    return instructions_registry.INSTRUCTION_DICT


def describe(constraint: Constraint) -> str:
    """The instruction text IFEval's checker writes for this constraint (what the prompt asks for)."""
    checker = registry()[constraint["id"]](constraint["id"])
    return str(checker.build_description(**{k: v for k, v in (constraint.get("kwargs") or {}).items() if v}))


def stated_rubric(constraints: Sequence[Constraint]) -> Rubric:
    """The rubric that states a prompt's constraints: each one, as its instruction text (``describe``), a criterion
    of equal weight. The ceiling of a rubric for these prompts (the constraints study's ``stated`` writer)."""
    weight = 1.0 / len(constraints)
    return Rubric(tuple(Criterion(describe(c), weight) for c in constraints))


# ----------------------------------------------------------------------------- checking an answer

MAX_ANSWER_CHARS = 20_000
"""The longest answer checked, in characters: a longer one follows no constraint (as an empty one), each
counted as a failure. Far above any answer these instructions ask for (the families here want under 80 words,
lm-eval's word counts at most 500; 20,000 characters are some 3,000 English words), it bounds the checks whose
time is linear in the answer with a large factor (punkt's sentence splitter: about 25 us a character on
``". " * 10_000``)."""


class Checked(NamedTuple):
    """``check_detailed``'s result: per constraint, whether the answer follows it; and how many checks failed
    (a checker that raised, or an answer over ``MAX_ANSWER_CHARS``): those count as not followed."""

    followed: tuple[bool, ...]
    failures: int


def check(answer: str, prompt: str, constraints: Sequence[Constraint], reference: bool = False) -> list[bool]:
    """Whether ``answer`` follows each constraint (``check_detailed``; an empty answer follows none).

    >>> c = [{"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}]
    >>> check("Paris.\\nP.S. It is lovely in May.", "Capital of France?", c), check("Paris.", "Capital of France?", c)
    ([True], [False])
    """
    return list(check_detailed(answer, prompt, constraints, reference).followed)


def check_detailed(answer: str, prompt: str, constraints: Sequence[Constraint],
                   reference: bool = False) -> Checked:
    """Whether ``answer`` follows each constraint, and how many checks failed; never raises on the answer.

    Each instruction is built as lm-eval's ``test_instruction_following_strict`` builds it (ids and kwargs as
    IFEval's data gives them; a bad id or kwarg raises: the caller's mistake, not the answer's), then checked
    by ``STRICT``'s check for its id, else lm-eval's. With ``reference``, lm-eval's checks alone: IFEval's
    strict accuracy as published, for comparison rather than as a reward (some take seconds on hostile
    answers). Either way an answer over ``MAX_ANSWER_CHARS`` follows nothing, and a check that raises means
    "not followed"; both count in ``failures``.

    >>> c = [{"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}]
    >>> check_detailed("Sent by U.S.P.S. today.", "q", c), check("Sent by U.S.P.S. today.", "q", c, True)
    (Checked(followed=(False,), failures=0), [True])
    >>> check_detailed("[" * 1000, "q", [{"id": "detectable_format:json_format", "kwargs": {}}])
    Checked(followed=(False,), failures=1)
    """
    checkers = [_built(c, prompt) for c in constraints]
    if len(answer) > MAX_ANSWER_CHARS:
        return Checked((False,) * len(checkers), len(checkers))
    followed, failures = [], 0
    for c, checker in zip(constraints, checkers, strict=True):
        own = None if reference else STRICT.get(c["id"])
        try:
            verdict = own(answer, checker) if own else checker.check_following(answer)
            followed.append(bool(answer.strip()) and bool(verdict))
        except Exception:  # noqa: BLE001 - RecursionError, an undecided answer: no answer may stop a run
            followed.append(False)
            failures += 1
    return Checked(tuple(followed), failures)


def _built(constraint: Constraint, prompt: str) -> Any:
    """lm-eval's checker for ``constraint``, built as ``test_instruction_following_strict`` builds it."""
    checker = registry()[constraint["id"]](constraint["id"])
    checker.build_description(**{k: v for k, v in (constraint.get("kwargs") or {}).items() if v})
    args = checker.get_instruction_args()
    if args and "prompt" in args:
        checker.build_description(prompt=prompt)
    return checker


def passed(answer: str, prompt: str, constraints: Sequence[Constraint]) -> int:
    """How many of ``constraints`` the answer follows."""
    return sum(check(answer, prompt, constraints))


@functools.lru_cache(maxsize=4096)
def checked_row(answer: str, question: str, constraints: str) -> Checked:
    """``check_detailed`` for a row's ``constraints`` column (JSON), remembered: a step checks the same answer
    for its reward, its samples and its precondition count, and a rubric step's pair once per sampled rubric.
    A step's count of failed checks is the sum of ``.failures`` over its rows."""
    return check_detailed(answer, question, parse_constraints(constraints))


def passed_row(answer: str, question: str, constraints: str) -> int:
    """``passed`` for a row's ``constraints`` column (JSON), from ``checked_row``."""
    return sum(checked_row(answer, question, constraints).followed)


def constraint_reward(completions: Sequence[Any], constraints: Sequence[str | None] = (), prompts: Any = None,
                      question: Sequence[str] | None = None, **_: Any) -> list[float | None]:
    """A TRL-style reward (``rewards.extra``): the share of its row's constraints an answer follows, ``None`` for a
    row without constraints (TRL's "no reward from this function"). Reads the rows' ``constraints`` column (JSON)
    and, for the checkers that need it, ``question``; a conversational completion is read as its last message.

    >>> caps = constraints_json([{"id": "change_case:english_capital", "kwargs": {}}])
    >>> constraint_reward(["The capital is Paris.", "THE CAPITAL OF FRANCE IS PARIS."], constraints=[caps, caps])
    [0.0, 1.0]
    """
    out: list[float | None] = []
    for i, completion in enumerate(completions):
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        cs = constraints[i] if i < len(constraints) and constraints[i] else None
        cs = cs if cs is None or isinstance(cs, str) else constraints_json(parse_constraints(cs))  # a list as given
        q = question[i] if question is not None and i < len(question) else ""
        out.append(passed_row(text, q, cs) / len(parse_constraints(cs)) if cs else None)
    return out


# ------------------------------------------------------------------ evolm's checks, where lm-eval's differ
# Each takes the answer and lm-eval's built checker (its kwargs: get_instruction_args()); docs/FIDELITY.md.

_COMMAS = re.compile("[,\u0326\u0375\u055d\u060c\u066b\u07f8\u1363\u1802\u1808\u201a\u201e\u275f\u2760"
                     "\u2e32\u2e34\u2e41\u2e49\u2e4c\u3001\ua4fe\ua60d\ua6f5\U0001144d\U0001145a"
                     "\U00016e97\U0001da87\U0001f678\U000e002c]")
"""Commas after NFKC (which maps the fullwidth, small, vertical and digit-comma forms to ``,`` or ``、``):
the comma and what reads as one (ideographic, Arabic, Armenian..., the low quotation marks ‚ and „)."""
_TITLE = re.compile(r"(?<![<\w])<<(?![\s<>])[^\n<>]*(?<![\s<>])>>(?![>\w])")
"""``<<title>>``: not glued to a word, no space just inside the brackets (``x << 2 >> 1`` is no title)."""
_NON_SPACE = re.compile(r"\S")
_SENTENCE_MARK = re.compile(r"[.?!]")
MAX_SENTENCE_MARKS = 500
"""Punkt decides each ``.``, ``?`` and ``!`` apart (about 60 us each on ``"Dr. " * 5000``): an answer with
more is decided from its first ``MAX_SENTENCE_MARKS`` where they settle it, else not checked (a failure)."""


class _Undecided(Exception):  # noqa: N818 - a reason, caught by check_detailed as a failed check
    """The answer cannot be checked within bounded work."""


def _postscript(text: str, checker: Any) -> bool:
    """A line that starts with the marker (after spaces or markdown): "U.S.P.S." is no postscript."""
    marker = str((checker.get_instruction_args() or {}).get("postscript_marker") or "").strip()
    mark = {"P.P.S": r"p\.[ \t]?p\.[ \t]?s", "P.S.": r"p\.[ \t]?s\."}.get(marker, re.escape(marker.lower()))
    return re.search(rf"^[ \t>*_#]*{mark}", text.lower(), re.MULTILINE) is not None


def _language(text: str) -> str | None:
    """langdetect's language of ``text``; ``None`` where it finds none (lm-eval counts that as followed)."""
    from langdetect import LangDetectException, detect

    try:
        return str(detect(text))
    except LangDetectException:
        return None


def _in_language(text: str, checker: Any) -> bool:
    return _language(text) == (checker.get_instruction_args() or {})["language"]


def _placeholders(text: str, checker: Any) -> bool:
    r"""lm-eval's count of ``re.findall(r"\[.*?\]", text)`` in one pass (that regex: quadratic on "[" * n)."""
    count = 0
    for line in text.split("\n"):
        at = 0
        while (start := line.find("[", at)) >= 0 and (end := line.find("]", start + 1)) >= 0:
            count, at = count + 1, end + 1
    return count >= (checker.get_instruction_args() or {})["num_placeholders"]


def _line_marks(text: str, mark: str) -> int:
    r"""lm-eval's count of ``^\s*\*[^\*].*$`` (``mark`` "*") or ``^\s*-.*$`` (``mark`` "-") matches
    (MULTILINE) in one pass: ``\s*`` spans blank lines, so the regex rescans them from every line start
    (quadratic on "\n" * n)."""
    count, at, size = 0, 0, len(text)
    while at <= size:
        if at and text[at - 1] != "\n":  # not a line start: the next one
            if (at := text.find("\n", at) + 1) == 0:
                break
            continue
        if (m := _NON_SPACE.search(text, at)) is None:
            break
        q = m.start()  # every line start up to q reaches this character first
        if text[q] == mark and (mark == "-" or text[q + 1:q + 2] not in ("*", "")):
            count += 1
            end = text.find("\n", q + (1 if mark == "-" else 2))
            at = size + 1 if end < 0 else end
        elif (at := text.find("\n", q) + 1) == 0:
            break
    return count


def _bullets(text: str, checker: Any) -> bool:
    wanted = (checker.get_instruction_args() or {})["num_bullets"]
    return _line_marks(text, "*") + _line_marks(text, "-") == wanted


def _at_least_sentences(text: str, n: int) -> bool:
    """Whether punkt (lm-eval's ``count_sentences``) finds at least ``n`` sentences, stopping at the n-th."""
    from lm_eval.tasks.ifeval.instructions_util import _get_sentence_tokenizer

    spans = _get_sentence_tokenizer().span_tokenize  # lazy: sentence by sentence, as ``tokenize`` lists them
    marks = list(islice(_SENTENCE_MARK.finditer(text), MAX_SENTENCE_MARKS + 1))
    if len(marks) <= MAX_SENTENCE_MARKS:
        return sum(1 for _ in islice(spans(text), max(n, 0))) >= n
    if sum(1 for _ in islice(spans(text[:marks[-1].start()]), max(n, 0) + 2)) >= n + 2:
        return True  # the first n sentences end before the next one does: the same in the whole answer
    raise _Undecided(f"over {MAX_SENTENCE_MARKS} sentence marks and under {n} sentences among them")


def _sentences(text: str, checker: Any) -> bool:
    args = checker.get_instruction_args() or {}
    at_least = _at_least_sentences(text, int(args["num_sentences"]))
    return {"less than": not at_least, "at least": at_least}.get(args["relation"], False)


def _capital_words(text: str, checker: Any) -> bool:
    """lm-eval's check (NLTK's punkt, then Treebank rules: some 5 us a character), bounded: fewer capital
    letters than asked for make fewer capital words; over 8,000 characters or ``MAX_SENTENCE_MARKS`` marks,
    it is not checked."""
    args = checker.get_instruction_args() or {}
    if sum(c.isupper() for c in text) < args["capital_frequency"]:  # each capital word holds a capital letter
        return args["capital_relation"] == "less than"
    if len(text) > 8_000 or len(_SENTENCE_MARK.findall(text, 0, 8_000)) > MAX_SENTENCE_MARKS:
        raise _Undecided("too long to count its capital words")
    return bool(checker.check_following(text))


STRICT: dict[str, Callable[[str, Any], bool]] = {
    "detectable_content:postscript": _postscript,
    "detectable_format:title": lambda text, checker: _TITLE.search(text) is not None,
    "punctuation:no_comma": lambda text, checker: _COMMAS.search(unicodedata.normalize("NFKC", text)) is None,
    "change_case:english_capital": lambda text, checker: text.isupper() and _language(text) == "en",
    "change_case:english_lowercase": lambda text, checker: text.islower() and _language(text) == "en",
    "language:response_language": _in_language,
    "detectable_content:number_placeholders": _placeholders,
    "detectable_format:number_bullet_lists": _bullets,
    "length_constraints:number_sentences": _sentences,
    "change_case:capital_word_frequency": _capital_words,
}
"""evolm's check per IFEval id where lm-eval's passes what the instruction does not ask for (the first six: a
postscript anywhere, a shift expression as a title, look-alike commas, a language langdetect cannot name
counted as followed) or takes super-linear time (the rest: the same verdicts, within bounds)."""


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


def checker_failures(rows: Sequence[Mapping[str, Any]], completions: Sequence[str]) -> dict[str, int]:
    """A step's failed constraint checks (``Checked.failures``: a policy row's answer, a rubric row's pair), for the
    step record; empty when no row has constraints."""
    texts = [[t] if r.get("role") == "policy" else [str(r.get("a_pos") or ""), str(r.get("a_neg") or "")]
             for r, t in zip(rows, completions, strict=True)]
    failed = [checked_row(a, str(r["question"]), r["constraints"]).failures
              for r, ts in zip(rows, texts, strict=True) if r.get("constraints") for a in ts]
    return {"checker_failures": sum(failed)} if failed else {}


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
