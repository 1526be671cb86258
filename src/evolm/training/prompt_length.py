"""Training prompts by length (``data.max_prompt_tokens``): each question's longest training prompt counted in the
model's chat template, the ones over the limit skipped and counted, the longest kept reported (the dry run's memory
estimate reads a training row of that length).

A prompt longer than vLLM's context stops the run on the process that holds it, and TRL 1.16's ``GRPOConfig`` cuts
no prompt, so they are skipped before the plan is made, identically on every process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evolm.errors import InputError
from evolm.training.prompts import load_prompt_set

EXACT_MARGIN = 64  # tokens: prompts estimated this close to the limit (or the longest few) are rendered exactly


@dataclass(frozen=True)
class PromptFit:
    """The training questions kept under ``data.max_prompt_tokens``, and what was counted."""

    questions: list[str]
    references: dict[str, str]
    total: int  # questions read (after data.limit)
    limit: int  # data.max_prompt_tokens (0: none)
    longest: int = 0  # tokens of the longest kept training prompt (0: not counted)

    @property
    def over(self) -> int:
        return self.total - len(self.questions)

    def note(self) -> str | None:
        """``1 of 4 prompts over data.max_prompt_tokens (4096): skipped``, when any was."""
        return f"{self.over} of {self.total} prompts over data.max_prompt_tokens ({self.limit}): skipped" \
            if self.over else None


def training_prompt_tokens(questions: Sequence[str], tokenizer: Any, system_prompt: str, rubric_prompt: str,
                           template_kwargs: dict[str, Any] | None = None, rubric_role: bool = True,
                           exact_above: int | None = None) -> list[int]:
    """Tokens of each question's longest training prompt: the policy's conversation and, with ``rubric_role``, the
    rubric writer's, in the chat template with the generation prompt (as TRL and vLLM read them).

    Each length is first estimated as the question's own tokens plus the conversation's fixed part (one batched
    tokenization: a Tulu-sized file takes seconds). A token may merge across the seams, so the prompts estimated
    above ``exact_above`` and those within ``EXACT_MARGIN`` of the longest are rendered and counted exactly.
    """
    from evolm.rubrics import rubric_messages
    from evolm.training.contrast import policy_messages

    kwargs = dict(template_kwargs or {})
    builders = [lambda q: policy_messages(q, system_prompt)]
    if rubric_role:
        builders.append(lambda q: rubric_messages(q, rubric_prompt))

    def exact(q: str) -> int:
        return max(len(tokenizer.apply_chat_template(b(q), tokenize=True, add_generation_prompt=True,
                                                     return_dict=False, **kwargs)) for b in builders)

    if not questions:
        return []
    fixed = exact("")
    estimates = [fixed + len(ids) for ids in tokenizer(list(questions), add_special_tokens=False)["input_ids"]]
    near = max(estimates) - EXACT_MARGIN
    return [exact(q) if n > near or (exact_above is not None and n > exact_above) else n
            for q, n in zip(questions, estimates, strict=True)]


def fit_prompts(questions: list[str], references: dict[str, str], limit: int, tokenizer: Any, system_prompt: str,
                rubric_prompt: str, template_kwargs: dict[str, Any] | None = None, rubric_role: bool = True
                ) -> PromptFit:
    """The questions whose training prompt has at most ``limit`` tokens (0: all), and the longest kept
    (``training_prompt_tokens``). Refuses, in one line, a limit that keeps no prompt."""
    counted = training_prompt_tokens(questions, tokenizer, system_prompt, rubric_prompt, template_kwargs, rubric_role,
                                     limit - EXACT_MARGIN if limit else None)
    kept = [(q, n) for q, n in zip(questions, counted, strict=True) if not limit or n <= limit]
    if not kept:
        raise InputError(f"all {len(questions)} prompts are over data.max_prompt_tokens ({limit} tokens; the shortest "
                         f"is {min(counted)}): raise it")
    return PromptFit([q for q, _ in kept], references, len(questions), limit, max(n for _, n in kept))


def fit_prompt_set(cfg: Any, tokenizer: Any = None) -> PromptFit:
    """``data.prompts`` (after ``data.limit``) without the prompts over ``data.max_prompt_tokens``, counted with
    ``tokenizer`` (default: the model's). With no limit and no tokenizer nothing is counted."""
    questions, references = load_prompt_set(cfg.data.prompts, cfg.data.limit)
    limit = cfg.data.max_prompt_tokens
    if not limit and tokenizer is None:
        return PromptFit(questions, references, len(questions), 0)
    if tokenizer is None:
        from evolm.backends.loading import load_tokenizer

        tokenizer = load_tokenizer(cfg.model.name)
    return fit_prompts(questions, references, limit, tokenizer, cfg.model.system_prompt, cfg.rubric.prompt,
                       cfg.model.chat_template_kwargs, rubric_role=cfg.schedule.regime != "judge_only")
