"""Shared prefixes of token sequences: which prompts share one (a judge's instructions, question and answer), and the
forward passes that compute each shared prefix once and continue every sequence from a copy of its KV cache
(``PrefixForward``, behind ``HFBackend.next_token_logprobs``)."""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import torch

MIN_SHARED_PREFIX = 32  # tokens; below this a shared prefix is not worth a separate forward pass


def prefix_groups(encoded: list[list[int]], min_shared: int) -> list[tuple[list[int], int]]:
    """Partition sequence indices into groups sharing a token prefix, so as to compute the fewest tokens.

    Returns ``(members, shared_len)``; ``shared_len`` (at least ``min_shared``) leaves every member
    at least one own token, and is 0 for sequences that share nothing worth reusing.

    Every answer to a question shares the judge's instructions *and* the question and rubric, but
    answers to different questions share only the instructions. Grouping everything that shares
    anything would cut every group down to the instructions. Instead groups are chosen for the
    tokens they save, ``(n - 1) * s`` for ``n`` members sharing ``s``: in sorted order, runs form
    a tree (a run splits into parts where the LCP of neighbours is smallest), and at each run a
    linear pass picks which consecutive parts to merge at that LCP and which to leave to their
    own best grouping (ties merge: fewer forward passes). That never saves less than merging whole
    runs greedily, and finds the per-question groups above; against exhaustive search over runs
    of 3,000 random short token lists it fell short in 8 contrived cases.

    >>> prefix_groups([[1, 2, 3, 4], [1, 2, 3, 5], [9, 9]], 2)
    [([0, 1], 3), ([2], 0)]
    >>> prefix_groups([[7, 7, 1, 1, 1], [7, 7, 1, 1, 2], [7, 7, 2, 2, 1], [7, 7, 2, 2, 2]], 2)
    [([0, 1], 4), ([2, 3], 4)]
    """
    order = sorted(range(len(encoded)), key=lambda i: encoded[i])
    if not order:
        return []
    # LCP of sorted neighbours, capped so that each keeps at least one own token: [N - 1]
    lcp = [min(_common_prefix(encoded[a], encoded[b]), len(encoded[a]) - 1, len(encoded[b]) - 1)
           for a, b in itertools.pairwise(order)]
    # The tree of runs [lo, hi] (sorted positions), parents before children.
    runs: list[tuple[int, int, int, list[int]]] = []  # (lo, hi, shared, children)
    todo = [(0, len(order) - 1, -1)]
    while todo:
        lo, hi, parent = todo.pop()
        shared = min(lcp[lo:hi]) if hi > lo else 0
        runs.append((lo, hi, shared, []))
        if parent >= 0:
            runs[parent][3].append(len(runs) - 1)
        if hi > lo:
            cuts = [k for k in range(lo, hi) if lcp[k] == shared]
            for a, b in zip([lo] + [k + 1 for k in cuts], cuts + [hi], strict=True):
                todo.append((a, b, len(runs) - 1))
    # Bottom-up: best saving of each run; merge[r][j] = i when parts i..j-1 of run r form one group.
    saving = [0] * len(runs)
    merge: list[list[int | None]] = [[] for _ in runs]
    for r in range(len(runs) - 1, -1, -1):  # children were appended after their parent
        lo, hi, shared, children = runs[r]
        if hi == lo:
            continue
        children.sort(key=lambda c: runs[c][0])
        sizes = [0]  # prefix sums of part sizes
        for c in children:
            sizes.append(sizes[-1] + runs[c][1] - runs[c][0] + 1)
        best = [0] * (len(children) + 1)
        choice: list[int | None] = [None] * (len(children) + 1)
        top, top_i = -math.inf, 0  # max over i <= j - 2 of best[i] - sizes[i] * shared
        for j in range(1, len(children) + 1):
            best[j] = best[j - 1] + saving[children[j - 1]]
            if j >= 2 and shared >= min_shared:
                if best[j - 2] - sizes[j - 2] * shared > top:
                    top, top_i = best[j - 2] - sizes[j - 2] * shared, j - 2
                merged = top + (sizes[j] - 1) * shared
                if merged >= best[j]:
                    best[j], choice[j] = int(merged), top_i
        saving[r], merge[r] = best[-1], choice
    groups: list[tuple[int, list[int], int]] = []  # (first sorted position, members, shared)
    stack = [0]
    while stack:
        r = stack.pop()
        lo, hi, shared, children = runs[r]
        if hi == lo:
            groups.append((lo, [order[lo]], 0))
            continue
        j = len(children)
        while j > 0:
            i = merge[r][j]
            if i is None:
                stack.append(children[j - 1])
                j -= 1
            else:
                first, last = runs[children[i]][0], runs[children[j - 1]][1]
                groups.append((first, sorted(order[first : last + 1]), shared))
                j = i
    return [(members, shared) for _, members, shared in sorted(groups)]


