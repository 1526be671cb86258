"""Every setting of a training run, as typed dataclasses, with the paper's values as defaults.

A run is described by one YAML file whose sections mirror ``RunConfig``; any field can be
overridden on the command line with a dotted ``key=value`` (``judge.mode=prob schedule.cycles=3``).
Unknown keys are errors. GRPO settings that EvoLM does not interpret live in the ``grpo`` mapping
and go to TRL's ``GRPOConfig`` unchanged, so TRL's documentation stays the reference for them.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import math
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evolm.errors import InputError

# ============================================================================= the names a setting may take
# Settings know no concept module: the choices a setting is validated against are listed here, and the modules that
# act on them (judge, rewards, contrast, models, ...) import them from here, never the reverse (tests/test_imports.py).

REGIMES = ("coevolve", "sequential", "frozen_rubric", "judge_only", "rubric_only")  # schedule.regime
JUDGE_MODES = ("generative", "prob", "yesno", "likert", "rar_implicit", "rar_explicit",
               "listwise")  # judge.mode with a judge model
REWARD_MODEL_MODE = "reward_model"  # judge.mode: a scalar sequence-classification reward model instead of a judge
SCORER_MODES = (*JUDGE_MODES, REWARD_MODEL_MODE)  # every judge.mode
JUDGE_PROMPTS = ("evolm", "reference")  # judge.prompt: evolm's wording or the authors'
JUDGE_PARSERS = ("evolm", "reference", "rb2")  # judge.parse: how a generative reply is read
REWARD_MODEL_READINGS = ("evolm", "reference")  # judge.reward_model_reading
OVERLONG = ("truncate", "refuse")  # judge.overlong: what happens to a prompt longer than the judge's context
JUDGE_SEEDS = ("same", "per_row")  # judge.seeds: every sampled judge request gets the run's seed, or seed + its row
BACKENDS = ("hf", "openai", "vllm")  # where a model runs: in-process transformers, an OpenAI-compatible server, vLLM
DTYPES = ("auto", "float32", "bfloat16", "float16")  # the weight types a user can name (CLI, config)
RUBRIC_PROMPTS = ("v3", "older")  # rubric.prompt: v3 (the paper's: 2-5 criteria) or older (5-10 criteria)
RUBRIC_REWARDS = ("binary", "margin_format", "separation")  # rubric.reward
INVALID_RUBRICS = ("judge_raw", "zero")  # rubric.invalid: what a rubric that does not parse gets
MULTI_JUDGE = ("majority_vote", "average_vote", "margin_kappa_format", "mean")  # judge.aggregate
MONITOR_ACTIONS = ("report", "mask", "stop")  # rewards.monitor: what the reward-hacking monitor may do
PAIR_BUILDERS = ("temporal", "rubric_conditioned", "inferred_question")  # contrast.combined_weights keys
PAIR_MODES = (*PAIR_BUILDERS, "combined", "labelled")  # contrast.pairs: one builder, or a weighted mix of them


def _f(default: Any, help: str, **kw: Any) -> Any:  # noqa: A002 - mirrors dataclasses' "help" metadata
    if isinstance(default, dict | list):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


@dataclass
class LoRAConfig:
    """A LoRA adapter trained instead of the full weights (PEFT); r=0: off (the paper trains every weight)."""

    r: int = _f(0, "LoRA rank (0: off, full fine-tuning as in the paper); both roles train the one adapter, the "
                "frozen base model is GRPO's KL reference, and checkpoints hold the adapter alone")
    alpha: int = _f(16, "LoRA scaling numerator: the update is scaled by alpha / r")
    dropout: float = _f(0.0, "dropout on the adapter's input during training")
    target_modules: list = _f(["all-linear"], "module names (or suffixes) that get an adapter; ['all-linear']: every "
                              "linear layer but the output head (PEFT)")


@dataclass
class ModelConfig:
    """The one model that plays both roles (policy and rubric writer)."""

    name: str = _f("Qwen/Qwen3-8B", "local dir, Hugging Face id, or built-in 'smollm2-135m-instruct' (paper: Qwen3-8B)")
    dtype: str = _f("auto", "auto (bf16 on GPU, fp32 on CPU), float32, bfloat16")
    system_prompt: str = _f("You are a helpful assistant.", "system prompt of the policy role (paper's)")
    chat_template_kwargs: dict = _f({}, "passed to the chat template, e.g. {enable_thinking: false} for Qwen3")
    lora: LoRAConfig = field(default_factory=LoRAConfig)


@dataclass
class JudgeConfig:
    """The small frozen judge that scores answers against rubrics."""

    # Parameters that control which model judges, and where
    model: str = _f("Qwen/Qwen3-1.7B", "judge model (paper: Qwen3-1.7B; small judges lean on the rubric)")
    mode: str = _f("yesno", "yesno (default: per criterion P(Yes), weighted by the rubric; one forward pass per "
                   "criterion, deterministic, never unreadable), generative (the paper's: per-criterion reasoning, "
                   "JSON score, sampled; configs/paper-qwen3-8b.yaml), prob (expected 0-9 digit, one forward pass), "
                   "listwise (not the paper's: all samples of a question listed in one prompt, an expected 0-9 digit "
                   "per answer, averaged over a shuffled order and its reverse); "
                   "baselines: likert (1-10, no rubric), rar_implicit (1-10 given the rubric), rar_explicit (binary "
                   "verdict per criterion), reward_model (a scalar sequence-classification reward model, regime "
                   "judge_only)")
    backend: str = _f("hf", "hf: in-process on the trainer's device; openai: an OpenAI-compatible server such as "
                      "`vllm serve` on its own GPUs (recommended at scale); vllm: in-process vLLM")

    # Parameters that control a judge server (backend=openai)
    base_url: str | list | None = _f(None, "server URL for backend=openai, e.g. http://judge-host:8000/v1; a list "
                                     "(or comma-separated URLs) of servers of the same model is a pool: each request "
                                     "goes to the least-loaded one, a failed one is retried on another")
    api_key_env: str = _f("OPENAI_API_KEY", "environment variable with the judge server's API key")
    timeout: float = _f(120.0, "backend=openai: seconds one request attempt may take in all (connect, wait, read "
                        "the whole reply; not per read)")
    max_retries: int = _f(2, "backend=openai: retries of a failed request (connection errors, timeouts, 408, 409, "
                          "429, 5xx); one request ends within (max_retries + 1) x timeout + 8 s per retry")
    deadline: float = _f(0.0, "backend=openai: seconds one request may take in all, retries, waits and endpoint "
                         "changes included (0: (max_retries + 1) x timeout + 8 s per retry)")
    max_concurrency: int = _f(32, "backend=openai: requests in flight at once to each judge server (per training "
                              "process); more keeps a big server busy, fewer protects a small one")
    requests_per_minute: float = _f(0.0, "backend=openai: requests per minute to each judge server from each "
                                    "training process (0: no limit; spread evenly, bursts of one second's worth), "
                                    "e.g. a hosted API's rate limit divided by the processes")
    tokens_per_minute: float = _f(0.0, "backend=openai: tokens per minute to each judge server from each training "
                                  "process (0: no limit); a request counts its characters / 3 + its reply budget "
                                  "until the server reports its usage")
    max_reply_mb: float = _f(8.0, "backend=openai: the most of one reply body read, in MiB after decompression; "
                             "a larger reply (a gzip bomb, an endless body) fails its request, one line, not retried")
    max_failure_share: float = _f(0.5, "training: a judge request that still fails after its retries is a missing "
                                  "score (its reward becomes the group mean: zero advantage, as the reference's NaN), "
                                  "counted per step as judge_failures; a step whose share of failed requests exceeds "
                                  "this stops the run with one line (evolm train --resume continues it). 1: never "
                                  "stop; 0: stop at the first failure. `evolm judge` / `eval` fail at the first "
                                  "failure unless given --judge-failures missing")

    # Parameters that control the generative judge's reply
    temperature: float = _f(0.6, "sampling temperature of the generative mode (paper: 0.6)")
    top_p: float = _f(0.95, "top-p of the generative mode (paper: 0.95)")
    max_new_tokens: int = _f(16384, "generation budget of the generative mode (paper: 16384, the judge thinks "
                             "first); a reply cut inside its thinking has no score")
    constrained: bool = _f(False, "decode the judge's reply under its JSON schema {reasoning, score} "
                           "(xgrammar on transformers, structured outputs on vLLM / OpenAI-compatible servers), so "
                           "every reply has a readable score; off in the paper config")
    seeds: str = _f("same", "seed of each sampled judge request: same (the reference: the run's seed on every request, "
                    "so the same question, rubric and answer get the same verdict and duplicate answers in a group "
                    "tie; on servers and vLLM, which seed each request) or per_row (seed + the row's place in its "
                    "batch: duplicates are sampled afresh, a departure)")

    # Parameters that control an in-process judge (backend=hf)
    batch_size: int = _f(16, "answers per forward pass for backend=hf")
    dtype: str = _f("auto", "judge weights for backend=hf: auto (float32 on every device: a score does not depend on "
                    "the answers batched beside it; bfloat16 is faster where the hardware computes it but moves "
                    "scores, docs/PERFORMANCE.md), float32, bfloat16, float16. In training a judge of the initial "
                    "model reads TRL's frozen reference copy instead, in the policy's dtype")

    # Parameters that control a prompt longer than the judge's context
    max_context: int = _f(0, "the judge's context in tokens (0: the model's own, from its config; a server's is not "
                          "known, so set it for backend=openai to guard there, prompts then estimated at 3 bytes per "
                          "token); a prompt leaving no room for the reply is handled per judge.overlong")
    overlong: str = _f("truncate", "a judge prompt longer than the context: truncate (cut from the middle of the "
                       "answer, said per row and in the summary) or refuse (an error naming the row)")

    # Parameters that control what the judge reads, and how its reply is read
    prompt: str = _f("evolm", "wording of the generative judge: evolm (its own instructions and worked examples) or "
                     "reference (the authors' prompt, texts cut as their code cuts them; the paper config, "
                     "docs/FIDELITY.md). `evolm judge --show-prompt` prints it")
    defences: bool = _f(True, "fence the answer as data, tell the judge to ignore instructions and scores written in "
                        "it and that length and polish earn nothing no criterion asks for; off only in the paper "
                        "config (the authors' prompt; docs/SECURITY.md). Chat markup stays neutralised either way")
    parse: str = _f("evolm", "reading of a generative reply: evolm (the first JSON object with a score after the "
                    "thinking, else 'score: x'; clipped to [0, 1]), reference (the authors' reading in training, not "
                    "clipped; the paper config, docs/FIDELITY.md) or rb2 (their evaluation judge's: the first "
                    "\"score\": x after the thinking; `evolm eval rb2 --protocol paper`)")
    reward_model_reading: str = _f("evolm", "mode=reward_model: evolm (the raw logit of the answer, thinking "
                                   "stripped) or reference (the authors' 10 x sigmoid(logit), thinking kept; "
                                   "configs/baselines/skywork-rm.yaml, docs/FIDELITY.md)")
    chat_template_kwargs: dict = _f({"enable_thinking": True},
                                    "judge chat-template kwargs (paper: Qwen3 thinking on; the probability modes read "
                                    "the score after a closed think block either way)")

    # Parameters that control reusing judge results
    cache: int = _f(10_000, "judge results kept (LRU, per judge): an answer judged before under the same question, "
                    "rubric, judge settings and prompt wording is not sent again, and identical completions of a step "
                    "are judged once (evolm.judge.cache); a sampled generative judge then reuses its first sample. 0: "
                    "off (the paper config: the authors re-judge every completion); mode=listwise never caches (a "
                    "score there depends on the whole group)")
    cache_mb: float = _f(256.0, "MiB the judge results kept may take, at most (least recently used dropped first): "
                         "a generative result keeps its reasoning (up to about 64 KB), so the entry bound alone could "
                         "reach gigabytes")

    # Parameters that control several judges
    extra_models: list = _f([], "more judges for multi-judge training (their scores are aggregated)")
    aggregate: str = _f("majority_vote", "with extra_models, a rubric's reward from the judges' votes on its pair "
                        "(reference): majority_vote, average_vote, margin_kappa_format (0.5 margin + 0.3 format + 0.2 "
                        "Fleiss kappa), or mean (mean scores, then rubric.reward); policy scores are averaged")


@dataclass
class RubricConfig:
    """The rubric role: how rubrics are written and rewarded."""

    # Parameters that control the rubric reward
    reward: str = _f("margin_format", "binary (workshop), margin_format (paper main run: 0.7 margin + 0.3 "
                     "format), separation")
    invalid: str = _f("judge_raw", "a rubric that does not parse: judge_raw (reference: the judge reads its raw "
                      "text in both roles; the format term does the rest) or zero (reward 0 in the rubric role, "
                      "judge alone in the policy role)")

    # Parameters that control how rubrics are written
    prompt: str = _f("v3", "the rubric prompt in both roles and in held-out evaluation: v3 (the paper's: 2-5 criteria, "
                     "a dealbreaker allowed for short verifiable answers) or older (the authors' older prompt: 5-10 "
                     "criteria); both in evolm's words (docs/FIDELITY.md)")
    temperature: float = _f(0.6, "temperature when writing the rubric shared by a policy question's samples")
    top_p: float = _f(0.95, "top-p when writing that rubric (paper: 0.95)")
    max_new_tokens: int = _f(16384, "token budget for writing a rubric for the policy phase (thinking included)")
    constrained: bool = _f(False, "decode every rubric the model writes (policy-step rubrics, rubric-step samples, "
                           "held-out evaluation) under the rubric JSON schema (2-5 criteria with criterion, weight, "
                           "scoring_levels): xgrammar on transformers, structured outputs on vLLM. Off in the paper "
                           "config; GRPO then takes log-probs under the unconstrained model (docs/FIDELITY.md)")
    max_criteria: int = _f(5, "rubric.constrained: the most criteria the rubric grammar lets a rubric have (2-5; the "
                           "prompt asks for 2-5). Fewer bound a rubric's length (a criterion is up to ~95 tokens), "
                           "so a smaller rubric.max_new_tokens / grpo.max_completion_length still holds whole rubrics")

    # Parameters that control a fixed writer (frozen_rubric regime)
    writer: str | None = _f(None, "frozen_rubric regime: the fixed writer (model dir/id, or a served model name "
                            "with writer_backend=openai, e.g. gpt-4.1); default: the untrained base model")
    writer_backend: str = _f("hf", "backend of the fixed writer: hf or openai")
    writer_base_url: str | None = _f(None, "server URL of the fixed writer for writer_backend=openai")
    writer_timeout: float = _f(120.0, "writer_backend=openai: seconds one request attempt may take in all")
    writer_max_retries: int = _f(2, "writer_backend=openai: retries of a failed request")
    writer_temperature: float | None = _f(None, "rubric.writer's temperature (none: rubric.temperature); the "
                                          "reference's API writer (GPT-4.1): 0")
    writer_top_p: float | None = _f(None, "rubric.writer's top-p (none: rubric.top_p); the reference's API writer: 1.0")
    writer_max_new_tokens: int | None = _f(None, "rubric.writer's token budget (none: rubric.max_new_tokens); the "
                                           "reference's API writer: 800")
    writer_fallback: str | None = _f(None, "writer_backend=openai: a model at the same endpoint that writes the rubric "
                                     "of a request still failing after its retries (the reference's API writer: "
                                     "gpt-4.1-mini, through litellm's fallbacks); none: the failure stops the run")


@dataclass
class ContrastConfig:
    """Temporal contrast: where the (better, worse) answer pairs for rubric training come from."""

    # Parameters that control where the pairs come from
    pairs: str = _f("temporal", "temporal (default: fresh answer vs one from min_age..max_age policy steps ago), "
                    "rubric_conditioned, inferred_question, combined, or labelled (data.pairs: human/GPT-4 "
                    "labelled chosen/rejected pairs, the sanity check of rubric learning)")
    combined_weights: dict = _f({"temporal": 0.5, "rubric_conditioned": 0.25, "inferred_question": 0.25},
                                "mix of builders for pairs=combined")

    # Parameters that control the replay buffer and its age window
    buffer_size: int = _f(2048, "replay buffer entries (oldest dropped first; reference: 2048)")
    min_age: int = _f(20, "youngest stored answer usable as the worse answer, in policy steps (reference: 20)")
    max_age: int = _f(100, "oldest stored answer usable, in policy steps (reference: 100)")

    # Parameters that control the fresh (better) answer, and who writes it
    temperature: float = _f(1.0, "sampling temperature of the fresh (better) answer (reference: 1.0)")
    max_new_tokens: int = _f(16384, "token budget of the fresh answer")
    answerer: str | None = _f(None, "a fixed model that writes the pairs' answers (a frozen policy); default: the "
                              "model being trained. The sequential regime's writer stage uses the base model")
    answerer_backend: str = _f("hf", "backend of the fixed answerer: hf, openai (e.g. `vllm serve` of the base "
                               "model) or vllm")
    answerer_base_url: str | None = _f(None, "server URL of the fixed answerer for answerer_backend=openai")


@dataclass
class ScheduleConfig:
    """How the two roles alternate."""

    regime: str = _f("coevolve", "coevolve: K policy then K rubric steps per cycle; sequential: all rubric "
                     "steps, then all policy steps with the rubric writer frozen; frozen_rubric: policy steps "
                     "only, rubrics from a fixed writer (the paper's prompted-rubric and RaR baselines); judge_only: "
                     "policy steps only, no rubric: the judge alone (Direct-Likert with judge.mode=likert) or a "
                     "scalar reward model (judge.mode=reward_model, the paper's Skywork baseline); rubric_only: "
                     "rubric steps only, answers from a frozen policy (contrast.answerer, default the base model)")
    cycles: int = _f(10, "number of cycles (paper: 10)")
    steps_per_phase: int = _f(50, "K, optimizer steps per phase (paper: 50)")
    prompts_per_step: int = _f(64, "questions per optimizer step, over all processes (paper: 64)")
    samples_per_prompt: int = _f(8, "GRPO group size (paper: 8)")
    save_every: int = _f(25, "checkpoint every N steps, besides every phase end (paper: 25)")
    samples_logged_per_step: int = _f(0, "rows per step written to samples/*.jsonl (0: all)")


@dataclass
class DataConfig:
    """Training prompts (only prompts are used, never labels)."""

    prompts: str = _f("builtin:demo", "JSONL with a 'prompt' field per line, or builtin:demo (shipped set)")
    limit: int = _f(0, "use only the first N prompts (0: all)")
    max_prompt_tokens: int = _f(0, "skip a prompt whose training prompt (the longer of the policy's and the rubric "
                                "writer's conversation, in the model's chat template) is longer than this many tokens; "
                                "counted and reported at the start of the run and by the dry run (0: keep every "
                                "prompt). A prompt longer than vLLM's context (grpo.vllm_max_model_length) stops the "
                                "run on the process that holds it")
    pairs: str | None = _f(None, "contrast.pairs=labelled: JSONL of {prompt, chosen, rejected} pairs (also accepts "
                           "the pair files `evolm eval pairs` reads)")


@dataclass
class EvalConfig:
    """Held-out evaluation during training, logged to metrics.jsonl with the current weights."""

    pairs: str | None = _f(None, "JSONL of held-out {prompt, chosen, rejected} pairs: the judge's pairwise accuracy "
                           "with the current writer's rubrics")
    questions: str | None = _f(None, "JSONL with a 'prompt' per line: held-out questions for rubric validity and "
                               "the policy's mean judge score under a fixed evaluation rubric set (written once by "
                               "the initial writer, saved as eval_rubrics.jsonl in the run)")
    every: int = _f(0, "evaluate every N optimizer steps, before the first step and at the end (0: only before "
                    "the first step and at the end when pairs or questions are set)")
    limit: int = _f(0, "use only the first N held-out pairs and N questions (0: all)")


@dataclass
class RewardsConfig:
    """Reward functions besides the judge, added to the policy's reward (off in the paper)."""

    extra: list = _f([], "TRL-style reward functions added to the policy reward on policy steps (rubric steps are "
                     "untouched): a list of {name, weight, kwargs}. name: an import path (trl.rewards.get_soft_"
                     "overlong_punishment, mypkg.mod:fn), resolved when the config loads. With kwargs (even {}) name "
                     "is a factory, called once as name(**kwargs), that returns the reward function; without, name is "
                     "the reward function. It gets prompts, completions, completion_ids and the row columns as TRL "
                     "passes them and returns one float per completion (None: no reward). Policy reward = judge "
                     "reward (missing: its group's mean) + sum of weight x value; each term's mean is logged per step")
    drop_flat_criteria: bool = _f(False, "policy steps, judge.mode yesno: each answer's score re-weighted over the "
                                  "criteria that separate its group's answers (a criterion whose P(Yes) spans less "
                                  "than 0.05 across the group is dropped from the weighting). Off in the paper; the "
                                  "share of such criteria is logged per step either way (flat_criteria)")
    monitor: str = _f("report", "what the reward-hacking monitor (training.monitor) does on policy steps: report (only "
                      "log its signals; the paper has no monitor), mask (also drop the judge reward of each answer it "
                      "flags, a score string or a copy of the rubric: that answer gets its group's mean, zero "
                      "advantage), stop (end the run at a policy step whose flagged share reaches monitor_stop_share "
                      "or whose length_drift passes 2; the last checkpoint stays)")
    monitor_stop_share: float = _f(0.5, "monitor=stop: the share of a policy step's answers flagged (score string or "
                                   "rubric copy) that ends the run")


