"""Temporal contrast (docs/METHOD.md §2.4): the replay buffer, its age window and relaxations, and the pair builders.

Ages are "current policy step minus the entry's step"; every expected set below is worked out by hand.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from evolm.backends.base import Conversation, SamplingParams
from evolm.errors import InputError, RunError
from evolm.training.contrast import (
    RELAXATIONS,
    BufferEntry,
    LabelledPairs,
    Pair,
    ReplayBuffer,
    choose_builders,
    inferred_question_pairs,
    policy_messages,
    rubric_conditioned_pairs,
    temporal_pairs,
)

PARAMS = SamplingParams(1.0, 0.95, 16, 0)
SYSTEM = "You are a helpful assistant."


def buffer_with(steps: Sequence[int], max_size: int = 100) -> ReplayBuffer:
    buf = ReplayBuffer(max_size)
    for s in steps:
        buf.add(s, f"q{s}", f"a{s}")
    return buf


def steps_of(entries: Sequence[BufferEntry]) -> list[int]:
    return sorted(e.step for e in entries)


# ----------------------------------------------------------------------------- window and relaxations


def test_window_picks_entries_within_ages_inclusive() -> None:
    buf = buffer_with([0, 10, 20, 50, 79, 80, 95, 99, 100])
    # current step 100, window [20, 80]: ages 100, 90, 80, 50, 21, 20, 5, 1, 0 -> ages 80, 50, 21, 20
    found, level = buf.candidates(100, 20, 80)
    assert level == "window"
    assert steps_of(found) == [20, 50, 79, 80]


def test_window_boundaries_are_inclusive_on_both_ends() -> None:
    buf = buffer_with([5, 25])  # at step 30: ages 25 and 5
    assert steps_of(buf.candidates(30, 5, 25)[0]) == [5, 25]
    assert buf.candidates(30, 5, 25)[1] == "window"
    # age 25 > 24, age 5 < 6: no window; the newest (age 5) is younger than 6, so max_age is not simply dropped:
    # ages from 3 = 6 // 2
    assert buf.candidates(30, 6, 24) == (list(buf.entries), "half_min_age")


def test_relaxation_drops_max_age_first_when_the_newest_entry_is_old_enough() -> None:
    buf = buffer_with([0, 1, 5])  # at step 40: ages 40, 39, 35, all over max_age 30 and at least min_age 20
    found, level = buf.candidates(40, 20, 30)
    assert level == "no_max_age"
    assert steps_of(found) == [0, 1, 5]


def test_max_age_is_not_dropped_while_the_newest_entry_is_younger_than_min_age() -> None:
    """The reference relaxes max_age only when its newest entry is min_age old: with a young entry in the buffer (in
    training the newest has age 0) it goes on to half of min_age, which here admits fewer old entries."""
    buf = buffer_with([0, 1, 28, 38])  # at step 40: ages 40, 39, 12, 2; window [20, 30] is empty
    found, level = buf.candidates(40, 20, 30)
    assert level == "half_min_age"
    assert steps_of(found) == [0, 1, 28]  # ages >= 10


def test_relaxation_then_halves_min_age() -> None:
    buf = buffer_with([28, 30, 38])  # at step 40: ages 12, 10, 2; window [20, 100] and ages >= 20 are empty
    found, level = buf.candidates(40, 20, 100)
    assert level == "half_min_age"
    assert steps_of(found) == [28, 30]  # ages >= 10 (boundary 10 included)


def test_relaxation_then_takes_the_oldest_half() -> None:
    buf = buffer_with([37, 33, 35, 39])  # at step 40: ages 3, 7, 5, 1; all < 10 = half of min_age 20
    found, level = buf.candidates(40, 20, 100)
    assert level == "oldest_half"
    assert steps_of(found) == [33, 35]  # oldest 2 of 4 by step, whatever the insertion order


def test_oldest_half_of_a_single_entry_is_that_entry() -> None:
    buf = buffer_with([39])
    found, level = buf.candidates(40, 20, 100)
    assert (steps_of(found), level) == ([39], "oldest_half")


def test_oldest_half_is_of_the_whole_buffer() -> None:
    buf = buffer_with([40, 40, 40, 38])  # at step 40: ages 0, 0, 0, 2
    found, level = buf.candidates(40, 20, 100)
    assert (steps_of(found), level) == ([38, 40], "oldest_half")  # the older 2 of 4, a same-step answer included


def test_half_min_age_never_admits_the_current_step() -> None:
    buf = buffer_with([9, 10])  # at step 10, min_age 1: 1 // 2 = 0, but the reference's floor is 1
    assert buf.candidates(10, 1, 0) == ([buf.entries[0]], "half_min_age")


def test_relaxation_finally_takes_any_entry() -> None:
    buf = buffer_with([40, 40, 41])  # nothing older than the current step 40
    found, level = buf.candidates(40, 20, 100)
    assert level == "any"
    assert steps_of(found) == [40, 40, 41]


def test_relaxation_levels_are_in_the_spec_order() -> None:
    assert RELAXATIONS == ("window", "no_max_age", "half_min_age", "oldest_half", "any")


def test_empty_buffer_has_no_candidates() -> None:
    buf = ReplayBuffer(4)
    assert buf.candidates(10, 1, 5) == ([], "empty")
    assert buf.sample(10, 3, 1, 5, random.Random(0)) == []


def test_min_age_zero_takes_entries_of_the_current_step() -> None:
    buf = buffer_with([7, 3])
    assert steps_of(buf.candidates(7, 0, 2)[0]) == [7]


# ----------------------------------------------------------------------------- bounded size, persistence


def test_bounded_size_drops_the_oldest() -> None:
    buf = buffer_with(range(10), max_size=4)
    assert len(buf) == 4
    assert [e.step for e in buf.entries] == [6, 7, 8, 9]
    buf.add(10, "q", "a")
    assert [e.step for e in buf.entries] == [7, 8, 9, 10]


def test_save_load_round_trip(tmp_path: Path) -> None:
    buf = ReplayBuffer(8)
    buf.add(0, "Qué?\nline two", 'answer with "quotes" and ünïcode')
    buf.add(3, "q2", "")
    path = tmp_path / "sub" / "buffer.jsonl"
    buf.save(path)
    back = ReplayBuffer.load(path, 8)
    assert list(back.entries) == list(buf.entries)
    assert back.max_size == 8
    assert [json.loads(line)["step"] for line in path.read_text(encoding="utf-8").splitlines()] == [0, 3]


def test_load_into_a_smaller_buffer_keeps_the_newest(tmp_path: Path) -> None:
    buffer_with(range(6)).save(tmp_path / "b.jsonl")
    back = ReplayBuffer.load(tmp_path / "b.jsonl", 3)
    assert [e.step for e in back.entries] == [3, 4, 5]


def test_empty_buffer_round_trip(tmp_path: Path) -> None:
    ReplayBuffer(3).save(tmp_path / "b.jsonl")
    assert len(ReplayBuffer.load(tmp_path / "b.jsonl", 3)) == 0


@pytest.mark.parametrize("content", [
    '{"step": 1, "question": "q", "answer": "a"}\n{"step": 2, "question": "q"\n',  # torn line
    '{"step": "soon", "question": "q", "answer": "a"}\n',  # step is not a number
    '{"question": "q", "answer": "a"}\n',  # no step
    '[1, 2, 3]\n',  # not an object
])
def test_corrupt_buffer_file_is_a_run_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "evolm_buffer.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RunError, match="unreadable replay buffer"):
        ReplayBuffer.load(path, 10)


def test_missing_buffer_file_is_a_run_error(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="unreadable replay buffer"):
        ReplayBuffer.load(tmp_path / "nope.jsonl", 10)


# ----------------------------------------------------------------------------- sampling


def test_sample_draws_each_pair_independently_with_replacement() -> None:
    buf = buffer_with(range(10))  # at step 20, window [5, 15]: steps 5..15 -> 5 entries (5..9)
    picked = buf.sample(20, 5, 5, 15, random.Random(1))
    rng = random.Random(1)
    assert [e.step for e, _ in picked] == [rng.choice([5, 6, 7, 8, 9]) for _ in range(5)]  # random.choice per pair
    assert len({e.step for e, _ in picked}) < 5  # this seed repeats an entry, as the reference may
    assert {lvl for _, lvl in picked} == {"window"}


def test_sample_repeats_when_the_pool_is_small() -> None:
    buf = buffer_with([1, 2])
    picked = buf.sample(10, 5, 0, 100, random.Random(0))
    assert len(picked) == 5
    assert {e.step for e, _ in picked} <= {1, 2}


def test_sample_is_deterministic_for_a_seed() -> None:
    buf = buffer_with(range(50))
    a = buf.sample(60, 6, 10, 40, random.Random("0:7"))
    b = buf.sample(60, 6, 10, 40, random.Random("0:7"))
    c = buf.sample(60, 6, 10, 40, random.Random("0:8"))
    assert a == b
    assert a != c  # another step's seed draws other entries (fixed seeds: checked once)


def test_sample_reports_the_relaxation_level() -> None:
    buf = buffer_with([38, 39])
    assert {lvl for _, lvl in buf.sample(40, 2, 20, 100, random.Random(0))} == {"oldest_half"}


# ----------------------------------------------------------------------------- builders


def test_choose_builders_plain_modes() -> None:
    rng = random.Random(0)
    for mode in ("temporal", "rubric_conditioned", "inferred_question"):
        assert choose_builders(3, mode, {"temporal": 1.0}, rng) == [mode] * 3


def test_choose_builders_combined_follows_weights() -> None:
    weights = {"temporal": 0.5, "rubric_conditioned": 0.5, "inferred_question": 0.0}
    drawn = choose_builders(400, "combined", weights, random.Random(3))
    assert set(drawn) == {"temporal", "rubric_conditioned"}  # a zero weight is never drawn
    assert 150 < drawn.count("temporal") < 250
    assert drawn == choose_builders(400, "combined", weights, random.Random(3))  # same seed, same draw
    only = choose_builders(5, "combined", {"temporal": 0.0, "inferred_question": 2.0}, random.Random(0))
    assert only == ["inferred_question"] * 5


def test_choose_builders_combined_without_positive_weight() -> None:
    with pytest.raises(ValueError, match="no positive weight"):
        choose_builders(2, "combined", {"temporal": 0.0}, random.Random(0))


class FakeGenerate:
    """A ``generate`` callable that records each call's conversations and answers from a script."""

    def __init__(self, reply) -> None:  # noqa: ANN001 - reply(conversation) -> str
        self.reply = reply
        self.calls: list[list[Conversation]] = []
        self.params: list[SamplingParams] = []

    def __call__(self, convs: Sequence[Conversation], params: SamplingParams) -> list[str]:
        self.calls.append([list(c) for c in convs])
        self.params.append(params)
        return [self.reply(c) for c in convs]


