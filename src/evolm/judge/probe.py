"""Probing a served judge before a run loads anything: the endpoint, the served model, the key, and a real scoring
request read by the configured mode and parser.

A wrong judge URL, port, model name or API key otherwise shows at step 1's rewards, after the models loaded, vLLM
started and a whole step generated: at 8B scale the better part of an hour. ``check_endpoints`` asks each URL of
``judge.base_url`` for its served models (``GET /models``: one request, no retry) and stops in one line naming the
setting that is wrong. ``probe_judges`` then sends each served judge ``PROBES`` real scoring requests (a question, a
rubric, three answers) through ``build_judge``'s judge, so the configured mode, prompt, sampling and parser are the
ones tested; a thinking judge gets the time ``judge.timeout`` allows.

What it refuses, and what it only says:

- a reply the parser cannot read, or a request that fails after its retries, is quoted (``ProbeReport.unreadable``);
  the run stops only when every probe is unreadable, since training tolerates some missing scores
  (``judge.max_failure_share``);
- with ``judge.parse: reference`` (the authors' reading of the whole reply, thinking included) a reply whose content
  carries ``<think>`` means a server without a reasoning parser: a ``{`` the judge quotes while thinking (a rubric
  criterion) makes the score unreadable, so such a judge is refused, naming ``--reasoning-parser``, unless
  ``judge.parse_after_thinking`` is on (a departure, docs/FIDELITY.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from evolm.config import JudgeConfig, RunConfig, endpoint_urls
from evolm.errors import BackendError, InputError

PROBES = 3
"""Scoring requests per served judge and endpoint (one question and rubric, three answers of different quality)."""
MODELS_TIMEOUT_S = 10.0
"""Seconds ``GET /models`` may take (a server that accepts connections answers it at once)."""

PROBE_QUESTION = "What is the boiling point of water at sea level, in degrees Celsius?"
PROBE_RUBRIC = json.dumps({"criteria": [
    {"criterion": "States that water boils at 100 degrees Celsius at sea level.", "weight": 0.7,
     "scoring_levels": {"1.0": "States 100 C.", "0.0": "Another value or none."}},
    {"criterion": "Is one or two clear sentences.", "weight": 0.3,
     "scoring_levels": {"1.0": "Short and clear.", "0.0": "Long or unclear."}},
]})
PROBE_ANSWERS = ("Water boils at 100 degrees Celsius at sea level.",
                 "It boils at about 90 degrees Celsius.",
                 "Water is a liquid made of hydrogen and oxygen.")
THINK_TAGS = ("<think>", "</think>")


@dataclass
class ProbeReport:
    """What the probe of one served judge endpoint found."""

    model: str
    url: str
    replies: list[str] = field(default_factory=list)  # the generative modes' raw replies (probability modes: none)
    scores: list[float | None] = field(default_factory=list)
    seconds: float = 0.0
    failed: list[str | None] = field(default_factory=list)  # per probe: the request's error after its retries

    @property
    def unreadable(self) -> list[int]:
        """Indices of the probe requests whose reply had no score the configured parser could read."""
        return [i for i, s in enumerate(self.scores) if s is None]

    @property
    def thinks_in_content(self) -> bool:
        """A reply's content carries the judge's thinking: the server runs without a reasoning parser."""
        return any(tag in r for r in self.replies for tag in THINK_TAGS)


def served_judges(cfg: RunConfig) -> list[tuple[str, str]]:
    """(model, url) of every judge the run reaches over HTTP (``judge.backend: openai``), each endpoint apart."""
    j = cfg.judge
    if j.backend != "openai" or j.mode == "reward_model":
        return []
    return [(m, u) for m in [j.model, *j.extra_models] for u in endpoint_urls(j.base_url) if u]


def check_endpoints(cfg: RunConfig) -> None:
    """Every served judge's endpoint answers ``GET /models``, accepts the key and serves the judge's model; else one
    ``InputError`` line naming the setting (``judge.base_url``, ``judge.api_key_env``, ``judge.model``)."""
    from urllib.parse import urlparse

    served: dict[str, list[str]] = {}
    for model, url in served_judges(cfg):
        u = urlparse(url)
        if u.scheme not in ("http", "https") or not u.netloc:
            continue  # refused by config.launch_errors, naming the URL
        if url not in served:
            served[url] = _served_models(url, cfg.judge)
        if model not in served[url]:
            names = ", ".join(served[url][:5]) or "none"
            which = "judge.model" if model == cfg.judge.model else "judge.extra_models"
            raise InputError(f"{which} '{model}' is not served at judge.base_url {url} (it serves: {names}); set "
                             f"{which} to the served name (vllm serve's --served-model-name) or fix judge.base_url")


def _served_models(url: str, j: JudgeConfig) -> list[str]:
    """The model ids ``url`` serves (``GET {url}/models``), or a one-line ``InputError`` naming the setting."""
    import os

    import httpx

    key = os.environ.get(j.api_key_env) or "EMPTY"
    where = f"{url.rstrip('/')}/models"
    try:
        reply = httpx.get(where, headers={"Authorization": f"Bearer {key}"}, timeout=MODELS_TIMEOUT_S)
    except httpx.TimeoutException:
        raise InputError(f"judge.base_url {url}: no answer to GET /models within {MODELS_TIMEOUT_S:g} s (a server "
                         "still starting, or the wrong host)") from None
    except httpx.HTTPError as e:
        raise InputError(f"judge.base_url {url}: cannot reach the judge server ({type(e).__name__}: nothing listens "
                         "there?); start it first (docs/GPU.md) or fix the URL and port") from None
    if reply.status_code in (401, 403):
        set_or_not = "is set" if os.environ.get(j.api_key_env) else "is not set"
        raise InputError(f"judge.api_key_env: the judge server at {url} refused the API key (HTTP "
                         f"{reply.status_code}); the environment variable {j.api_key_env} {set_or_not} (vllm serve's "
                         "--api-key)")
    if reply.status_code == 404:
        raise InputError(f"judge.base_url {url}: no OpenAI-compatible API there (GET /models answered 404); the URL "
                         "usually ends in /v1")
    if reply.status_code >= 400:
        raise InputError(f"judge.base_url {url}: GET /models answered HTTP {reply.status_code}")
    try:
        data = reply.json()
        return [str(m["id"]) for m in data["data"] if isinstance(m, dict) and "id" in m]
    except (ValueError, KeyError, TypeError):
        raise InputError(f"judge.base_url {url}: GET /models did not answer an OpenAI model list") from None


class _Recording:
    """A backend whose ``generate`` replies are kept (the probe reads the raw text the parser was given)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.replies: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def generate(self, conversations: Any, params: Any, *, progress: bool = False,
                 failures: dict[int, str] | None = None) -> list[str]:  # the openai backend's: a failure per request
        out = self._backend.generate(conversations, params, progress=progress, failures=failures)
        self.replies.extend(out)
        return out


