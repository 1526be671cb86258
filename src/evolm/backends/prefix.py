"""Shared prefixes of token sequences: which prompts share one (a judge's instructions, question and answer), and
the KV-cache rows a batch continues from. Used by ``HFBackend.last_token_logits``."""

from __future__ import annotations

import copy
import itertools
import math
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
