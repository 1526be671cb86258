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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo

from evolm.config.grpo_values import grpo_value_errors
from evolm.config.messages import error_line, kinds
from evolm.config.values import endpoint_urls, extra_reward_problems, system_dir, url_error
from evolm.errors import InputError
from evolm.rewards import MULTI_JUDGE, RUBRIC_REWARDS  # the choices are the maths the ground floor computes

# ============================================================================= the names a setting may take
# Settings know no concept module: the choices a setting is validated against are listed here, and the modules that
# act on them (judge, rewards, contrast, models, ...) import them from here, never the reverse
# (tests/test_import_graph.py).

REGIMES = ("coevolve", "sequential", "frozen_rubric", "judge_only", "rubric_only")  # schedule.regime
WRITER_REGIMES = ("coevolve", "sequential", "rubric_only")  # the regimes with rubric steps (the writer is trained)
TRL_MAX_COMPLETION_LENGTH = 512  # trl.GRPOConfig's max_completion_length when grpo sets none (the pinned TRL's)
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
INVALID_RUBRICS = ("judge_raw", "zero")  # rubric.invalid: what a rubric that does not parse gets
MONITOR_ACTIONS = ("report", "mask", "stop")  # rewards.monitor: what the reward-hacking monitor may do
PAIR_BUILDERS = ("temporal", "rubric_conditioned", "inferred_question")  # contrast.combined_weights keys
PAIR_MODES = (*PAIR_BUILDERS, "combined", "labelled")  # contrast.pairs: one builder, or a weighted mix of them


# The GRPOConfig keywords evolm sets itself (training.grpo_config.evolm_grpo_settings, which a test holds to this
# list): a run may not set them in grpo:, so one TRL generation batch stays one optimizer step of one role.
EVOLM_GRPO_KEYS = ("output_dir", "num_generations", "gradient_accumulation_steps", "steps_per_generation",
                   "generation_batch_size", "num_iterations", "max_steps", "shuffle_dataset", "remove_unused_columns",
                   "save_strategy", "save_steps", "logging_strategy", "logging_steps", "seed", "disable_tqdm",
                   "chat_template_kwargs")


def _f(default: Any, help: str, hint: str = "", **constraints: Any) -> Any:  # noqa: A002
    """A setting: its default (pydantic copies a mutable one per instance), its help (the ``--help`` text of a flag
    made from it), its range (``ge=1``) and what an error for a value out of range adds (``hint``: why the bound, or
    what 0 means)."""
    return Field(default, description=help, json_schema_extra={"hint": hint} if hint else None, **constraints)


class Settings(BaseModel):
    """A group of settings, checked by pydantic when built. ``checked`` builds them from user input (a mapping read
    from YAML, flags): a wrong setting is then an ``InputError`` of one line naming it."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @classmethod
    def checked(cls, data: Any) -> Any:
        """``data``, a mapping, as these settings, or an ``InputError`` naming the first wrong setting."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise InputError(error_line(e, cls)) from None

    @field_validator("*", mode="before")
    @classmethod
    def _whole_number(cls, value: Any, info: ValidationInfo) -> Any:
        """A whole float sets an integer setting (YAML reads ``2e1`` as 20.0; strict mode takes no float for an
        int), a fraction stays an error."""
        whole = isinstance(value, float) and value.is_integer()
        return int(value) if whole and int in kinds(cls.model_fields[info.field_name].annotation) else value


def leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, FieldInfo]]:
    """Every setting of ``model`` as ``(dotted key, field)``, in declaration order, sections flattened."""
    out: list[tuple[str, FieldInfo]] = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            out += leaves(field.annotation, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", field))
    return out


def _first(checks: list[tuple[bool, str]]) -> None:
    """Raise the message of the first failed check (pydantic reports it as the model's error)."""
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


class LoRAConfig(Settings):
    """A LoRA adapter trained instead of the full weights (PEFT); r=0: off (the paper trains every weight)."""

    r: int = _f(0, "LoRA rank (0: off, full fine-tuning as in the paper); both roles train the one adapter, the "
                "frozen base model (or a warm-start adapter's frozen copy) is GRPO's KL reference, and checkpoints "
                "hold the adapter alone", ge=0)
    alpha: int = _f(16, "LoRA scaling numerator: the update is scaled by alpha / r", gt=0)
    dropout: float = _f(0.0, "dropout on the adapter's input during training", ge=0, lt=1)
    target_modules: list = _f(["all-linear"], "module names (or suffixes) that get an adapter; ['all-linear']: every "
                              "linear layer but the output head (PEFT)")

    @field_validator("target_modules")
    @classmethod
    def _module_names(cls, names: list) -> list:
        _first([(bool(names) and all(isinstance(m, str) and m for m in names), "model.lora.target_modules must be a "
                 "non-empty list of module names, e.g. [q_proj, v_proj] or [all-linear]")])
        return names


class ModelConfig(Settings):
    """The one model that plays both roles (policy and rubric writer)."""

    name: str = _f("Qwen/Qwen3-8B", "local dir, Hugging Face id, or a built-in name (smollm2-135m-instruct; the "
                    "Qwen2.5-Coder judges with their extras: docs/USAGE.md) (paper: Qwen3-8B)")
    dtype: Literal[DTYPES] = _f("auto", "auto (bf16 on GPU, fp32 on CPU), float32, bfloat16")
    system_prompt: str = _f("You are a helpful assistant.", "system prompt of the policy role (paper's)")
    chat_template_kwargs: dict = _f({}, "passed to the chat template, e.g. {enable_thinking: false} for Qwen3")
    lora: LoRAConfig = Field(default_factory=LoRAConfig)


class JudgeConfig(Settings):
    """The small frozen judge that scores answers against rubrics."""

    # Parameters that control which model judges, and where
    model: str = _f("Qwen/Qwen3-1.7B", "judge model (paper: Qwen3-1.7B; small judges lean on the rubric)")
    mode: Literal[SCORER_MODES] = _f("yesno", "yesno (default: per criterion P(Yes), weighted by the rubric; one "
                                     "forward pass per criterion, deterministic, never unreadable), generative (the "
                                     "paper's: per-criterion reasoning, JSON score, sampled; "
                                     "configs/paper-qwen3-8b.yaml), prob (expected 0-9 digit, one forward pass), "
                                     "listwise (not the paper's: all samples of a question listed in one prompt, an "
                                     "expected 0-9 digit per answer, averaged over a shuffled order and its reverse); "
                                     "baselines: likert (1-10, no rubric), rar_implicit (1-10 given the rubric), "
                                     "rar_explicit (binary verdict per criterion), reward_model (a scalar "
                                     "sequence-classification reward model, regime judge_only)")
    backend: Literal[BACKENDS] = _f("hf", "hf: in-process on the trainer's device; openai: an OpenAI-compatible server "
                                    "such as `vllm serve` on its own GPUs (recommended at scale); vllm: in-process "
                                    "vLLM")

    # Parameters that control a judge server (backend=openai)
    base_url: str | list | None = _f(None, "server URL for backend=openai, e.g. http://judge-host:8000/v1; a list "
                                     "(or comma-separated URLs) of servers of the same model is a pool: each request "
                                     "goes to the least-loaded one, a failed one is retried on another")
    api_key_env: str = _f("OPENAI_API_KEY", "environment variable with the judge server's API key")
    timeout: float = _f(120.0, "backend=openai: seconds one request attempt may take in all (connect, wait, read "
                        "the whole reply; not per read)", gt=0)
    max_retries: int = _f(2, "backend=openai: retries of a failed request (connection errors, timeouts, 408, 409, "
                          "429, 5xx); one request ends within (max_retries + 1) x timeout + 8 s per retry", ge=0)
    deadline: float = _f(0.0, "backend=openai: seconds one request may take in all, retries, waits and endpoint "
                         "changes included (0: (max_retries + 1) x timeout + 8 s per retry)", ge=0)
    max_concurrency: int = _f(32, "backend=openai: requests in flight at once to each judge server (per training "
                              "process); more keeps a big server busy, fewer protects a small one", ge=1)
    requests_per_minute: float = _f(0.0, "backend=openai: requests per minute to each judge server from each "
                                    "training process (0: no limit; spread evenly, bursts of one second's worth), "
                                    "e.g. a hosted API's rate limit divided by the processes", ge=0)
    tokens_per_minute: float = _f(0.0, "backend=openai: tokens per minute to each judge server from each training "
                                  "process (0: no limit); a request counts its characters / 3 + its reply budget "
                                  "until the server reports its usage", ge=0)
    max_reply_mb: float = _f(8.0, "backend=openai: the most of one reply body read, in MiB after decompression; a "
                             "larger reply (a gzip bomb, an endless body) fails its request, one line, not "
                             "retried", gt=0)
    max_failure_share: float = _f(0.5, "training: a judge request that still fails after its retries is a missing "
                                  "score (its reward becomes the group mean: zero advantage, as the reference's NaN), "
                                  "counted per step as judge_failures; a step whose share of failed requests exceeds "
                                  "this stops the run with one line (evolm train --resume continues it). 1: never "
                                  "stop; 0: stop at the first failure. `evolm judge` / `eval` fail at the first "
                                  "failure unless given --judge-failures missing", ge=0, le=1)

    # Parameters that control the generative judge's reply
    temperature: float = _f(0.6, "sampling temperature of the generative mode (paper: 0.6)", ge=0)
    top_p: float = _f(0.95, "top-p of the generative mode (paper: 0.95)", gt=0, le=1)
    max_new_tokens: int = _f(16384, "generation budget of the generative mode (paper: 16384, the judge thinks "
                             "first); a reply cut inside its thinking has no score", ge=1)
    constrained: bool = _f(False, "decode the judge's reply under its JSON schema {reasoning, score} "
                           "(xgrammar on transformers, structured outputs on vLLM / OpenAI-compatible servers), so "
                           "every reply has a readable score; off in the paper config")
    seeds: Literal[JUDGE_SEEDS] = _f("same", "seed of each sampled judge request: same (the reference: the run's seed "
                                     "on every request, so the same question, rubric and answer get the same verdict "
                                     "and duplicate answers in a group tie; on servers and vLLM, which seed each "
                                     "request) or per_row (seed + the row's place in its batch: duplicates are sampled "
                                     "afresh, a departure)")

    # Parameters that control an in-process judge (backend=hf)
    batch_size: int = _f(16, "answers per forward pass for backend=hf", ge=1)
    dtype: Literal[DTYPES] = _f("auto", "judge weights for backend=hf: auto (float32 on every device: a score does not "
                                "depend on the answers batched beside it; bfloat16 is faster where the hardware "
                                "computes it, a GPU or a CPU with AVX512-BF16 or AMX, about 6x slower on other CPUs "
                                "(evolm warns), and moves scores, docs/PERFORMANCE.md), float32, bfloat16, float16. In "
                                "training a judge of the initial model reads TRL's frozen reference copy instead, in "
                                "the policy's dtype")

    # Parameters that control a prompt longer than the judge's context
    max_context: int = _f(0, "the judge's context in tokens (0: the model's own, from its config; a server's is not "
                          "known, so set it for backend=openai to guard there, prompts then estimated at 3 bytes per "
                          "token); a prompt leaving no room for the reply is handled per judge.overlong", ge=0)
    overlong: Literal[OVERLONG] = _f("truncate", "a judge prompt longer than the context: truncate (cut from the "
                                     "middle of the answer, said per row and in the summary) or refuse (an error "
                                     "naming the row)")

    # Parameters that control what the judge reads, and how its reply is read
    prompt: Literal[JUDGE_PROMPTS] = _f("evolm", "wording of the generative judge: evolm (its own instructions and "
                                        "worked examples) or reference (the authors' prompt, texts cut as their code "
                                        "cuts them; the paper config, docs/FIDELITY.md). `evolm judge --show-prompt` "
                                        "prints it")
    defences: bool = _f(True, "fence the answer as data, tell the judge to ignore instructions and scores written in "
                        "it and that length and polish earn nothing no criterion asks for; off only in the paper "
                        "config (the authors' prompt; docs/SECURITY.md). Chat markup stays neutralised either way")
    parse: Literal[JUDGE_PARSERS] = _f("evolm", "reading of a generative reply: evolm (the first JSON object with a "
                                       "score after the thinking, else 'score: x'; clipped to [0, 1]), reference (the "
                                       "authors' reading in training, not clipped; the paper config, docs/FIDELITY.md) "
                                       "or rb2 (their evaluation judge's: the first \"score\": x after the thinking; "
                                       "`evolm eval rb2 --protocol paper`)")
    clamp_scores: bool = _f(True, "clip a score parse=reference reads to [0, 1] before any reward "
                            "(evolm's reading always clips; rb2, an evaluation reading that only ranks, "
                            "never does); off only in the paper config, whose authors' reading keeps the "
                            "raw number: a rubric or answer telling the judge to multiply its total by 10 "
                            "is then paid up to 10x (docs/SECURITY.md)")
    parse_after_thinking: bool = _f(False, "read a generative reply after its closed think block instead of whole: "
                                    "with parse=reference a '{' the judge quotes while thinking (a rubric criterion) "
                                    "otherwise makes the score unreadable when the server has no reasoning parser "
                                    "(a departure, off in the paper config, which serves the judge with vLLM's "
                                    "--reasoning-parser instead; docs/FIDELITY.md)")
    reward_model_reading: Literal[REWARD_MODEL_READINGS] = _f("evolm", "mode=reward_model: evolm (the raw logit of the "
                                                              "answer, thinking stripped) or reference (the authors' "
                                                              "10 x sigmoid(logit), thinking kept; "
                                                              "configs/baselines/skywork-rm.yaml, docs/FIDELITY.md)")
    chat_template_kwargs: dict = _f({"enable_thinking": True},
                                    "judge chat-template kwargs (paper: Qwen3 thinking on; the probability modes read "
                                    "the score after a closed think block either way)")

    # Parameters that control reusing judge results
    cache: int = _f(10_000, "judge results kept (LRU, per judge): an answer judged before under the same question, "
                    "rubric, judge settings and prompt wording is not sent again, and identical completions of a step "
                    "are judged once (evolm.judge.cache); a sampled generative judge then reuses its first sample. 0: "
                    "off (the paper config: the authors re-judge every completion); mode=listwise never caches (a "
                    "score there depends on the whole group)", hint="0: off", ge=0)
    cache_mb: float = _f(256.0, "MiB the judge results kept may take, at most (least recently used dropped first): "
                         "a generative result keeps its reasoning (up to about 64 KB), so the entry bound alone could "
                         "reach gigabytes", gt=0)

    # Parameters that control several judges
    extra_models: list = _f([], "more judges for multi-judge training (their scores are aggregated)")
    aggregate: Literal[MULTI_JUDGE] = _f("majority_vote", "with extra_models, a rubric's reward from the judges' votes "
                                         "on its pair (reference): majority_vote, average_vote, margin_kappa_format "
                                         "(0.5 margin + 0.3 format + 0.2 Fleiss kappa), or mean (mean scores, then "
                                         "rubric.reward); policy scores are averaged")

    @field_validator("base_url")
    @classmethod
    def _urls(cls, url: str | list | None) -> str | list | None:
        _first([(not isinstance(url, list) or all(isinstance(u, str) for u in url) and any(url),
                 "judge.base_url must be a URL or a non-empty list of URLs")])
        return url


class RubricConfig(Settings):
    """The rubric role: how rubrics are written and rewarded."""

    # Parameters that control the rubric reward
    reward: Literal[RUBRIC_REWARDS] = _f("margin_format", "binary (workshop), margin_format (paper main run: 0.7 "
                                         "margin + 0.3 format), separation")
    invalid: Literal[INVALID_RUBRICS] = _f("judge_raw", "a rubric that does not parse: judge_raw (reference: the judge "
                                           "reads its raw text in both roles; the format term does the rest) or zero "
                                           "(reward 0 in the rubric role, judge alone in the policy role)")

    # Parameters that control how rubrics are written
    prompt: Literal[RUBRIC_PROMPTS] = _f("v3", "the rubric prompt in both roles and in held-out evaluation: v3 (the "
                                         "paper's: 2-5 criteria, a dealbreaker allowed for short verifiable answers) "
                                         "or older (the authors' older prompt: 5-10 criteria); both in evolm's words "
                                         "(docs/FIDELITY.md)")
    temperature: float = _f(0.6, "sampling temperature when writing a rubric (paper: 0.6; in training, the rubric a "
                            "policy question's samples share)", ge=0)
    top_p: float = _f(0.95, "top-p when writing a rubric (paper: 0.95)", gt=0, le=1)
    max_new_tokens: int = _f(16384, "token budget for writing a rubric, thinking included (in training: the policy "
                             "phase's rubrics)", ge=1)
    constrained: bool = _f(False, "decode every rubric the model writes (policy-step rubrics, rubric-step samples, "
                           "held-out evaluation) under the rubric JSON schema (2-5 criteria with criterion, weight, "
                           "scoring_levels): xgrammar on transformers, structured outputs on vLLM. Off in the paper "
                           "config; GRPO then takes log-probs under the unconstrained model (docs/FIDELITY.md)")
    max_criteria: int = _f(5, "rubric.constrained: the most criteria the rubric grammar lets a rubric have (2-5; the "
                           "prompt asks for 2-5). Fewer bound a rubric's length (a criterion is up to ~95 tokens), so "
                           "a smaller rubric.max_new_tokens / grpo.max_completion_length still holds whole "
                           "rubrics", ge=2, le=5)

    # Parameters that control a fixed writer (frozen_rubric regime)
    writer: str | None = _f(None, "frozen_rubric regime: the fixed writer (model dir/id, or a served model name "
                            "with writer_backend=openai, e.g. gpt-4.1); default: the untrained base model")
    writer_backend: Literal[BACKENDS] = _f("hf", "backend of the fixed writer: hf or openai")
    writer_base_url: str | None = _f(None, "server URL of the fixed writer for writer_backend=openai")
    writer_timeout: float = _f(120.0, "writer_backend=openai: seconds one request attempt may take in all", gt=0)
    writer_max_retries: int = _f(2, "writer_backend=openai: retries of a failed request", ge=0)
    writer_temperature: float | None = _f(None, "rubric.writer's temperature (none: rubric.temperature); the "
                                          "reference's API writer (GPT-4.1): 0", ge=0)
    writer_top_p: float | None = _f(None, "rubric.writer's top-p (none: rubric.top_p); the reference's API writer: "
                                    "1.0", gt=0, le=1)
    writer_max_new_tokens: int | None = _f(None, "rubric.writer's token budget (none: rubric.max_new_tokens); the "
                                           "reference's API writer: 800", ge=1)
    writer_fallback: str | None = _f(None, "writer_backend=openai: a model at the same endpoint that writes the rubric "
                                     "of a request still failing after its retries (the reference's API writer: "
                                     "gpt-4.1-mini, through litellm's fallbacks); none: the failure stops the run")

    @model_validator(mode="after")
    def _consistent(self) -> RubricConfig:
        _first([
            (not (self.constrained and self.prompt == "older"), "rubric.prompt=older asks for 5-10 criteria, which "
             "the rubric grammar (rubric.constrained: 2-5 criteria) cannot write: use rubric.prompt=v3"),
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
    pairs: Literal[PAIR_MODES] = _f("temporal", "temporal (default: fresh answer vs one from min_age..max_age policy "
                                    "steps ago), rubric_conditioned, inferred_question, combined, or labelled "
                                    "(data.pairs: human/GPT-4 labelled chosen/rejected pairs, the sanity check of "
                                    "rubric learning)")
    combined_weights: dict = _f({"temporal": 0.5, "rubric_conditioned": 0.25, "inferred_question": 0.25},
                                "mix of builders for pairs=combined")

    # Parameters that control the replay buffer and its age window
    buffer_size: int = _f(2048, "replay buffer entries (oldest dropped first; reference: 2048)", ge=1)
    min_age: int = _f(20, "youngest stored answer usable as the worse answer, in policy steps (reference: 20)", ge=0)
    max_age: int = _f(100, "oldest stored answer usable, in policy steps (reference: 100)", ge=0)

    # Parameters that control the fresh (better) answer, and who writes it
    temperature: float = _f(1.0, "sampling temperature of the fresh (better) answer (reference: 1.0)", ge=0)
    max_new_tokens: int | None = _f(None, "token budget of a pair's fresh answers (none: grpo.max_completion_length, "
                                    "the policy answers' own, which the replay buffer stores: a temporal pair's "
                                    "fresh a+ is then never cut shorter than the stored a- it is compared with)", ge=1)
    answerer: str | None = _f(None, "a fixed model that writes the pairs' answers (a frozen policy); default: the "
                              "model being trained. The sequential regime's writer stage uses the base model")
    answerer_backend: Literal[BACKENDS] = _f("hf", "backend of the fixed answerer: hf, openai (e.g. `vllm serve` of "
                                             "the base model) or vllm")
    answerer_base_url: str | None = _f(None, "server URL of the fixed answerer for answerer_backend=openai")

    @model_validator(mode="after")
    def _consistent(self) -> ContrastConfig:
        c = self
        weights = c.combined_weights.values()
        _first([
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

    regime: Literal[REGIMES] = _f("coevolve", "coevolve: K policy then K rubric steps per cycle; sequential: all "
                                  "rubric steps, then all policy steps with the rubric writer frozen; frozen_rubric: "
                                  "policy steps only, rubrics from a fixed writer (the paper's prompted-rubric and RaR "
                                  "baselines); judge_only: policy steps only, no rubric: the judge alone "
                                  "(Direct-Likert with judge.mode=likert) or a scalar reward model "
                                  "(judge.mode=reward_model, the paper's Skywork baseline); rubric_only: rubric steps "
                                  "only, answers from a frozen policy (contrast.answerer, default the base model)")
    cycles: int = _f(10, "number of cycles (paper: 10)", ge=1)
    steps_per_phase: int = _f(50, "K, optimizer steps per phase (paper: 50)", ge=1)
    prompts_per_step: int = _f(64, "questions per optimizer step, over all processes (paper: 64)", ge=1)
    samples_per_prompt: int = _f(8, "GRPO group size (paper: 8)", hint="GRPO compares the samples of a group", ge=2)
    save_every: int = _f(25, "checkpoint every N steps, besides every phase end (paper: 25)", ge=1)
    samples_logged_per_step: int = _f(0, "rows per step written to samples/*.jsonl (0: all)", ge=0)


class DataConfig(Settings):
    """Training prompts (only prompts are used, never labels)."""

    prompts: str = _f("builtin:demo", "JSONL with a 'prompt' field per line, or builtin:demo (shipped set)")
    limit: int = _f(0, "use only the first N prompts (0: all)", hint="0: all prompts", ge=0)
    max_prompt_tokens: int = _f(0, "skip a prompt whose training prompt (the longer of the policy's and the rubric "
                                "writer's conversation, in the model's chat template) is longer than this many tokens, "
                                "and a labelled pair (data.pairs) or held-out pair or question (eval.*, after "
                                "eval.limit) whose prompt is; counted and reported at the start "
                                "of the run and by the dry run (0: keep every prompt). A prompt longer than vLLM's "
                                "context (grpo.vllm_max_model_length) stops the run on the process that holds it", ge=0)
    pairs: str | None = _f(None, "contrast.pairs=labelled: JSONL of {prompt, chosen, rejected} pairs (also accepts "
                           "the pair files `evolm eval pairs` reads)")


class EvalConfig(Settings):
    """Held-out evaluation during training, logged to metrics.jsonl with the current weights."""

    pairs: str | None = _f(None, "JSONL of held-out {prompt, chosen, rejected} pairs: the judge's pairwise accuracy "
                           "with the current writer's rubrics")
    questions: str | None = _f(None, "JSONL with a 'prompt' per line: held-out questions for rubric validity and "
                               "the policy's mean judge score under a fixed evaluation rubric set (written once by "
                               "the initial writer, saved as eval_rubrics.jsonl in the run)")
    every: int = _f(0, "evaluate every N optimizer steps, before the first step and at the end (0: only before "
                    "the first step and at the end when pairs or questions are set)", ge=0)
    limit: int = _f(0, "use only the first N held-out pairs and N questions (0: all); of those, the ones over "
                    "data.max_prompt_tokens are skipped", ge=0)


class RewardsConfig(Settings):
    """Reward functions besides the judge, added to either role's reward (off in the paper)."""

    extra: list = _f([], "TRL-style reward functions added to a role's reward: a list of {name, weight, kwargs, role}. "
                     "name: an import path (trl.rewards.get_soft_overlong_punishment, mypkg.mod:fn), resolved when the "
                     "config loads. With kwargs (even {}) name is a factory, called once as name(**kwargs), that "
                     "returns the reward function; without, name is the reward function. It gets prompts, "
                     "completions, completion_ids and the row columns as TRL passes them (rubric rows: the written "
                     "rubrics, with a_pos, a_neg) and returns one float per completion (None: no reward). role: "
                     "policy (default) or rubric, the steps it adds to. Reward = judge_weight x judge reward (missing: "
                     "its group's mean) + sum of weight x value; each term's mean is logged per step")
    judge_weight: float = _f(1.0, "the judge's reward times this in both roles; 0: the judge is not asked, the "
                             "reward is rewards.extra alone (a program reward: the writer's learnability check, "
                             "docs/RESULTS.md). The paper: 1", ge=0)
    drop_flat_criteria: bool = _f(False, "policy steps, judge.mode yesno: each answer's score re-weighted over the "
                                  "criteria that separate its group's answers (a criterion whose P(Yes) spans less "
                                  "than 0.05 across the group is dropped from the weighting). Off in the paper; the "
                                  "share of such criteria is logged per step either way (flat_criteria)")
    monitor: Literal[MONITOR_ACTIONS] = _f("report", "what the reward-hacking monitor (training.monitor) does on "
                                           "policy steps: report (only log its signals; the paper has no monitor), "
                                           "mask (also drop the judge reward of each answer it flags, a score string "
                                           "or a copy of the rubric: that answer gets its group's mean, zero "
                                           "advantage), stop (end the run at a policy step whose flagged share reaches "
                                           "monitor_stop_share or whose length_drift passes 2; the last checkpoint "
                                           "stays)")
    monitor_stop_share: float = _f(0.5, "monitor=stop: the share of a policy step's answers flagged (score string or "
                                   "rubric copy) that ends the run", gt=0, le=1)

    @field_validator("extra")
    @classmethod
    def _extra_shape(cls, entries: list) -> list:
        if problems := extra_reward_problems(entries):
            raise ValueError(problems[0])
        return entries


class RunConfig(Settings):
    """A whole EvoLM run."""

    output_dir: str = _f("runs/evolm", "run directory: config, checkpoints, buffer, metrics, samples")
    seed: int = _f(0, "seed of everything random: sampled generation (rubrics, answers, a generative judge), "
                   "shuffles and draws, in [0, 2**32)", ge=0, lt=2**32)
    model: ModelConfig = Field(default_factory=ModelConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    rubric: RubricConfig = Field(default_factory=RubricConfig)
    contrast: ContrastConfig = Field(default_factory=ContrastConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    rewards: RewardsConfig = Field(default_factory=RewardsConfig)
    grpo: dict = _f(
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
        _first([(path.strip() != "", "output_dir must name a directory"),
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
        _first([
            (grpo.get("num_iterations", 1) == 1,
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
        _first([
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
        """The policy's answer budget (``grpo.max_completion_length``), the length of the answers the buffer stores."""
        return int(self.grpo.get("max_completion_length") or TRL_MAX_COMPLETION_LENGTH)

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