def test_policy_messages() -> None:
    assert policy_messages("Q?", SYSTEM) == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Q?"}]
    with_rubric = policy_messages("Q?", SYSTEM, "1. (weight 1.00) Says 4")
    assert with_rubric[0]["content"].startswith(SYSTEM)
    assert "1. (weight 1.00) Says 4" in with_rubric[0]["content"]
    assert with_rubric[1] == {"role": "user", "content": "Q?"}


def test_temporal_pairs_fresh_is_better_stored_is_worse() -> None:
    gen = FakeGenerate(lambda c: "fresh answer to " + c[-1]["content"])
    picked = [(BufferEntry(3, "What is 2+2?", "old: 5"), "window"), (BufferEntry(1, "Name a colour.", "old: cat"),
                                                                     "no_max_age")]
    pairs = temporal_pairs(picked, gen, PARAMS, SYSTEM)
    assert pairs == [
        Pair("What is 2+2?", "fresh answer to What is 2+2?", "old: 5", "temporal:window"),
        Pair("Name a colour.", "fresh answer to Name a colour.", "old: cat", "temporal:no_max_age"),
    ]
    assert len(gen.calls) == 1  # one batched call for the fresh answers
    assert gen.calls[0] == [policy_messages("What is 2+2?", SYSTEM), policy_messages("Name a colour.", SYSTEM)]
    assert gen.params == [PARAMS]


