"""Local transformers backend: batched generation with left padding (``generate``), and next-token log-probs with
each shared prefix run once (``next_token_logprobs``, ``evolm.backends.prefix``). With a thinking template the
one-token read follows an empty think block, and a think block the template opened goes back in front of a reply."""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from tqdm.auto import tqdm

from evolm.backends.base import (
    ESCAPE_MARK,
    THINK_CLOSE,
    THINK_OPEN,
    Conversation,
    SamplingParams,
    close_thinking,
    control_pattern,
    control_strings,
    escaped_pattern,
    neutralise_conversation,
    opened_thinking,
    tokenizer_thinks,
)
from evolm.backends.constrained import logits_processor, reply_start
from evolm.backends.context import model_context_length
from evolm.backends.pool import Usage
from evolm.backends.prefix import PrefixForward, left_pad
from evolm.backends.stopping import RowsEnded, generation_stop_ids, with_bar


def cache_kwarg(model: Any) -> str:
    """The KV cache's name in ``model``'s forward arguments and outputs: transformers >= 5.2x names it ``cache`` (the
    old ``past_key_values`` still works there but warns), earlier 5.x ``past_key_values``. A PEFT wrapper's forward
    takes ``**kwargs``, so its base model is asked."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


class HFBackend:
    """A transformers causal LM + tokenizer behind the ``Backend`` protocol.

    The model may be one a trainer is updating: calls run under ``torch.no_grad`` in eval mode
    and restore the model's training flag afterwards.

    ``thinking`` says whether the chat template makes the reply think; ``None`` detects it
    (``tokenizer_thinks``).

    Untrusted text cannot become a control token: before the template renders a conversation,
    every string the tokenizer would read as a special or markup token (``control_strings``:
    ``<|im_end|>``, ``<|im_start|>``, ``<think>``...) and any ``<|...|>`` in a system or user
    message is broken by a zero-width space (``neutralise_text``). The rendered prompt is then
    tokenized as a whole, so the template's own control tokens stay real and the ids are those of
    an ordinary prompt. Without this, an answer that writes ``<|im_end|>\\n<|im_start|>assistant``
    (typed, or decoded from ordinary pieces and re-encoded here) ends the judge's turn and
    speaks for it. ``escape_special=False`` turns it off (``bench/security/steering.py`` measures both).

    ``usage`` counts what the backend ran, as a server's ``usage`` would (``evolm.backends.pool.Usage``):
    requests (prompts), prompt tokens, generated tokens (a next-token read counts one), seconds.

    ``synced_gpus`` goes to ``model.generate``. ``False`` (default): the model is whole on this process (every model
    evolm loads itself, ``loading.whole_model``), so generation never waits for the other processes. Left unset,
    transformers turns it on under ZeRO-3 with several processes: an all_reduce per generated token, which deadlocks
    as soon as the processes make different numbers of calls (judge cache hits, held-out judging on the main process
    only). ``None`` lets transformers decide: the policy while TRL trains it (``trl_adapter.TrainerGenerate``), whose
    ZeRO-3 shards every process must gather together.
    """

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 8, share_prefix: bool = True,
                 thinking: bool | None = None, escape_special: bool = True, synced_gpus: bool | None = False) -> None:
        self.model = model
        self.synced_gpus = synced_gpus
        self.tokenizer = tokenizer
        self.batch_size = max(1, int(batch_size))
        self.share_prefix = share_prefix
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.thinking = tokenizer_thinks(tokenizer) if thinking is None else thinking
        self._think_tags = _skipped_think_tags(tokenizer) if self.thinking else {}
        self.escape_special = escape_special
        controls = control_strings(tokenizer)
        self._controls, self._escaped = control_pattern(controls), escaped_pattern(controls)
        self._candidate_ids: dict[str, list[int]] = {}
        params = inspect.signature(model.forward).parameters
        self._cache_kw = cache_kwarg(model)
        # Only the last position's logits are needed: ``logits_to_keep=1`` skips the lm_head on every
        # other position (for SmolLM2 a fifth of the FLOPs and a [B, L, 49152] float tensor per batch).
        self._last_only: dict[str, Any] = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self.usage = Usage()

    # ------------------------------------------------------------------ helpers

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def context_length(self) -> int | None:
        """The model's context in tokens (``evolm.context.model_context_length``); ``None`` when its config does not
        say."""
        return model_context_length(self.model, self.tokenizer)

    def count_tokens(self, conversations: Sequence[Conversation], chat_template_kwargs: dict[str, Any] | None = None,
                     *, after_thinking: bool = False) -> list[int]:
        """Prompt length in tokens of each conversation, as ``generate`` (with ``after_thinking``: as
        ``next_token_logprobs``) encodes it: the context guard's exact count (``evolm.context``)."""
        encoded = self._encode(conversations, dict(chat_template_kwargs or {}), after_thinking=after_thinking)
        return [len(ids) for ids in encoded]

    def _render(self, conversations: Sequence[Conversation], template_kwargs: dict[str, Any]) -> list[str]:
        """The chat template's text for each conversation, ending with the assistant's generation prompt.

        Control strings in untrusted messages are neutralised first (see the class docstring).
        """
        return [
            self.tokenizer.apply_chat_template(
                neutralise_conversation(conv, self._controls) if self.escape_special else list(conv),
                tokenize=False, add_generation_prompt=True, **template_kwargs
            )
            for conv in conversations
        ]

    def _tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of rendered prompts, as ``apply_chat_template(tokenize=True)`` gives them (no added BOS).

        Control strings that ``_render`` neutralised are encoded as their own characters split into
        ordinary pieces (``split_special_tokens``), not with the zero-width mark: the judge reads
        ``<|im_end|>`` as the text it is, and the template's own control tokens stay real.
        """
        return [self._ids(text) for text in texts]

    def _ids(self, text: str) -> list[int]:
        def plain(segment: str, split: bool = False) -> list[int]:
            if not segment:
                return []
            kwargs = {"split_special_tokens": True} if split else {}
            return list(self.tokenizer(segment, add_special_tokens=False, **kwargs)["input_ids"])

        if not self.escape_special or ESCAPE_MARK not in text:
            return plain(text)
        ids: list[int] = []
        pos = 0
        for m in self._escaped.finditer(text):
            ids += plain(text[pos : m.start()]) + plain(m.group(0).replace(ESCAPE_MARK, ""), split=True)
            pos = m.end()
        return ids + plain(text[pos:])

    def _encode(
        self, conversations: Sequence[Conversation], template_kwargs: dict[str, Any], *, after_thinking: bool = False
    ) -> list[list[int]]:
        """Prompt ids; with ``after_thinking`` (thinking templates only) ending after an empty think block."""
        texts = self._render(conversations, template_kwargs)
        if after_thinking and self.thinking:
            texts = [close_thinking(t) for t in texts]
        return self._tokenize(texts)

    def _decode(self, row: Sequence[int]) -> str:
        """A reply's text without special tokens, but with its think tags even where the tokenizer calls them special.

        Qwen3's tags are plain added tokens, so ``skip_special_tokens`` keeps them; a tokenizer that
        marks them special would hand the judge its reasoning as if it were the reply.
        """
        if not self._think_tags:
            return self.tokenizer.decode(row, skip_special_tokens=True)
        parts: list[str] = []
        start = 0
        for k, token in enumerate(row):
            if token in self._think_tags:
                parts += [self.tokenizer.decode(row[start:k], skip_special_tokens=True), self._think_tags[token]]
                start = k + 1
        parts.append(self.tokenizer.decode(row[start:], skip_special_tokens=True))
        return "".join(parts)

    def _left_pad(self, batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        return left_pad(batch, self.tokenizer.pad_token_id, self.device)

    # ------------------------------------------------------------------ generate

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams, *, progress: bool = False,
        on_rows: Callable[[int], None] | None = None, on_tokens: Callable[[int], None] | None = None,
    ) -> list[str]:
        """One completion per conversation; rows are batched by similar length to limit padding.

        ``on_rows(n)`` is told as ``n`` more rows finish: a row as its reply ends (end of sequence), the rows
        that ran to ``max_new_tokens`` when their batch ends (``evolm rubric``'s progress bar); ``on_tokens(n)``
        after each decoding step, ``n`` the rows of the batch still generating. ``progress`` shows a bar of rows
        with the tokens generated so far, so a batch of long replies never looks hung.

        A think block the template opened in the prompt is put back in front of the reply. With
        ``params.json_schema`` every batch decodes under it, through its own xgrammar processor (one
        grammar per row: each row's prompt says whether a think block may come first).

        ``params.seed`` seeds batch ``b`` with ``seed + b`` inside a forked RNG: the caller's random stream
        continues afterwards as if this call had not run (in training, TRL's per-process stream, seeded
        ``device_specific``, so a group of answers split over several processes gets distinct samples).
        """
        if not conversations:
            return []
        started = time.monotonic()
        encoded, opened, starts = self.prompts(conversations, params)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        generated = 0
        results: list[str] = [""] * len(encoded)
        sample = params.temperature > 0
        kwargs: dict[str, Any] = {"max_new_tokens": params.max_new_tokens, "do_sample": sample}
        if sample:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
        was_training = self.model.training
        self.model.eval()
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        bar = tqdm(total=len(encoded), desc="generate", unit="row", disable=not progress)
        if progress:
            on_rows, on_tokens = with_bar(bar, on_rows, on_tokens)
        watch = on_rows is not None or on_tokens is not None
        stop_ids = generation_stop_ids(self.model, self.tokenizer) if watch else []
        try:
            with torch.random.fork_rng(devices=devices, enabled=params.seed is not None):
                for b, idx in enumerate(batches):
                    if params.seed is not None:
                        torch.manual_seed(params.seed + b)
                    ids, mask = self._left_pad([encoded[i] for i in idx])
                    if starts is not None:  # a fresh processor per generate() call, sized to this batch
                        kwargs["logits_processor"] = [self._grammar(params.json_schema, [starts[i] for i in idx])]
                    if watch:  # stops nothing: tells on_rows as rows end, on_tokens at each step
                        kwargs["stopping_criteria"] = [RowsEnded(stop_ids, len(idx), on_rows, on_tokens)]
                    with torch.no_grad():
                        out = self.model.generate(
                            input_ids=ids,
                            attention_mask=mask,
                            pad_token_id=self.tokenizer.pad_token_id,
                            use_cache=True,
                            synced_gpus=self.synced_gpus,
                            **kwargs,
                        )
                    if watch:
                        kwargs["stopping_criteria"][0].finish()
                    for i, row in zip(idx, out[:, ids.shape[1] :].tolist(), strict=True):
                        results[i] = self.reply(row, opened[i])
                        n = len(row)
                        while n and row[n - 1] == self.tokenizer.pad_token_id:  # padding after an early stop
                            n -= 1
                        generated += n
        finally:
            self.model.train(was_training)
            bar.close()
        self._count(len(encoded), sum(map(len, encoded)), generated, started)
        return results

    def _count(self, requests: int, prompt_tokens: int, generated: int, started: float) -> None:
        self.usage += Usage(requests=requests, prompt_tokens=prompt_tokens, completion_tokens=generated,
                            latency_s=time.monotonic() - started)

    def prompts(self, conversations: Sequence[Conversation], params: SamplingParams
                ) -> tuple[list[list[int]], list[str], list[str] | None]:
        """What ``generate`` feeds the model: each conversation's prompt ids, the think block its prompt opened (put
        back in front of the reply), and, with ``params.json_schema``, where its grammar starts (``REPLY_*``)."""
        texts = self._render(conversations, params.chat_template_kwargs)
        opened = [opened_thinking(t) if self.thinking else "" for t in texts]
        starts = [reply_start(t, self.thinking) for t in texts] if params.json_schema is not None else None
        return self._tokenize(texts), opened, starts

    def reply(self, row: Sequence[int], opened: str = "") -> str:
        """A generated row's reply text (tokens after the prompt), as ``generate`` returns it."""
        return (opened + self._decode(row)).strip()

    def _grammar(self, schema: dict[str, Any], starts: list[str]) -> Any:
        """An xgrammar logits processor for one ``generate()`` call; it stops where ``generate`` does."""
        return logits_processor(self.tokenizer, model_vocab_size(self.model), schema, starts,
                                generation_stop_ids(self.model, self.tokenizer))

    # ------------------------------------------------------------------ next-token log-probs

    def candidate_token_ids(self, candidate: str) -> list[int]:
        """Vocabulary ids whose text, stripped and lower-cased, equals the candidate's (e.g. 'Yes', ' yes')."""
        key = candidate.strip().lower()
        if key not in self._candidate_ids:
            ids = set()
            for variant in {candidate, candidate.strip(), " " + candidate.strip(), key, " " + key,
                            key.capitalize(), " " + key.capitalize(), key.upper()}:
                toks = self.tokenizer.encode(variant, add_special_tokens=False)
                if len(toks) == 1 and self.tokenizer.decode(toks).strip().lower() == key:
                    ids.add(toks[0])
            self._candidate_ids[key] = sorted(ids)
        return self._candidate_ids[key]

    def next_token_logprobs(
        self,
        conversations: Sequence[Conversation],
        candidates: Sequence[str],
        *,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> list[dict[str, float]]:
        """Log-probability of each candidate as the first reply token (log-sum-exp over its spellings).

        With a thinking template the read is after an empty think block (``close_thinking``), so that
        a thinking judge (Qwen3, ``enable_thinking`` on or off) gives its score, not ``<think>``.
        """
        if not conversations:
            return []
        started = time.monotonic()
        encoded = self._encode(conversations, dict(chat_template_kwargs or {}), after_thinking=True)
        logits = self.last_token_logits(encoded)  # [N, V]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        out = []
        cand_ids = {c: self.candidate_token_ids(c) for c in candidates}
        for row in logprobs:
            d = {}
            for c, ids in cand_ids.items():
                d[c] = torch.logsumexp(row[ids], dim=0).item() if ids else -math.inf
            out.append(d)
        self._count(len(encoded), sum(map(len, encoded)), len(encoded), started)
        return out

    def last_token_logits(self, encoded: list[list[int]]) -> torch.Tensor:
        """Logits after the last token of each sequence: ``[N, vocab]``, shared prefixes computed once
        (``PrefixForward``); with ``share_prefix`` off, each sequence runs whole."""
        forward = PrefixForward(self.model, self.tokenizer.pad_token_id, self.batch_size, self._cache_kw,
                                self._last_only)
        return forward.last_token_logits(encoded, self.share_prefix)


def model_vocab_size(model: Any) -> int:
    """The width of the model's logits (``config.vocab_size``; often more than the tokenizer's length)."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(size) if size else int(model.get_output_embeddings().weight.shape[0])


@contextmanager
def grammar_generate(model: Any, tokenizer: Any, schema: dict[str, Any], thinking: bool) -> Iterator[None]:
    """``model.generate`` constrained to ``schema`` while the block runs, then restored.

    For code that calls ``model.generate`` itself (TRL's trainer: ``trl_adapter`` contract item 5); ``HFBackend``
    adds its processor directly. Each call gets one fresh xgrammar processor sized to its batch, each row's grammar
    starting where its (left-padded) prompt ends. The shadow is an instance attribute: a wrapper already there is
    put back afterwards.
    """
    generate = model.generate

    def constrained_generate(*args: Any, **kwargs: Any) -> Any:
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]  # [B, L], left-padded
        starts = [reply_start(tokenizer.decode(row[-16:].tolist()), thinking) for row in ids]  # the prompts' ends
        config = kwargs.get("generation_config")
        stops = generation_stop_ids(model, tokenizer, getattr(config, "eos_token_id", None))
        grammar = logits_processor(tokenizer, model_vocab_size(model), schema, starts, stops)
        kwargs["logits_processor"] = [*(kwargs.get("logits_processor") or []), grammar]
        return generate(*args, **kwargs)

    shadowed = model.__dict__.get("generate")  # an instance attribute already there (another wrapper, or none)
    model.generate = constrained_generate
    try:
        yield
    finally:
        if shadowed is None:
            del model.generate
        else:
            model.generate = shadowed


def _skipped_think_tags(tokenizer: Any) -> dict[int, str]:
    """Ids of think tags that ``decode(skip_special_tokens=True)`` would drop, with their text."""
    tags: dict[int, str] = {}
    for tag in (THINK_OPEN, THINK_CLOSE):
        ids = tokenizer.encode(tag, add_special_tokens=False)
        if len(ids) == 1 and tokenizer.decode(ids) == tag and tokenizer.decode(ids, skip_special_tokens=True) == "":
            tags[ids[0]] = tag
    return tags
