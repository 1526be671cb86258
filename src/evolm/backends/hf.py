"""Local transformers backend: batched generation with left padding, and next-token log-probs
with shared-prefix reuse.

``next_token_logprobs`` finds, on token ids, groups of prompts that share a long prefix (the judge's
instructions + question + rubric are the same for every answer to a question) and runs that prefix
once, then only the differing suffixes, batched, on top of its key/value cache.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from evolm.backends.base import Conversation, SamplingParams

MIN_SHARED_PREFIX = 32  # tokens; below this a shared prefix is not worth a separate forward pass


class HFBackend:
    """A transformers causal LM + tokenizer behind the ``Backend`` protocol.

    The model may be one a trainer is updating: calls run under ``torch.no_grad`` in eval mode
    and restore the model's training flag afterwards.
    """

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 8, share_prefix: bool = True) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = max(1, int(batch_size))
        self.share_prefix = share_prefix
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._candidate_ids: dict[str, list[int]] = {}
        # transformers >= 5.2x names the KV cache argument ``cache``; earlier 5.x ``past_key_values``.
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    # ------------------------------------------------------------------ helpers

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _encode(self, conversations: Sequence[Conversation], template_kwargs: dict[str, Any]) -> list[list[int]]:
        out = []
        for conv in conversations:
            ids = self.tokenizer.apply_chat_template(
                list(conv), tokenize=True, add_generation_prompt=True, **template_kwargs
            )
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer transformers
                ids = ids["input_ids"]
            out.append(list(ids))
        return out

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
        self, conversations: Sequence[Conversation], params: SamplingParams, *, progress: bool = False
    ) -> list[str]:
        """One completion per conversation; rows are batched by similar length to limit padding."""
        if not conversations:
            return []
        encoded = self._encode(conversations, params.chat_template_kwargs)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        results: list[str] = [""] * len(encoded)
        sample = params.temperature > 0
        kwargs: dict[str, Any] = {"max_new_tokens": params.max_new_tokens, "do_sample": sample}
        if sample:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
        was_training = self.model.training
        self.model.eval()
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        try:
            for b, idx in enumerate(tqdm(batches, desc="generate", disable=not progress, unit="batch")):
                if params.seed is not None:
                    torch.manual_seed(params.seed + b)
                ids, mask = self._left_pad([encoded[i] for i in idx])
                with torch.no_grad():
                    out = self.model.generate(
                        input_ids=ids,
                        attention_mask=mask,
                        pad_token_id=self.tokenizer.pad_token_id,
                        use_cache=True,
                        **kwargs,
                    )
                texts = self.tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
                for i, t in zip(idx, texts, strict=True):
                    results[i] = t.strip()
        finally:
            self.model.train(was_training)
        return results

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
        """Log-probability of each candidate as the first reply token (log-sum-exp over its spellings)."""
        if not conversations:
            return []
        encoded = self._encode(conversations, dict(chat_template_kwargs or {}))
        logits = self.last_token_logits(encoded)  # [N, V]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        out = []
        cand_ids = {c: self.candidate_token_ids(c) for c in candidates}
        for row in logprobs:
            d = {}
            for c, ids in cand_ids.items():
                d[c] = torch.logsumexp(row[ids], dim=0).item() if ids else -math.inf
            out.append(d)
        return out

    def last_token_logits(self, encoded: list[list[int]]) -> torch.Tensor:
        """Logits after the last token of each sequence: ``[N, vocab]``, shared prefixes computed once."""
        groups = _prefix_groups(encoded, MIN_SHARED_PREFIX) if self.share_prefix else [([i], 0) for i in range(len(encoded))]
        result: list[torch.Tensor | None] = [None] * len(encoded)
        singles = [g[0][0] for g in groups if len(g[0]) == 1 or g[1] == 0]
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                singles.sort(key=lambda i: len(encoded[i]))
                for s in range(0, len(singles), self.batch_size):
                    idx = singles[s : s + self.batch_size]
                    ids, mask = self._left_pad([encoded[i] for i in idx])
                    logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, -1, :]
                    for i, row in zip(idx, logits, strict=True):
                        result[i] = row
                for members, shared in groups:
                    if len(members) == 1 or shared == 0:
                        continue
                    for i, row in zip(members, self._shared_prefix_logits(encoded, members, shared), strict=True):
                        result[i] = row
        finally:
            self.model.train(was_training)
        return torch.stack([r for r in result if r is not None])

    def _shared_prefix_logits(self, encoded: list[list[int]], members: list[int], shared: int) -> list[torch.Tensor]:
        prefix = torch.tensor([encoded[members[0]][:shared]], dtype=torch.long, device=self.device)
        out = self.model(input_ids=prefix, use_cache=True)
        prefix_cache = out.cache if self._cache_kw == "cache" else out.past_key_values  # [1, heads, P, d] per layer
        rows: list[torch.Tensor] = []
        pad = self.tokenizer.pad_token_id
        for s in range(0, len(members), self.batch_size):
            idx = members[s : s + self.batch_size]
            suffixes = [encoded[i][shared:] for i in idx]
            width = max(len(x) for x in suffixes)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)  # right-padded: [B, S]
            mask = torch.zeros((len(idx), shared + width), dtype=torch.long)  # prefix + suffix: [B, P+S]
            mask[:, :shared] = 1
            for r, x in enumerate(suffixes):
                ids[r, : len(x)] = torch.tensor(x, dtype=torch.long)
                mask[r, shared : shared + len(x)] = 1
            positions = torch.arange(shared, shared + width).unsqueeze(0).expand(len(idx), -1)
            cache = copy.deepcopy(prefix_cache)
            cache.batch_repeat_interleave(len(idx))
            logits = self.model(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                position_ids=positions.to(self.device),
                use_cache=True,
                **{self._cache_kw: cache},
            ).logits  # [B, S, V]
            last = torch.tensor([len(x) - 1 for x in suffixes], device=logits.device)
            rows.extend(logits[torch.arange(len(idx), device=logits.device), last])
        return rows


def _prefix_groups(encoded: list[list[int]], min_shared: int) -> list[tuple[list[int], int]]:
    """Partition sequence indices into groups sharing a token prefix of at least ``min_shared``.

    Returns ``(members, shared_len)``; ``shared_len`` leaves every member at least one own token,
    and is 0 for sequences that share nothing worth reusing.

    >>> _prefix_groups([[1, 2, 3, 4], [1, 2, 3, 5], [9, 9]], 2)
    [([0, 1], 3), ([2], 0)]
    """
    order = sorted(range(len(encoded)), key=lambda i: encoded[i])
    groups: list[tuple[list[int], int]] = []
    members: list[int] = []
    shared = 0
    for i in order:
        if not members:
            members, shared = [i], len(encoded[i]) - 1
            continue
        prev = encoded[members[-1]]
        cur = encoded[i]
        lcp = 0
        limit = min(len(prev), len(cur), shared + 1)
        while lcp < limit and prev[lcp] == cur[lcp]:
            lcp += 1
        new_shared = min(shared, lcp, len(cur) - 1)
        if new_shared >= min_shared:
            members.append(i)
            shared = new_shared
        else:
            groups.append((sorted(members), shared if len(members) > 1 else 0))
            members, shared = [i], len(cur) - 1
    if members:
        groups.append((sorted(members), shared if len(members) > 1 else 0))
    return groups