def test_rubric_conditioned_pairs_show_the_rubric_only_to_the_better_answer() -> None:
    def reply(c: Conversation) -> str:
        return ("with rubric: " if "rubric" in c[0]["content"] else "plain: ") + c[-1]["content"]

    gen = FakeGenerate(reply)
    pairs = rubric_conditioned_pairs(["Q1", "Q2"], ["R-one", "R-two"], gen, PARAMS, SYSTEM)
    assert pairs == [Pair("Q1", "with rubric: Q1", "plain: Q1", "rubric_conditioned"),
                     Pair("Q2", "with rubric: Q2", "plain: Q2", "rubric_conditioned")]
    (convs,) = gen.calls
    assert [c[-1]["content"] for c in convs] == ["Q1", "Q2", "Q1", "Q2"]
    assert "R-one" in convs[0][0]["content"] and "R-two" in convs[1][0]["content"]
    assert convs[2][0]["content"] == SYSTEM and convs[3][0]["content"] == SYSTEM  # no rubric for the worse one


def test_inferred_question_pairs_answer_the_guessed_question() -> None:
    def reply(c: Conversation) -> str:
        text = c[-1]["content"]
        if text.startswith("Here is an answer"):  # the guess step: sees only the answer
            return "<think>hmm</think> Guess for [" + text.split("\n\n")[1] + "]"
        return "A(" + text + ")"

    gen = FakeGenerate(reply)
    pairs = inferred_question_pairs(["What is 2+2?"], gen, PARAMS, SYSTEM)
    assert len(gen.calls) == 3  # answer, guess, answer to the guess
    assert gen.calls[0] == [policy_messages("What is 2+2?", SYSTEM)]
    guess_conv = gen.calls[1][0]
    assert "A(What is 2+2?)" in guess_conv[-1]["content"]
    assert "What is 2+2?" not in guess_conv[-1]["content"].replace("A(What is 2+2?)", "")  # question not shown
    assert gen.calls[2] == [policy_messages("Guess for [A(What is 2+2?)]", SYSTEM)]  # thinking stripped
    assert pairs == [Pair("What is 2+2?", "A(What is 2+2?)", "A(Guess for [A(What is 2+2?)])", "inferred_question")]


