"""The frozen judge (docs/METHOD.md §2.2): question + rubric + answer in, a score in [0, 1] (or ``None``) out.

``Judge`` holds a judge's settings (mode, decoding, wording, defences, reading of replies, context guard, what a
failed request gives) and ``build_judge`` is the one way training and the CLI build one. Each mode is a scorer
(``SCORERS``) over one batched backend call: ``generative`` (the reference), ``prob`` and ``yesno`` (next-token
probabilities, deterministic), the paper's baselines ``likert``, ``rar_implicit`` and ``rar_explicit``, and
``listwise`` (``evolm.judge.listwise``). Every mode but ``listwise`` scores answers one at a time, each prompt
putting what the answer does not change first, so that a backend computes that shared prefix once. What a mode
sends: ``evolm.judge.prompts``; how a reply is read: ``evolm.judge.parse``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evolm.backends.base import Backend, Conversation, SamplingParams
from evolm.backends.constrained import JUDGE_SCHEMA
from evolm.backends.context import PROBE_RESERVE, context_length, prompt_tokens
from evolm.backends.replies import strip_thinking
from evolm.config import JUDGE_MODES, JUDGE_PARSERS, JUDGE_PROMPTS, JUDGE_SEEDS, OVERLONG, JudgeConfig
from evolm.errors import BackendError
from evolm.judge.context_guard import ContextFit, fit_items
from evolm.judge.listwise import listwise_blocks, listwise_requests, listwise_scores
from evolm.judge.parse import (
    DIGITS,
    copied_score,
    expected_digit,
    p_yes,
    parse_criterion_ratings,
    parse_judge_reasoning,
    parse_judge_score,
    parse_judge_score_rb2,
    parse_judge_score_reference,
    parse_rating_reference,
    parse_scale_score,
)
from evolm.judge.prompts import (
    generative_messages,
    likert_messages,
    listwise_messages,
    prob_messages,
    rar_implicit_messages,
    rubric_criteria,
    shown_answer,
    yesno_messages,
)
from evolm.rubrics import Rubric
from evolm.scores import CriterionScore, Judgment, aggregate_scores, scores_of


@dataclass(frozen=True)
class JudgeItem:
    """One answer to score.

    ``rubric`` is the parsed rubric, ``None`` for none (the judge alone). ``rubric_text`` is the
    rubric as its writer wrote it, thinking stripped by the caller (and again here): the generative
    modes (``generative``, ``rar_implicit``) show it as it stands, as the reference does, rather
    than a re-rendering of the parsed rubric that drops what the parser did not keep and
    renormalises the weights (without it they show ``render_rubric(rubric)``). The probability
    modes use the parsed rubric when there is one (``prob`` re-rendered, ``yesno`` and
    ``rar_explicit`` one criterion at a time). When only ``rubric_text`` is given (a rubric that
    does not parse), every mode judges against that text (per-criterion modes: as one criterion of
    weight 1). ``reference`` is a reference answer, shown by the ``likert`` mode only.
    """

    question: str
    answer: str
    rubric: Rubric | None = None
    rubric_text: str | None = None
    reference: str | None = None
    group: Any = None
    """``listwise`` mode: items with the same (hashable) ``group`` are judged together; ``None``: items with the same
    question and rubric are. The other modes ignore it."""


PROGRESS_BLOCK = 128  # answers per backend call when a progress bar is shown
JUDGE_MAX_NEW_TOKENS = 16384
"""Generation budget of the generative modes: the paper's for its thinking Qwen3 judge. A thinking
judge cut off before ``</think>`` gives no score, so a short budget turns scores into ``None``s."""

# ----------------------------------------------------------------------------- the judge


def judge_conversations(judge: Judge, item: JudgeItem) -> list[Conversation]:
    """The prompts ``judge`` sends for ``item`` (one per criterion in the per-criterion modes)."""
    if judge.mode in ("generative", "likert", "rar_implicit"):
        return [_ONE_PROMPT[judge.mode](item, prompt=judge.prompt, defences=judge.defences)]
    if judge.mode in _ONE_PROMPT:
        return [_ONE_PROMPT[judge.mode](item, defences=judge.defences)]
    if judge.mode == "listwise":  # the item as a group of one (the context guard checks each answer alone)
        return [listwise_messages([item], 0, defences=judge.defences)]
    return [yesno_messages(item.question, text, item.answer, defences=judge.defences)
            for text, _ in rubric_criteria(item)]


@dataclass
class Judge:
    """A frozen judge model behind a backend, in one of ``JUDGE_MODES``.

    ``chat_template_kwargs`` reaches the chat template in every mode. With a thinking judge (Qwen3,
    thinking on as in the paper) the generative modes let it think within ``max_new_tokens``; the
    probability modes read the score after an empty think block that the backend puts in the
    prompt, whatever these kwargs say about thinking.
    """

    backend: Backend
    mode: str = "yesno"
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = JUDGE_MAX_NEW_TOKENS
    seed: int | None = 0
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    max_context: int = 0
    overlong: str = "truncate"
    constrained: bool = False
    """``generative`` mode: decode the reply under ``JUDGE_SCHEMA`` (``backends.constrained``): always a score."""
    prompt: str = "evolm"
    """``generative`` mode's wording: ``evolm`` or ``reference`` (the authors'; ``generative_messages``)."""
    defences: bool = True
    """Fence the answer as data and say that length and polish earn nothing (``generative_messages``; off in the
    paper config, whose authors' prompt has none: docs/SECURITY.md)."""
    parse: str = "evolm"
    """``generative`` mode's reading of a reply: ``evolm`` (``parse_judge_score``), ``reference``
    (``parse_judge_score_reference``: the authors' reading, scores not clipped to [0, 1]) or ``rb2``
    (``parse_judge_score_rb2``: their evaluation judge's regex)."""
    parse_after_thinking: bool = False
    """Generative modes: the parser reads the reply after its closed think block (``strip_thinking``), not whole."""
    clamp_scores: bool = True
    """``generative`` mode with ``parse="reference"``: the score clipped to [0, 1], the range every reward is
    built on (``evolm.rewards``). Off, the authors' raw number is kept (the paper config): a judge that obeys
    "multiply the total by 10" written in a rubric or answer pays up to 10x. ``rb2`` never clips (an
    evaluation reading that only ranks)."""
    seeds: str = "same"
    """Sampled modes: ``same`` sends every request ``seed`` (the reference), ``per_row`` ``seed`` + the row's index."""
    failures: str = "raise"
    """A request that fails after the backend's retries: ``raise`` (``BackendError``; the CLI) or ``missing`` (its
    items get no score and ``Judgment.failed``; training, where a step's share of them is bounded instead)."""
    requests: int = field(default=0, init=False, repr=False, compare=False)
    """Requests (prompts) sent to the backend so far; with ``failed_requests``, what a step's failure share counts."""
    failed_requests: int = field(default=0, init=False, repr=False, compare=False)
    """Of those, requests that failed after the backend's retries (``failures="missing"``)."""

    def __post_init__(self) -> None:
        if self.mode not in JUDGE_MODES:
            raise ValueError(f"unknown judge mode '{self.mode}' (choose from {', '.join(sorted(JUDGE_MODES))})")
        if self.seeds not in JUDGE_SEEDS or self.failures not in FAILURES:
            raise ValueError(f"unknown judge seeds '{self.seeds}' or failures '{self.failures}' (choose from "
                             f"{', '.join(JUDGE_SEEDS)}; {', '.join(FAILURES)})")
        if self.overlong not in OVERLONG:
            raise ValueError(f"unknown overlong policy '{self.overlong}' (choose from {', '.join(OVERLONG)})")
        if self.prompt not in JUDGE_PROMPTS or self.parse not in JUDGE_PARSERS:
            raise ValueError(f"unknown judge prompt '{self.prompt}' or parse '{self.parse}' (choose from "
                             f"{', '.join(JUDGE_PROMPTS)})")

    def score(self, items: Sequence[JudgeItem], progress: bool = False) -> list[Judgment]:
        """One ``Judgment`` per item, in order: its score (a float in [0, 1], or ``None``: an unreadable reply; in
        the probability modes only from a server that reported no score token; a prompt over the judge's context
        that cannot be cut to fit, see ``fit_to_context``), and per mode its criteria and reasoning.

        Context guard first: an answer too long for the judge's context is cut from its middle
        (``Judgment.cut``), or, with ``overlong="refuse"``, the call raises ``OverlongPrompt``
        (``fit_to_context``); an item whose prompt cannot fit is not sent (``Judgment.unscored``). With
        ``progress``, items go to the backend in blocks of ``PROGRESS_BLOCK`` under a progress bar; answers
        to the same question should be adjacent so that a block keeps their shared prefix (``listwise``: a block holds
        whole groups, wherever their items stand).
        """
        items = list(items)
        if not items:
            return []
        fitted, fit = self.fit_to_context(items)
        keep = [i for i in range(len(items)) if i not in fit.unscored]
        out = [Judgment(None, unscored=fit.unscored.get(i)) for i in range(len(items))]
        for i, j in zip(keep, self._score_fitted([fitted[i] for i in keep], progress) if keep else [], strict=True):
            out[i] = replace(j, cut=fit.cut.get(i, 0))
        return out

    def _score_fitted(self, items: list[JudgeItem], progress: bool) -> list[Judgment]:
        """``score`` on items that fit the context."""
        score = SCORERS[self.mode]
        if not progress or len(items) <= PROGRESS_BLOCK or self.mode in GENERATIVE_MODES:
            return score(self, items, progress)  # the generative modes have their own bar
        from tqdm.auto import tqdm

        blocks = (listwise_blocks(items, PROGRESS_BLOCK) if self.mode == "listwise"  # whole listwise groups
                  else [range(start, min(start + PROGRESS_BLOCK, len(items)))
                        for start in range(0, len(items), PROGRESS_BLOCK)])
        out: list[Judgment] = [Judgment(None)] * len(items)
        with tqdm(total=len(items), desc=f"judge ({self.mode})", unit="answer") as bar:
            for block in blocks:
                for i, judged in zip(block, score(self, [items[i] for i in block], False), strict=True):
                    out[i] = judged
                bar.update(len(block))
        return out

    def sampling_params(self) -> SamplingParams:
        """Decoding settings of the generative modes (reference: temperature 0.6, top-p 0.95, one seed for all)."""
        return SamplingParams(self.temperature, self.top_p, self.max_new_tokens, self.seed, self.chat_template_kwargs,
                              seed_per_row=self.seeds == "per_row")

    def fit_to_context(self, items: Sequence[JudgeItem]) -> tuple[list[JudgeItem], ContextFit]:
        """The items with every answer too long for the judge's context cut from its middle, and what was done
        (``evolm.judge.context_guard.fit_items``). The context is ``max_context``, else the backend's own
        (``evolm.backends.context``; unknown for a server: then nothing is checked)."""
        return fit_items(items, self.backend, context_length(self.backend, self.max_context),
                         prompts=lambda item: judge_conversations(self, item),
                         reads_one=self.mode not in GENERATIVE_MODES, max_new_tokens=self.max_new_tokens,
                         chat_template_kwargs=self.chat_template_kwargs, overlong=self.overlong)


FAILURES = ("raise", "missing")  # Judge.failures


def _ask(judge: Judge, method: str, convs: list[Conversation], *args: Any, **kwargs: Any
         ) -> tuple[list[Any], dict[int, str]]:
    """``judge.backend.<method>(convs, ...)`` and the conversations whose request failed (index -> error line).

    ``failures="raise"``: a failure raises. ``missing``: a backend that fails per request (``openai``) gives the
    others their replies; one that fails a whole call (``hf``, ``vllm``) fails every conversation of it. A failed
    conversation's reply reads as no score: ``""``, or every candidate at ``-inf``.
    """
    call = getattr(judge.backend, method)
    judge.requests += len(convs)
    if judge.failures == "raise" or not convs:
        return call(convs, *args, **kwargs), {}
    failed: dict[int, str] = {}
    if "failures" in inspect.signature(call).parameters:
        out = call(convs, *args, failures=failed, **kwargs)
    else:
        try:
            out = call(convs, *args, **kwargs)
        except BackendError as exc:
            blank: Any = "" if method == "generate" else {c: -math.inf for c in args[0]}
            out, failed = [blank] * len(convs), dict.fromkeys(range(len(convs)), str(exc))
    judge.failed_requests += len(failed)
    return out, failed


def _failed(judgments: list[Judgment], failed: dict[int, str], owners: Sequence[int] | None = None) -> list[Judgment]:
    """``judgments`` with each item whose request (``owners[k]``: conversation k's item) failed marked, score None."""
    by_item: dict[int, str] = {}
    for k, error in failed.items():
        by_item.setdefault(owners[k] if owners is not None else k, error)
    return [replace(j, score=None, failed=by_item[i]) if i in by_item else j for i, j in enumerate(judgments)]


def _generate(judge: Judge, items: list[JudgeItem], progress: bool, json_schema: dict[str, Any] | None = None
              ) -> tuple[list[str], dict[int, str]]:
    """The judge's replies to ``items``' one prompt each, and the items whose request failed (``_ask``)."""
    convs = [judge_conversations(judge, it)[0] for it in items]
    return _ask(judge, "generate", convs, replace(judge.sampling_params(), json_schema=json_schema), progress=progress)


def _after_thinking(judge: Judge, replies: list[str]) -> list[str]:
    """The replies the parser reads: whole, or after their closed think block (``Judge.parse_after_thinking``)."""
    return [strip_thinking(t) for t in replies] if judge.parse_after_thinking else replies


def _score_generative(judge: Judge, items: list[JudgeItem], progress: bool) -> list[Judgment]:
    """The reference: the judge rates how far the answer meets each criterion (0 to 1), multiplies by its weight,
    sums, and replies ``{"reasoning": ..., "score": ...}`` (sampled, by default at temperature 0.6, top-p 0.95). The
    prompt shows two worked examples of that arithmetic and the rubric as its writer wrote it (``rubric_text``).

    An unreadable reply (or one cut before ``</think>``) gives ``None``; a readable score outside [0, 1] is clipped
    (``parse="reference"``: unless ``clamp_scores`` is off). The reasoning is kept, and per-criterion ratings when
    the reasoning gives one per parsed criterion.
    """
    reference = judge.parse != "evolm"
    read = {"reference": parse_judge_score_reference, "rb2": parse_judge_score_rb2}.get(judge.parse, parse_judge_score)
    out = []
    replies, failed = _generate(judge, items, progress, JUDGE_SCHEMA if judge.constrained else None)
    for t, it in zip(_after_thinking(judge, replies), items, strict=True):
        # with the defences on, a score the answer wrote for the judge (echoed back) is no verdict: missing
        score = None if judge.defences and copied_score(t, shown_answer(it, judge.prompt)) else read(t)
        if score is not None and judge.clamp_scores and judge.parse == "reference":
            score = min(1.0, max(0.0, score))  # the rewards' range: "multiply your total by 10" pays no more
        reasoning = parse_judge_reasoning(t, reference=reference)
        criteria = None
        if it.rubric is not None and it.rubric.criteria:
            named = _shares(rubric_criteria(it))
            ratings = parse_criterion_ratings(reasoning, len(named))
            if ratings is not None:
                criteria = tuple(CriterionScore(text, w, r) for (text, w), r in zip(named, ratings, strict=True))
        out.append(Judgment(score, criteria, reasoning))
    return _failed(out, failed)


def _score_scale(judge: Judge, items: list[JudgeItem], progress: bool) -> list[Judgment]:
    """``likert`` (the judge alone rates 1-10; rubric ignored, reference answer shown if any) and ``rar_implicit``
    (one holistic 1-10 rating given the rubric): the rating mapped to [0, 1], with the reply's reasoning."""
    reference = judge.parse != "evolm"  # rb2 has no rating reading of its own: the authors' training one
    read = parse_rating_reference if reference else parse_scale_score
    replies, failed = _generate(judge, items, progress)
    replies = _after_thinking(judge, replies)
    return _failed([Judgment(read(t), reasoning=parse_judge_reasoning(t, reference=reference)) for t in replies],
                   failed)


def _score_prob(judge: Judge, items: list[JudgeItem], progress: bool) -> list[Judgment]:
    """One forward pass per answer: asked for one digit 0-9, the score is the expected digit under the judge's
    next-token distribution, divided by 9; missing only when a server reports no digit among its top tokens.

    A rubric that parses is shown re-rendered (``render_rubric``), not as written: on a small sample it scored
    better than the same rubric as JSON (dev/performance.md, "Judge accuracy: every measurement in one place").
    """
    lps, failed = _ask(judge, "next_token_logprobs", [prob_messages(it, defences=judge.defences) for it in items],
                       DIGITS, chat_template_kwargs=judge.chat_template_kwargs)
    return _failed([Judgment(expected_digit(lp)) for lp in lps], failed)


def _shares(criteria: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """(text, weight over the total weight); weights that do not sum to a positive number are kept as they are."""
    total = sum(w for _, w in criteria)
    if not total > 0 or not math.isfinite(total):
        return criteria
    return [(text, w / total) for text, w in criteria]


def _criterion_p_yes(judge: Judge, items: list[JudgeItem]) -> tuple[list[tuple[CriterionScore, ...]], dict[int, str]]:
    """Per item, each criterion with its share of the weight and its P(Yes): one batched backend call for all; and
    the items with a failed request (item index -> error line)."""
    convs: list[Conversation] = []
    owners: list[tuple[int, str, float]] = []  # (item index, criterion, weight share) per conversation
    for i, it in enumerate(items):
        for text, weight in _shares(rubric_criteria(it)):
            convs.append(yesno_messages(it.question, text, it.answer, defences=judge.defences))
            owners.append((i, text, weight))
    lps, failed = _ask(judge, "next_token_logprobs", convs, ("Yes", "No"),
                       chat_template_kwargs=judge.chat_template_kwargs)
    per_item: list[list[CriterionScore]] = [[] for _ in items]
    for (i, text, w), lp in zip(owners, lps, strict=True):
        per_item[i].append(CriterionScore(text, w, p_yes(lp)))
    item_failed: dict[int, str] = {}
    for k in sorted(failed):
        item_failed.setdefault(owners[k][0], failed[k])
    return [tuple(c) for c in per_item], item_failed


def _weighted(pairs: list[tuple[float, float | None]]) -> float | None:
    """Weighted mean; ``None`` when any criterion has no reading (its weight cannot be dropped silently)."""
    total = sum(w for w, _ in pairs)
    if not total > 0 or not math.isfinite(total) or any(v is None for _, v in pairs):
        return None
    return sum(w * v for w, v in pairs) / total  # type: ignore[operator]


def _score_yesno(judge: Judge, items: list[JudgeItem], progress: bool) -> list[Judgment]:
    """One forward pass per criterion, "does the answer meet it?": the rubric-weighted mean of P(Yes) / (P(Yes) +
    P(No)); missing only as ``prob``. A rubric that does not parse is one criterion of weight 1, its raw text."""
    per_item, failed = _criterion_p_yes(judge, items)
    return _failed([Judgment(_weighted([(c.weight, c.value) for c in crit]), crit) for crit in per_item], failed)


def _score_rar_explicit(judge: Judge, items: list[JudgeItem], progress: bool) -> list[Judgment]:
    """RaR explicit baseline: a criterion is met when P(Yes) > P(No); score = weight met / total weight.

    Same question and forward pass as ``yesno``, read as a verdict rather than a probability: a
    deterministic stand-in for sampling a Yes/No reply per criterion. A judge that reports neither
    word (P(Yes) = P(No)) has not said yes: the criterion counts as unmet. The criteria keep P(Yes).
    """
    per_item, failed = _criterion_p_yes(judge, items)
    return _failed([Judgment(_weighted([(c.weight, None if c.value is None else 1.0 if c.value > 0.5 else 0.0)
                                        for c in crit]), crit) for crit in per_item], failed)


def _score_listwise(judge: Judge, items: list[JudgeItem], progress: bool) -> list[Judgment]:
    """Each group's answers listed in one prompt, one 0-9 reading per answer, averaged over two orders
    (``evolm.judge.listwise``).

    One batched backend call for every group, order and answer. A group whose list does not fit the judge's
    context is judged in parts that do (halves, recursively). A reading with no score token is left out of
    the mean; an answer with none in either order has no score.
    """
    context = context_length(judge.backend, judge.max_context)

    def fits(part: list[int]) -> bool:  # the list prompt asking about its last answer is the longest
        if context is None:
            return True
        shown = [items[i] for i in part]
        n = prompt_tokens(judge.backend, [listwise_messages(shown, len(shown) - 1, defences=judge.defences)],
                          judge.chat_template_kwargs, reads_one_token=True)[0]
        return n <= context - PROBE_RESERVE

    convs, owners = listwise_requests(items, judge.seed, fits, judge.defences)
    lps, failed = _ask(judge, "next_token_logprobs", convs, DIGITS, chat_template_kwargs=judge.chat_template_kwargs)
    return _failed([Judgment(s) for s in listwise_scores(lps, owners, len(items))], failed, owners)


SCORERS: dict[str, Callable[[Judge, list[JudgeItem], bool], list[Judgment]]] = {  # keys: config.JUDGE_MODES
    "generative": _score_generative,
    "prob": _score_prob,
    "yesno": _score_yesno,
    "likert": _score_scale,
    "rar_implicit": _score_scale,
    "rar_explicit": _score_rar_explicit,
    "listwise": _score_listwise,
}
_ONE_PROMPT: dict[str, Callable[..., Conversation]] = {
    "generative": generative_messages, "likert": likert_messages, "rar_implicit": rar_implicit_messages,
    "prob": prob_messages,
}
GENERATIVE_MODES = frozenset({"generative", "likert", "rar_implicit"})
"""Modes that sample a reply (and may give ``None``); the others read next-token probabilities."""


def score_with_judges(judges: Sequence[Judge], items: Sequence[JudgeItem], how: str = "mean") -> list[float | None]:
    """Several judges score the same items; per item, scores are aggregated (``mean`` or ``majority``)."""
    per_judge = [scores_of(j.score(items)) for j in judges]
    return [aggregate_scores([s[k] for s in per_judge], how) for k in range(len(items))]


def build_judge(cfg: JudgeConfig, model: str | None = None, *, seed: int | None = 0, device: str = "auto",
                fallback_dtype: str = "auto", loaded: Any = None, failures: str = "raise") -> Judge:
    """The one way a judge is built, for training (``RunConfig.judge``) and the CLI alike.

    ``model`` overrides ``cfg.model`` (multi-judge training builds one judge per model). ``cfg.dtype == "auto"``:
    float32 on every device, so that a score does not depend on its batch (``backends.devices.judge_dtype``; a reward
    model takes ``fallback_dtype``, training: the policy's). ``loaded``: that model, already loaded and frozen
    (training: TRL's reference model, ``trl_adapter.reference_model``), read instead of loading another copy.
    ``failures``: ``Judge.failures`` (training: ``missing``; the CLI: ``raise`` unless asked otherwise).
    """
    from evolm.backends.devices import judge_dtype
    from evolm.backends.loading import load_backend, load_tokenizer

    if cfg.mode == "reward_model":  # a scalar reward model (the paper's Skywork baseline): no prompt, no rubric
        from evolm.judge.reward_model import load_reward_model

        return load_reward_model(model or cfg.model, device=device,  # type: ignore[return-value]
                                 dtype=fallback_dtype if cfg.dtype == "auto" else cfg.dtype, batch_size=cfg.batch_size,
                                 reading=cfg.reward_model_reading)
    if loaded is not None and cfg.backend == "hf":
        from evolm.backends.hf import HFBackend

        backend: Any = HFBackend(loaded, load_tokenizer(model or cfg.model), batch_size=cfg.batch_size)
    else:
        backend = load_backend(model or cfg.model, backend=cfg.backend, base_url=cfg.base_url,
                               api_key_env=cfg.api_key_env, device=device,
                               dtype=judge_dtype(cfg.dtype, device), batch_size=cfg.batch_size,
                               timeout=cfg.timeout, max_retries=cfg.max_retries, deadline=cfg.deadline,
                               max_concurrency=cfg.max_concurrency, requests_per_minute=cfg.requests_per_minute,
                               tokens_per_minute=cfg.tokens_per_minute, max_reply_mb=cfg.max_reply_mb)
    return Judge(backend, mode=cfg.mode, temperature=cfg.temperature, top_p=cfg.top_p,
                 max_new_tokens=cfg.max_new_tokens, seed=seed, chat_template_kwargs=dict(cfg.chat_template_kwargs),
                 max_context=cfg.max_context, overlong=cfg.overlong, constrained=cfg.constrained,
                 prompt=cfg.prompt, defences=cfg.defences, parse=cfg.parse, seeds=cfg.seeds, failures=failures,
                 parse_after_thinking=cfg.parse_after_thinking, clamp_scores=cfg.clamp_scores)
