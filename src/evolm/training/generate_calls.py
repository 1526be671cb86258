"""The generate calls of one training step, described once: which model writes (the trained weights, or a fixed
writer or answerer), how many conversations, how many samples of each, and how (token budget, sampling, the rubric
grammar). The step samples with these parameters (``rubric_params``, ``answer_params``, ``writer_params``); the dry
run counts vLLM's calls and a step's tokens from the same list (``step_calls``), so the plan follows the step.

A step's calls, in the order the step makes them (training/step.py), TRL's own generation last:

- a policy step: the rubrics its answers share. coevolve: written now by the trained weights. frozen_rubric (and the
  policy stage of sequential): by the fixed writer for the questions it has not written for yet (``rubric.writer``;
  sequential: the writer stage's checkpoint), else by the base model once, on the first policy step, for every
  question the run will ask. judge_only: none. Then TRL samples the answers;
- a rubric step: the pairs' answers, by pair builder. temporal: a fresh answer per question; inferred_question: an
  answer, the question guessed back from it, and an answer to that guess; rubric_conditioned (and temporal while
  the replay buffer is empty): rubrics from the trained weights, then answers with and without them in one call;
  labelled: none. The answers come from the trained weights or a fixed answerer (``contrast.answerer``; sequential's
  writer stage: the base model). Then TRL samples the rubrics, under the rubric grammar with ``rubric.constrained``.

A call over no conversations is never made (``TrainerGenerate.share``): a builder no slot drew costs nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from evolm.backends.base import SamplingParams
from evolm.backends.constrained import rubric_schema
from evolm.config import RunConfig, grpo_setting
from evolm.training.plan import StepInfo

TRAINED, WRITER, ANSWERER = "trained", "writer", "answerer"  # who writes: the weights being trained, or a fixed model


@dataclass(frozen=True)
class GenerateCall:
    """One ``generate`` call of a step: ``prompts`` conversations over all processes (each process writes a share),
    ``samples`` completions of each, sampled with ``params``."""

    what: str  # what it writes, as the dry run names it
    model: str  # TRAINED (TRL's vLLM engine with grpo.use_vllm, else the trainer's model), WRITER or ANSWERER
    prompts: int
    samples: int
    params: SamplingParams
    local: bool = True  # generated in the training processes (the trained weights, or a fixed model on backend hf)
    by_trl: bool = False  # TRL's own generation of the step's completions (num_generations samples per prompt)

    @property
    def sequences(self) -> int:
        return self.prompts * self.samples

    @property
    def grammar(self) -> bool:
        """Decoded under the rubric grammar (``rubric.constrained``)."""
        return self.params.json_schema is not None


# ----------------------------------------------------------------------------- how each kind of text is sampled


def rubric_params(cfg: RunConfig, info: StepInfo) -> SamplingParams:
    """Rubrics written by the trained weights (or the frozen base model): ``rubric.*``, the grammar with
    ``rubric.constrained``, seeded by the step."""
    r = cfg.rubric
    return SamplingParams(r.temperature, r.top_p, r.max_new_tokens, cfg.seed + info.step,
                          cfg.model.chat_template_kwargs, rubric_schema(r.max_criteria) if r.constrained else None)


def writer_params(cfg: RunConfig, info: StepInfo) -> SamplingParams:
    """Rubrics of a fixed writer (``rubric.writer``): ``rubric.writer_*`` over ``rubric_params``, without the policy
    model's chat-template kwargs (``RubricConfig.writer_sampling``)."""
    return replace(rubric_params(cfg, info), **cfg.rubric.writer_sampling())


def answer_params(cfg: RunConfig, info: StepInfo) -> SamplingParams:
    """A pair's answers (and the question guessed from one): ``contrast.temperature``, the policy's ``grpo.top_p``
    and the pairs' budget (``RunConfig.pair_answer_tokens``), seeded by the step."""
    c = cfg.contrast
    return SamplingParams(c.temperature, grpo_setting(cfg.grpo, "top_p"), cfg.pair_answer_tokens,
                          cfg.seed + info.step, cfg.model.chat_template_kwargs)