@dataclass
class RunConfig:
    """A whole EvoLM run."""

    output_dir: str = _f("runs/evolm", "run directory: config, checkpoints, buffer, metrics, samples")
    seed: int = _f(0, "seed of everything random in the run")
    model: ModelConfig = field(default_factory=ModelConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    rubric: RubricConfig = field(default_factory=RubricConfig)
    contrast: ContrastConfig = field(default_factory=ContrastConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    grpo: dict = _f(
        {"learning_rate": 1e-6, "lr_scheduler_type": "constant", "beta": 0.001, "epsilon": 0.2, "loss_type": "grpo",
         "temperature": 1.0, "top_p": 0.95, "max_completion_length": 16384, "per_device_train_batch_size": 8,
         "bf16": True, "gradient_checkpointing": True, "use_vllm": True, "vllm_mode": "colocate"},
        "passed to trl.GRPOConfig as is (learning_rate, beta = KL coefficient with TRL's k3 estimator, epsilon "
        "= clip, loss_type = grpo: masked mean per sequence then mean, the reference's, use_vllm, ...); EvoLM "
        "sets num_generations, batch sizes, max_steps, saving and logging itself",
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def total_steps(self) -> int:
        """Optimizer steps of the whole run (both roles)."""
        per_role = self.schedule.cycles * self.schedule.steps_per_phase
        return per_role if self.schedule.regime in ("frozen_rubric", "judge_only", "rubric_only") else 2 * per_role


# ============================================================================= settings resolved into values
# A base_url setting names one or more servers; a rewards.extra entry names a function by its import path.


def endpoint_urls(base_url: str | Sequence[str] | None) -> list[str | None]:
    """The endpoints a ``base_url`` setting names: a URL, comma-separated URLs, or a list of either.

    ``None`` is one endpoint, the ``openai`` client's default.

    >>> endpoint_urls("http://a:8000/v1, http://b:8000/v1/")
    ['http://a:8000/v1', 'http://b:8000/v1/']
    >>> endpoint_urls(["http://a/v1", "http://b/v1,http://c/v1"]), endpoint_urls(None)
    (['http://a/v1', 'http://b/v1', 'http://c/v1'], [None])
    """
    if base_url is None:
        return [None]
    parts = [base_url] if isinstance(base_url, str) else list(base_url)
    return [url.strip() for part in parts for url in str(part).split(",") if url.strip()]


@dataclass(frozen=True)
class ExtraReward:
    """A TRL-style reward function added, times ``weight``, to the policy's reward (``rewards.extra``)."""

    label: str  # its name in the logs: the function's ``__name__`` (made unique within the run)
    weight: float
    fn: Callable[..., Sequence[Any]]


def extra_rewards(entries: Sequence[Any]) -> list[ExtraReward]:
    """``rewards.extra`` resolved: each ``{name, weight, kwargs}`` imported (and its factory called).

    ``name`` is an import path, ``pkg.mod.attr`` or ``pkg.mod:attr``; ``weight`` defaults to 1. The
    ``kwargs`` convention: an entry *with* ``kwargs`` (a mapping, ``{}`` included) names a factory, called
    once here as ``name(**kwargs)``, whose result is the reward function (TRL's
    ``get_soft_overlong_punishment(max_completion_len, soft_punish_cache)``, ``get_repetition_penalty_reward``);
    an entry without names the reward function itself (TRL's ``think_format_reward``). A reward function
    must take ``**kwargs``: TRL's contract passes every row column as a keyword. A bad entry, a failed
    import or factory call, or a result that is no such function is a one-line ``InputError``.

    >>> soft = {"name": "trl.rewards.get_soft_overlong_punishment", "weight": 0.5,
    ...         "kwargs": {"max_completion_len": 10, "soft_punish_cache": 4}}
    >>> [(e.label, e.weight, e.fn(completion_ids=[[1] * 6, [1] * 8])) for e in extra_rewards([soft])]
    [('soft_overlong_punishment_reward', 0.5, [0.0, -0.5])]
    """
    if not isinstance(entries, list | tuple):
        raise InputError("rewards.extra must be a list of {name, weight, kwargs} entries")
    out: list[ExtraReward] = []
    for i, entry in enumerate(entries):
        where = f"rewards.extra[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
            raise InputError(f"{where} must be a mapping with a 'name' (an import path such as mypkg.mod:fn)")
        if set(entry) - {"name", "weight", "kwargs"}:
            raise InputError(f"{where}: unknown key '{sorted(set(entry) - {'name', 'weight', 'kwargs'})[0]}' "
                             "(known: name, weight, kwargs)")
        name, weight, kwargs = entry["name"].strip(), entry.get("weight", 1.0), entry.get("kwargs")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            raise InputError(f"{where}: weight must be a finite number, not {weight!r}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise InputError(f"{where}: kwargs must be a mapping of the factory's arguments, not {kwargs!r}")
        fn = _import(name, where)
        if kwargs is not None:
            try:
                fn = fn(**kwargs)
            except Exception as e:  # noqa: BLE001 - any failure of the user's factory is a config error
                raise InputError(f"{where}: {name}(**kwargs) failed: {_first_line(e)}") from None
        _check_reward_fn(fn, name, where)
        label = str(getattr(fn, "__name__", "") or name.replace(":", ".").rsplit(".", 1)[-1])
        taken = {e.label for e in out}
        if label in taken:
            label = next(f"{label}_{k}" for k in range(2, len(taken) + 3) if f"{label}_{k}" not in taken)
        out.append(ExtraReward(label, float(weight), fn))
    return out


def _import(path: str, where: str) -> Any:
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise InputError(f"{where}: '{path}' is not an import path (pkg.mod.fn or pkg.mod:fn)")
    try:
        obj = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - a missing package or a module that fails to import
        raise InputError(f"{where}: cannot import {module} ({_first_line(e)})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(f"{where}: {module} has no '{attr}'")
        obj = getattr(obj, part)
    return obj


def _check_reward_fn(fn: Any, name: str, where: str) -> None:
    if not callable(fn):
        raise InputError(f"{where}: {name} is not callable (a factory's result must be a reward function)")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        raise InputError(f"{where}: {name} is async; rewards.extra takes plain functions")
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return  # a builtin without a signature: its first call will tell
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        raise InputError(f"{where}: {name} does not take **kwargs (TRL passes every row column as a keyword); if it "
                         "is a factory, give its arguments as kwargs: {...}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{e.__class__.__name__}: {text[0]}" if text else e.__class__.__name__


def evolm_grpo_settings(cfg: RunConfig, num_processes: int = 1) -> dict[str, Any]:
    """The ``GRPOConfig`` keywords evolm sets itself, from the schedule, the seed and the output_dir.

    These are what make one TRL generation batch exactly one optimizer step of one role, in plan
    order; ``validate`` refuses them in ``grpo:`` (the set is derived from this function, so a new
    keyword here is reserved there too).
    """
    s = cfg.schedule
    rows_per_step = s.prompts_per_step * s.samples_per_prompt
    per_device = int(cfg.grpo.get("per_device_train_batch_size", 8))
    accum = max(1, rows_per_step // max(1, per_device * num_processes))
    return {
        "output_dir": str(Path(cfg.output_dir) / "checkpoints"),
        "num_generations": s.samples_per_prompt,
        "gradient_accumulation_steps": accum,
        "steps_per_generation": accum,  # one generation batch == one optimizer step == one step of one role
        "generation_batch_size": None,
        "num_iterations": 1,  # one update per batch (paper); >1 would reuse a step's rows across plan steps
        "max_steps": cfg.total_steps,
        "shuffle_dataset": False,  # the dataset is the plan, read in order
        "remove_unused_columns": False,  # the reward reads the rows' evolm columns
        "save_strategy": "steps",
        "save_steps": s.save_every,
        "logging_strategy": "steps",
        "logging_steps": 1,
        "seed": cfg.seed,
        "disable_tqdm": True,  # evolm shows its own progress per step
        "chat_template_kwargs": dict(cfg.model.chat_template_kwargs) or None,
    }


def batch_error(cfg: RunConfig, num_processes: int) -> str | None:
    """Why the batch arithmetic fails for ``num_processes`` processes, or ``None``."""
    s = cfg.schedule
    rows_per_step = s.prompts_per_step * s.samples_per_prompt
    per_device = cfg.grpo.get("per_device_train_batch_size", 8)
    if not isinstance(per_device, int) or isinstance(per_device, bool) or per_device < 1:
        return f"grpo.per_device_train_batch_size must be an integer >= 1, not {per_device!r}"
    if rows_per_step % (per_device * num_processes):
        return (f"schedule.prompts_per_step x schedule.samples_per_prompt ({rows_per_step}) must be a multiple of "
                f"grpo.per_device_train_batch_size x processes ({per_device} x {num_processes})")
    return None


def grpo_errors(grpo: dict[str, Any]) -> list[str]:
    """Why ``grpo:`` would not make the installed TRL's ``GRPOConfig``: unknown keys and values of the wrong type.

    Read from the installed TRL's dataclass fields and their type hints, so the dry run and the real
    launch (``trl_adapter.check_launch``) refuse the same keys. A value is accepted when it matches one
    member of the field's type (an int where a float is expected; text where an enum is; anything where
    the hint is a class evolm does not know); TRL's own ``__post_init__`` checks stay TRL's.
    """
    import difflib
    from importlib.metadata import version

    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    names = [f.name for f in dataclasses.fields(GRPOConfig)]
    errors = []
    for key, value in grpo.items():
        if key not in hints:
            near = difflib.get_close_matches(key, names, n=1)
            errors.append(f"grpo.{key} is not a TRL GRPOConfig setting (trl {version('trl')})"
                          + (f": did you mean grpo.{near[0]}?" if near else ""))
        elif (wanted := _type_error(hints[key], value)) is not None:
            errors.append(f"grpo.{key} must be {wanted}, not {value!r}")
    return errors


def _type_error(hint: Any, value: Any) -> str | None:
    """What ``value`` should be for type ``hint`` (``"a number"``, ``"true or false"``...), or None if it fits."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, type(int | None)) else (hint,)
    kinds = {typing.get_origin(a) or a for a in args}
    if value is None:
        return None if type(None) in kinds else "set (null is not allowed)"
    if any(k is typing.Any or k is typing.Literal or not isinstance(k, type) for k in kinds):
        return None
    if isinstance(value, bool):
        return None if bool in kinds else _wanted(kinds)
    if isinstance(value, int | float):
        ok = float in kinds or (isinstance(value, int) and int in kinds)
        return None if ok else _wanted(kinds)
    if isinstance(value, str):  # text is also how YAML writes an enum member (SchedulerType, IntervalStrategy)
        return None if str in kinds or any(issubclass(k, enum.Enum) for k in kinds) else _wanted(kinds)
    if isinstance(value, list | dict):
        return None if type(value) in kinds else _wanted(kinds)
    return None


def _wanted(kinds: set[type]) -> str:
    if kinds & {int, float} and not kinds & {str, bool}:
        return "a number" if float in kinds else "an integer"
    if bool in kinds and not kinds & {str, int, float}:
        return "true or false"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "text", list: "a list",
             dict: "a mapping"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds if k is not type(None)))


def sequential_stages(cfg: RunConfig, writer_checkpoint: str | None = None) -> tuple[RunConfig, RunConfig]:
    """The paper's sequential baseline as two runs with two weight sets (docs/METHOD.md §2.5).

    Stage 1 trains the rubric writer (``rubric_only``: cycles x K rubric steps) while the policy is
    frozen: the pairs' answers come from ``contrast.answerer`` (default: the base model). Stage 2
    trains the policy from the *base* weights (``frozen_rubric``: cycles x K policy steps) with
    rubrics from stage 1's final checkpoint, frozen. Each stage is a run directory of its own under
    ``output_dir`` (``stage1-writer``, ``stage2-policy``).
    """
    import copy

    out = Path(cfg.output_dir)
    writer = copy.deepcopy(cfg)
    writer.output_dir, writer.schedule.regime = str(out / "stage1-writer"), "rubric_only"
    writer.contrast.answerer = cfg.contrast.answerer or cfg.model.name
    policy = copy.deepcopy(cfg)
    policy.output_dir, policy.schedule.regime = str(out / "stage2-policy"), "frozen_rubric"
    policy.rubric.writer, policy.rubric.writer_backend, policy.rubric.writer_base_url = writer_checkpoint, "hf", None
    return writer, policy


def launch_errors(cfg: RunConfig, num_processes: int) -> list[str]:
    """Every constraint that can be checked without a model, for ``num_processes`` training processes."""
    from urllib.parse import urlparse

    errors = [e for e in [batch_error(cfg, num_processes)] if e] + path_errors(cfg)
    s, c = cfg.schedule, cfg.contrast
    if s.regime in ("coevolve",) and c.pairs in ("temporal", "combined") \
            and c.buffer_size < s.prompts_per_step * (c.min_age + 1):
        errors.append(f"contrast.buffer_size ({c.buffer_size}) cannot hold answers {c.min_age} policy steps old "
                      f"({s.prompts_per_step} questions per step x {c.min_age + 1} steps): raise it or lower "
                      "contrast.min_age")
    for name, backend, url in (*[("judge", cfg.judge.backend, u) for u in endpoint_urls(cfg.judge.base_url) if u],
                               ("rubric.writer", cfg.rubric.writer_backend, cfg.rubric.writer_base_url)):
        if url is not None:
            u = urlparse(url)
            if u.scheme not in ("http", "https") or not u.netloc:
                errors.append(f"{name} base_url '{url}' is not an http(s)://host[:port]/path URL")
            if backend != "openai" and (e := f"{name} base_url is set but its backend is '{backend}' (a URL needs "
                                               "backend openai)") not in errors:  # once for a pool of URLs
                errors.append(e)
    if cfg.contrast.answerer_base_url is not None and cfg.contrast.answerer_backend != "openai":
        errors.append("contrast.answerer_base_url is set but contrast.answerer_backend is not openai")
    if cfg.rubric.writer is not None and s.regime == "coevolve":
        errors.append("rubric.writer is a fixed writer for the sequential and frozen_rubric regimes; the coevolve "
                      "regime writes rubrics with the model being trained")
    for name, path in (("data.pairs", cfg.data.pairs if c.pairs == "labelled" else None),
                       ("eval.pairs", cfg.eval.pairs), ("eval.questions", cfg.eval.questions)):
        if path and not Path(path).is_file():
            errors.append(f"{name}: no such file {path} (a relative path is read from the directory evolm runs in)")
    return errors


def writer_sampling(cfg: RunConfig) -> dict[str, Any]:
    """``rubric.writer``'s sampling (``SamplingParams`` fields): ``rubric.writer_*``, else ``rubric.*`` (a frozen base
    model writes as the trained one does: ``rubric.*``); no chat-template kwargs (the policy model's are not its)."""
    r = cfg.rubric
    if r.writer is None:
        return {"temperature": r.temperature, "top_p": r.top_p, "max_new_tokens": r.max_new_tokens}
    return {"temperature": r.temperature if r.writer_temperature is None else r.writer_temperature,
            "top_p": r.top_p if r.writer_top_p is None else r.writer_top_p,
            "max_new_tokens": r.max_new_tokens if r.writer_max_new_tokens is None else r.writer_max_new_tokens,
            "chat_template_kwargs": {}}


def fixed_model_spec(cfg: RunConfig, role: str) -> tuple[str, dict[str, Any]]:
    """The model of a fixed ``writer`` (``rubric.writer``) or ``answerer`` (``contrast.answerer``), default the model
    being trained, and its ``models.load_backend`` settings."""
    r, c = cfg.rubric, cfg.contrast
    name, backend, url = (r.writer, r.writer_backend, r.writer_base_url) if role == "writer" else \
        (c.answerer, c.answerer_backend, c.answerer_base_url)
    return name or cfg.model.name, {"backend": backend, "base_url": url, "dtype": cfg.model.dtype,
                                    "timeout": r.writer_timeout, "max_retries": r.writer_max_retries,
                                    "fallback_model": r.writer_fallback if role == "writer" else None}


def launch_plan(cfg: RunConfig, num_processes: int) -> list[tuple[str, str]]:
    """What a launch with ``num_processes`` processes will do, as (item, value) rows."""
    s = cfg.schedule
    per_role = s.cycles * s.steps_per_phase
    labelled = cfg.contrast.pairs == "labelled"
    pairs_from = "labelled pairs from data.pairs" if labelled else "answers from a frozen policy"
    roles = {"coevolve": f"{per_role} policy + {per_role} rubric, alternating",
             "sequential": f"{per_role} rubric, then {per_role} policy",
             "frozen_rubric": f"{per_role} policy (rubrics from a fixed writer)",
             "judge_only": f"{per_role} policy (no rubric: the judge or reward model alone)",
             "rubric_only": f"{per_role} rubric ({pairs_from})"}[s.regime]
    per_device = cfg.grpo.get("per_device_train_batch_size", 8)
    settings = evolm_grpo_settings(cfg, num_processes)
    rows = s.prompts_per_step * s.samples_per_prompt
    max_len = cfg.grpo.get("max_completion_length", 256)
    heldout = ", ".join(f for f in (cfg.eval.pairs, cfg.eval.questions) if f)
    every = f", every {cfg.eval.every} steps" if cfg.eval.every else ""
    lora = cfg.model.lora
    return [
        ("regime", s.regime),
        ("optimizer steps", f"{cfg.total_steps}: {roles}"),
        ("per cycle", f"{s.steps_per_phase} steps per phase, {2 if s.regime == 'coevolve' else 1} phase(s); "
                      f"{s.cycles} cycles"),
        ("rows per step", f"{s.prompts_per_step} questions x {s.samples_per_prompt} samples = {rows}"),
        ("processes x micro-batch", f"{num_processes} x {per_device}"),
        ("gradient accumulation", str(settings["gradient_accumulation_steps"])),
        ("rows per process", f"{rows // num_processes} per step: {settings['gradient_accumulation_steps']} "
                             f"micro-batches of {per_device}"),
        ("completion tokens per step", f"at most {rows * max_len:,} ({rows} x {max_len})"),
        ("checkpoints", f"every {s.save_every} steps and at each phase end, in {settings['output_dir']}"),
        ("importance sampling", importance_sampling_rule(cfg.grpo)),
        ("judge", f"{cfg.judge.model} ({cfg.judge.mode}, {cfg.judge.backend}"
                  + (f" at {', '.join(u for u in endpoint_urls(cfg.judge.base_url) if u)})"
                     if cfg.judge.base_url else ")")),
    ] + ([("rubric writer", _writer_row(cfg))] if s.regime == "frozen_rubric" else []) \
      + ([("held-out evaluation", f"{heldout}: before step 1{every} and after the last step")] if heldout else []) \
      + ([("LoRA", f"rank {lora.r}, alpha {lora.alpha} on {', '.join(lora.target_modules)}: checkpoints hold the "
                   "adapter alone")] if lora.r > 0 else []) \
      + ([("extra policy rewards", ", ".join(f"{e.get('weight', 1.0)} x {e['name']}" for e in cfg.rewards.extra))]
         if cfg.rewards.extra else []) \
      + ([("vLLM per step", plan)] if (plan := vllm_plan(cfg)) else [])


def vllm_plan(cfg: RunConfig) -> str | None:
    """The vLLM work of a step with ``grpo.use_vllm``: evolm's generate calls per role before TRL's own, and the
    weight syncs (``trl_adapter`` contract item 4; metrics.jsonl logs both per step)."""
    g, s, c = cfg.grpo, cfg.schedule, cfg.contrast
    if not g.get("use_vllm"):
        return None
    policy = {"coevolve": "1 (its rubrics)", "judge_only": "0", "sequential": "0 (the writer stage's checkpoint)",
              "frozen_rubric": "0 (a fixed writer)" if cfg.rubric.writer else "1 on the first (the frozen rubrics), 0 "
              "after"}.get(s.regime)
    # the pairs' answers come from a fixed model, not vLLM (sequential: the base model, config.sequential_stages)
    fixed = (bool(c.answerer) or s.regime == "sequential") and c.pairs != "labelled"
    rubric = "0" if c.pairs == "labelled" else {
        "temporal": "0, or 1 while the buffer is empty" if fixed else "1 (fresh answers), 2 while the buffer is empty",
        "rubric_conditioned": "1" if fixed else "2", "inferred_question": "0" if fixed else "3",
        "combined": "up to 1" if fixed else "up to 6"}[c.pairs]
    roles = [f"policy steps {policy}" if s.regime != "rubric_only" and policy else "",
             f"rubric steps {rubric}" if s.regime in ("coevolve", "rubric_only", "sequential") else ""]
    calls = "; ".join(r for r in roles if r)
    if g.get("vllm_mode", "colocate") == "colocate" and g.get("vllm_enable_sleep_mode"):
        syncs = ("1 per step: evolm wakes the sleeping engine once for its calls and TRL's generation puts it back "
                 "to sleep (sleep level 2 drops the weights: one sync per call otherwise)")
    else:
        syncs = "1 per step, after the update"
    heldout = ", and 1 more after a held-out evaluation (eval.*)" if cfg.eval.pairs or cfg.eval.questions else ""
    return f"evolm's generate calls before TRL's: {calls}; weight syncs: {syncs}{heldout}"


def _writer_row(cfg: RunConfig) -> str:
    """The fixed writer of a frozen_rubric run and how it samples, for the dry run."""
    r = cfg.rubric
    temperature, top_p, tokens = (writer_sampling(cfg)[k] for k in ("temperature", "top_p", "max_new_tokens"))
    who = f"{r.writer} ({r.writer_backend})" if r.writer else f"{cfg.model.name} (the base model, frozen)"
    served = (f", {r.writer_max_retries} retries of {r.writer_timeout:g} s, fallback {r.writer_fallback or 'none'}"
              if r.writer and r.writer_backend == "openai" else "")
    return f"{who}: temperature {temperature:g}, top-p {top_p:g}, up to {tokens:,} tokens{served}"


def importance_sampling_rule(grpo: dict[str, Any]) -> str:
    """How TRL corrects the gap between vLLM's sampling log-probs and the trainer's, from the ``grpo`` settings.

    The reference's rule: per token, exp(trainer - vLLM log-prob) truncated at 2.0, multiplying the
    policy-gradient term only (TRL: ``vllm_importance_sampling_mode: token_truncate``,
    ``vllm_importance_sampling_clip_max: 2.0``). TRL's default masks whole sequences whose product of
    ratios leaves [0, 3.0]. ``use_bias_correction_kl`` (TRL's default true) also multiplies the KL term
    by the policy ratio, which changes its gradient; the reference's k3 term has no such factor.

    >>> rule = importance_sampling_rule({"use_vllm": True, "vllm_importance_sampling_mode": "token_truncate",
    ...                                  "vllm_importance_sampling_clip_max": 2.0, "use_bias_correction_kl": False})
    >>> import textwrap
    >>> print(textwrap.fill(rule, 100))
    per token, ratio exp(trainer - vLLM log-prob) truncated at 2.0, on the policy-gradient term only
    (the reference's rule); KL term: k3, no ratio
    """
    if not grpo.get("use_vllm", False):
        return "none: generation in the trainer, no vLLM/trainer log-prob gap to correct"
    if not grpo.get("vllm_importance_sampling_correction", True):
        return "off (grpo.vllm_importance_sampling_correction: false)"
    mode = grpo.get("vllm_importance_sampling_mode", "sequence_mask")
    high = grpo.get("vllm_importance_sampling_clip_max", grpo.get("vllm_importance_sampling_cap", 3.0))
    low = grpo.get("vllm_importance_sampling_clip_min")
    level, how = mode.split("_", 1) if "_" in mode else (mode, "?")
    where = "per token, ratio" if level == "token" else "per sequence, product of token ratios"
    bounds = f"[{low}, {high}]" if low is not None else f"{high}"
    rule = (f"{where} exp(trainer - vLLM log-prob) truncated at {bounds}" if how == "truncate" else
            f"{where} exp(trainer - vLLM log-prob); outside {bounds if low is not None else f'[0, {high}]'} set to 0")
    reference = " (the reference's rule)" if (mode, high, low) == ("token_truncate", 2.0, None) else \
        " (the reference: per token, truncated at 2.0)"
    kl = "k3 x policy ratio (use_bias_correction_kl)" if grpo.get("use_bias_correction_kl", True) else "k3, no ratio"
    return f"{rule}, on the policy-gradient term only{reference}; KL term: {kl}"


def _sampling_checks(section: str, temperature: float, top_p: float | None, max_new_tokens: int
                     ) -> list[tuple[bool, str]]:
    return [(math.isfinite(temperature) and temperature >= 0,
             f"{section}.temperature must be a finite number >= 0 (0: greedy), not {temperature}"),
            (top_p is None or 0 < top_p <= 1, f"{section}.top_p must be in (0, 1], not {top_p}"),
            (max_new_tokens >= 1, f"{section}.max_new_tokens must be >= 1, not {max_new_tokens}")]


# Ranges of the numeric grpo.* settings evolm knows the meaning of (every number there must also be finite).
_GRPO_RANGES: dict[str, tuple[Any, str]] = {
    "learning_rate": (lambda v: v > 0, "> 0"),
    "beta": (lambda v: v >= 0, ">= 0 (0: no KL term)"),
    "epsilon": (lambda v: v >= 0, ">= 0"),
    "epsilon_high": (lambda v: v >= 0, ">= 0"),
    "delta": (lambda v: v > 0, "> 0"),
    "temperature": (lambda v: v > 0, "> 0"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "top_k": (lambda v: v >= 0, ">= 0"),
    "min_p": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "repetition_penalty": (lambda v: v > 0, "> 0"),
    "max_completion_length": (lambda v: v >= 1, ">= 1"),
    "max_prompt_length": (lambda v: v >= 1, ">= 1"),
    "weight_decay": (lambda v: v >= 0, ">= 0"),
    "max_grad_norm": (lambda v: v >= 0, ">= 0"),
    "warmup_ratio": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "warmup_steps": (lambda v: v >= 0, ">= 0"),
    "adam_beta1": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "adam_beta2": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "adam_epsilon": (lambda v: v > 0, "> 0"),
    "vllm_gpu_memory_utilization": (lambda v: 0 < v <= 1, "in (0, 1]"),
}


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _non_finite(value: Any, depth: int = 0) -> bool:
    """Whether a number anywhere in ``value`` (lists and mappings included) is NaN or infinite."""
    if _is_number(value):
        return not math.isfinite(value)
    if depth < 20 and isinstance(value, list | dict):
        return any(_non_finite(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


def grpo_value_errors(grpo: dict[str, Any]) -> list[str]:
    """Numbers in ``grpo`` that cannot train: NaN or infinite anywhere, or out of the range of a known setting
    (a NaN learning rate, an infinite beta). Types and unknown keys are ``trl_adapter.check_launch``'s."""
    errors = []
    for key, value in grpo.items():
        if _non_finite(value):
            errors.append(f"grpo.{key} must be a finite number, not {value!r}")
        elif key in _GRPO_RANGES and _is_number(value) and not _GRPO_RANGES[key][0](value):
            errors.append(f"grpo.{key} must be {_GRPO_RANGES[key][1]}, not {value!r}")
    return errors


def url_error(name: str, url: Any) -> str | None:
    """Why ``url`` is no http(s)://host[:port]/path URL (``None``: it is one)."""
    from urllib.parse import urlparse

    try:
        u = urlparse(url)
        u.port  # noqa: B018 - parses the port: 'http://h:x' is refused here, not at the first request
    except (ValueError, TypeError, AttributeError):
        return f"{name} '{url}' is not a URL"
    if u.scheme not in ("http", "https") or not u.hostname:
        return f"{name} '{url}' is not an http(s)://host[:port]/path URL"
    return None


def _system_dir(path: str) -> bool:
    """Whether ``path`` is the filesystem root or under /proc, /sys or /dev: no place for a run directory."""
    try:
        p = Path(path).resolve()
    except (OSError, RuntimeError):
        return False
    return p == Path(p.anchor) or any(p == Path(d) or Path(d) in p.parents for d in ("/proc", "/sys", "/dev"))


def path_errors(cfg: RunConfig) -> list[str]:
    """The run's prompts and output directory, checked by reading only (no model, nothing written)."""
    import os

    from evolm.training.prompts import load_prompt_set

    errors = []
    out = Path(cfg.output_dir).absolute()
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        errors.append(f"output_dir {cfg.output_dir}: {existing} is a file, not a directory")
    elif not os.access(existing, os.W_OK | os.X_OK):
        errors.append(f"output_dir {cfg.output_dir}: {existing} is not writable")
    try:
        load_prompt_set(cfg.data.prompts, cfg.data.limit)
    except InputError as e:
        errors.append(f"data.prompts: {e}")
    return errors


def _choice(name: str, value: Any, choices: Any) -> str:
    return f"{name} must be one of {', '.join(choices)}, not '{value}'"


def validate(cfg: RunConfig) -> None:
    """Reject inconsistent settings with a message that says which field and why."""
    s, c, j, lora = cfg.schedule, cfg.contrast, cfg.judge, cfg.model.lora
    reserved = sorted(k for k in set(evolm_grpo_settings(cfg)) & set(cfg.grpo)
                      if k != "num_iterations")  # num_iterations: 1 may be written down; any other value is refused
    checks = [
        (s.regime in REGIMES, _choice("schedule.regime", s.regime, REGIMES)),
        (c.pairs in PAIR_MODES, _choice("contrast.pairs", c.pairs, PAIR_MODES)),
        (cfg.rubric.reward in RUBRIC_REWARDS, _choice("rubric.reward", cfg.rubric.reward, RUBRIC_REWARDS)),
        (cfg.rubric.invalid in INVALID_RUBRICS, _choice("rubric.invalid", cfg.rubric.invalid, INVALID_RUBRICS)),
        (cfg.rewards.monitor in MONITOR_ACTIONS, _choice("rewards.monitor", cfg.rewards.monitor, MONITOR_ACTIONS)),
        (0 < cfg.rewards.monitor_stop_share <= 1,
         f"rewards.monitor_stop_share must be in (0, 1], not {cfg.rewards.monitor_stop_share}"),
        (j.mode in SCORER_MODES, _choice("judge.mode", j.mode, SCORER_MODES)),
        (j.mode != REWARD_MODEL_MODE or s.regime == "judge_only",
         "judge.mode=reward_model (a scalar reward model reads no rubric) needs schedule.regime=judge_only"),
        (j.backend in BACKENDS, _choice("judge.backend", j.backend, BACKENDS)),
        (cfg.rubric.writer_backend in BACKENDS, _choice("rubric.writer_backend", cfg.rubric.writer_backend, BACKENDS)),
        (c.answerer_backend in BACKENDS, _choice("contrast.answerer_backend", c.answerer_backend, BACKENDS)),
        (j.dtype in DTYPES, _choice("judge.dtype", j.dtype, DTYPES)),
        (cfg.model.dtype in DTYPES, _choice("model.dtype", cfg.model.dtype, DTYPES)),
        (j.aggregate in MULTI_JUDGE, _choice("judge.aggregate", j.aggregate, MULTI_JUDGE)),
        (s.cycles >= 1 and s.steps_per_phase >= 1, "schedule.cycles and schedule.steps_per_phase must be >= 1"),
        (s.prompts_per_step >= 1, "schedule.prompts_per_step must be >= 1"),
        (s.samples_per_prompt >= 2, "schedule.samples_per_prompt must be >= 2 (GRPO compares samples of a group)"),
        (0 <= c.min_age <= c.max_age, "contrast.min_age must be >= 0 and <= contrast.max_age"),
        (c.buffer_size >= 1, "contrast.buffer_size must be >= 1"),
        (s.save_every >= 1, "schedule.save_every must be >= 1"),
        (0 <= cfg.seed < 2**32, f"seed must be >= 0 and < 2**32 (numpy's limit), not {cfg.seed}"),
        (cfg.data.limit >= 0, f"data.limit must be >= 0 (0: all prompts), not {cfg.data.limit}"),
        (cfg.data.max_prompt_tokens >= 0,
         f"data.max_prompt_tokens must be >= 0 (0: keep every prompt), not {cfg.data.max_prompt_tokens}"),
        (cfg.output_dir.strip() != "", "output_dir must name a directory"),
        (not _system_dir(cfg.output_dir), f"output_dir {cfg.output_dir} is the filesystem root or a system directory "
         "(/proc, /sys, /dev): choose a directory of its own for the run"),
        (c.pairs != "labelled" or bool(cfg.data.pairs), "contrast.pairs=labelled needs data.pairs: a JSONL file of "
         "{prompt, chosen, rejected} pairs"),
        (j.overlong in OVERLONG, _choice("judge.overlong", j.overlong, OVERLONG)),
        (j.prompt in JUDGE_PROMPTS, _choice("judge.prompt", j.prompt, JUDGE_PROMPTS)),
        (cfg.rubric.prompt in RUBRIC_PROMPTS, _choice("rubric.prompt", cfg.rubric.prompt, RUBRIC_PROMPTS)),
        (not (cfg.rubric.constrained and cfg.rubric.prompt == "older"), "rubric.prompt=older asks for 5-10 criteria, "
         "which the rubric grammar (rubric.constrained: 2-5 criteria) cannot write: use rubric.prompt=v3"),
        (2 <= cfg.rubric.max_criteria <= 5, f"rubric.max_criteria must be 2-5, not {cfg.rubric.max_criteria}"),
        (j.parse in JUDGE_PARSERS, _choice("judge.parse", j.parse, JUDGE_PARSERS)),
        (j.seeds in JUDGE_SEEDS, _choice("judge.seeds", j.seeds, JUDGE_SEEDS)),
        (0 <= j.max_failure_share <= 1, f"judge.max_failure_share must be in [0, 1], not {j.max_failure_share}"),
        (j.reward_model_reading in REWARD_MODEL_READINGS,
         _choice("judge.reward_model_reading", j.reward_model_reading, REWARD_MODEL_READINGS)),
        (j.max_context >= 0, f"judge.max_context must be >= 0 (0: the model's own), not {j.max_context}"),
        (cfg.eval.every >= 0 and cfg.eval.limit >= 0, "eval.every and eval.limit must be >= 0"),
        *_sampling_checks("judge", j.temperature, j.top_p, j.max_new_tokens),
        *_sampling_checks("rubric", cfg.rubric.temperature, cfg.rubric.top_p, cfg.rubric.max_new_tokens),
        *_sampling_checks("rubric.writer_*", *(writer_sampling(cfg)[k] for k in ("temperature", "top_p",
                                                                                   "max_new_tokens"))),
        (cfg.rubric.writer_fallback is None or cfg.rubric.writer_backend == "openai",
         "rubric.writer_fallback needs rubric.writer_backend=openai (a model at the same endpoint)"),
        *_sampling_checks("contrast", c.temperature, None, c.max_new_tokens),
        (j.batch_size >= 1, f"judge.batch_size must be >= 1, not {j.batch_size}"),
        (j.cache >= 0, f"judge.cache must be >= 0 results (0: off), not {j.cache}"),
        (j.cache_mb > 0 and math.isfinite(j.cache_mb), f"judge.cache_mb must be a positive number, not {j.cache_mb}"),
        (j.timeout > 0 and cfg.rubric.writer_timeout > 0,
         "judge.timeout and rubric.writer_timeout must be > 0 seconds"),
        (j.max_retries >= 0 and cfg.rubric.writer_max_retries >= 0,
         "judge.max_retries and rubric.writer_max_retries must be >= 0"),
        (0 < j.max_reply_mb < math.inf, f"judge.max_reply_mb must be a positive number of MiB, not {j.max_reply_mb}"),
        (j.max_concurrency >= 1 and min(j.deadline, j.requests_per_minute, j.tokens_per_minute) >= 0,
         "judge.max_concurrency must be >= 1; judge.deadline, requests_per_minute, tokens_per_minute >= 0 (0: none)"),
        (not isinstance(j.base_url, list) or all(isinstance(u, str) for u in j.base_url) and any(j.base_url),
         "judge.base_url must be a URL or a non-empty list of URLs"),
        (cfg.grpo.get("num_iterations", 1) == 1,
         "grpo.num_iterations must be 1: evolm makes one update per generation batch (as the paper does), and a "
         "reused batch would train one step's rows at the next step of the plan"),
        (not reserved, f"grpo.{(reserved or [''])[0]} is set by evolm (it keeps one TRL generation batch = one "
         "optimizer step of one role; see config.evolm_grpo_settings): set schedule.*, seed, output_dir or "
         "model.chat_template_kwargs instead"),
        (set(c.combined_weights) <= set(PAIR_BUILDERS),
         f"contrast.combined_weights keys must be among {', '.join(PAIR_BUILDERS)}, not "
         f"{', '.join(sorted(set(c.combined_weights) - set(PAIR_BUILDERS)))}"),
        (all(isinstance(w, int | float) and not isinstance(w, bool) and w >= 0 for w in c.combined_weights.values())
         and (c.pairs != "combined" or any(w > 0 for w in c.combined_weights.values())),
         "contrast.combined_weights must be numbers >= 0, at least one > 0 when contrast.pairs=combined"),
        (not cfg.rewards.drop_flat_criteria or j.mode == "yesno",
         f"rewards.drop_flat_criteria re-weights a score made of its criteria's values: it needs judge.mode=yesno, not "
         f"{j.mode}"),
        (lora.r >= 0 and lora.alpha > 0 and 0 <= lora.dropout < 1, "model.lora needs r >= 0 (0: off), alpha > 0 and "
         f"0 <= dropout < 1, not r={lora.r}, alpha={lora.alpha}, dropout={lora.dropout}"),
        (bool(lora.target_modules) and all(isinstance(m, str) and m for m in lora.target_modules),
         "model.lora.target_modules must be a non-empty list of module names, e.g. [q_proj, v_proj] or [all-linear]"),
    ]
    for ok, msg in checks:
        if not ok:
            raise InputError(msg)
    urls = [("judge.base_url", u) for u in endpoint_urls(j.base_url)] + [
        ("rubric.writer_base_url", cfg.rubric.writer_base_url), ("contrast.answerer_base_url", c.answerer_base_url)]
    for msg in [*grpo_value_errors(cfg.grpo), *(url_error(n, u) for n, u in urls if u)]:
        if msg:
            raise InputError(msg)
    extra_rewards(cfg.rewards.extra)  # import paths resolved now: a bad name is a one-line error before anything runs


# ----------------------------------------------------------------------------- YAML + overrides


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


# settings that existed and were removed: a saved run's config.yaml holding their old default still loads
RETIRED = {"rubric.with_answers": (False, "the one-pass generation path was removed (slower on CPU, unmeasured on "
                                          "GPU: docs/PERFORMANCE.md)")}


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in [k for k in data if f"{where}{k}" in RETIRED]:
        default, why = RETIRED[f"{where}{key}"]
        if data[key] != default:
            raise InputError(f"'{where}{key}' is no longer a setting: {why}; remove it")
        data = {k: v for k, v in data.items() if k != key}
    unknown = set(data) - names
    if unknown:
        raise InputError(f"unknown setting '{where}{sorted(unknown)[0]}' (known: {', '.join(sorted(names))})")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise InputError(f"'{where}{f.name}' must be a mapping")
            kwargs[f.name] = _build(hint, value, f"{where}{f.name}.")
        else:
            kwargs[f.name] = _coerce(value, hint, f"{where}{f.name}")
    return cls(**kwargs)


# PyYAML follows YAML 1.1, which reads "1e-6" (no dot) as a string; YAML 1.2 and every user read it as a number.
_FLOAT_TEXT = re.compile(r"^[-+]?(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)[eE][-+]?\d+$")


def _number(value: Any) -> Any:
    """``value`` as a float if it is a string in exponent notation (``1e-6``), else unchanged."""
    return float(value.replace("_", "")) if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()) else value


def _coerce(value: Any, hint: Any, name: str) -> Any:
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if base in (int, float):
        value = _number(value)
    if base is bool and isinstance(value, bool):
        return value
    if base in (int, float) and isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"'{name}' must be a finite number, got {value}")
        if base is int and isinstance(value, float) and value != int(value):  # (a big int is no float)
            raise InputError(f"'{name}' must be an integer, got {value}")
        return base(value)
    if base is str and isinstance(value, str):
        return value
    if base in (dict, list) and isinstance(value, base) or list in args and isinstance(value, list):
        return value
    raise InputError(f"'{name}' must be {getattr(base, '__name__', base)}, got {value!r}")


def _read_yaml(p: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML config as a mapping; ``extends: FILE`` (relative to this file) names a config it changes.

    The baselines under configs/baselines/ extend the paper config, so each states only how it differs.
    """
    if not p.is_file():
        raise InputError(f"{p}: no such config file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError:
        raise InputError(f"{p}: not UTF-8 text") from None
    except yaml.YAMLError as e:
        raise InputError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{p}: the config must be a mapping")
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise InputError(f"{p}: 'extends' must be a file name")
    target = (p.parent / base).resolve()
    if target in seen:
        raise InputError(f"{p}: 'extends' loops back to {target}")
    return _merge(_read_yaml(target, (*seen, p.resolve())), data)


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in change.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "combined_weights" \
            else v
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """The run config from a YAML file (or the defaults) with dotted ``key=value`` overrides applied."""
    data: dict[str, Any] = _read_yaml(Path(path)) if path is not None else {}
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise InputError(f"override '{item}' must look like section.key=value")
        parts = key.split(".")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        if _is_text_field(parts) and value is not None and not isinstance(value, str):
            value = raw  # model.name=2024, model.system_prompt=yes: the text as typed, not YAML's int or bool
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError(f"override '{item}': '{part}' is not a section")
        node[parts[-1]] = value
    if "grpo" in data and isinstance(data["grpo"], dict):
        merged = dict(RunConfig.__dataclass_fields__["grpo"].default_factory())  # type: ignore[misc]
        merged.update({k: _number(v) for k, v in data["grpo"].items()})
        data["grpo"] = merged
    return _build(RunConfig, data, "")


def _is_text_field(parts: list[str]) -> bool:
    """True if the dotted key names a ``str`` (or ``str | None``) setting."""
    cls: Any = RunConfig
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            return False
        hint = typing.get_type_hints(cls).get(part)
        if hint is None:
            return False
        if i == len(parts) - 1:
            return hint is str or (str in typing.get_args(hint) and list not in typing.get_args(hint)
                                   and not dataclasses.is_dataclass(hint))  # str | list: YAML reads the list
        cls = hint
    return False


def save_config(cfg: RunConfig, path: str | Path) -> None:
    """Write ``cfg`` as YAML, atomically (a resume rewrites a run's config.yaml when its overrides change it)."""
    from evolm.runs.jsonl import atomic_writer

    with atomic_writer(path) as f:
        f.write(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def describe() -> str:
    """Every setting with its default and help, for ``evolm train --help``."""
    lines = []

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{prefix}{f.name}.")
                continue
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]
            if f.name == "grpo":
                default = "{...}"
            lines.append(f"  {prefix}{f.name} (default {default!r})\n      {f.metadata.get('help', '')}")

    walk(RunConfig, "")
    return "\n".join(lines)
