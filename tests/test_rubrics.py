"""Rubric parsing, format validity, thinking removal and rendering (docs/METHOD.md §2.1) on many model outputs.

Every case states what a rubric writer could plausibly emit and what the parser must make of it:
the weights the judge will use (normalised to sum 1) and the 0/1 format-validity reward term.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from evolm import rubrics
from evolm.backends.replies import remove_reasoning, strip_thinking
from evolm.rubrics import (
    Criterion,
    Rubric,
    WrittenRubric,
    format_validity,
    parse_rubric,
    read_written,
    render_rubric,
    rubric_messages,
    write_rubrics,
)


def rub(*pairs: tuple[str, object]) -> str:
    """A rubric JSON text with the given (criterion, weight) pairs."""
    return json.dumps({"criteria": [{"criterion": c, "weight": w} for c, w in pairs]})


GOOD = rub(("Correct", 0.7), ("Clear", 0.3))

# (id, text, expected criterion texts or None, expected normalised weights or None, validity)
CASES: list[tuple[str, str, list[str] | None, list[float] | None, float]] = [
    ("plain", GOOD, ["Correct", "Clear"], [0.7, 0.3], 1.0),
    ("prose-before", "Here is the rubric:\n" + GOOD, ["Correct", "Clear"], [0.7, 0.3], 1.0),
    ("prose-after", GOOD + "\nHope this helps! {not json}", ["Correct", "Clear"], [0.7, 0.3], 0.0),  # authors': the last } ends the span
    ("prose-both", "Sure.\n\n" + GOOD + "\n\nLet me know.", ["Correct", "Clear"], [0.7, 0.3], 1.0),
    ("fence-json", "```json\n" + GOOD + "\n```", ["Correct", "Clear"], [0.7, 0.3], 1.0),
    ("fence-plain", "Rubric:\n```\n" + GOOD + "\n```\nDone.", ["Correct", "Clear"], [0.7, 0.3], 1.0),
    ("pretty-printed", json.dumps(json.loads(GOOD), indent=2), ["Correct", "Clear"], [0.7, 0.3], 1.0),
    (
        "first-with-criteria-wins",
        '{"note": "draft"} ' + rub(("A", 0.5), ("B", 0.5)) + " " + rub(("C", 0.9), ("D", 0.1)),
        ["A", "B"], [0.5, 0.5], 0.0,  # authors': first { to last } holds three objects, no top-level criteria
    ),
    (
        "first-criteria-object-decides-validity",
        rub(("Only", 1.0)) + "\n" + GOOD,
        ["Only"], [1.0], 0.0,
    ),
    ("nested-rubric-key", json.dumps({"rubric": json.loads(GOOD)}), ["Correct", "Clear"], [0.7, 0.3], 0.0),  # authors': top level only
    (
        "nested-deeper-in-list",
        json.dumps({"answer": [{"x": 1}, {"rubric": json.loads(GOOD)}]}),
        ["Correct", "Clear"], [0.7, 0.3], 0.0,  # authors': top level only
    ),
    (
        "bare-list",
        json.dumps([{"criterion": "A", "weight": 0.25}, {"criterion": "B", "weight": 0.75}]),
        ["A", "B"], [0.25, 0.75], 0.0,  # no {"criteria": ...} object: parsed, but not well-formed
    ),
    (
        "other-text-keys",
        json.dumps({"criteria": [{"description": "A", "weight": 1}, {"name": "B", "weight": 1}, {"text": "C", "weight": 2}]}),
        ["A", "B", "C"], [0.25, 0.25, 0.5], 0.0,
    ),
    # cut off by the token limit: the complete criteria are kept (parsed), but the output is not well-formed
    ("truncated-mid-string", GOOD[: GOOD.index("Clear") + 2], ["Correct"], [1.0], 0.0),
    ("truncated-mid-array", GOOD[: GOOD.index("}, {") + 3], ["Correct"], [1.0], 0.0),
    ("truncated-nested-levels",
     '{"criteria": [{"criterion": "A", "weight": 0.6, "scoring_levels": {"1.0": "x"}}, '
     '{"criterion": "B", "weight": 0.4, "scoring_levels": {"1.0": "y", "0.5": "z', ["A"], [1.0], 0.0),
    ("truncated-final-brace", GOOD[:-1], ["Correct", "Clear"], [0.7, 0.3], 1.0),  # json_repair closes it  # the criteria list is still whole
    ("truncated-after-key", '{"criteria": ', None, None, 0.0),
    ("truncated-mid-number", '{"criteria": [{"criterion": "A", "weight": 0.', None, None, 0.0),
    ("trailing-comma-array", '{"criteria": [{"criterion": "A", "weight": 0.5}, {"criterion": "B", "weight": 0.5},]}',
     ["A", "B"], [0.5, 0.5], 1.0),
    ("trailing-comma-object", '{"criteria": [{"criterion": "A", "weight": 0.4,}, {"criterion": "B", "weight": 0.6,},],}',
     ["A", "B"], [0.4, 0.6], 1.0),
    ("trailing-comma-with-newlines", 'x {"criteria": [\n {"criterion": "A", "weight": 0.5},\n {"criterion": "B", "weight": 0.5},\n]\n} y',
     ["A", "B"], [0.5, 0.5], 1.0),
    ("weights-as-strings", rub(("A", "0.6"), ("B", "0.4")), ["A", "B"], [0.6, 0.4], 1.0),  # authors': float("0.6")
    ("weights-as-percent", rub(("A", "60%"), ("B", "40%")), ["A", "B"], [0.6, 0.4], 0.0),
    ("percent-beside-number", rub(("A", "40%"), ("B", 0.6)), ["A", "B"], [0.4, 0.6], 0.0),
    ("weights-unnormalised-ints", rub(("A", 3), ("B", 1)), ["A", "B"], [0.75, 0.25], 0.0),
    ("weights-missing", json.dumps({"criteria": [{"criterion": "A"}, {"criterion": "B"}]}), ["A", "B"], [0.5, 0.5], 0.0),
    ("one-weight-missing", json.dumps({"criteria": [{"criterion": "A", "weight": 0.6}, {"criterion": "B"}]}),
     ["A", "B"], [0.5, 0.5], 0.0),
    ("zero-weight", rub(("A", 0.0), ("B", 0.6), ("C", 0.2)), ["A", "B", "C"], [0.4 / 1.2, 0.6 / 1.2, 0.2 / 1.2], 0.0),
    ("negative-weight", rub(("A", -0.5), ("B", 0.5)), ["A", "B"], [0.5, 0.5], 0.0),
    ("nan-weight", '{"criteria": [{"criterion": "A", "weight": NaN}, {"criterion": "B", "weight": 0.5}]}',
     ["A", "B"], [0.5, 0.5], 0.0),
    ("infinite-weight", '{"criteria": [{"criterion": "A", "weight": Infinity}, {"criterion": "B", "weight": 1}]}',
     ["A", "B"], [0.5, 0.5], 0.0),
    ("bool-weight", rub(("A", True), ("B", 0.5)), ["A", "B"], [0.5, 0.5], 0.0),
    ("null-weight", rub(("A", None), ("B", 0.5)), ["A", "B"], [0.5, 0.5], 0.0),
    ("list-weight", rub(("A", [0.5]), ("B", 0.5)), ["A", "B"], [0.5, 0.5], 0.0),
    ("nonsense-string-weight", rub(("A", "heavy"), ("B", 0.5)), ["A", "B"], [0.5, 0.5], 0.0),
    ("sum-0.84", rub(("A", 0.5), ("B", 0.34)), ["A", "B"], [0.5 / 0.84, 0.34 / 0.84], 0.0),
    ("sum-0.85-boundary", rub(("A", 0.5), ("B", 0.35)), ["A", "B"], [0.5 / 0.85, 0.35 / 0.85], 0.0),  # 0.85 - 1 is -0.15000000000000002
    ("sum-0.86", rub(("A", 0.5), ("B", 0.36)), ["A", "B"], [0.5 / 0.86, 0.36 / 0.86], 1.0),
    ("sum-1.15-boundary", rub(("A", 0.6), ("B", 0.55)), ["A", "B"], [0.6 / 1.15, 0.55 / 1.15], 1.0),
    ("sum-1.16", rub(("A", 0.6), ("B", 0.56)), ["A", "B"], [0.6 / 1.16, 0.56 / 1.16], 0.0),
    ("five-criteria", rub(*[(f"C{i}", 0.2) for i in range(5)]), [f"C{i}" for i in range(5)], [0.2] * 5, 1.0),
    ("one-criterion", rub(("Everything", 1.0)), ["Everything"], [1.0], 0.0),
    ("empty-criteria", '{"criteria": []}', None, None, 0.0),
    ("criteria-not-a-list", '{"criteria": "be correct"}', None, None, 0.0),
    ("criterion-not-a-string", rub((5, 0.5), ("B", 0.5)), ["B"], [1.0], 1.0),  # authors': the key must be there, any value  # type: ignore[arg-type]
    ("criterion-blank", rub(("   ", 0.5), ("B", 0.5)), ["B"], [1.0], 1.0),
    ("criterion-text-stripped", rub(("  A  ", 0.5), ("B\n", 0.5)), ["A", "B"], [0.5, 0.5], 1.0),
    ("entry-not-a-dict", '{"criteria": ["be correct", {"criterion": "B", "weight": 1.0}]}', ["B"], [1.0], 0.0),
    ("no-usable-criterion", '{"criteria": [{"weight": 0.5}, {"weight": 0.5}]}', None, None, 0.0),
    ("unicode", rub(("Réponse correcte — 答案正确 ✓", 0.8), ("Ton poli 🙂", 0.2)),
     ["Réponse correcte — 答案正确 ✓", "Ton poli 🙂"], [0.8, 0.2], 1.0),
    ("unicode-unescaped", json.dumps(json.loads(rub(("Ça marche", 0.5), ("日本語", 0.5))), ensure_ascii=False),
     ["Ça marche", "日本語"], [0.5, 0.5], 1.0),
    ("braces-inside-strings", rub(("Uses {braces} and [brackets]", 0.5), ("B", 0.5)),
     ["Uses {braces} and [brackets]", "B"], [0.5, 0.5], 1.0),
    ("think-closed", "<think>The question asks for X.</think>\n" + GOOD, ["Correct", "Clear"], [0.7, 0.3], 1.0),
    ("think-uppercase", "<THINK>hmm</THINK>" + GOOD, ["Correct", "Clear"], [0.7, 0.3], 1.0),
    ("think-contains-rubric", "<think>Draft: " + rub(("Draft", 1.0)) + "</think>" + GOOD,
     ["Correct", "Clear"], [0.7, 0.3], 1.0),
    ("think-unclosed", "<think>Still thinking " + GOOD, None, None, 0.0),
    ("think-unclosed-after-rubric", GOOD + "\n<think>second thoughts " + rub(("X", 1.0)), ["Correct", "Clear"], [0.7, 0.3], 1.0),
    ("lone-close-think", "draft " + rub(("Draft", 0.5), ("Other", 0.5)) + "</think>" + GOOD,
     ["Correct", "Clear"], [0.7, 0.3], 1.0),
    ("only-thinking", "<think>" + GOOD + "</think>", None, None, 0.0),
    ("empty", "", None, None, 0.0),
    ("whitespace", "  \n\t ", None, None, 0.0),
    ("prose-only", "A good answer should be correct and clear.", None, None, 0.0),
    ("scalar-json", "42", None, None, 0.0),
    ("list-of-numbers", "[0.5, 0.5]", None, None, 0.0),
    ("single-quotes", "{'criteria': [{'criterion': 'A', 'weight': 0.5}, {'criterion': 'B', 'weight': 0.5}]}", ["A", "B"],
     [0.5, 0.5], 1.0),  # json_repair reads it, for validity and (as a last resort) for parsing
]


@pytest.mark.parametrize(("text", "names", "weights", "valid"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_and_validity(text: str, names: list[str] | None, weights: list[float] | None, valid: float) -> None:
    rubric = parse_rubric(text)
    if names is None:
        assert rubric is None
    else:
        assert rubric is not None
        assert [c.criterion for c in rubric.criteria] == names
        assert [c.weight for c in rubric.criteria] == pytest.approx(weights)
        assert math.fsum(c.weight for c in rubric.criteria) == pytest.approx(1.0)
    assert format_validity(text) == valid
    written = read_written(text)
    assert written == WrittenRubric(text, rubric, valid)


def test_case_table_is_wide() -> None:
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


def test_scoring_levels_are_kept_as_strings() -> None:
    text = json.dumps({"criteria": [
        {"criterion": "A", "weight": 0.5, "scoring_levels": {"1.0": "all", 0.5: "half", "0.0": 0}},
        {"criterion": "B", "weight": 0.5, "scoring_levels": ["not", "a", "dict"]},
    ]})
    rubric = parse_rubric(text)
    assert rubric is not None
    assert rubric.criteria[0].scoring_levels == {"1.0": "all", "0.5": "half", "0.0": "0"}
    assert rubric.criteria[1].scoring_levels == {}


@pytest.mark.parametrize("value", [None, b'{"criteria": []}', 3.5, ["x"], {"criteria": []}, object()])
def test_non_string_inputs_never_raise(value: object) -> None:
    assert parse_rubric(value) is None  # type: ignore[arg-type]
    assert format_validity(value) == 0.0  # type: ignore[arg-type]
    assert strip_thinking(value) == ""  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- strip_thinking


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no thinking", "no thinking"),
        ("<think>a</think>b", "b"),
        ("  <think>\nmulti\nline\n</think>\n\nanswer  ", "answer"),
        ("<think>a</think>b<think>c</think>d", "bd"),
        ("<Think>a</tHiNk>b", "b"),
        ("answer<think>unfinished", "answer"),
        ("<think>unfinished", ""),
        ("prompt-opened thinking</think>answer", "answer"),
        ("x</think>y</think>z", "z"),
        ("a</think>b<think>c</think>d", "bd"),
        ("<think>outer<think>inner</think>tail", "tail"),
        ("", ""),
    ],
)
def test_strip_thinking(text: str, expected: str) -> None:
    assert strip_thinking(text) == expected


# ----------------------------------------------------------------------------- adversarial and fuzzed input


@pytest.mark.parametrize(
    "text",
    [
        "{" * 200_000,
        "[" * 200_000,
        '{"a": [' * 50_000,
        "{, " * 60_000,
        '{"a":1,' * 50_000 + " " * 1000 + "," * 1000,
        '{"' + "x" * 500_000,
        "}" * 100_000 + "]" * 100_000,
    ],
    ids=["open-braces", "open-brackets", "nested-unclosed", "brace-comma", "commas", "long-string", "closers"],
)
def test_adversarial_text_returns(text: str) -> None:
    """Degenerate outputs (RL policies do produce them) give 'no rubric', never an exception."""
    assert parse_rubric(text) is None
    assert format_validity(text) == 0.0


def test_object_start_bound_limits_the_scan() -> None:
    """Only the first ``_MAX_OBJECT_STARTS`` openers are tried: a rubric after that many is not looked for."""
    n = rubrics._MAX_OBJECT_STARTS
    assert parse_rubric("{ " * (n - 1) + GOOD) is not None
    assert rubrics._json_values("{ " * n + GOOD) == []  # not looked for by the scan ...
    assert parse_rubric("{ " * n + GOOD) is not None  # ... but found by the json_repair reading, the last resort
    # format validity is the authors' json_repair reading, which has no such bound (their code gives 1.0 to both)
    assert format_validity("{ " * (n - 1) + GOOD) == format_validity("{ " * n + GOOD) == 1.0
    # The lone braces decode to nothing; the openers inside the rubric are skipped, not decoded again.
    assert len(rubrics._json_values("{ " * (n - 1) + GOOD)) == 1


def test_trailing_comma_repair_maps_openers() -> None:
    """The repair is done once on the whole text; values before and after a repaired one are all found."""
    text = '[1, 2,] then {"a": {"b": 1,},} then {"c": [3]}'
    assert rubrics._json_values(text) == [[1, 2], {"a": {"b": 1}}, {"c": [3]}]


def _random_text(rng: random.Random) -> str:
    alphabet = '{}[]":,. 0123456789-eE+truefalsnNaIiy\n\\<>/thinkcriterionweight' + "é中🙂\x00"
    pieces = [GOOD, "<think>", "</think>", '"criteria"', '"weight"', "NaN", "```json"]
    out = []
    for _ in range(rng.randint(0, 60)):
        if rng.random() < 0.15:
            piece = rng.choice(pieces)
            cut = rng.randint(0, len(piece))
            out.append(piece[:cut] if rng.random() < 0.5 else piece[cut:])
        else:
            out.append(rng.choice(alphabet))
    return "".join(out)


def test_fuzz_never_raises() -> None:
    """Seeded random strings built from JSON-ish pieces (hypothesis is not a dependency)."""
    rng = random.Random(1234)
    parsed = 0
    for _ in range(3000):
        text = _random_text(rng)
        rubric = parse_rubric(text)
        valid = format_validity(text)
        assert valid in (0.0, 1.0)
        if rubric is not None:
            parsed += 1
            assert rubric.criteria
            assert math.fsum(c.weight for c in rubric.criteria) == pytest.approx(1.0)
            assert all(c.weight > 0 and c.criterion.strip() for c in rubric.criteria)
        strip_thinking(text)
    assert parsed > 0  # the generator does produce parseable rubrics, so the loop tests both paths


def test_fuzz_with_hypothesis() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=300, deadline=None)
    @hypothesis.given(st.text())
    def check(text: str) -> None:
        parse_rubric(text)
        assert format_validity(text) in (0.0, 1.0)

    check()


# ----------------------------------------------------------------------------- data model and rendering


def test_to_dict_from_obj_round_trip() -> None:
    rubric = parse_rubric(
        json.dumps({"criteria": [
            {"criterion": "Final answer is 408", "weight": 2, "scoring_levels": {"1.0": "408", "0.0": "other"}},
            {"criterion": "Shows steps", "weight": 1, "scoring_levels": {"1.0": "all", "0.5": "some", "0.0": "none"}},
            {"criterion": "Concise", "weight": 1},
        ]})
    )
    assert rubric is not None
    d = rubric.to_dict()
    assert d == {"criteria": [
        {"criterion": "Final answer is 408", "weight": 0.5, "scoring_levels": {"1.0": "408", "0.0": "other"}},
        {"criterion": "Shows steps", "weight": 0.25, "scoring_levels": {"1.0": "all", "0.5": "some", "0.0": "none"}},
        {"criterion": "Concise", "weight": 0.25, "scoring_levels": {}},
    ]}
    assert Rubric.from_obj(d) == rubric
    assert Rubric.from_obj(json.dumps(d)) == rubric
    assert Rubric.from_obj(json.loads(json.dumps(d))) == rubric
    assert Rubric.from_obj(rubric) is rubric
    assert format_validity(json.dumps(d)) == 1.0


def test_weights_are_written_without_float_noise() -> None:
    """0.3, 0.3, 0.4 normalised is 0.29999999999999993 in floating point: written (rubrics.jsonl, samples) as 0.3."""
    rubric = parse_rubric(rub(("A", 0.3), ("B", 0.3), ("C", 0.4)))
    assert rubric is not None and rubric.criteria[0].weight != 0.3  # the noise is there in the parsed value
    assert '"weight": 0.3,' in json.dumps(rubric.to_dict()) and "0.2999" not in json.dumps(rubric.to_dict())


def test_from_obj_round_trip_keeps_awkward_weights() -> None:
    rubric = parse_rubric(rub(("A", 1), ("B", 1), ("C", 1)))
    assert rubric is not None
    back = Rubric.from_obj(rubric.to_dict())
    assert back is not None
    assert [c.criterion for c in back.criteria] == ["A", "B", "C"]
    assert [c.weight for c in back.criteria] == pytest.approx([1 / 3] * 3)


@pytest.mark.parametrize("obj", [None, 3, "not json", {"criteria": []}, [], {"x": 1}])
def test_from_obj_unusable(obj: object) -> None:
    assert Rubric.from_obj(obj) is None


def test_render_rubric() -> None:
    rubric = Rubric((
        Criterion("The final answer is 408.", 0.8, {"1.0": "States 408.", "0.5": "Slip.", "0.0": "Wrong."}),
        Criterion("Shows steps.", 0.2),
    ))
    assert render_rubric(rubric) == (
        "1. (weight 0.80) The final answer is 408.\n"
        "   - 1.0: States 408.\n"
        "   - 0.5: Slip.\n"
        "   - 0.0: Wrong.\n"
        "2. (weight 0.20) Shows steps."
    )
    assert render_rubric(Rubric(())) == ""


def test_rubric_messages_hold_the_question_only() -> None:
    conv = rubric_messages("Name the capital of Australia.")
    assert [m["role"] for m in conv] == ["system", "user", "assistant", "user"]
    assert conv[-1]["content"] == "Question:\nName the capital of Australia."
    assert format_validity(conv[2]["content"]) == 1.0  # the worked example is itself a valid rubric
    assert all("{" not in m["content"] or m["role"] != "user" for m in conv)  # no unfilled placeholders


class _ScriptedBackend:
    """A backend that replies with fixed texts and records what it was asked."""

    name = "scripted"

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.calls: list[tuple[list, object]] = []

    def generate(self, conversations, params, *, progress=False):  # type: ignore[no-untyped-def]
        self.calls.append((list(conversations), params))
        return self.replies[: len(conversations)]

    def next_token_logprobs(self, conversations, candidates, *, chat_template_kwargs=None):  # type: ignore[no-untyped-def]
        raise AssertionError("not used")


def test_write_rubrics_one_batched_call() -> None:
    from evolm.backends.base import SamplingParams

    backend = _ScriptedBackend([GOOD, "<think>hmm</think>no json", rub(("Only", 1.0))])
    params = SamplingParams(temperature=0.6, max_new_tokens=64, seed=3)
    written = write_rubrics(backend, ["q1", "q2", "q3"], params)
    assert len(backend.calls) == 1
    convs, got_params = backend.calls[0]
    assert convs == [rubric_messages(q) for q in ("q1", "q2", "q3")]
    assert got_params is params
    assert [w.valid for w in written] == [1.0, 0.0, 0.0]
    assert written[0].rubric is not None and written[1].rubric is None and written[2].rubric is not None
    assert [w.text for w in written] == backend.replies


def test_huge_weights_normalise_without_overflow() -> None:
    r = parse_rubric('{"criteria": [{"criterion": "a", "weight": 1e308}, {"criterion": "b", "weight": 1e308}]}')
    assert r is not None and [c.weight for c in r.criteria] == [0.5, 0.5]
    r = parse_rubric('{"criteria": [{"criterion": "a", "weight": 3}, {"criterion": "b"}, {"criterion": "c", "weight": 1}]}')
    assert r is not None and [round(c.weight, 6) for c in r.criteria] == [0.5, round(2 / 6, 6), round(1 / 6, 6)]


# Inputs and the values the authors' format check (is_valid_rubric_format, with json_repair 0.64) gives them,
# obtained by running their function on each text; evolm's must agree (one refusal of its own: a NaN weight).
AUTHORS_VALIDITY: list[tuple[str, float]] = [
    ('{"criteria": [{"criterion": "x", "weight": "0.5"}, {"criterion": "y", "weight": "0.5"}]}', 1.0),
    ("{'criteria': [{'criterion': 'x', 'weight': 0.5}, {'criterion': 'y', 'weight': 0.5}]}", 1.0),
    ('Here is the rubric: {"criteria": [{"criterion": "x", "weight": 0.6}, {"criterion": "y", "weight": 0.4}]} '
     'Hope it helps.', 1.0),
    ('{"criteria": [{"criterion": "x", "weight": 0.5}, {"criterion": "y", "weight": 0.5}', 1.0),
    ('{"rubric": {"criteria": [{"criterion": "x", "weight": 0.5}, {"criterion": "y", "weight": 0.5}]}}', 0.0),
    ('{"criteria": [{"criterion": "x", "weight": "0.5"}]}', 0.0),
    ('{"criteria": [{"criterion": "a", "weight": 0.5}, {"criterion": "b", "weight": 0.35}]}', 0.0),
    ('{"criteria": [{"criterion": "a", "weight": 0.5}, {"criterion": "b", "weight": 0.36}]}', 1.0),
    ('<think>let me {think}</think>{"criteria": [{"criterion": "a", "weight": 0.7}, {"criterion": "b", "weight": 0.3}]}',
     1.0),
    ('<think>never closed {"criteria": [{"criterion": "a", "weight": 0.7}, {"criterion": "b", "weight": 0.3}]}', 0.0),
    ('{"criteria": [{"criterion": "a", "weight": 0.7}, {"criterion": "b", "weight": "heavy"}]}', 0.0),
    ('{"criteria": [{"criterion": "a", "weight": 0.7}, {"criterion": "b", "weight": 0}]}', 0.0),
    ('{"criteria": [{"criterion": "", "weight": 0.7}, {"weight": 0.3, "criterion": null}]}', 1.0),
    ('{"criteria": [{"criterion": "a", "weight": true}, {"criterion": "b", "weight": 0.1}]}', 1.0),
    ('{"criteria": [{"criterion": "a", "weight": 0.5}, {"criterion": "b", "weight": 0.5}]} and also {"x": 1}', 0.0),
    ('```json\n{"criteria": [{criterion: "a", weight: 0.5,}, {criterion: "b", weight: 0.5,},]}\n```', 1.0),
    ("no json here", 0.0),
    ("", 0.0),
    ("x" * 300 + '{"criteria": [{"criterion": "a", "weight": 0.5}, {"criterion": "b", "weight": 0.5}]} trailing {"y": 2}',
     1.0),
    ('A</think>{"criteria": [{"criterion": "a", "weight": 0.5}, {"criterion": "b", "weight": 0.5}]}', 1.0),
    ('{"criteria": [{"criterion": "a", "weight": 0.5}, {"criterion": "b", "weight": 0.5}]}' + "z" * 16100, 0.0),
    ('<think>open <RUBRIC>{"criteria": [{"criterion": "a", "weight": 0.5}, {"criterion": "b", "weight": 0.5}]}', 1.0),
]


@pytest.mark.parametrize(("text", "expected"), AUTHORS_VALIDITY)
def test_format_validity_matches_the_authors(text: str, expected: float) -> None:
    assert format_validity(text) == expected


def test_remove_reasoning_matches_the_authors() -> None:
    """Outputs of the authors' reasoning removal on the same inputs (their _remove_redacted_reasoning, run)."""
    remove = remove_reasoning
    assert remove("<think>let me {think}</think>{}") == "{}"
    assert remove("A</think>B") == "AB"  # a stray closing tag is dropped, the text on both sides kept
    assert remove("A <think>never closed") == "A"
    assert remove("<think>open <RUBRIC>x") == "<RUBRIC>x"
    text = "x" * 300 + '{"criteria": [1]} trailing {"y": 2}'
    assert remove(text) == '{"criteria": [1]}'  # a rubric object deep in untagged reasoning is kept alone
    assert remove("a" * 16001) == "a" * 8000 and remove("a" * 16000) == "a" * 16000
    assert format_validity('{"criteria": [{"criterion": "a", "weight": "nan"}, {"criterion": "b", "weight": 1}]}') == 0.0


def test_rubric_prompt_setting_v3_and_older() -> None:
    """``rubric.prompt``: v3 (2-5 criteria, a dealbreaker allowed; the default) or older (5-10, none), same layout."""
    v3, older = rubric_messages("Q?"), rubric_messages("Q?", "older")
    assert v3 == rubric_messages("Q?", "v3") and [m["role"] for m in older] == [m["role"] for m in v3]
    assert "2 to 5 criteria" in v3[0]["content"] and "dealbreaker" in v3[0]["content"]
    assert "5 to 10 criteria" in older[0]["content"] and "dealbreaker" not in older[0]["content"]
    example = json.loads(older[2]["content"])
    assert len(example["criteria"]) == 5 and format_validity(older[2]["content"]) == 1.0
    assert max(c["weight"] for c in example["criteria"]) <= 0.3  # balanced: no dealbreaker taught
    assert older[-1]["content"] == "Question:\nQ?"
    with pytest.raises(ValueError, match="unknown rubric prompt"):
        rubric_messages("Q?", "v4")