def trl_params(cfg: RunConfig, role: str) -> SamplingParams:
    """How TRL samples a step's completions: ``grpo.temperature``, ``grpo.top_p``, ``grpo.max_completion_length``
    (TRL's defaults where unset), a rubric step's under the grammar with ``rubric.constrained``; TRL seeds them."""
    schema = rubric_schema(cfg.rubric.max_criteria) if role == "rubric" and cfg.rubric.constrained else None
    return SamplingParams(grpo_setting(cfg.grpo, "temperature"), grpo_setting(cfg.grpo, "top_p"), cfg.policy_tokens,
                          None, cfg.model.chat_template_kwargs, schema)


# ----------------------------------------------------------------------------- a step's calls


def fixed_model(cfg: RunConfig, role: str) -> str | None:
    """The model a run loads to play ``role`` ("writer" or "answerer") beside the one it trains, or None when the
    trained model plays it. The writer: ``rubric.writer`` under frozen_rubric, or sequential's (its policy stage
    loads the writer stage's checkpoint, of the model's shape). The answerer of a rubric step's pairs:
    ``contrast.answerer``, or the base model in sequential's writer stage (``plan.sequential_stages``); labelled
    pairs need none. The one place this is decided: the step loads it (``step.fixed_model_spec``), the dry run
    plans its calls and its memory (``memory.fixed_model``).

    >>> from evolm.config import load_config
    >>> cfg = load_config(None, ["schedule.regime=sequential"])
    >>> fixed_model(cfg, "writer") == fixed_model(cfg, "answerer") == cfg.model.name
    True
    >>> fixed_model(load_config(None, []), "writer") is None
    True
    """
    r, c, regime = cfg.rubric, cfg.contrast, cfg.schedule.regime
    if role == "writer":
        return cfg.model.name if regime == "sequential" else r.writer if regime == "frozen_rubric" else None
    if c.pairs == "labelled":
        return None
    return c.answerer or (cfg.model.name if regime == "sequential" else None)


def step_calls(cfg: RunConfig, role: str, *, builders: Sequence[str] | None = None, buffer_empty: bool | None = None,
               first_step: bool = False, questions: int | None = None, step: int = 0) -> list[GenerateCall]:
    """The generate calls of a ``role`` step (0-based ``step``) of ``cfg``, in the order the step makes them, TRL's
    generation last.

    ``builders``: each slot's pair builder (``contrast.choose_builders``; default ``usual_builders``);
    ``buffer_empty``: the replay buffer has no answer old enough, and temporal slots fall back to rubric-conditioned
    pairs (default: when the run has no policy steps to fill it, ``buffer_fills``); ``first_step``: the run's first
    policy step, where a frozen base model writes the rubrics of ``questions`` questions (default one step's) at once.

    >>> from evolm.config import load_config
    >>> cfg = load_config("configs/paper-qwen3-8b.yaml", ["data.prompts=builtin:demo"])
    >>> [(c.what, c.prompts, c.samples, c.params.max_new_tokens, c.grammar) for c in step_calls(cfg, "rubric")]
    [('fresh answers', 64, 1, 16384, False), ('rubrics', 64, 8, 16384, False)]
    >>> [(c.what, c.model, c.prompts) for c in step_calls(cfg, "rubric", buffer_empty=True)][:2]
    [('rubrics to condition on', 'trained', 64), ('answers with and without them', 'trained', 128)]
    """
    s, p = cfg.schedule, cfg.schedule.prompts_per_step
    info = StepInfo(step, role, 0, 0, 0)
    if role == "policy":
        calls = _policy_calls(cfg, info, first_step, questions or p)
        trl = GenerateCall("answers", TRAINED, p, s.samples_per_prompt, trl_params(cfg, role), by_trl=True)
    else:
        empty = not buffer_fills(cfg) if buffer_empty is None else buffer_empty
        calls = _rubric_calls(cfg, info, builders or usual_builders(cfg), empty)
        trl = GenerateCall("rubrics", TRAINED, p, s.samples_per_prompt, trl_params(cfg, role), by_trl=True)
    return [*calls, trl]


