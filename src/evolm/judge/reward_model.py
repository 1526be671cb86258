"""A scalar reward model as the judge: the paper's Skywork-Reward baseline (docs/METHOD.md §3.2).

Any Hugging Face sequence-classification reward model (one output, e.g.
Skywork-Reward-V2-Llama-3.1-8B) scores the chat ``[user: question, assistant: answer]``; the score
is the model's raw output (a logit, unbounded), which is the policy's reward in the
``judge_only`` regime. It reads no rubric: that is the point of the baseline. Thinking is stripped
from answers, as for every judge, and the chat is cut at 8,192 tokens.

``reading="reference"`` (``judge.reward_model_reading``, configs/baselines/skywork-rm.yaml) reads it
as the authors' code does: 10 x sigmoid(logit), of the response as generated (thinking kept), the
chat tokenized with the tokenizer's special tokens and cut at 4,096 tokens (its end dropped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evolm.backends.replies import strip_thinking
from evolm.errors import ModelError
from evolm.scores import Judgment


@dataclass
class RewardModel:
    """A frozen sequence-classification model with the ``Judge.score`` interface."""

    model: Any
    tokenizer: Any
    batch_size: int = 8
    max_length: int = 8192
    reading: str = "evolm"

    def __post_init__(self) -> None:
        if self.reading == "reference":
            self.max_length = 4096

    def score(self, items: Sequence[Any], progress: bool = False) -> list[Judgment]:
        """One raw reward per item as its ``Judgment``'s score (``JudgeItem``: question and answer; rubric and
        reference ignored)."""
        import torch

        texts = [self._text(it.question, it.answer) for it in items]
        out: list[Judgment] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(texts[start : start + self.batch_size], return_tensors="pt", padding=True,
                                   truncation=True, max_length=self.max_length,
                                   add_special_tokens=self.reading == "reference")
            batch = {k: v.to(self.model.device) for k, v in batch.items()}
            with torch.inference_mode():
                logits = self.model(**batch).logits  # [B, 1]
            raw = logits[:, 0].float()
            out += [Judgment(x) for x in (10.0 * torch.sigmoid(raw) if self.reading == "reference" else raw).tolist()]
        return out

    def _text(self, question: str, answer: str) -> str:
        answer = answer if self.reading == "reference" else strip_thinking(answer)
        conv = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(conv, tokenize=False)
        return f"{question}\n\n{answer}"


def load_reward_model(name: str, device: str = "auto", dtype: str = "auto", batch_size: int = 8,
                      reading: str = "evolm") -> RewardModel:
    """A reward model from a local directory (or a hub id, tried only when given)."""
    from transformers import AutoModelForSequenceClassification

    from evolm.backends.loading import load_tokenizer, load_weights

    model = load_weights(AutoModelForSequenceClassification, name, device, dtype, what="reward model")
    if model.config.num_labels != 1:
        raise ModelError(f"'{name}' has {model.config.num_labels} outputs; a scalar reward model has one")
    tokenizer = load_tokenizer(name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return RewardModel(model, tokenizer, batch_size=batch_size, reading=reading)
