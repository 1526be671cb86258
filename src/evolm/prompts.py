"""Training prompts: questions only, never labels (docs/METHOD.md §2.5), and optional reference answers.

A prompts file is JSONL with a ``prompt`` field per line (``builtin:demo`` names the shipped set);
a line may also carry a ``reference`` answer, which only reference-aware judges read (the
Direct-Likert baseline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolm.errors import InputError
from evolm.jsonl import read_jsonl

BUILTIN_PROMPTS = {"builtin:demo": Path(__file__).parent / "data" / "demo_prompts.jsonl"}


def load_prompt_set(spec: str, limit: int = 0) -> tuple[list[str], dict[str, str]]:
    """Training questions (deduplicated, blanks dropped, order kept) and their reference answers, one read."""
    if spec.startswith("builtin:") and spec not in BUILTIN_PROMPTS:
        raise InputError(f"{spec}: no such built-in prompt set (known: {', '.join(BUILTIN_PROMPTS)})")
    rows = read_jsonl(BUILTIN_PROMPTS.get(spec, Path(spec)), required=["prompt"])
    questions = list(dict.fromkeys(str(r["prompt"]) for r in rows if str(r["prompt"]).strip()))
    questions = questions[:limit] if limit else questions
    if not questions:
        raise InputError(f"{spec}: no prompts")
    references = {str(r["prompt"]): str(r["reference"]) for r in rows if isinstance(r.get("reference"), str)}
    return questions, references


def load_prompts(spec: str, limit: int = 0) -> list[str]:
    """Training questions from a JSONL file with a ``prompt`` field (or a built-in set), deduplicated."""
    return load_prompt_set(spec, limit)[0]


def load_references(spec: str) -> dict[str, str]:
    """question -> reference answer, from the prompts file's optional ``reference`` field."""
    return load_prompt_set(spec)[1]


# ----------------------------------------------------------------------------- prompt length (data.max_prompt_tokens)

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
    from evolm.contrast import policy_messages
    from evolm.rubrics import rubric_messages

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
        from evolm.models import load_tokenizer

        tokenizer = load_tokenizer(cfg.model.name)
    return fit_prompts(questions, references, limit, tokenizer, cfg.model.system_prompt, cfg.rubric.prompt,
                       cfg.model.chat_template_kwargs, rubric_role=cfg.schedule.regime != "judge_only")
