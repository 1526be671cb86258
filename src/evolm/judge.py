"""The frozen judge (SPEC §2.2): question + rubric + answer in, a score in [0, 1] (or ``None``) out.

Three modes, one contract:

- ``generative``: the reference behaviour. The judge rates every criterion, weights and sums, and
  replies with JSON ``{"reasoning": ..., "score": ...}`` (sampled at temperature 0.6, top-p 0.95).
  An unreadable reply gives ``None``.
- ``prob``: one forward pass. The judge is asked for one digit 0-9; the score is the expected
  digit under its next-token distribution, divided by 9. Deterministic, never missing.
- ``yesno``: one forward pass per criterion. The score is the rubric-weighted mean of
  P(Yes) / (P(Yes) + P(No)) for "does the answer meet this criterion?". Deterministic, never missing.

Answers are always scored one at a time (pointwise). In the probability modes the prompt puts
everything an answer does not change (instructions, question, rubric or criterion) before the
answer, so a backend can compute that shared prefix once for all answers to the same question.
Without a rubric the judge scores alone (the "judge alone" baseline).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evolm.backends.base import Backend, Conversation, SamplingParams
from evolm.rubrics import Rubric, render_rubric, strip_thinking
from evolm.scores import aggregate_scores

if TYPE_CHECKING:
    from evolm.config import JudgeConfig


@dataclass(frozen=True)
class JudgeItem:
    """One answer to score: the question, the answer, and the rubric (``None``: judge alone)."""

    question: str
    answer: str
    rubric: Rubric | None = None


# ----------------------------------------------------------------------------- prompts

_SYSTEM = "You are a careful, strict grader of answers to user questions."
_NO_RUBRIC_CRITERION = "The answer is correct, helpful, and does what the question asks."

_GENERATIVE_TASK = """\
Grade the answer below.
{guide}
Reply with only a JSON object: {{"reasoning": "<one or two sentences>", "score": <number from 0 to 1>}}"""
_GEN_GUIDE_RUBRIC = (
    "For each criterion of the rubric, rate from 0 to 1 how far the answer satisfies it, multiply by the "
    "criterion's weight, and add the results: that sum is the score."
)
_GEN_GUIDE_ALONE = "Rate from 0 (useless or wrong) to 1 (fully correct and helpful) how good the answer is."

_PROB_TASK = (
    "Rate how well the answer meets the rubric, giving each criterion its weight. Reply with a single digit "
    "from 0 (meets none of it) to 9 (meets all of it), and nothing else."
)
_PROB_TASK_ALONE = (
    "Rate how good the answer is: correct, helpful, and doing what the question asks. Reply with a single "
    "digit from 0 (useless or wrong) to 9 (excellent), and nothing else."
)
_YESNO_TASK = "Does the answer meet the criterion? Reply with Yes or No only."

DIGITS = tuple(str(d) for d in range(10))
PROGRESS_BLOCK = 128  # answers per backend call when a progress bar is shown


def _clean_answer(answer: str) -> str:
    return strip_thinking(answer) if "<think>" in answer.lower() or "</think>" in answer.lower() else answer.strip()


def generative_messages(item: JudgeItem) -> Conversation:
    guide = _GEN_GUIDE_RUBRIC if item.rubric is not None else _GEN_GUIDE_ALONE
    parts = [f"Question:\n{item.question}"]
    if item.rubric is not None:
        parts.append(f"Rubric:\n{render_rubric(item.rubric)}")
    parts.append(f"Answer:\n{_clean_answer(item.answer)}")
    parts.append(_GENERATIVE_TASK.format(guide=guide))
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def prob_messages(item: JudgeItem) -> Conversation:
    task = _PROB_TASK if item.rubric is not None else _PROB_TASK_ALONE
    parts = [task, f"Question:\n{item.question}"]
    if item.rubric is not None:
        parts.append(f"Rubric:\n{render_rubric(item.rubric)}")
    parts.append(f"Answer:\n{_clean_answer(item.answer)}")
    parts.append("Score (0-9):")
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def yesno_messages(question: str, criterion: str, answer: str) -> Conversation:
    user = "\n\n".join(
        [_YESNO_TASK, f"Question:\n{question}", f"Criterion:\n{criterion}", f"Answer:\n{_clean_answer(answer)}",
         "Does the answer meet the criterion (Yes or No)?"]
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


# ----------------------------------------------------------------------------- reading outputs

_SCORE_FIELD = re.compile(r'"?score"?\s*[:=]\s*"?(-?\d+(?:\.\d+)?)', re.IGNORECASE)  # "Score: 0.8" too


def parse_judge_score(text: str) -> float | None:
    """The score in a generative judge's reply, or ``None``. Never raises.

    Reads the ``score`` of the first JSON object that has one (prose and fences tolerated), else a
    ``"score": x`` pattern in the text. A score outside [0, 1] is unreadable (``None``): a
    judge that ignores the requested scale is not silently rescaled.

    >>> parse_judge_score('{"reasoning": "ok", "score": 0.75}')
    0.75
    >>> parse_judge_score('Score: 7') is None, parse_judge_score('garbage') is None
    (True, True)
    """
    try:
        body = strip_thinking(text)
        decoder = json.JSONDecoder()
        for m in re.finditer(r"\{", body):
            try:
                obj, _ = decoder.raw_decode(body[m.start() :])
            except (json.JSONDecodeError, RecursionError, ValueError):
                continue
            if isinstance(obj, dict) and "score" in obj:
                return _unit(obj["score"])
        m = _SCORE_FIELD.search(body)
        return _unit(m.group(1)) if m else None
    except Exception:  # noqa: BLE001 - model output must never crash the caller
        return None


def _unit(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and 0.0 <= f <= 1.0 else None


def expected_digit(logprobs: dict[str, float]) -> float:
    """Expected value of a 0-9 digit under renormalised probabilities, scaled to [0, 1].

    >>> expected_digit({"0": math.log(0.5), "9": math.log(0.5)})
    0.5
    """
    probs = [math.exp(logprobs.get(d, -math.inf)) for d in DIGITS]
    total = sum(probs)
    if total <= 0:
        return 0.5  # no digit among the reported tokens: no information either way
    return sum(i * p for i, p in enumerate(probs)) / (9 * total)


def p_yes(logprobs: dict[str, float]) -> float:
    """P(Yes) / (P(Yes) + P(No)); 0.5 when the judge reported neither."""
    y, n = math.exp(logprobs.get("Yes", -math.inf)), math.exp(logprobs.get("No", -math.inf))
    return y / (y + n) if y + n > 0 else 0.5


# ----------------------------------------------------------------------------- the judge


@dataclass
class Judge:
    """A frozen judge model behind a backend, in one of ``JUDGE_MODES``.

    ``chat_template_kwargs`` reaches the chat template (Qwen3 judges need
    ``{"enable_thinking": False}`` so that the first reply token is the score).
    """

    backend: Backend
    mode: str = "prob"
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 512
    seed: int | None = 0
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in JUDGE_MODES:
            raise ValueError(f"unknown judge mode '{self.mode}' (choose from {', '.join(sorted(JUDGE_MODES))})")

    def score(self, items: Sequence[JudgeItem], progress: bool = False) -> list[float | None]:
        """One score per item, in order: a float in [0, 1], or ``None`` (generative mode only).

        With ``progress``, items go to the backend in blocks of ``PROGRESS_BLOCK`` under a progress bar;
        answers to the same question should be adjacent so that a block keeps their shared prefix.
        """
        items = list(items)
        if not items:
            return []
        score = JUDGE_MODES[self.mode]
        if not progress or len(items) <= PROGRESS_BLOCK or self.mode == "generative":  # generative has its own bar
            return score(self, items, progress)
        from tqdm.auto import tqdm

        out: list[float | None] = []
        with tqdm(total=len(items), desc=f"judge ({self.mode})", unit="answer") as bar:
            for start in range(0, len(items), PROGRESS_BLOCK):
                block = items[start : start + PROGRESS_BLOCK]
                out += score(self, block, False)
                bar.update(len(block))
        return out


def _score_generative(judge: Judge, items: list[JudgeItem], progress: bool) -> list[float | None]:
    params = SamplingParams(judge.temperature, judge.top_p, judge.max_new_tokens, judge.seed,
                            judge.chat_template_kwargs)
    texts = judge.backend.generate([generative_messages(it) for it in items], params, progress=progress)
    return [parse_judge_score(t) for t in texts]


def _score_prob(judge: Judge, items: list[JudgeItem], progress: bool) -> list[float | None]:
    lps = judge.backend.next_token_logprobs(
        [prob_messages(it) for it in items], DIGITS, chat_template_kwargs=judge.chat_template_kwargs
    )
    return [expected_digit(lp) for lp in lps]


def _score_yesno(judge: Judge, items: list[JudgeItem], progress: bool) -> list[float | None]:
    convs: list[Conversation] = []
    owners: list[tuple[int, float]] = []  # (item index, criterion weight) per conversation
    for i, it in enumerate(items):
        criteria = [(c.criterion, c.weight) for c in it.rubric.criteria] if it.rubric else [(_NO_RUBRIC_CRITERION, 1.0)]
        for text, weight in criteria:
            convs.append(yesno_messages(it.question, text, it.answer))
            owners.append((i, weight))
    lps = judge.backend.next_token_logprobs(convs, ("Yes", "No"), chat_template_kwargs=judge.chat_template_kwargs)
    totals = [0.0] * len(items)
    weights = [0.0] * len(items)
    for (i, w), lp in zip(owners, lps, strict=True):
        totals[i] += w * p_yes(lp)
        weights[i] += w
    return [t / w if w > 0 else None for t, w in zip(totals, weights, strict=True)]


JUDGE_MODES: dict[str, Callable[[Judge, list[JudgeItem], bool], list[float | None]]] = {
    "generative": _score_generative,
    "prob": _score_prob,
    "yesno": _score_yesno,
}


def score_with_judges(judges: Sequence[Judge], items: Sequence[JudgeItem], how: str = "mean") -> list[float | None]:
    """Several judges score the same items; per item, scores are aggregated (``mean`` or ``majority``)."""
    per_judge = [j.score(items) for j in judges]
    return [aggregate_scores([s[k] for s in per_judge], how) for k in range(len(items))]


def build_judge(cfg: JudgeConfig, model: str | None = None, *, seed: int | None = 0, device: str = "auto",
                fallback_dtype: str = "auto") -> Judge:
    """The one way a judge is built, for training (``RunConfig.judge``) and the CLI alike.

    ``model`` overrides ``cfg.model`` (multi-judge training builds one judge per model);
    ``cfg.dtype == "auto"`` takes ``fallback_dtype`` (training: the policy's dtype).
    """
    from evolm.models import load_backend

    backend = load_backend(model or cfg.model, backend=cfg.backend, base_url=cfg.base_url,
                           api_key_env=cfg.api_key_env, device=device,
                           dtype=fallback_dtype if cfg.dtype == "auto" else cfg.dtype, batch_size=cfg.batch_size)
    return Judge(backend, mode=cfg.mode, temperature=cfg.temperature, top_p=cfg.top_p,
                 max_new_tokens=cfg.max_new_tokens, seed=seed, chat_template_kwargs=dict(cfg.chat_template_kwargs))
