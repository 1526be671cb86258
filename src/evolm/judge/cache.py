"""Never pay twice for a judgment: a bounded cache of judge results (``JudgeCache``, cachetools' LRU), and a judge
behind it (``CachedJudge``) that scores duplicates within a call once and sends the rest grouped by question and
rubric. A result comes back only for the same judge reading the same prompt (``judgment_key``).
"""
from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

CACHE_ENTRIES = 10_000  # default bound: at most this many results are kept
CACHE_MB = 256.0  # and at most this many MiB of them (``result_bytes``): a probability-mode result is about a kilobyte;
# a generative one keeps its reasoning, up to the reply's length (16,384 tokens: about 64 KB), so 10,000 of those
# would be gigabytes


def result_bytes(key: str, value: Any) -> int:
    """About what a cached result takes in memory: its key, the result and the texts it holds (reasoning, criteria).

    >>> from evolm.scores import Judgment
    >>> result_bytes("k" * 64, Judgment(0.5, reasoning="x" * 100_000)) > 100_000
    True
    """
    size = sys.getsizeof(key) + sys.getsizeof(value) + 64  # the LRU's own entry
    for name in ("reasoning", "unscored"):
        text = getattr(value, name, None)
        size += sys.getsizeof(text) if isinstance(text, str) else 0
    for c in getattr(value, "criteria", None) or ():
        size += sys.getsizeof(c) + sys.getsizeof(getattr(c, "text", "")) + 64
    return size


@dataclass
class CacheStats:
    """Counts over a cache's life: judgments asked for, answered from the cache, sent to the judge."""

    lookups: int = 0
    hits: int = 0  # answered by a stored result
    duplicates: int = 0  # answered by an identical item of the same call (scored once)
    sent: int = 0  # items the judge scored

    @property
    def hit_rate(self) -> float | None:
        """Share of lookups not sent to the judge (stored results and in-call duplicates)."""
        return (self.hits + self.duplicates) / self.lookups if self.lookups else None


class JudgeCache:
    """A bounded LRU of judge results by key (``judgment_key``), safe to share between threads: at most
    ``max_entries`` results and ``max_mb`` MiB of them (``result_bytes``; a result larger than that is not kept).

    cachetools' ``LRUCache`` keeps the byte bound (each entry weighs its ``result_bytes``) and the order of use; the
    entry bound is kept here on top of it, and the lock (cachetools' caches are not thread-safe). The cache lives in
    memory, for one process, and one loaded model is one identity (its object's ``id`` is in the key). A judge behind
    a server is known only by its model name and URL: when the weights served under that name change, the cache
    cannot tell. Then ``clear`` it, restart the process (``evolm serve``, a training run), serve the new weights
    under a new model name, or run with the cache off (``judge.cache: 0``, ``--judge-cache 0``).
    """

    def __init__(self, max_entries: int = CACHE_ENTRIES, max_mb: float = CACHE_MB) -> None:
        if max_entries < 1 or not max_mb > 0:
            raise ValueError(f"a judge cache holds at least 1 entry and some bytes, not {max_entries} and {max_mb} MiB")
        self.max_entries, self.max_bytes = max_entries, int(max_mb * 2**20)
        self.stats = CacheStats()
        self._store: LRUCache[str, tuple[Any, int]] = LRUCache(self.max_bytes, getsizeof=lambda entry: entry[1])
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._store)

    @property
    def bytes(self) -> int:
        """What the kept results take (``result_bytes``)."""
        return self._store.currsize

    def get(self, key: str) -> tuple[bool, Any]:
        """``(True, result)`` for a kept key (now the most recently used), else ``(False, None)``."""
        with self._lock:
            entry = self._store.get(key)
            return (False, None) if entry is None else (True, entry[0])

    def put(self, key: str, value: Any) -> None:
        """Keep ``value`` under ``key``, dropping the least recently used results until both bounds hold."""
        size = result_bytes(key, value)
        with self._lock:
            self._store.pop(key, None)
            if size > self.max_bytes:
                return
            self._store[key] = (value, size)  # LRUCache drops the least recently used until the bytes fit
            while len(self._store) > self.max_entries:
                self._store.popitem()

    def clear(self) -> None:
        """Forget every result (the judge's weights changed under the same name: see the class); counts stay."""
        with self._lock:
            self._store.clear()


