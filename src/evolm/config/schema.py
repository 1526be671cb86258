"""Every setting of a training run, as pydantic models with the paper's values as defaults.

A run is described by one YAML file whose sections mirror ``RunConfig``; any field can be
overridden on the command line with a dotted ``key=value`` (``judge.mode=prob schedule.cycles=3``).
pydantic checks each setting: its type (strictly: YAML's ``true`` is no number), unknown keys, the names a
``Literal`` setting may take, the range a ``Field(ge=..., le=...)`` gives; each model's validators check what spans
settings. The first error becomes one line naming the setting (``messages.error_line``), raised as ``InputError``.
GRPO settings that EvoLM does not interpret live in the ``grpo`` mapping
and go to TRL's ``GRPOConfig`` unchanged, so TRL's documentation stays the reference for them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from evolm.config.grpo_values import grpo_setting, grpo_value_errors, trl_default
from evolm.config.judge_settings import JudgeConfig
from evolm.config.settings import (
    BACKENDS,
    DTYPES,
    EVOLM_GRPO_KEYS,
    INVALID_RUBRICS,
    MONITOR_ACTIONS,
    PAIR_BUILDERS,
    PAIR_MODES,
    REGIMES,
    REWARD_MODEL_MODE,
    RUBRIC_PROMPTS,
    RUBRIC_REWARDS,
    WRITER_REGIMES,
    Settings,
    first_failed,
    setting,
)
from evolm.config.values import endpoint_urls, extra_reward_problems, system_dir, url_error


class LoRAConfig(Settings):
    """A LoRA adapter trained instead of the full weights (PEFT); r=0: off (the paper trains every weight)."""

    r: int = setting(0, "LoRA rank (0: off, full fine-tuning as in the paper); both roles train the one adapter, the "
                     "frozen base model (or a warm-start adapter's frozen copy) is GRPO's KL reference, and "
                     "checkpoints hold the adapter alone", ge=0)
    alpha: int = setting(16, "LoRA scaling numerator: the update is scaled by alpha / r", gt=0)
    dropout: float = setting(0.0, "dropout on the adapter's input during training", ge=0, lt=1)
    target_modules: list = setting(["all-linear"], "module names (or suffixes) that get an adapter; ['all-linear']: "
                                   "every linear layer but the output head (PEFT)")

    @field_validator("target_modules")
    @classmethod
    def _module_names(cls, names: list) -> list:
        first_failed([(bool(names) and all(isinstance(m, str) and m for m in names), "model.lora.target_modules must "
                                                      "be a "
                 "non-empty list of module names, e.g. [q_proj, v_proj] or [all-linear]")])
        return names


class ModelConfig(Settings):
    """The one model that plays both roles (policy and rubric writer)."""

    name: str = setting("Qwen/Qwen3-8B", "local dir, Hugging Face id, or a built-in name (smollm2-135m-instruct; the "
                    "Qwen2.5-Coder judges with their extras: docs/USAGE.md) (paper: Qwen3-8B)")
    dtype: Literal[DTYPES] = setting("auto", "auto (bf16 on GPU, fp32 on CPU), float32, bfloat16")
    system_prompt: str = setting("You are a helpful assistant.", "system prompt of the policy role (paper's)")
    chat_template_kwargs: dict = setting({}, "passed to the chat template, e.g. {enable_thinking: false} for Qwen3")
    lora: LoRAConfig = Field(default_factory=LoRAConfig)


class RubricConfig(Settings):
    """The rubric role: how rubrics are written and rewarded."""

    # Parameters that control the rubric reward
    reward: Literal[RUBRIC_REWARDS] = setting("margin_format", "binary (workshop), margin_format (paper main run: 0.7 "
                                              "margin + 0.3 format), separation")
    invalid: Literal[INVALID_RUBRICS] = setting("judge_raw", "a rubric that does not parse: judge_raw (reference: the "
                                                "judge reads its raw text in both roles; the format term does the "
                                                "rest) or zero (reward 0 in the rubric role, judge alone in the policy "
                                                "role)")

    # Parameters that control how rubrics are written
    prompt: Literal[RUBRIC_PROMPTS] = setting("v3", "the rubric prompt in both roles and in held-out evaluation: v3 "
                                              "(the paper's: 2-5 criteria, a dealbreaker allowed for short verifiable "
                                              "answers) or older (the authors' older prompt: 5-10 criteria); both in "
                                              "evolm's words (docs/FIDELITY.md)")
    temperature: float = setting(0.6, "sampling temperature when writing a rubric (paper: 0.6; in training, the rubric "
                                 "a policy question's samples share)", ge=0)
    top_p: float = setting(0.95, "top-p when writing a rubric (paper: 0.95)", gt=0, le=1)
    max_new_tokens: int = setting(16384, "token budget for writing a rubric, thinking included (in training: the "
                                  "policy phase's rubrics)", ge=1)
    constrained: bool = setting(False, "decode every rubric the model writes (policy-step rubrics, rubric-step "
                                "samples, held-out evaluation) under the rubric JSON schema (2-5 criteria with "
                                "criterion, weight, scoring_levels): xgrammar on transformers, structured outputs on "
                                "vLLM. Off in the paper config; GRPO then takes log-probs under the unconstrained "
                                "model (docs/FIDELITY.md)")
    max_criteria: int = setting(5, "rubric.constrained: the most criteria the rubric grammar lets a rubric have (2-5; "
                                "the prompt asks for 2-5). Fewer bound a rubric's length (a criterion is up to ~95 "
                                "tokens), so a smaller rubric.max_new_tokens / grpo.max_completion_length still holds "
                                "whole rubrics", ge=2, le=5)

    # Parameters that control a fixed writer (frozen_rubric regime)
    writer: str | None = setting(None, "frozen_rubric regime: the fixed writer (model dir/id, or a served model name "
                                 "with writer_backend=openai, e.g. gpt-4.1); default: the untrained base model")
    writer_backend: Literal[BACKENDS] = setting("hf", "backend of the fixed writer: hf or openai")
    writer_base_url: str | None = setting(None, "server URL of the fixed writer for writer_backend=openai")
    writer_timeout: float = setting(120.0, "writer_backend=openai: seconds one request attempt may take in all", gt=0)
    writer_max_retries: int = setting(2, "writer_backend=openai: retries of a failed request", ge=0)
    writer_temperature: float | None = setting(None, "rubric.writer's temperature (none: rubric.temperature); the "
                                               "reference's API writer (GPT-4.1): 0", ge=0)
    writer_top_p: float | None = setting(None, "rubric.writer's top-p (none: rubric.top_p); the reference's API "
                                         "writer: 1.0", gt=0, le=1)
    writer_max_new_tokens: int | None = setting(None, "rubric.writer's token budget (none: rubric.max_new_tokens); the "
                                                "reference's API writer: 800", ge=1)
    writer_fallback: str | None = setting(None, "writer_backend=openai: a model at the same endpoint that writes the "
                                          "rubric of a request still failing after its retries (the reference's API "
                                          "writer: gpt-4.1-mini, through litellm's fallbacks); none: the failure stops "
                                          "the run")

    @model_validator(mode="after")
    def _consistent(self) -> RubricConfig:
        first_failed([
            (not (self.constrained and self.prompt == "older"), "rubric.prompt=older asks for 5-10 criteria, which the "
             "rubric grammar (rubric.constrained: 2-5 criteria) cannot write: use rubric.prompt=v3"),
            (self.writer_fallback is None or self.writer_backend == "openai",
             "rubric.writer_fallback needs rubric.writer_backend=openai (a model at the same endpoint)"),
        ])
        return self

    def writer_sampling(self) -> dict[str, Any]:
        """``rubric.writer``'s sampling (``SamplingParams`` fields): ``rubric.writer_*``, else ``rubric.*`` (a frozen
        base model writes as the trained one does: ``rubric.*``); no chat-template kwargs (the policy model's are not
        its)."""
        if self.writer is None:
            return {"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens}
        return {"temperature": self.temperature if self.writer_temperature is None else self.writer_temperature,
                "top_p": self.top_p if self.writer_top_p is None else self.writer_top_p,
                "max_new_tokens": self.max_new_tokens if self.writer_max_new_tokens is None
                else self.writer_max_new_tokens, "chat_template_kwargs": {}}


class ContrastConfig(Settings):
    """Temporal contrast: where the (better, worse) answer pairs for rubric training come from."""

    # Parameters that control where the pairs come from
    pairs: Literal[PAIR_MODES] = setting("temporal", "temporal (default: fresh answer vs one from min_age..max_age "
                                         "policy steps ago), rubric_conditioned, inferred_question, combined, or "
                                         "labelled (data.pairs: human/GPT-4 labelled chosen/rejected pairs, the sanity "
                                         "check of rubric learning)")
    combined_weights: dict = setting({"temporal": 0.5, "rubric_conditioned": 0.25, "inferred_question": 0.25},
                                     "mix of builders for pairs=combined")

    # Parameters that control the replay buffer and its age window
    buffer_size: int = setting(2048, "replay buffer entries (oldest dropped first; reference: 2048)", ge=1)
    min_age: int = setting(20, "youngest stored answer usable as the worse answer, in policy steps (reference: "
                           "20)", ge=0)
    max_age: int = setting(100, "oldest stored answer usable, in policy steps (reference: 100)", ge=0)

    # Parameters that control the fresh (better) answer, and who writes it
    temperature: float = setting(1.0, "sampling temperature of the fresh (better) answer (reference: 1.0)", ge=0)
    max_new_tokens: int | None = setting(None, "token budget of a pair's fresh answers (none: "
                                         "grpo.max_completion_length, the policy answers' own, which the replay buffer "
                                         "stores: a temporal pair's fresh a+ is then never cut shorter than the stored "
                                         "a- it is compared with)", ge=1)
    answerer: str | None = setting(None, "a fixed model that writes the pairs' answers (a frozen policy); default: the "
                                   "model being trained. The sequential regime's writer stage uses the base model")
    answerer_backend: Literal[BACKENDS] = setting("hf", "backend of the fixed answerer: hf, openai (e.g. `vllm serve` "
                                                  "of the base model) or vllm")
    answerer_base_url: str | None = setting(None, "server URL of the fixed answerer for answerer_backend=openai")

    @model_validator(mode="after")
    def _consistent(self) -> ContrastConfig:
        c = self
        weights = c.combined_weights.values()
        first_failed([
            (c.min_age <= c.max_age, "contrast.min_age must be >= 0 and <= contrast.max_age"),
            (set(c.combined_weights) <= set(PAIR_BUILDERS),
             f"contrast.combined_weights keys must be among {', '.join(PAIR_BUILDERS)}, not "
             f"{', '.join(sorted(set(c.combined_weights) - set(PAIR_BUILDERS)))}"),
            (all(isinstance(w, int | float) and not isinstance(w, bool) and w >= 0 for w in weights)
             and (c.pairs != "combined" or any(w > 0 for w in weights)),
             "contrast.combined_weights must be numbers >= 0, at least one > 0 when contrast.pairs=combined"),
        ])
        return self


class ScheduleConfig(Settings):
    """How the two roles alternate."""

    regime: Literal[REGIMES] = setting("coevolve", "coevolve: K policy then K rubric steps per cycle; sequential: all "
                                       "rubric steps, then all policy steps with the rubric writer frozen; "
                                       "frozen_rubric: policy steps only, rubrics from a fixed writer (the paper's "
                                       "prompted-rubric and RaR baselines); judge_only: policy steps only, no rubric: "
                                       "the judge alone (Direct-Likert with judge.mode=likert) or a scalar reward "
                                       "model (judge.mode=reward_model, the paper's Skywork baseline); rubric_only: "
                                       "rubric steps only, answers from a frozen policy (contrast.answerer, default "
                                       "the base model)")
    cycles: int = setting(10, "number of cycles (paper: 10)", ge=1)
    steps_per_phase: int = setting(50, "K, optimizer steps per phase (paper: 50)", ge=1)
    prompts_per_step: int = setting(64, "questions per optimizer step, over all processes (paper: 64)", ge=1)
    samples_per_prompt: int = setting(8, "GRPO group size (paper: 8)", hint="GRPO compares the samples of a "
                                                           "group", ge=2)
    save_every: int = setting(25, "checkpoint every N steps, besides every phase end (paper: 25)", ge=1)
    samples_logged_per_step: int = setting(0, "rows per step written to samples/*.jsonl (0: all)", ge=0)


class DataConfig(Settings):
    """Training prompts (only prompts are used, never labels)."""

    prompts: str = setting("builtin:demo", "JSONL with a 'prompt' field per line, or builtin:demo (shipped set)")
    limit: int = setting(0, "use only the first N prompts (0: all)", hint="0: all prompts", ge=0)
    max_prompt_tokens: int = setting(0, "skip a prompt whose training prompt (the longer of the policy's and the "
                                     "rubric writer's conversation, in the model's chat template) is longer than this "
                                     "many tokens, and a labelled pair (data.pairs) or held-out pair or question "
                                     "(eval.*, after eval.limit) whose prompt is; counted and reported at the start of "
                                     "the run and by the dry run (0: keep every prompt). A prompt longer than vLLM's "
                                     "context (grpo.vllm_max_model_length) stops the run on the process that holds "
                                     "it", ge=0)
    pairs: str | None = setting(None, "contrast.pairs=labelled: JSONL of {prompt, chosen, rejected} pairs (also "
                                "accepts the pair files `evolm eval pairs` reads)")


class EvalConfig(Settings):
    """Held-out evaluation during training, logged to metrics.jsonl with the current weights."""

    pairs: str | None = setting(None, "JSONL of held-out {prompt, chosen, rejected} pairs: the judge's pairwise "
                                "accuracy with the current writer's rubrics")
    questions: str | None = setting(None, "JSONL with a 'prompt' per line: held-out questions for rubric validity and "
                                    "the policy's mean judge score under a fixed evaluation rubric set (written once "
                                    "by the initial writer, saved as eval_rubrics.jsonl in the run)")
    every: int = setting(0, "evaluate every N optimizer steps, before the first step and at the end (0: only before "
                         "the first step and at the end when pairs or questions are set)", ge=0)
    limit: int = setting(0, "use only the first N held-out pairs and N questions (0: all); of those, the ones over "
                         "data.max_prompt_tokens are skipped", ge=0)


class RewardsConfig(Settings):
    """Reward functions besides the judge, added to either role's reward (off in the paper)."""

    extra: list = setting([], "TRL-style reward functions added to a role's reward: a list of {name, weight, kwargs, "
                          "role}. name: an import path (trl.rewards.get_soft_overlong_punishment, mypkg.mod:fn), "
                          "resolved when the config loads. With kwargs (even {}) name is a factory, called once as "
                          "name(**kwargs), that returns the reward function; without, name is the reward function. It "
                          "gets prompts, completions, completion_ids and the row columns as TRL passes them (rubric "
                          "rows: the written rubrics, with a_pos, a_neg) and returns one float per completion (None: "
                          "no reward). role: policy (default) or rubric, the steps it adds to. Reward = judge_weight x "
                          "judge reward (missing: its group's mean) + sum of weight x value; each term's mean is "
                          "logged per step")
    judge_weight: float = setting(1.0, "the judge's reward times this in both roles; 0: the judge is not asked, the "
                                  "reward is rewards.extra alone (a program reward: the writer's learnability check, "
                                  "docs/RESULTS.md). The paper: 1", ge=0)
    drop_flat_criteria: bool = setting(False, "policy steps, judge.mode yesno: each answer's score re-weighted over "
                                       "the criteria that separate its group's answers (a criterion whose P(Yes) spans "
                                       "less than 0.05 across the group is dropped from the weighting). Off in the "
                                       "paper; the share of such criteria is logged per step either way "
                                       "(flat_criteria)")
    monitor: Literal[MONITOR_ACTIONS] = setting("report", "what the reward-hacking monitor (training.monitor) does on "
                                                "policy steps: report (only log its signals; the paper has no "
                                                "monitor), mask (also drop the judge reward of each answer it flags, a "
                                                "score string or a copy of the rubric: that answer gets its group's "
                                                "mean, zero advantage), stop (end the run at a policy step whose "
                                                "flagged share reaches monitor_stop_share or whose length_drift passes "
                                                "2; the last checkpoint stays)")
    monitor_stop_share: float = setting(0.5, "monitor=stop: the share of a policy step's answers flagged (score string "
                                        "or rubric copy) that ends the run", gt=0, le=1)

    @field_validator("extra")
    @classmethod
    def _extra_shape(cls, entries: list) -> list:
        if problems := extra_reward_problems(entries):
            raise ValueError(problems[0])
        return entries


