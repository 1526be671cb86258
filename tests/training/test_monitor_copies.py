"""The monitor's rubric-copy check, rebuilt to stay linear, flags what the set of all answer windows did."""

from __future__ import annotations

import random
import time

from evolm.training.monitor import COPY_MIN_CRITERION_WORDS, COPY_WORDS, _words, copies_rubric


def _naive(answer: str, rubric_text: str, criteria: list[str]) -> bool:
    """The old reading: every run of the answer, and every run with one word inserted, as a set."""
    said = _words(answer)

    def runs(words: list[str], n: int) -> set[tuple[str, ...]]:
        return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}

    def with_one(words: list[str], n: int) -> set[tuple[str, ...]]:
        out = runs(words, n)
        for i in range(len(words) - n):
            w = words[i : i + n + 1]
            out.update(tuple(w[:k]) + tuple(w[k + 1 :]) for k in range(1, n))
        return out

    if not said:
        return False
    grams = with_one(said, COPY_WORDS)
    for source in (rubric_text, *criteria):
        words = _words(source)
        if len(words) >= COPY_WORDS and grams & runs(words, COPY_WORDS):
            return True
    return any(COPY_MIN_CRITERION_WORDS <= len(w := _words(c)) < COPY_WORDS
               and tuple(w) in with_one(said, len(w)) for c in criteria)


def test_the_linear_check_agrees_with_the_set_of_all_windows() -> None:
    rng = random.Random(0)
    vocab = ["names", "carbon", "dioxide", "as", "the", "gas", "taken", "in", "oxygen", "given", "off"]
    criteria = ["Names carbon dioxide as the gas taken in.", "Names oxygen as the gas given off.",
                "Says light."]
    rubric = " ".join(criteria) + " The answer names carbon dioxide as the gas taken in, and oxygen."
    agree = flagged = 0
    source = _words(rubric)
    for _ in range(400):
        start = rng.randrange(len(source))
        words = source[start : start + rng.randrange(4, 12)]  # a piece of the rubric, then changed a little
        for _ in range(rng.randrange(0, 3)):
            words.insert(rng.randrange(len(words) + 1), rng.choice(vocab))
        if words and rng.random() < 0.3:
            del words[rng.randrange(len(words))]
        answer = " ".join([rng.choice(vocab) for _ in range(rng.randrange(0, 5))] + words)
        got, want = copies_rubric(answer, rubric, criteria), _naive(answer, rubric, criteria)
        assert got == want, answer
        agree, flagged = agree + 1, flagged + got
    assert 20 < flagged < 380  # both kinds of answer were drawn


def test_the_check_is_fast_on_a_long_answer_of_rubric_words() -> None:
    criteria = ["Names carbon dioxide as the gas taken in."]
    answer = "names carbon dioxide as the gas " * 30_000  # 190,000 characters, every window a near miss
    start = time.process_time()  # CPU time: a loaded machine does not make a linear check look slow
    assert not copies_rubric(answer, "", criteria)
    assert time.process_time() - start < 2.0  # linear: ~0.1 s here; a quadratic scan of the windows takes minutes
