"""The constraint checks against an answer optimised to pass them: no answer crashes or stalls a check, and
where lm-eval's IFEval check passes what its instruction does not ask for, evolm's does not
(``reference=True`` keeps lm-eval's verdict for comparison)."""

from __future__ import annotations

import gc
import random
import re
import time

import pytest

from evolm.eval.constraints import (
    FAMILIES,
    MAX_ANSWER_CHARS,
    STRICT,
    Checked,
    check,
    check_detailed,
    checked_row,
    constraints_json,
    passed_row,
    registry,
)

POSTSCRIPT = {"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}
TITLE = {"id": "detectable_format:title", "kwargs": {}}
NO_COMMA = {"id": "punctuation:no_comma", "kwargs": {}}
CAPITALS = {"id": "change_case:english_capital", "kwargs": {}}
LOWER = {"id": "change_case:english_lowercase", "kwargs": {}}
JSON = {"id": "detectable_format:json_format", "kwargs": {}}


def _kwargs(family: str) -> dict:
    """Arguments for any registry id: the study's families as drawn, the others as lm-eval draws them
    (seeded)."""
    if family in FAMILIES:
        return FAMILIES[family](random.Random(0))
    state = random.getstate()
    random.seed(0)
    try:
        checker = registry()[family](family)
        try:
            checker.build_description()
        except ValueError:  # combination:repeat_prompt needs its prompt
            checker.build_description(prompt_to_repeat="Say hi.")
        return {k: v for k, v in (checker.get_instruction_args() or {}).items() if k != "prompt"}
    finally:
        random.setstate(state)


def _hostile(n: int) -> dict[str, str]:
    """Answers of about ``n`` characters that make a backtracking regex, a recursive parser or punkt work
    hardest."""
    return {"[": "[" * n, "spaces": "a" + " " * (n - 2) + "a", "newlines": "a" + "\n" * (n - 2) + "a",
            "newline-space": "a" + "\n " * (n // 2 - 1) + "a", "{": "{" * n, "stars": "*" * n,
            "star-lines": "*\n" * (n // 2), "<<": "<<" * (n // 2), "<<a": "<<a" * (n // 3),
            "p.": "p." * (n // 2),
            "dots": ". " * (n // 2), "Dr.": "Dr. " * (n // 4), "caps": "A" * n, "dashes": "-\n" * (n // 2),
            '"': '"' * n, "[a": "[a" * (n // 2), "nested-json": "[" * (n // 2) + "]" * (n // 2),
            "shifts": "x << 2 >> 1 " * (n // 12), "markers": "P.S. " * (n // 5), "words": "Word " * (n // 5)}


# ------------------------------------------------------------------ never a crash, never a stall


def test_an_answer_that_crashes_a_checker_is_not_followed_and_counted() -> None:
    """lm-eval's JSON check catches only ValueError: ``"[" * 1000`` raised RecursionError through the run."""
    assert check_detailed("[" * 1000, "q", [JSON, POSTSCRIPT]) == Checked((False, False), 1)
    assert check_detailed("[" * 1000, "q", [JSON], reference=True) == Checked((False,), 1)
    assert check('{"a": [1, 2]}', "q", [JSON]) == [True]


def test_an_answer_over_the_cap_follows_nothing_and_each_check_is_a_failure() -> None:
    quoted = {"id": "startend:quotation", "kwargs": {}}
    fits = '"' + "a" * (MAX_ANSWER_CHARS - 2) + '"'
    assert check_detailed(fits, "q", [quoted]) == Checked((True,), 0)
    assert check_detailed(fits + " ", "q", [quoted, POSTSCRIPT]) == Checked((False, False), 2)


def test_a_bad_constraint_is_the_callers_error_not_a_failed_check() -> None:
    with pytest.raises(KeyError):
        check("Hi.", "q", [{"id": "no:such", "kwargs": {}}])


@pytest.mark.slow
@pytest.mark.parametrize("size", [MAX_ANSWER_CHARS, 200_000], ids=["at-the-cap", "200k"])
def test_every_check_is_fast_on_hostile_answers(size: int) -> None:
    """Every IFEval id of lm-eval's registry, on answers that took lm-eval seconds (postscript 0.9 s on 20,000
    spaces, placeholders 2.7 s on 20,000 ``[``, minutes at 200,000): at most 0.2 s of CPU each."""
    constraints = [{"id": family, "kwargs": _kwargs(family)} for family in sorted(registry())]
    check("WARM UP. THE PROFILES.", "q", constraints)  # langdetect's profiles and punkt load once, ~0.5 s
    slow = []
    gc.collect()
    gc.disable()  # a full collection of the test process's heap (torch, after other tests) is not the check's
    try:
        for constraint in constraints:
            for name, answer in _hostile(size).items():
                start = time.process_time()
                check_detailed(answer, "Say hi.", [constraint])
                if (spent := time.process_time() - start) > 0.2:
                    slow.append((constraint["id"], name, round(spent, 3)))
    finally:
        gc.enable()
    assert not slow


# ------------------------------------------------------------------ stricter where lm-eval is looser


@pytest.mark.parametrize(("answer", "expected"), [
    ("Mail it by U.S.P.S. today.", False),  # lm-eval: "p.s." anywhere
    ("It rains. P.S. Bring a coat.", False),  # in the middle of a line
    ("It rains.\nP.S. Bring a coat.", True),
    ("It rains.\n\n  **P.S.** Bring a coat.", True),
    ("It rains.\np. s. bring a coat.", True),  # lm-eval's spelling: case and one space allowed
])
def test_a_postscript_starts_a_line(answer: str, expected: bool) -> None:
    assert check(answer, "q", [POSTSCRIPT]) == [expected]
    assert check(answer, "q", [POSTSCRIPT], reference=True) == [True]


def test_another_postscript_marker_starts_a_line_too() -> None:
    pps = {"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.P.S"}}
    assert check("Hi.\nP.P.S. More.", "q", [pps]) == [True]
    assert check("Hi. Ask P.P.S. staff.", "q", [pps]) == [False]


@pytest.mark.parametrize(("answer", "expected"), [
    ("x << 2 >> 1", False),
    ("In C, a<<b>>c shifts twice.", False),
    ("<< >> and <<>>", False),
    ("<<Poem of Joy>>\nRoses are red.", True),
    ("Title: <<Joy>>", True),
    ("**<<A Day Out>>**", True),
])
def test_a_title_is_not_a_shift_expression(answer: str, expected: bool) -> None:
    assert check(answer, "q", [TITLE]) == [expected]
    assert check(answer, "q", [TITLE], reference=True) == [True]  # lm-eval: any <<...>> on one line


@pytest.mark.parametrize("comma", ["\uff0c", "\u201a", "\u3001", "\ufe50", "\ufe10", "\u060c", "\uff64",
                                   "\U0001f101"])
def test_a_look_alike_comma_is_a_comma(comma: str) -> None:
    answer = f"Red{comma} green and blue."
    assert check(answer, "q", [NO_COMMA]) == [False]
    assert check(answer, "q", [NO_COMMA], reference=True) == [True]
    assert check("Red and green and blue.", "q", [NO_COMMA]) == [True]


@pytest.mark.parametrize(("answer", "constraint"), [
    ("\u24bd\u24ba\u24c1\u24c1\u24c4 \u24cc\u24c4\u24c7\u24c1\u24b9", CAPITALS),  # circled capitals
    ("MAIL@EXAMPLE.ORG", CAPITALS),
    ("\u24d7\u24d4\u24db\u24db\u24de", LOWER),
    ("https://example.com", LOWER),
])
def test_a_case_check_whose_language_langdetect_cannot_name_is_not_followed(answer: str,
                                                                           constraint: dict) -> None:
    """langdetect finds no features in circled letters or an address: lm-eval counts that as followed."""
    assert check(answer, "q", [constraint]) == [False]
    assert check(answer, "q", [constraint], reference=True) == [True]


def test_a_case_check_still_passes_english_in_that_case() -> None:
    assert check("THE CAPITAL OF FRANCE IS PARIS.", "q", [CAPITALS]) == [True]
    assert check("the capital of france is paris.", "q", [LOWER]) == [True]


@pytest.mark.slow
def test_langdetect_is_seeded_so_a_verdict_does_not_change_between_calls() -> None:
    from langdetect import DetectorFactory, detect

    registry()
    assert DetectorFactory.seed == 0
    mixed = "AD HOC IN VIVO"  # unseeded, langdetect said "en" or "de" for it, so the capitals check flipped
    assert len({detect(mixed) for _ in range(20)}) == 1
    assert len({tuple(check(mixed, "q", [CAPITALS])) for _ in range(10)}) == 1


def test_the_reference_reading_is_lm_evals_strict_check() -> None:
    from lm_eval.tasks.ifeval.utils import InputExample, test_instruction_following_strict

    rng = random.Random(1)
    answers = ["Mail it by U.S.P.S. today.", "x << 2 >> 1", "Red\uff0c green.", "HTTPS://EXAMPLE.COM",
               '"<<Rain>>\nIt rains.\nP.S. Bring a coat."', "* one\n* two\n- three", "Hi [name]. Bye. Now!"]
    for family in sorted(registry()):
        constraint = {"id": family, "kwargs": _kwargs(family)}
        example = InputExample(0, [family], "Say hi.", [constraint["kwargs"]])
        for answer in answers + [rng.choice(answers) + rng.choice(answers)]:
            expected = test_instruction_following_strict(example, answer).follow_instruction_list
            assert check(answer, "Say hi.", [constraint], reference=True) == expected, (family, answer)


# ------------------------------------------------------------------ the same verdicts in bounded time


def _random_texts(alphabet: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14))) for _ in range(n)]


def test_placeholders_are_counted_as_lm_evals_regex_counts_them() -> None:
    for text in _random_texts(["[", "]", "a", "\n", " ", "\r", "\u2028"], 3000, 0):
        for need in (1, 2, 3):
            c = {"id": "detectable_content:number_placeholders", "kwargs": {"num_placeholders": need}}
            assert check(text, "q", [c]) == [bool(text.strip()) and len(re.findall(r"\[.*?\]", text)) >= need]


def test_bullets_are_counted_as_lm_evals_regexes_count_them() -> None:
    for text in _random_texts(["*", "-", "a", "\n", " ", "\t", "\r", "\u00a0", "\u2028"], 6000, 1):
        found = len(re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE)) + len(
            re.findall(r"^\s*-.*$", text, flags=re.MULTILINE))
        for need in (1, 2, 3):
            c = {"id": "detectable_format:number_bullet_lists", "kwargs": {"num_bullets": need}}
            assert check(text, "q", [c]) == [bool(text.strip()) and found == need], repr(text)


@pytest.mark.slow
def test_sentences_are_counted_as_lm_evals_punkt_counts_them() -> None:
    from lm_eval.tasks.ifeval.instructions_util import count_sentences

    words = ["Hi", "Dr.", "U.S.", "it", "rains", ".", "!", "?", " ", " ", "\n", "3.5", "e.g.", '"', "A"]
    for text in _random_texts(words, 1500, 2):
        n = count_sentences(text)
        for relation in ("less than", "at least"):
            for k in (1, 2, 3):
                c = {"id": "length_constraints:number_sentences",
                     "kwargs": {"relation": relation, "num_sentences": k}}
                want = bool(text.strip()) and (n < k if relation == "less than" else n >= k)
                assert check(text, "q", [c]) == [want], (text, relation, k)


@pytest.mark.slow
def test_capital_words_are_counted_as_lm_evals_check_counts_them() -> None:
    pieces = ["HI", "Hi", "CAN'T", "U.S.", ".", " ", " ", "\n", "(", '"', "ok", "A", "-", "DON'T."]
    for text in _random_texts(pieces, 1500, 3):
        for relation in ("less than", "at least"):
            for k in (1, 2, 4):
                c = {"id": "change_case:capital_word_frequency",
                     "kwargs": {"capital_relation": relation, "capital_frequency": k}}
                assert check(text, "q", [c]) == check(text, "q", [c], reference=True), (text, relation, k)
    long = {"id": "change_case:capital_word_frequency", "kwargs": {"capital_relation": "at least",
                                                                   "capital_frequency": 3}}
    assert check_detailed("lower case words " * 1000, "q", [long]) == Checked((False,), 0)  # no capital letter
    assert check_detailed("SOME CAPITALS " * 1000, "q", [long]) == Checked((False,), 1)  # too long to count


def test_an_answer_with_hundreds_of_sentence_marks_is_decided_from_its_first_ones() -> None:
    many = {"id": "length_constraints:number_sentences",
            "kwargs": {"relation": "at least", "num_sentences": 3}}
    few = {**many, "kwargs": {"relation": "less than", "num_sentences": 3}}
    assert check_detailed("It rains. " * 1500, "q", [many, few]) == Checked((True, False), 0)
    undecided = check_detailed("Dr. " * 5000, "q", [many, few])  # 5,000 marks, no sentence among the first
    assert undecided == Checked((False, False), 2)


def test_the_strict_checks_cover_the_ids_they_name() -> None:
    assert set(STRICT) <= set(registry())


# ------------------------------------------------------------------ what a step can count


def test_a_rows_failed_checks_are_counted_once_with_its_verdicts() -> None:
    cs = constraints_json([JSON, POSTSCRIPT])
    assert checked_row("[" * 1000, "q", cs) == Checked((False, False), 1)
    assert passed_row('{"a": 1}', "q", cs) == 1
