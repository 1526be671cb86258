"""Never pay twice for a judgment: a bounded cache of judge results, and duplicates within a call scored once.

``CachedJudge`` wraps a judge (anything with ``score(items, progress)``, whatever per-item result it returns)
and keeps its results in a ``JudgeCache``: an LRU of at most ``max_entries`` results, keyed by the sha256 of

    (the judge: its backend and model, mode, decoding settings, prompt wording, defences, parse, context guard;
     the prompt template version: a digest of the prompts the judge sends for a fixed example;
     question, parsed rubric, rubric text as written, reference answer, answer)

so a result comes back only for the same judge reading the same prompt. What a call does:

1. identical items within the call are scored once (a group's duplicate completions, a pair seen twice);
2. items found in the cache are not sent;
3. the rest go to the judge ordered by (question, rubric), so answers sharing a question and a rubric reach it
   together: a local backend computes their shared prefix once, a vLLM server's prefix cache keeps it.

A missing result (``None``, or a result whose ``score`` is ``None``: an unreadable reply, a server that failed)
is not kept, so it is asked again next time. A sampled judge (``generative`` at temperature > 0) gives a cached
answer its first sample again rather than a fresh draw; ``judge.cache: 0`` turns the cache off (the paper config
does, as the authors' code re-judges every completion). Hit rates: ``JudgeCache.stats`` (whole life) and the
``CacheCall`` each ``score_with_hits`` returns; training logs ``judge_cache_hit_rate`` per step.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CACHE_ENTRIES = 10_000  # default bound: at most this many results are kept (a probability-mode result is a few
# hundred bytes; a generative one keeps its reasoning, up to the reply's length: size judge.cache to the replies)


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
    """A bounded LRU of judge results by key (``judgment_key``), safe to share between threads."""

    def __init__(self, max_entries: int = CACHE_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"a judge cache holds at least 1 entry, not {max_entries}")
        self.max_entries = max_entries
        self.stats = CacheStats()
        self._store: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._store)

    def get(self, key: str) -> tuple[bool, Any]:
        with self._lock:
            if key not in self._store:
                return False, None
            self._store.move_to_end(key)
            return True, self._store[key]

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._store[key] = value
            self._store.move_to_end(key)
            while len(self._store) > self.max_entries:
                self._store.popitem(last=False)


def _text(x: Any) -> str:
    return "" if x is None else str(x)


def _rubric(item: Any) -> str:
    r = getattr(item, "rubric", None)
    return json.dumps(r.to_dict(), sort_keys=True, ensure_ascii=False) if r is not None else ""


def judge_identity(judge: Any) -> str:
    """Everything about ``judge`` that can change a result, with its prompt template version, as one string."""
    backend = getattr(judge, "backend", None)
    model = getattr(backend, "model", None)
    name = model if isinstance(model, str) else getattr(model, "name_or_path", None) or type(model).__name__
    settings = {k: getattr(judge, k, None) for k in ("mode", "temperature", "top_p", "max_new_tokens", "seed",
                                                      "chat_template_kwargs", "max_context", "overlong",
                                                      "constrained", "prompt", "defences", "parse", "seeds")}
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
        from evolm.judge import JudgeItem, judge_conversations
        from evolm.rubrics import Rubric

        q, a, r, ref = _PROBE
        probes = [JudgeItem(q, a, Rubric.from_obj(r), rubric_text=json.dumps(r), reference=ref), JudgeItem(q, a)]
        convs = [judge_conversations(judge, it) for it in probes]
    except Exception:  # noqa: BLE001 - a judge this module cannot render (a reward model, a test double)
        return ""
    return hashlib.sha256(json.dumps(convs, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def judgment_key(identity: str, item: Any) -> str:
    """The cache key of ``item`` under a judge of ``identity``: sha256 over length-prefixed fields (no two
    different tuples serialise alike)."""
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
    """A judge whose results are cached (module docstring); reads as the judge it wraps for everything else."""

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
        fresh = self.judge.score([items[i] for i in firsts], progress) if firsts else []
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


def cached_judge(judge: Any, entries: int) -> Any:
    """``judge`` behind a cache of ``entries`` results, or ``judge`` itself when ``entries`` is 0 or the judge is
    ``listwise`` (an answer's score there depends on the other answers of its group, which the key does not hold)."""
    return CachedJudge(judge, JudgeCache(entries)) if entries > 0 and getattr(judge, "mode", None) != "listwise" \
        else judge
