"""The judge's settings (``judge:`` of a run): which model judges, where it runs, how it reads a rubric and an
answer, and the limits that keep a served judge from stalling a step."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from evolm.config.settings import (
    BACKENDS,
    DTYPES,
    JUDGE_PARSERS,
    JUDGE_PROMPTS,
    JUDGE_SEEDS,
    MULTI_JUDGE,
    OVERLONG,
    REWARD_MODEL_READINGS,
    SCORER_MODES,
    Settings,
    first_failed,
    setting,
)


class JudgeConfig(Settings):
    """The small frozen judge that scores answers against rubrics."""

    # Parameters that control which model judges, and where
    model: str = setting("Qwen/Qwen3-1.7B", "judge model (paper: Qwen3-1.7B; small judges lean on the rubric)")
    mode: Literal[SCORER_MODES] = setting("yesno", "yesno (default: per criterion P(Yes), weighted by the rubric; one "
                                          "forward pass per criterion, deterministic, never unreadable), generative "
                                          "(the paper's: per-criterion reasoning, JSON score, sampled; "
                                          "configs/paper-qwen3-8b.yaml), prob (expected 0-9 digit, one forward pass), "
                                          "listwise (not the paper's: all samples of a question listed in one prompt, "
                                          "an expected 0-9 digit per answer, averaged over a shuffled order and its "
                                          "reverse); baselines: likert (1-10, no rubric), rar_implicit (1-10 given the "
                                          "rubric), rar_explicit (binary verdict per criterion), reward_model (a "
                                          "scalar sequence-classification reward model, regime judge_only)")
    backend: Literal[BACKENDS] = setting("hf", "hf: in-process on the trainer's device; openai: an OpenAI-compatible "
                                         "server such as `vllm serve` on its own GPUs (recommended at scale); vllm: "
                                         "in-process vLLM")

    # Parameters that control a judge server (backend=openai)
    base_url: str | list | None = setting(None, "server URL for backend=openai, e.g. http://judge-host:8000/v1; a list "
                                          "(or comma-separated URLs) of servers of the same model is a pool: each "
                                          "request goes to the least-loaded one, a failed one is retried on another")
    api_key_env: str = setting("OPENAI_API_KEY", "environment variable with the judge server's API key")
    timeout: float = setting(120.0, "backend=openai: seconds one request attempt may take in all (connect, wait, read "
                             "the whole reply; not per read)", gt=0)
    max_retries: int = setting(2, "backend=openai: retries of a failed request (connection errors, timeouts, 408, 409, "
                               "429, 5xx); one request ends within (max_retries + 1) x timeout + 8 s per retry", ge=0)
    deadline: float = setting(0.0, "backend=openai: seconds one request may take in all, retries, waits and endpoint "
                              "changes included (0: (max_retries + 1) x timeout + 8 s per retry)", ge=0)
    max_concurrency: int = setting(32, "backend=openai: requests in flight at once to each judge server (per training "
                                   "process); more keeps a big server busy, fewer protects a small one", ge=1)
    requests_per_minute: float = setting(0.0, "backend=openai: requests per minute to each judge server from each "
                                         "training process (0: no limit; spread evenly, bursts of one second's worth), "
                                         "e.g. a hosted API's rate limit divided by the processes", ge=0)
    tokens_per_minute: float = setting(0.0, "backend=openai: tokens per minute to each judge server from each training "
                                       "process (0: no limit); a request counts its characters / 3 + its reply budget "
                                       "until the server reports its usage", ge=0)
    max_reply_mb: float = setting(8.0, "backend=openai: the most of one reply body read, in MiB after decompression; a "
                                  "larger reply (a gzip bomb, an endless body) fails its request, one line, not "
                                  "retried", gt=0)
    max_failure_share: float = setting(0.5, "training: a judge request that still fails after its retries is a missing "
                                       "score (its reward becomes the group mean: zero advantage, as the reference's "
                                       "NaN), counted per step as judge_failures; a step whose share of failed "
                                       "requests exceeds this stops the run with one line (evolm train --resume "
                                       "continues it). 1: never stop; 0: stop at the first failure. `evolm judge` / "
                                       "`eval` fail at the first failure unless given --judge-failures "
                                       "missing", ge=0, le=1)

    # Parameters that control the generative judge's reply
    temperature: float = setting(0.6, "sampling temperature of the generative mode (paper: 0.6)", ge=0)
    top_p: float = setting(0.95, "top-p of the generative mode (paper: 0.95)", gt=0, le=1)
    max_new_tokens: int = setting(16384, "generation budget of the generative mode (paper: 16384, the judge thinks "
                                  "first); a reply cut inside its thinking has no score", ge=1)
    constrained: bool = setting(False, "decode the judge's reply under its JSON schema {reasoning, score} (xgrammar on "
                                "transformers, structured outputs on vLLM / OpenAI-compatible servers), so every reply "
                                "has a readable score; off in the paper config")
    seeds: Literal[JUDGE_SEEDS] = setting("same", "seed of each sampled judge request: same (the reference: the run's "
                                          "seed on every request, so the same question, rubric and answer get the same "
                                          "verdict and duplicate answers in a group tie; on servers and vLLM, which "
                                          "seed each request) or per_row (seed + the row's place in its batch: "
                                          "duplicates are sampled afresh, a departure)")

    # Parameters that control an in-process judge (backend=hf)
    batch_size: int = setting(16, "answers per forward pass for backend=hf", ge=1)
    dtype: Literal[DTYPES] = setting("auto", "judge weights for backend=hf: auto (float32 on every device: a score "
                                     "does not depend on the answers batched beside it; bfloat16 is faster where the "
                                     "hardware computes it, a GPU or a CPU with AVX512-BF16 or AMX, about 6x slower on "
                                     "other CPUs (evolm warns), and moves scores, docs/PERFORMANCE.md), float32, "
                                     "bfloat16, float16. In training a judge of the initial model reads TRL's frozen "
                                     "reference copy instead, in the policy's dtype")

    # Parameters that control a prompt longer than the judge's context
    max_context: int = setting(0, "the judge's context in tokens (0: the model's own, from its config; a server's is "
                               "not known, so set it for backend=openai to guard there, prompts then estimated at 3 "
                               "bytes per token); a prompt leaving no room for the reply is handled per "
                               "judge.overlong", ge=0)
    overlong: Literal[OVERLONG] = setting("truncate", "a judge prompt longer than the context: truncate (cut from the "
                                          "middle of the answer, said per row and in the summary) or refuse (an error "
                                          "naming the row)")

    # Parameters that control what the judge reads, and how its reply is read
    prompt: Literal[JUDGE_PROMPTS] = setting("evolm", "wording of the generative judge: evolm (its own instructions "
                                             "and worked examples) or reference (the authors' prompt, texts cut as "
                                             "their code cuts them; the paper config, docs/FIDELITY.md). `evolm judge "
                                             "--show-prompt` prints it")
    defences: bool = setting(True, "fence the answer as data, tell the judge to ignore instructions and scores written "
                             "in it and that length and polish earn nothing no criterion asks for; off only in the "
                             "paper config (the authors' prompt; docs/SECURITY.md). Chat markup stays neutralised "
                             "either way")
    parse: Literal[JUDGE_PARSERS] = setting("evolm", "reading of a generative reply: evolm (the first JSON object with "
                                            "a score after the thinking, else 'score: x'; clipped to [0, 1]), "
                                            "reference (the authors' reading in training, not clipped; the paper "
                                            "config, docs/FIDELITY.md) or rb2 (their evaluation judge's: the first "
                                            "\"score\": x after the thinking; `evolm eval rb2 --protocol paper`)")
    clamp_scores: bool = setting(True, "clip a score parse=reference reads to [0, 1] before any reward (evolm's "
                                 "reading always clips; rb2, an evaluation reading that only ranks, never does); off "
                                 "only in the paper config, whose authors' reading keeps the raw number: a rubric or "
                                 "answer telling the judge to multiply its total by 10 is then paid up to 10x "
                                 "(docs/SECURITY.md)")
    parse_after_thinking: bool = setting(False, "read a generative reply after its closed think block instead of "
                                         "whole: with parse=reference a '{' the judge quotes while thinking (a rubric "
                                         "criterion) otherwise makes the score unreadable when the server has no "
                                         "reasoning parser (a departure, off in the paper config, which serves the "
                                         "judge with vLLM's --reasoning-parser instead; docs/FIDELITY.md)")
    reward_model_reading: Literal[REWARD_MODEL_READINGS] = setting("evolm", "mode=reward_model: evolm (the raw logit "
                                                                   "of the answer, thinking stripped) or reference "
                                                                   "(the authors' 10 x sigmoid(logit), thinking kept; "
                                                                   "configs/baselines/skywork-rm.yaml, "
                                                                   "docs/FIDELITY.md)")
    chat_template_kwargs: dict = setting({"enable_thinking": True},
                                         "judge chat-template kwargs (paper: Qwen3 thinking on; the probability modes "
                                         "read "
                                         "the score after a closed think block either way)")

    # Parameters that control reusing judge results
    cache: int = setting(10_000, "judge results kept (LRU, per judge): an answer judged before under the same "
                         "question, rubric, judge settings and prompt wording is not sent again, and identical "
                         "completions of a step are judged once (evolm.judge.cache); a sampled generative judge then "
                         "reuses its first sample. 0: off (the paper config: the authors re-judge every completion); "
                         "mode=listwise never caches (a score there depends on the whole group)", hint="0: off", ge=0)
    cache_mb: float = setting(256.0, "MiB the judge results kept may take, at most (least recently used dropped "
                              "first): a generative result keeps its reasoning (up to about 64 KB), so the entry bound "
                              "alone could reach gigabytes", gt=0)

    # Parameters that control several judges
    extra_models: list = setting([], "more judges for multi-judge training (their scores are aggregated)")
    aggregate: Literal[MULTI_JUDGE] = setting("majority_vote", "with extra_models, a rubric's reward from the judges' "
                                              "votes on its pair (reference): majority_vote, average_vote, "
                                              "margin_kappa_format (0.5 margin + 0.3 format + 0.2 Fleiss kappa), or "
                                              "mean (mean scores, then rubric.reward); policy scores are averaged")

    @field_validator("base_url")
    @classmethod
    def _urls(cls, url: str | list | None) -> str | list | None:
        first_failed([(not isinstance(url, list) or all(isinstance(u, str) for u in url) and any(url),
                 "judge.base_url must be a URL or a non-empty list of URLs")])
        return url
