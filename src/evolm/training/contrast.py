"""Temporal contrast (docs/METHOD.md §2.4): where the (better, worse) answer pairs for rubric training come from.

During policy training one sampled answer per question goes into a bounded ``ReplayBuffer`` as
(policy step, question, answer). A pair for rubric training takes a stored answer whose age (current
policy step minus its step) lies in [min_age, max_age] as the worse answer, and a fresh answer of
the current policy to the same question as the better one: "newer is better". When no entry is in
the window the selection relaxes as the reference's does, in this order: drop max_age (only when even
the newest entry is min_age old); ages from max(1, min_age // 2); the oldest half of the whole buffer
(when its oldest entry is older than the current step); any entry. Each pair draws its entry
independently (with replacement), as the reference's ``random.choice`` per pair does.

Two more pair builders exist as options: ``rubric_conditioned`` (better = answer written with the
rubric in the system prompt, worse = without) and ``inferred_question`` (worse = the policy's
answer to the question the model guesses the better answer responds to: tests on-topicness).
Builders take a ``generate`` callable so that the same code runs on the trainer's engine.
``labelled`` generates nothing: (chosen, rejected) pairs from a file (``LabelledPairs``), the sanity
check that the writer learns rubrics under which the judge agrees with human or GPT-4 labels.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from evolm.backends.base import Conversation, SamplingParams
from evolm.errors import InputError
from evolm.rubrics import strip_thinking
from evolm.runs.files import atomic_writer
from evolm.runs.jsonl import dumps_line
from evolm.runs.records import read_buffer_file

Generate = Callable[[Sequence[Conversation], SamplingParams], list[str]]

RELAXATIONS = ("window", "no_max_age", "half_min_age", "oldest_half", "any")


@dataclass(frozen=True)
class BufferEntry:
    """An answer the policy gave at ``step`` (counted in policy steps) to ``question``."""

    step: int
    question: str
    answer: str


@dataclass(frozen=True)
class Pair:
    """A question with a better and a worse answer, and where the pair came from."""

    question: str
    a_pos: str
    a_neg: str
    source: str  # builder name, plus the relaxation level for temporal pairs ("temporal:window", ...)


class ReplayBuffer:
    """Bounded FIFO of ``BufferEntry``; the oldest entry leaves first when full."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.entries: deque[BufferEntry] = deque(maxlen=max_size)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, step: int, question: str, answer: str) -> None:
        self.entries.append(BufferEntry(step, question, answer))

    def save(self, path: str | Path) -> None:
        """Write atomically: a crash mid-write leaves the previous file intact."""
        with atomic_writer(path) as f:
            for e in self.entries:
                f.write(dumps_line(asdict(e)))

    @classmethod
    def load(cls, path: str | Path, max_size: int) -> ReplayBuffer:
        buf = cls(max_size)
        for step, question, answer in read_buffer_file(path):
            buf.add(step, question, answer)
        return buf

    def candidates(self, current_step: int, min_age: int, max_age: int) -> tuple[list[BufferEntry], str]:
        """Entries usable as the worse answer, after as little relaxation as needed, and the level used.

        The reference's ladder (``ReplayBufferDataProvider.get_pair_context``), edge cases included: ``no_max_age``
        only when the newest entry is at least ``min_age`` old (with the newest entry at age 0, as in training, that
        level is skipped for any ``min_age > 0``); ``half_min_age`` from age ``max(1, min_age // 2)``;
        ``oldest_half`` the older half (at least one) of the whole buffer sorted by step, answers of the current
        step included, only when the oldest entry is older than ``current_step``; then ``any``.
        """
        entries = list(self.entries)
        if not entries:
            return [], "empty"
        ages = [current_step - e.step for e in entries]

        def aged(lo: int, hi: float) -> list[BufferEntry]:
            return [e for e, age in zip(entries, ages, strict=True) if lo <= age <= hi]

        def oldest_half() -> list[BufferEntry]:
            if max(ages) <= 0:
                return []
            by_step = sorted(entries, key=lambda e: e.step)
            return by_step[: max(1, len(by_step) // 2)]

        for level, found in (
            ("window", lambda: aged(min_age, max_age)),
            ("no_max_age", lambda: aged(min_age, float("inf")) if min(ages) >= min_age else []),
            ("half_min_age", lambda: aged(max(1, min_age // 2), float("inf"))),
            ("oldest_half", oldest_half),
            ("any", lambda: entries),
        ):
            chosen = found()
            if chosen:
                return chosen, level
        return [], "empty"  # pragma: no cover - "any" always finds one

    def sample(self, current_step: int, n: int, min_age: int, max_age: int, rng: random.Random
               ) -> list[tuple[BufferEntry, str]]:
        """``n`` entries, each drawn independently (with replacement, as the reference draws one per pair), each with
        the relaxation level that found it."""
        pool, level = self.candidates(current_step, min_age, max_age)
        if not pool:
            return []
        return [(rng.choice(pool), level) for _ in range(n)]


# ----------------------------------------------------------------------------- pair builders


def policy_messages(question: str, system_prompt: str, rubric_text: str | None = None) -> Conversation:
    """The policy role's prompt; with ``rubric_text`` the rubric is shown in the system prompt."""
    system = system_prompt if rubric_text is None else (
        f"{system_prompt}\nA good answer to the next question meets this rubric:\n{rubric_text}")
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def _guess_question_messages(answer: str) -> Conversation:
    return [{"role": "user", "content": "Here is an answer someone wrote:\n\n" + answer +
             "\n\nWhat question was it answering? Reply with the question only."}]


def temporal_pairs(picked: Sequence[tuple[BufferEntry, str]], generate: Generate, params: SamplingParams,
                   system_prompt: str) -> list[Pair]:
    """Better = a fresh answer of the current policy; worse = the stored older answer."""
    fresh = generate([policy_messages(e.question, system_prompt) for e, _ in picked], params)
    return [Pair(e.question, new, e.answer, f"temporal:{level}") for (e, level), new in zip(picked, fresh, strict=True)]


def rubric_conditioned_pairs(questions: Sequence[str], rubric_texts: Sequence[str], generate: Generate,
                             params: SamplingParams, system_prompt: str) -> list[Pair]:
    """Better = answer written with the question's rubric in view; worse = answer without it."""
    convs = [policy_messages(q, system_prompt, r) for q, r in zip(questions, rubric_texts, strict=True)]
    convs += [policy_messages(q, system_prompt) for q in questions]
    out = generate(convs, params)
    n = len(questions)
    return [Pair(q, out[i], out[n + i], "rubric_conditioned") for i, q in enumerate(questions)]


def inferred_question_pairs(questions: Sequence[str], generate: Generate, params: SamplingParams,
                            system_prompt: str) -> list[Pair]:
    """Better = an answer to the question; worse = an answer to the question the model infers from it."""
    answers = generate([policy_messages(q, system_prompt) for q in questions], params)
    guesses = generate([_guess_question_messages(a) for a in answers], params)
    guessed = [strip_thinking(g).strip() or q for g, q in zip(guesses, questions, strict=True)]  # no guess: q itself
    off_topic = generate([policy_messages(g, system_prompt) for g in guessed], params)
    return [Pair(q, a, b, "inferred_question") for q, a, b in zip(questions, answers, off_topic, strict=True)]


class LabelledPairs:
    """``contrast.pairs=labelled``: the pairs of ``data.pairs`` (any format ``evolm eval pairs`` reads), dealt out
    in a seed-shuffled order.

    Slot ``s`` of the ``r``-th rubric step (counting rubric steps only) gets the pair at position ``r * n + s`` of
    the order, cycling through the file when it runs out: the same pairs on every process and after a resume.
    """

    def __init__(self, pairs: Sequence[Pair], seed: int) -> None:
        if not pairs:
            raise ValueError("no labelled pairs")
        self.pairs = list(pairs)
        self.order = list(range(len(self.pairs)))
        random.Random(seed).shuffle(self.order)

    @classmethod
    def load(cls, path: str | Path, seed: int) -> LabelledPairs:
        from evolm.eval.pairs import load_pairs

        try:
            pairs = load_pairs(path)
        except InputError as e:  # one line, before any model loads
            raise InputError(f"data.pairs: {e}") from None
        return cls([Pair(p.prompt, p.better, p.worse, "labelled") for p in pairs], seed)

    def take(self, rubric_step: int, n: int) -> list[Pair]:
        """The ``n`` pairs of the ``rubric_step``-th rubric step (0-based), one per slot."""
        return [self.pairs[self.order[(rubric_step * n + s) % len(self.order)]] for s in range(n)]


def choose_builders(n: int, mode: str, weights: dict[str, float], rng: random.Random) -> list[str]:
    """The builder for each of ``n`` slots: ``mode`` itself, or a weighted draw for ``combined``."""
    if mode != "combined":
        return [mode] * n
    names = [k for k, w in weights.items() if w > 0]
    if not names:
        raise ValueError("contrast.combined_weights has no positive weight")
    return rng.choices(names, weights=[weights[k] for k in names], k=n)
