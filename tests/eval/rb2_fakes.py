"""A deterministic backend at the edge, for running the real ``Judge`` and rubric writer without a model.

Rubric role: always writes the same rubric, whose first criterion is "marked as good".
Judge role (probability modes): finds the answer's marker word (upper case, anywhere in the
judge's conversation: questions and prompts never contain one) and puts all its next-token mass
on one digit. With the rubric in the conversation: GOOD -> 9, OK -> 7, BAD -> 1, no marker -> 5;
without it the judge cannot tell answers apart and always says 5. The fake reads nothing else of
the judge's prompt, so it survives changes to the prompt wording. ``expected_digit`` then gives
GOOD 1.0, OK 7/9, plain 5/9, BAD 1/9, and every answer 5/9 for the judge alone.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from evolm.backends.base import Conversation, SamplingParams
from evolm.rubrics import RUBRIC_SYSTEM_PROMPT

RUBRIC = {
    "criteria": [
        {"criterion": "The answer is marked as good.", "weight": 0.7, "scoring_levels": {"1.0": "yes", "0.0": "no"}},
        {"criterion": "The answer is short.", "weight": 0.3, "scoring_levels": {"1.0": "yes", "0.0": "no"}},
    ]
}
DIGIT_FOR = (("GOOD", "9"), ("OK", "7"), ("BAD", "1"))


class FakeBackend:
    name = "fake"

    def __init__(self, rubric_text: str | None = None) -> None:
        self.rubric_text = json.dumps(RUBRIC) if rubric_text is None else rubric_text
        self.generate_calls: list[int] = []  # conversations per call
        self.logprob_calls: list[int] = []

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams, *, progress: bool = False) -> list[str]:
        self.generate_calls.append(len(conversations))
        assert all(c[0]["content"].startswith(RUBRIC_SYSTEM_PROMPT) for c in conversations), "only the rubric role generates"
        return [self.rubric_text for _ in conversations]

    def next_token_logprobs(
        self, conversations: Sequence[Conversation], candidates: Sequence[str], *, chat_template_kwargs: Any = None
    ) -> list[dict[str, float]]:
        self.logprob_calls.append(len(conversations))
        out = []
        for conv in conversations:
            text = "\n".join(m["content"] for m in conv)
            digit = "5"
            if "marked as good" in text:
                digit = next((d for word, d in DIGIT_FOR if re.search(rf"\b{word}\b", text)), "5")
            out.append({c: (0.0 if c == digit else -math.inf) for c in candidates})
        return out
