"""Training prompts by length (``data.max_prompt_tokens``): each question's longest training prompt counted in the
model's chat template, the ones over the limit skipped and counted, the longest kept reported (the dry run's memory
estimate reads a training row of that length).

A prompt longer than vLLM's context stops the run on the process that holds it, and TRL 1.16's ``GRPOConfig`` cuts
no prompt, so they are skipped before the plan is made, identically on every process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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
    longest: int = 0  # tokens of the longest kept training prompt, labelled pairs' included (0: not counted;
    # held-out prompts are not trained on: not included)
    pairs: list[Any] | None = None  # contrast.pairs=labelled: the data.pairs kept (contrast.Pair), else None
    pairs_total: int = 0  # labelled pairs read
    eval_pairs: list[Any] = field(default_factory=list)  # eval.pairs kept (eval.pairs.PreferencePair)
    eval_pairs_total: int = 0  # held-out pairs read (after eval.limit)
    eval_questions: list[str] = field(default_factory=list)  # eval.questions kept
    eval_questions_total: int = 0  # held-out questions read (after eval.limit)

    @property
    def over(self) -> int:
        return self.total - len(self.questions)

    def note(self) -> str | None:
        """``1 of 4 prompts over data.max_prompt_tokens (4096): skipped``, when any was (and the labelled and
        held-out pairs' and questions')."""
        notes = [f"{n} of {total} {what} over data.max_prompt_tokens ({self.limit}): skipped"
                 for n, total, what in ((self.over, self.total, "prompts"),
                                        (self.pairs_total - len(self.pairs or ()), self.pairs_total,
                                         "labelled pairs (data.pairs)"),
                                        (self.eval_pairs_total - len(self.eval_pairs), self.eval_pairs_total,
                                         "held-out pairs (eval.pairs)"),
                                        (self.eval_questions_total - len(self.eval_questions),
                                         self.eval_questions_total, "held-out questions (eval.questions)")) if n]
        return "; ".join(notes) or None


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
    ``tokenizer`` (default: the model's); with ``contrast.pairs=labelled`` the pairs of ``data.pairs`` whose rubric
    prompt is over it skipped the same way, and so are the held-out pairs (``eval.pairs``, by their rubric prompt)
    and questions (``eval.questions``, by their rubric and policy prompts), after ``eval.limit``: a held-out prompt
    is generated from in the run as a training one is. With no limit and no tokenizer nothing is counted."""
    from dataclasses import replace

    from evolm.training.contrast import LabelledPairs
    from evolm.training.heldout import read_eval_sets

    questions, references = load_prompt_set(cfg.data.prompts, cfg.data.limit)
    pairs = LabelledPairs.load(str(cfg.data.pairs), cfg.seed).pairs if cfg.contrast.pairs == "labelled" else None
    eval_pairs, eval_questions = read_eval_sets(cfg)
    limit = cfg.data.max_prompt_tokens
    read = {"pairs": pairs, "pairs_total": len(pairs or ()), "eval_pairs": eval_pairs,
            "eval_pairs_total": len(eval_pairs), "eval_questions": eval_questions,
            "eval_questions_total": len(eval_questions)}
    if not limit and tokenizer is None:
        return PromptFit(questions, references, len(questions), 0, **read)
    if tokenizer is None:
        from evolm.backends.loading import load_tokenizer

        tokenizer = load_tokenizer(cfg.model.name)
    count = (tokenizer, cfg.model.system_prompt, cfg.rubric.prompt, cfg.model.chat_template_kwargs)
    fit = replace(fit_prompts(questions, references, limit, *count, rubric_role=cfg.schedule.regime != "judge_only"),
                  **read)

    def fitting(what: str, prompts: list[str]) -> tuple[set[str], int]:  # the prompts under the limit, the longest
        if not prompts:
            return set(), 0
        try:
            kept = fit_prompts(list(dict.fromkeys(prompts)), {}, limit, *count)
        except InputError as e:
            raise InputError(f"{what}: {e}") from None
        return set(kept.questions), kept.longest

    if pairs is not None:  # a labelled pair's prompt is its rubric step's question: trained on
        keep, longest = fitting("data.pairs", [p.question for p in pairs])
        fit = replace(fit, longest=max(fit.longest, longest), pairs=[p for p in pairs if p.question in keep])
    keep, _ = fitting("eval.pairs", [p.prompt for p in eval_pairs])  # a rubric per held-out pair's prompt
    fit = replace(fit, eval_pairs=[p for p in eval_pairs if p.prompt in keep])
    keep, _ = fitting("eval.questions", eval_questions)  # a rubric and an answer per held-out question
    fit = replace(fit, eval_questions=[q for q in eval_questions if q in keep])
    return fit  # its longest: a training prompt's (the memory plan's row); held-out prompts are only generated from
