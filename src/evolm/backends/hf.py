"""Local transformers backend: batched generation with left padding, and next-token log-probs
with shared-prefix reuse.

``next_token_logprobs`` finds, on token ids, groups of prompts that share a long prefix (``backends.prefix``: the
judge's instructions once for all, then the question and answer that every criterion of an answer shares) and runs
each prefix once, several groups side by side, then only the differing suffixes, batched, on top of their key/value
caches.

Thinking templates (Qwen3 and the like, detected by what the template renders): the
one-token read of ``next_token_logprobs`` is placed after a closed, empty think block
(``close_thinking``), whatever ``enable_thinking`` says, so that it reads the reply and not the
model's wish to start thinking; ``generate`` puts a think block opened by the template back in
front of the reply (``opened_thinking``), so that a reply cut while thinking reads as unfinished.
"""

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
    BAR_REFRESH_S,
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
from evolm.backends.prefix import MIN_SHARED_PREFIX, cache_rows, common_length, prefix_groups


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
    evolm loads itself, ``models.whole_model``), so generation never waits for the other processes. Left unset,
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
        width = max(len(x) for x in batch)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, x in enumerate(batch):
            ids[i, width - len(x) :] = torch.tensor(x, dtype=torch.long)
            mask[i, width - len(x) :] = 1
        return ids.to(self.device), mask.to(self.device)

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
            on_rows, on_tokens = _with_bar(bar, on_rows, on_tokens)
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
                        kwargs["stopping_criteria"] = [_RowsEnded(stop_ids, len(idx), on_rows, on_tokens)]
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
        """Logits after the last token of each sequence: ``[N, vocab]``, shared prefixes computed once.

        Two levels: the prefix every sequence shares (a judge's system turn and instructions, the same for every
        question) runs once per call; each group's longer prefix (its question and answer, or question and rubric)
        continues from a copy of it, several groups side by side; each member's own tokens (a criterion) continue
        from a copy of its group's, several members side by side (``_grouped_logits``).
        """
        common = common_length(encoded) if self.share_prefix and len(encoded) > 1 else 0
        common = common if common >= MIN_SHARED_PREFIX else 0
        rest = [e[common:] for e in encoded]  # groups are chosen on what follows the common prefix
        groups = (prefix_groups(rest, MIN_SHARED_PREFIX) if self.share_prefix
                  else [([i], 0) for i in range(len(encoded))])
        result: list[torch.Tensor | None] = [None] * len(encoded)
        singles = [g[0][0] for g in groups if len(g[0]) == 1 or g[1] == 0]
        multi = [(members, common + shared) for members, shared in groups if len(members) > 1 and shared > 0]
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                base = self._prefix_cache(encoded[0][:common]) if common else None
                if base is not None and singles:  # the ungrouped sequences still share the common prefix
                    multi.append((singles, common))
                    singles = []
                singles.sort(key=lambda i: len(encoded[i]))  # similar lengths together: less padding
                for s in range(0, len(singles), self.batch_size):
                    idx = singles[s : s + self.batch_size]
                    ids, mask = self._left_pad([encoded[i] for i in idx])  # left-padded: last column = last token
                    logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False,
                                        **self._last_only).logits[:, -1, :]  # [B, V]
                    for i, row in zip(idx, logits, strict=True):
                        result[i] = row
                for i, row in self._grouped_logits(encoded, multi, base, common).items():
                    result[i] = row
        finally:
            self.model.train(was_training)
        return torch.stack([r for r in result if r is not None])

    def _prefix_cache(self, tokens: list[int]) -> Any:
        """The KV cache after ``tokens``: ``[1, heads, P, d]`` per layer."""
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        return self._cache_of(self.model(input_ids=ids, use_cache=True, **self._last_only))

    def _cache_of(self, out: Any) -> Any:
        """The KV cache a forward pass returned, under either of its names (``cache_kwarg``)."""
        return out.cache if self._cache_kw == "cache" else out.past_key_values

    def _grouped_logits(self, encoded: list[list[int]], groups: list[tuple[list[int], int]], base: Any,
                        common: int) -> dict[int, torch.Tensor]:
        """Last-token logits of every member of ``groups`` (``(members, shared)``: their first ``shared`` tokens are
        equal), by sequence index.

        Batched across groups, so that short parts run as one forward pass, not one each (on a CPU a pass of
        1 x 32 tokens costs about 3x more per token than 8 x 32): up to ``batch_size`` groups at a time run their
        own prefixes (what follows the ``common`` tokens of ``base``, a cache nothing changes) side by side,
        right-padded; then their members' suffixes run in batches of ``batch_size``, each row on a copy of its
        group's cache row, *left*-padded between that prefix and their own tokens. Padding is masked and positions
        are given explicitly, so every row's last token is the batch's last column and only that column goes
        through the lm_head.
        """
        rows: dict[int, torch.Tensor] = {}
        pad = self.tokenizer.pad_token_id
        order = sorted(groups, key=lambda g: g[1])  # similar prefix lengths together: less padding
        for s in range(0, len(order), self.batch_size):
            chunk = order[s : s + self.batch_size]
            cache, prefix_mask = self._group_caches(encoded, chunk, base, common)  # [G, heads, W, d], [G, W]
            width_p = prefix_mask.shape[1]
            members = sorted(((i, g) for g, (ms, _) in enumerate(chunk) for i in ms),
                             key=lambda m: len(encoded[m[0]]) - chunk[m[1]][1])  # by suffix length
            for t in range(0, len(members), self.batch_size):
                batch = members[t : t + self.batch_size]
                suffixes = [encoded[i][chunk[g][1] :] for i, g in batch]
                width = max(len(x) for x in suffixes)
                ids = torch.full((len(batch), width), pad, dtype=torch.long)  # left-padded suffixes: [B, S]
                mask = torch.zeros((len(batch), width_p + width), dtype=torch.long)  # group prefix + suffix
                positions = torch.zeros((len(batch), width), dtype=torch.long)  # pads: any position, masked
                for r, ((_, g), x) in enumerate(zip(batch, suffixes, strict=True)):
                    shared = chunk[g][1]
                    ids[r, width - len(x) :] = torch.tensor(x, dtype=torch.long)
                    mask[r, :width_p] = prefix_mask[g]
                    mask[r, width_p + width - len(x) :] = 1
                    positions[r] = shared
                    positions[r, width - len(x) :] = torch.arange(shared, shared + len(x))
                rows_cache = cache_rows(cache, [g for _, g in batch], self.device)
                logits = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    position_ids=positions.to(self.device),
                    use_cache=True,
                    **{self._cache_kw: rows_cache},
                    **self._last_only,
                ).logits[:, -1, :]  # [B, V]
                rows.update(zip((i for i, _ in batch), logits, strict=True))
        return rows

    def _group_caches(self, encoded: list[list[int]], chunk: list[tuple[list[int], int]], base: Any,
                      common: int) -> tuple[Any, torch.Tensor]:
        """The KV cache of each group's prefix, one row per group (``base``, the cache of the ``common`` tokens,
        continued by what the group shares beyond them, right-padded), and the attention mask of those rows."""
        parts = [encoded[members[0]][common:shared] for members, shared in chunk]
        width = max(len(p) for p in parts)
        mask = torch.zeros((len(chunk), common + width), dtype=torch.long)
        mask[:, :common] = 1
        cache = None if base is None else cache_rows(base, [0] * len(chunk), self.device)  # base's row per group
        if width == 0:  # the groups are the common prefix alone
            return cache, mask
        ids = torch.full((len(chunk), width), self.tokenizer.pad_token_id, dtype=torch.long)
        for r, part in enumerate(parts):
            ids[r, : len(part)] = torch.tensor(part, dtype=torch.long)
            mask[r, common : common + len(part)] = 1
        positions = torch.arange(common, common + width)[None].expand(len(chunk), -1)
        out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                         position_ids=positions.to(self.device), use_cache=True,
                         **({} if cache is None else {self._cache_kw: cache}), **self._last_only)
        return self._cache_of(out), mask