def test_inferred_question_without_a_guess_falls_back_to_the_question() -> None:
    def reply(c: Conversation) -> str:
        return "  \n" if c[-1]["content"].startswith("Here is an answer") else "A(" + c[-1]["content"] + ")"

    gen = FakeGenerate(reply)
    pairs = inferred_question_pairs(["Q"], gen, PARAMS, SYSTEM)
    assert gen.calls[2] == [policy_messages("Q", SYSTEM)]
    assert pairs[0].a_neg == "A(Q)"


def test_builders_with_no_input_make_no_pairs() -> None:
    gen = FakeGenerate(lambda c: "x")
    assert temporal_pairs([], lambda convs, p: [], PARAMS, SYSTEM) == []
    assert rubric_conditioned_pairs([], [], lambda convs, p: [], PARAMS, SYSTEM) == []
    assert gen.calls == []


# ----------------------------------------------------------------------------- labelled pairs (contrast.pairs=labelled)


def labelled(n: int, seed: int = 0) -> LabelledPairs:
    return LabelledPairs([Pair(f"q{i}", f"good{i}", f"bad{i}", "labelled") for i in range(n)], seed)


def test_labelled_pairs_are_dealt_in_a_seeded_order_and_cycle() -> None:
    lp = labelled(5)
    dealt = [p.question for r in range(5) for p in lp.take(r, 2)]  # 5 rubric steps x 2 slots = two passes
    first = dealt[:5]
    assert sorted(first) == [f"q{i}" for i in range(5)]  # one pass deals every pair once
    assert dealt[5:] == first  # then the same order again
    assert [p.question for p in lp.take(1, 2)] == dealt[2:4]  # slot s of rubric step r: position r * n + s
    assert [p.question for r in range(5) for p in labelled(5).take(r, 2)] == dealt  # deterministic: every process
    orders = {tuple(p.question for r in range(3) for p in labelled(5, seed).take(r, 2)) for seed in range(6)}
    assert len(orders) > 1  # the seed matters
    for pair in lp.take(7, 3):  # chosen is a+, rejected a-
        assert (pair.a_pos, pair.a_neg, pair.source) == ("good" + pair.question[1:], "bad" + pair.question[1:], "labelled")


def test_labelled_pairs_read_every_format_eval_pairs_reads(tmp_path: Path) -> None:
    f = tmp_path / "pairs.jsonl"
    rows = [{"prompt": "P1", "chosen": "C1", "rejected": "R1", "source_index": 7, "metadata": {"score_chosen": 9}},
            {"input": "P2", "output_1": "worse", "output_2": "better", "label": 2},
            {"prompt": [{"role": "user", "content": "P3"}], "chosen": [{"role": "assistant", "content": "C3"}],
             "rejected": [{"role": "assistant", "content": "R3"}]}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lp = LabelledPairs.load(f, seed=0)
    assert sorted((p.question, p.a_pos, p.a_neg, p.source) for p in lp.pairs) == [
        ("P1", "C1", "R1", "labelled"), ("P2", "better", "worse", "labelled"), ("P3", "C3", "R3", "labelled")]
    with pytest.raises(InputError, match=r"^data.pairs: .*no such file"):
        LabelledPairs.load(tmp_path / "absent.jsonl", seed=0)
    (tmp_path / "bad.jsonl").write_text('{"prompt": "p"}\n')
    with pytest.raises(InputError, match=r"^data.pairs: .*unknown pair format"):
        LabelledPairs.load(tmp_path / "bad.jsonl", seed=0)