def common_length(encoded: list[list[int]]) -> int:
    """Tokens every sequence starts with, leaving each at least one of its own."""
    if not encoded:
        return 0
    first = encoded[0]
    return min(min(_common_prefix(first, e) for e in encoded), min(len(e) for e in encoded) - 1)


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (binary search on C-speed slice compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def cache_rows(cache: Any, rows: list[int], device: Any) -> Any:
    """A cache holding ``rows`` of ``cache`` (repeats allowed), which is left unchanged: the selected tensors are
    new (advanced indexing copies), so a shallow copy of the cache and its layers is enough to keep the original
    intact, without a deep copy of every row first."""
    index = torch.tensor(rows, device=device)
    if hasattr(cache, "layers"):  # transformers >= 4.56: a list of per-layer caches
        out = copy.copy(cache)
        out.layers = [copy.copy(layer) for layer in cache.layers]
    else:
        out = copy.deepcopy(cache)
    out.batch_select_indices(index)
    return out


def left_pad(batch: list[list[int]], pad_id: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` as left-padded ids and their attention mask, ``[B, L]`` each on ``device``: every row's last token
    is the last column."""
    width = max(len(x) for x in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, width - len(x) :] = torch.tensor(x, dtype=torch.long)
        mask[i, width - len(x) :] = 1
    return ids.to(device), mask.to(device)


@dataclass(frozen=True)
class PrefixForward:
    """A causal LM's last-token logits over many sequences, each shared prefix run once.

    ``batch_size`` rows run side by side; ``cache_kw`` is the name of the model's KV-cache argument
    (``evolm.backends.hf.cache_kwarg``); ``last_only`` is ``{"logits_to_keep": 1}`` where the model takes it (the
    lm_head on the last position only).
    """

    model: Any
    pad_id: int
    batch_size: int
    cache_kw: str = "past_key_values"
    last_only: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def last_token_logits(self, encoded: list[list[int]], share_prefix: bool = True) -> torch.Tensor:
        """Logits after the last token of each sequence: ``[N, vocab]``, shared prefixes computed once.

        Two levels: the prefix every sequence shares (a judge's system turn and instructions, the same for every
        question) runs once per call; each group's longer prefix (its question and answer, or question and rubric)
        continues from a copy of it, several groups side by side; each member's own tokens (a criterion) continue
        from a copy of its group's, several members side by side (``grouped_logits``).
        """
        common = common_length(encoded) if share_prefix and len(encoded) > 1 else 0
        common = common if common >= MIN_SHARED_PREFIX else 0
        rest = [e[common:] for e in encoded]  # groups are chosen on what follows the common prefix
        groups = (prefix_groups(rest, MIN_SHARED_PREFIX) if share_prefix
                  else [([i], 0) for i in range(len(encoded))])
        result: list[torch.Tensor | None] = [None] * len(encoded)
        singles = [g[0][0] for g in groups if len(g[0]) == 1 or g[1] == 0]
        multi = [(members, common + shared) for members, shared in groups if len(members) > 1 and shared > 0]
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                base = self.prefix_cache(encoded[0][:common]) if common else None
                if base is not None and singles:  # the ungrouped sequences still share the common prefix
                    multi.append((singles, common))
                    singles = []
                singles.sort(key=lambda i: len(encoded[i]))  # similar lengths together: less padding
                for s in range(0, len(singles), self.batch_size):
                    idx = singles[s : s + self.batch_size]
                    ids, mask = left_pad([encoded[i] for i in idx], self.pad_id, self.device)  # last column: last token
                    logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False,
                                        **self.last_only).logits[:, -1, :]  # [B, V]
                    for i, row in zip(idx, logits, strict=True):
                        result[i] = row
                for i, row in self.grouped_logits(encoded, multi, base, common).items():
                    result[i] = row
        finally:
            self.model.train(was_training)
        return torch.stack([r for r in result if r is not None])

    def prefix_cache(self, tokens: list[int]) -> Any:
        """The KV cache after ``tokens``: ``[1, heads, P, d]`` per layer."""
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        return self.cache_of(self.model(input_ids=ids, use_cache=True, **self.last_only))

    def cache_of(self, out: Any) -> Any:
        """The KV cache a forward pass returned, under either of its names (``evolm.backends.hf.cache_kwarg``)."""
        return out.cache if self.cache_kw == "cache" else out.past_key_values

    def grouped_logits(self, encoded: list[list[int]], groups: list[tuple[list[int], int]], base: Any,
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
        pad = self.pad_id
        order = sorted(groups, key=lambda g: g[1])  # similar prefix lengths together: less padding
        for s in range(0, len(order), self.batch_size):
            chunk = order[s : s + self.batch_size]
            cache, prefix_mask = self.group_caches(encoded, chunk, base, common)  # [G, heads, W, d], [G, W]
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
                    **{self.cache_kw: rows_cache},
                    **self.last_only,
                ).logits[:, -1, :]  # [B, V]
                rows.update(zip((i for i, _ in batch), logits, strict=True))
        return rows

    def group_caches(self, encoded: list[list[int]], chunk: list[tuple[list[int], int]], base: Any,
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
        ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
        for r, part in enumerate(parts):
            ids[r, : len(part)] = torch.tensor(part, dtype=torch.long)
            mask[r, common : common + len(part)] = 1
        positions = torch.arange(common, common + width)[None].expand(len(chunk), -1)
        out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                         position_ids=positions.to(self.device), use_cache=True,
                         **({} if cache is None else {self.cache_kw: cache}), **self.last_only)
        return self.cache_of(out), mask