def _text(x: Any) -> str:
    return "" if x is None else str(x)


def _rubric(item: Any) -> str:
    r = getattr(item, "rubric", None)
    return json.dumps(r.to_dict(), sort_keys=True, ensure_ascii=False) if r is not None else ""


def judge_identity(judge: Any) -> str:
    """Everything about ``judge`` that can change a result, with its prompt template version, as one string.

    A judge without a backend (a reward model, ``judge.reward_model.RewardModel``) is its class, its model (name and
    object) and its reading settings."""
    backend = getattr(judge, "backend", None)
    if backend is None:
        model = getattr(judge, "model", None)
        config = getattr(model, "config", None)
        own = {k: getattr(judge, k, None) for k in ("reading", "max_length", "batch_size")}
        return json.dumps({"judge": type(judge).__name__, "model": str(getattr(config, "name_or_path", None)),
                           "id": id(model), **own}, sort_keys=True, default=str)
    model = getattr(backend, "model", None)
    name = model if isinstance(model, str) else getattr(model, "name_or_path", None) or type(model).__name__
    settings = {k: getattr(judge, k, None) for k in ("mode", "temperature", "top_p", "max_new_tokens", "seed",
                                                      "chat_template_kwargs", "max_context", "overlong",
                                                      "constrained", "prompt", "defences", "parse", "seeds",
                                                      "parse_after_thinking", "clamp_scores")}
    where = {"backend": type(backend).__name__, "model": str(name), "url": str(getattr(backend, "base_url", "")),
             "id": id(backend)}  # in-memory cache: one backend object is one model's weights
    return json.dumps({**where, **settings, "template": template_version(judge)}, sort_keys=True, default=str)


_PROBE = ("What is the boiling point of water at sea level?", "100 degrees Celsius.",
          {"criteria": [{"criterion": "Gives 100 degrees Celsius.", "weight": 0.7},
                        {"criterion": "Says it holds at sea level.", "weight": 0.3}]}, "Reference: 100 C.")