class RunConfig(Settings):
    """A whole EvoLM run."""

    output_dir: str = setting("runs/evolm", "run directory: config, checkpoints, buffer, metrics, samples")
    seed: int = setting(0, "seed of everything random: sampled generation (rubrics, answers, a generative judge), "
                        "shuffles and draws, in [0, 2**32)", ge=0, lt=2**32)
    model: ModelConfig = Field(default_factory=ModelConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    rubric: RubricConfig = Field(default_factory=RubricConfig)
    contrast: ContrastConfig = Field(default_factory=ContrastConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    rewards: RewardsConfig = Field(default_factory=RewardsConfig)
    grpo: dict = setting(
        {"learning_rate": 1e-6, "lr_scheduler_type": "constant", "beta": 0.001, "epsilon": 0.2, "loss_type": "grpo",
         "temperature": 1.0, "top_p": 0.95, "max_completion_length": 16384, "per_device_train_batch_size": 8,
         "bf16": True, "gradient_checkpointing": True, "use_vllm": True, "vllm_mode": "colocate"},
        "passed to trl.GRPOConfig as is (learning_rate, beta = KL coefficient with TRL's k3 estimator, epsilon "
        "= clip, loss_type = grpo: masked mean per sequence then mean, the reference's, use_vllm, ...); EvoLM "
        "sets num_generations, batch sizes, max_steps, saving and logging itself",
    )

    @field_validator("output_dir")
    @classmethod
    def _run_directory(cls, path: str) -> str:
        first_failed([(path.strip() != "", "output_dir must name a directory"),
                (not system_dir(path), f"output_dir {path} is the filesystem root or a system directory (/proc, /sys, "
                 "/dev): choose a directory of its own for the run")])
        return path

    @field_validator("grpo")
    @classmethod
    def _grpo(cls, grpo: dict) -> dict:
        """What GRPOConfig would take but evolm cannot train with; its keys and types are checked against TRL's
        GRPOConfig at launch and in the dry run (``trl_adapter.grpo_errors``)."""
        reserved = sorted(k for k in set(EVOLM_GRPO_KEYS) & set(grpo)
                          if k != "num_iterations")  # num_iterations: 1 may be written down; any other value is refused
        first_failed([
            ("num_iterations" not in grpo or grpo["num_iterations"] == 1,
             "grpo.num_iterations must be 1: evolm makes one update per generation batch (as the paper does), and a "
             "reused batch would train one step's rows at the next step of the plan"),
            (not reserved, f"grpo.{(reserved or [''])[0]} is set by evolm (it keeps one TRL generation batch = one "
             "optimizer step of one role; see training.grpo_config.evolm_grpo_settings): set schedule.*, seed, "
             "output_dir or model.chat_template_kwargs instead"),
        ])
        if errors := grpo_value_errors(grpo):
            raise ValueError(errors[0])
        return grpo

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        """What spans sections; the URLs of the servers."""
        c, j = self.contrast, self.judge
        urls = [("judge.base_url", u) for u in endpoint_urls(j.base_url)] + [
            ("rubric.writer_base_url", self.rubric.writer_base_url),
            ("contrast.answerer_base_url", c.answerer_base_url)]
        first_failed([
            (j.mode != REWARD_MODEL_MODE or self.schedule.regime == "judge_only",
             "judge.mode=reward_model (a scalar reward model reads no rubric) needs schedule.regime=judge_only"),
            (c.pairs != "labelled" or bool(self.data.pairs), "contrast.pairs=labelled needs data.pairs: a JSONL file "
             "of {prompt, chosen, rejected} pairs"),
            (not self.temporal_pairs() or c.max_new_tokens is None or c.max_new_tokens >= self.policy_tokens,
             f"contrast.max_new_tokens ({c.max_new_tokens}) is below grpo.max_completion_length "
             f"({self.policy_tokens}): a temporal pair's fresh answer (a+) would be cut shorter than the stored "
             "policy answer (a-) it is compared with, so the judge would prefer the older answer; leave "
             "contrast.max_new_tokens unset (the policy's budget) or lower grpo.max_completion_length"),
            (not self.rewards.drop_flat_criteria or j.mode == "yesno",
             "rewards.drop_flat_criteria re-weights a score made of its criteria's values: it needs judge.mode=yesno, "
             f"not {j.mode}"),
            *((False, e) for name, url in urls if url and (e := url_error(name, url))),
            (not (self.schedule.regime == "coevolve" and self.temporal_pairs()
                  and c.buffer_size < self.schedule.prompts_per_step * (c.min_age + 1)),
             f"contrast.buffer_size ({c.buffer_size}) cannot hold answers {c.min_age} policy steps old "
             f"({self.schedule.prompts_per_step} questions per step x {c.min_age + 1} steps): raise it or lower "
             "contrast.min_age"),
            (not endpoint_urls(j.base_url)[0] or j.backend == "openai",
             f"judge base_url is set but its backend is '{j.backend}' (a URL needs backend openai)"),
            (self.rubric.writer_base_url is None or self.rubric.writer_backend == "openai",
             f"rubric.writer base_url is set but its backend is '{self.rubric.writer_backend}' (a URL needs backend "
             "openai)"),
            (c.answerer_base_url is None or c.answerer_backend == "openai",
             "contrast.answerer_base_url is set but contrast.answerer_backend is not openai"),
            (self.rubric.writer is None or self.schedule.regime != "coevolve",
             "rubric.writer is a fixed writer for the sequential and frozen_rubric regimes; the coevolve regime writes "
             "rubrics with the model being trained"),
            *((False, f"rewards.judge_weight is 0 and no rewards.extra entry has role {role}: its steps would all "
                     "earn 0") for role in self.trained_roles() if self.rewards.judge_weight == 0
              and not any(e.get("role", "policy") == role for e in self.rewards.extra)),
        ])
        return self

    def trained_roles(self) -> tuple[str, ...]:
        """The roles the run's optimizer steps train."""
        regime = self.schedule.regime
        return (*(("policy",) if regime != "rubric_only" else ()), *(("rubric",) if regime in WRITER_REGIMES else ()))

    @property
    def policy_tokens(self) -> int:
        """The policy's answer budget (``grpo.max_completion_length``, TRL's default when unset or null), the length of
        the answers the buffer stores."""
        return int(grpo_setting(self.grpo, "max_completion_length") or trl_default("max_completion_length"))

    @property
    def pair_answer_tokens(self) -> int:
        """The token budget of a pair's fresh answers (and of held-out answers): ``contrast.max_new_tokens``, or the
        policy's own."""
        return self.policy_tokens if self.contrast.max_new_tokens is None else self.contrast.max_new_tokens

    def temporal_pairs(self) -> bool:
        """Whether rubric steps compare a fresh answer with a stored one (temporal contrast, alone or mixed in)."""
        c = self.contrast
        return self.schedule.regime in WRITER_REGIMES and (
            c.pairs == "temporal" or (c.pairs == "combined" and c.combined_weights.get("temporal", 0) > 0))

    @property
    def total_steps(self) -> int:
        """Optimizer steps of the whole run (both roles)."""
        per_role = self.schedule.cycles * self.schedule.steps_per_phase
        return per_role if self.schedule.regime in ("frozen_rubric", "judge_only", "rubric_only") else 2 * per_role


# ============================================================================= checks
