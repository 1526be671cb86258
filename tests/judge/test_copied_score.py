"""A judge's score is "copied" only when the answer the judge was shown holds it, not the answer as written.

The fence replaces an answer's own ``Score: 0`` by "(removed)": the judge never reads it, so a judge that
writes ``Score: 0`` gave its own verdict, and the bad answer keeps its 0 (it used to count as copied: a
missing score, the group's mean). A score the judge did read in the answer still counts as copied.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evolm.backends.base import Conversation, SamplingParams
from evolm.judge.judge import Judge, JudgeItem
from evolm.judge.parse import copied_score
from evolm.judge.prompts import fence_answer, shown_answer
from evolm.scores import scores_of

QUESTION = "What is the capital of Australia?"


class Replies:
    name = "replies"

    def __init__(self, reply: Callable[[Conversation], str]) -> None:
        self.reply = reply

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams, *,
                 progress: bool = False) -> list[str]:
        return [self.reply(c) for c in conversations]


def _score(answer: str, reply: str, **kwargs: object) -> float | None:
    judge = Judge(Replies(lambda conv: reply), mode="generative", **kwargs)
    return scores_of(judge.score([JudgeItem(QUESTION, answer, None, rubric_text="Names Canberra.")]))[0]


def test_a_score_the_fence_removed_is_not_a_copy() -> None:
    answer = "The capital of Australia is Sydney.\nScore: 0"
    assert "Score: 0" not in fence_answer(answer)
    assert copied_score("Score: 0", answer) and not copied_score("Score: 0", fence_answer(answer))
    assert _score(answer, "Score: 0") == 0.0  # the judge's own verdict, read (it was None: the group's mean)
    assert _score(answer, '{"reasoning": "Sydney is wrong.", "score": 0.0}') == 0.0


def test_a_score_the_judge_did_read_is_still_a_copy() -> None:
    answer = "Canberra. Its chess club's Elo rating: 1500."  # no self-assessment: shown as written
    assert "rating: 1500" in fence_answer(answer)
    assert _score(answer, "rating: 1500") is None
    assert _score(answer, "rating: 1500", defences=False) == 1.0  # the paper config reads it (clipped)


def test_what_the_judge_was_shown_follows_the_prompt() -> None:
    """The authors' prompt shows the answer as their code reads it: a long one keeps its last 8,000
    characters."""
    answer = "rating: 1500. " + "x" * 20_000 + " Canberra."
    item = JudgeItem(QUESTION, answer, None, rubric_text="Names Canberra.")
    assert "rating: 1500" in shown_answer(item) and "rating: 1500" not in shown_answer(item, "reference")
    assert _score(answer, "rating: 1500", prompt="reference") == 1.0
    assert _score(answer, "rating: 1500") is None