def template_version(judge: Any) -> str:
    """A digest of the prompts ``judge`` sends for a fixed example (with a rubric and without): any change to
    the wording, the defences or the mode's template changes it. ``""`` for a judge without prompts (a reward
    model), whose identity then rests on its model and settings."""
    try:
        from evolm.judge.judge import JudgeItem, judge_conversations
        from evolm.rubrics import Rubric

        q, a, r, ref = _PROBE
        probes = [JudgeItem(q, a, Rubric.from_obj(r), rubric_text=json.dumps(r), reference=ref), JudgeItem(q, a)]
        convs = [judge_conversations(judge, it) for it in probes]
    except Exception:  # noqa: BLE001 - a judge this module cannot render (a reward model, a test double)
        return ""
    return hashlib.sha256(json.dumps(convs, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def judgment_key(identity: str, item: Any) -> str:
    """The cache key of ``item`` under a judge of ``identity``: sha256 over length-prefixed fields (no two
    different tuples serialise alike) of the judge (``judge_identity``: its backend and model, mode, decoding,
    wording, defences, parse, context guard and prompt template version; a reward model: its model, reading and
    maximum length), the question, the parsed rubric, the rubric as written, the reference answer and the answer."""
    h = hashlib.sha256()
    for part in (identity, _text(getattr(item, "question", None)), _rubric(item),
                 _text(getattr(item, "rubric_text", None)), _text(getattr(item, "reference", None)),
                 _text(getattr(item, "answer", None))):
        data = part.encode("utf-8", errors="surrogatepass")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def _missing(result: Any) -> bool:
    return result is None or getattr(result, "score", 0.0) is None


@dataclass(frozen=True)
class CacheCall:
    """One ``score_with_hits`` call: the results in item order, and per item whether the judge was spared."""

    results: list[Any]
    cached: list[bool]  # answered by a stored result or by an identical item of the same call
    sent: int  # items the judge scored in this call

    @property
    def hit_rate(self) -> float | None:
        return sum(self.cached) / len(self.cached) if self.cached else None


@dataclass
class CachedJudge:
    """A judge whose results are cached; reads as the judge it wraps for everything else.

    A call scores identical items once (a group's duplicate completions, a pair seen twice), does not send items
    found in the cache, and sends the rest ordered by (question, rubric), so answers sharing a prompt prefix reach the
    judge together (a local backend computes it once, a vLLM server's prefix cache keeps it). A missing result
    (``None``, or a ``score`` of ``None``) is not kept, so it is asked again next time. A sampled judge gives a cached
    answer its first sample again rather than a fresh draw; ``judge.cache: 0`` turns the cache off (the paper config
    does, as the authors' code re-judges every completion). Hit rates: ``JudgeCache.stats`` (whole life) and the
    ``CacheCall`` each ``score_with_hits`` returns; training logs ``judge_cache_hit_rate`` per step.
    """

    judge: Any
    cache: JudgeCache = field(default_factory=JudgeCache)
    _identity: str | None = field(default=None, init=False, repr=False)

    def __getattr__(self, name: str) -> Any:  # mode, backend, fit_to_context...: the wrapped judge's
        if name.startswith("__") or name == "judge":
            raise AttributeError(name)
        return getattr(self.judge, name)

    @property
    def identity(self) -> str:
        if self._identity is None:
            self._identity = judge_identity(self.judge)
        return self._identity

    def score(self, items: Sequence[Any], progress: bool = False) -> list[Any]:
        return self.score_with_hits(items, progress).results

    def score_with_hits(self, items: Sequence[Any], progress: bool = False) -> CacheCall:
        items = list(items)
        keys = [judgment_key(self.identity, it) for it in items]
        results: list[Any] = [None] * len(items)  # each a Judgment (the context guard's cut kept with it)
        cached = [False] * len(items)
        todo: dict[str, list[int]] = {}  # key -> the items it answers (first one is sent)
        for i, k in enumerate(keys):
            if k in todo:
                todo[k].append(i)
                cached[i] = True
                continue
            found, value = self.cache.get(k)
            if found:
                results[i], cached[i] = value, True
            else:
                todo[k] = [i]
        firsts = sorted((ix[0] for ix in todo.values()), key=lambda i: (_text(items[i].question), _rubric(items[i]),
                                                                       _text(items[i].rubric_text), i))
        try:
            fresh = self.judge.score([items[i] for i in firsts], progress) if firsts else []
        except Exception as e:
            from evolm.judge.context_guard import OverlongPrompt

            if isinstance(e, OverlongPrompt):  # its index is into the items sent (reordered): name the caller's
                raise OverlongPrompt(firsts[e.index], e.reason) from None
            raise
        for i, value in zip(firsts, fresh, strict=True):
            for t in todo[keys[i]]:
                results[t] = value
            if not _missing(value):
                self.cache.put(keys[i], value)
        dup = sum(len(ix) - 1 for ix in todo.values())
        s = self.cache.stats
        s.lookups, s.duplicates, s.sent = s.lookups + len(items), s.duplicates + dup, s.sent + len(firsts)
        s.hits += sum(cached) - dup
        return CacheCall(results, cached, len(firsts))


def cached_judge(judge: Any, entries: int, max_mb: float = CACHE_MB) -> Any:
    """``judge`` behind a cache of ``entries`` results and ``max_mb`` MiB, or ``judge`` itself when ``entries`` is 0
    or the judge is ``listwise`` (an answer's score there depends on the other answers of its group, which the key
    does not hold)."""
    return CachedJudge(judge, JudgeCache(entries, max_mb)) \
        if entries > 0 and getattr(judge, "mode", None) != "listwise" else judge