def buffer_fills(cfg: RunConfig) -> bool:
    """Whether the run's replay buffer fills: only its own policy steps store answers, so a rubric_only run (and
    sequential's writer stage) always builds its temporal pairs as rubric-conditioned ones."""
    return cfg.schedule.regime not in ("rubric_only", "sequential")


def usual_builders(cfg: RunConfig) -> list[str]:
    """Each slot's pair builder in a usual rubric step: ``contrast.pairs``, or for ``combined`` the weighted draw's
    expectation (slots in proportion to ``contrast.combined_weights``, the largest remainders rounded up).

    >>> from evolm.config import RunConfig
    >>> from collections import Counter
    >>> Counter(usual_builders(RunConfig(contrast={"pairs": "combined"})))  # 64 slots, weights 0.5, 0.25, 0.25
    Counter({'temporal': 32, 'rubric_conditioned': 16, 'inferred_question': 16})
    """
    c, p = cfg.contrast, cfg.schedule.prompts_per_step
    if c.pairs != "combined":
        return [c.pairs] * p
    weights = {k: w for k, w in c.combined_weights.items() if w > 0}
    share = {k: w / sum(weights.values()) * p for k, w in weights.items()}
    slots = {k: int(x) for k, x in share.items()}
    for k in sorted(share, key=lambda k: share[k] - slots[k], reverse=True)[:p - sum(slots.values())]:
        slots[k] += 1
    return [k for k in weights for _ in range(slots[k])]


def _policy_calls(cfg: RunConfig, info: StepInfo, first_step: bool, questions: int) -> list[GenerateCall]:
    p, regime = cfg.schedule.prompts_per_step, cfg.schedule.regime
    if regime == "coevolve":
        return [GenerateCall("its rubrics", TRAINED, p, 1, rubric_params(cfg, info))]
    if regime == "judge_only":
        return []
    if fixed_model(cfg, "writer"):  # sequential's policy stage loads the writer stage's checkpoint on hf
        local = regime == "sequential" or cfg.rubric.writer_backend == "hf"
        return [GenerateCall("rubrics", WRITER, p, 1, writer_params(cfg, info), local)]
    return [GenerateCall("the frozen rubrics", TRAINED, questions, 1, rubric_params(cfg, info))] if first_step else []


def _rubric_calls(cfg: RunConfig, info: StepInfo, builders: Sequence[str], buffer_empty: bool) -> list[GenerateCall]:
    if cfg.contrast.pairs == "labelled":
        return []
    fixed = fixed_model(cfg, "answerer") is not None
    who, local = (ANSWERER, cfg.contrast.answerer_backend == "hf") if fixed else (TRAINED, True)
    answers = answer_params(cfg, info)
    count = Counter(builders)
    temporal = 0 if buffer_empty else count["temporal"]
    inferred = count["inferred_question"]
    conditioned = len(builders) - temporal - inferred  # rubric_conditioned, and temporal with an empty buffer
    calls = []
    if temporal:
        calls.append(GenerateCall("fresh answers", who, temporal, 1, answers, local))
    if inferred:
        calls += [GenerateCall(what, who, inferred, 1, answers, local) for what in
                  ("answers", "questions guessed from them", "answers to the guessed questions")]
    if conditioned:
        calls += [GenerateCall("rubrics to condition on", TRAINED, conditioned, 1, rubric_params(cfg, info)),
                  GenerateCall("answers with and without them", who, 2 * conditioned, 1, answers, local)]
    return calls