class _RowsEnded:
    """A stopping criterion that stops nothing: after each decoding step it tells ``on_tokens`` how many rows were
    still generating (one token each) and ``on_rows`` how many rows of the batch ended (their last token one of
    ``stop_ids``) since the step before, and at ``finish`` the rows that never ended (the budget)."""

    def __init__(self, stop_ids: list[int], rows: int, on_rows: Callable[[int], None] | None,
                 on_tokens: Callable[[int], None] | None = None) -> None:
        self.stop_ids, self.on_rows, self.on_tokens = torch.tensor(stop_ids, dtype=torch.long), on_rows, on_tokens
        self.ended = torch.zeros(rows, dtype=torch.bool)

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        if self.on_tokens is not None:
            self.on_tokens(int((~self.ended).sum()))
        now = torch.isin(input_ids[:, -1].cpu(), self.stop_ids) & ~self.ended
        if now.any():
            self.ended |= now
            if self.on_rows is not None:
                self.on_rows(int(now.sum()))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def finish(self) -> None:
        if (left := int((~self.ended).sum())) > 0:
            self.ended[:] = True
            if self.on_rows is not None:
                self.on_rows(left)


def _with_bar(bar: Any, on_rows: Callable[[int], None] | None, on_tokens: Callable[[int], None] | None
              ) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """``on_rows`` / ``on_tokens`` that also move ``bar``: a row per finished reply, the tokens so far beside it."""
    state = {"tokens": 0, "drawn": 0.0}

    def rows(n: int) -> None:
        bar.update(n)
        if on_rows is not None:
            on_rows(n)

    def tokens(n: int) -> None:
        state["tokens"] += n
        bar.set_postfix_str(f"{state['tokens']} tokens", refresh=False)
        if (now := time.monotonic()) - state["drawn"] >= BAR_REFRESH_S:
            state["drawn"] = now
            bar.refresh()
        if on_tokens is not None:
            on_tokens(n)
    return rows, tokens


def model_vocab_size(model: Any) -> int:
    """The width of the model's logits (``config.vocab_size``; often more than the tokenizer's length)."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(size) if size else int(model.get_output_embeddings().weight.shape[0])


def generation_stop_ids(model: Any, tokenizer: Any, eos: Any = None) -> list[int]:
    """The tokens ``generate`` stops on: ``eos`` if given, else the model's generation config's, else the
    tokenizer's EOS."""
    if eos is None:
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    return [int(i) for i in ids]


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