def probe_judge(cfg: RunConfig, model: str, url: str) -> ProbeReport:
    """``PROBES`` scoring requests to one served judge at one endpoint, through the run's own judge (mode, prompt,
    sampling, parser); a request failing after its retries is a one-line ``InputError`` naming the endpoint."""
    import time

    from evolm.judge.judge import JudgeItem, build_judge
    from evolm.rubrics import parse_rubric

    judge = build_judge(cfg.judge.model_copy(update={"base_url": url}), model, seed=cfg.seed, failures="missing")
    judge.backend = recording = _Recording(judge.backend)
    rubric = parse_rubric(PROBE_RUBRIC)
    items = [JudgeItem(PROBE_QUESTION, a, rubric, rubric_text=PROBE_RUBRIC) for a in PROBE_ANSWERS[:PROBES]]
    started = time.monotonic()
    try:
        judged = judge.score(items)
    except BackendError as e:  # a failure outside the requests (a request's own failure is a missing score)
        raise InputError(f"judge probe ({model} at {url}): {e}") from None
    finally:
        close = getattr(recording._backend, "close", None)
        if close is not None:
            close()
    return ProbeReport(model, url, recording.replies, [j.score for j in judged], time.monotonic() - started,
                       [j.failed for j in judged])


def probe_judges(cfg: RunConfig, warn: Any = None) -> list[ProbeReport]:
    """``check_endpoints``, then ``probe_judge`` for each served judge and endpoint: the reports, or the refusal.

    ``warn(line)`` gets each unreadable reply, quoted. Refused (``InputError``): a thinking reply under
    ``judge.parse: reference`` without ``judge.parse_after_thinking`` (a server without ``--reasoning-parser``), and an
    endpoint whose every probe reply is unreadable."""
    from evolm.judge.judge import GENERATIVE_MODES

    check_endpoints(cfg)
    j = cfg.judge
    reports = []
    for model, url in served_judges(cfg):
        report = probe_judge(cfg, model, url)
        reports.append(report)
        if j.mode in GENERATIVE_MODES and j.parse == "reference" and not j.parse_after_thinking \
                and report.thinks_in_content:
            raise InputError(f"judge {model} at {url} replies with its thinking in the message content (<think> in "
                             "the probe replies): judge.parse=reference reads the whole reply, so a '{' quoted while "
                             "thinking makes the score unreadable; serve the judge with vLLM's reasoning parser "
                             "(vllm serve ... --reasoning-parser qwen3, docs/GPU.md) or set "
                             "judge.parse_after_thinking=true (a departure, docs/FIDELITY.md)")
        for i in report.unreadable:
            error = report.failed[i] if i < len(report.failed) else None
            text = report.replies[i] if i < len(report.replies) else "(no reply text: a probability mode)"
            if warn is not None:
                warn(f"evolm: WARNING: judge probe {i + 1} of {len(report.scores)} ({model} at {url}): "
                     + (f"the request failed after its retries: {error}" if error else
                        f"no score that judge.parse={j.parse} can read in the reply: {_quote(text)}"))
        if report.scores and len(report.unreadable) == len(report.scores):
            first = next((e for e in report.failed if e), None)
            raise InputError(f"judge {model} at {url}: none of the {len(report.scores)} probe replies has a score "
                             + (f"(every request failed; the first: {first})" if first and all(report.failed) else
                                f"judge.parse={j.parse} (mode {j.mode}) can read (quoted above); check the served "
                                "model, judge.max_new_tokens (a reply cut while thinking has none) and judge.parse"))
    return reports


def _quote(text: str, limit: int = 600) -> str:
    """The reply on one line, its start and end when long."""
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= limit else f"{flat[: limit // 2]} [...] {flat[-limit // 2:]}")
