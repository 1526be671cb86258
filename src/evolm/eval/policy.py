"""Policy quality (SPEC §3.2) with lm-evaluation-harness, offline, on an in-memory model.

The paper scores policies with Ai2's OLMES ``olmo3:adapt`` suite; that suite needs hub data and
API annotators, so here we run the matching tasks of lm-eval (``lm_eval`` on PyPI) instead, and
label every result "lm-eval protocol" so nobody mistakes it for OLMES numbers.

How it stays offline:
- The model is loaded by ``evolm.models.load_model`` and handed to lm-eval's ``HFLM`` as an
  object, so lm-eval never resolves a name on the hub.
- Each task is lm-eval's *stock* config with only its data source replaced: ``dataset_path:
  json`` plus ``dataset_kwargs: {data_files: {split: FILE}}`` pointing at a local JSONL file.
  Prompts, metrics and answer filters stay lm-eval's, so results follow the harness's protocol
  and its upgrades. The override is an inline group whose members name the stock task with
  overrides (the documented group syntax), built by a TaskManager that indexes only the stock
  folders we use (~0.1 s instead of ~10 s for the whole catalogue).
- While lm-eval runs, the hub is switched to offline mode (``HF_HUB_OFFLINE``; restored after),
  because ``HFLM.get_model_info`` otherwise asks the hub for the model's commit hash.
- IFEval's checkers need NLTK's ``punkt_tab`` sentence model, which lm-eval would download on
  import. We point ``nltk.data.path`` at the copy that the PyPI package ``llama-index-core``
  (MIT licence; the data are NLTK's Punkt models by Kiss & Strunk, from the NLTK data
  collection) ships in ``llama_index/core/_static/nltk_cache``. The package is located, not
  imported. An existing NLTK data install is used first when it already has ``punkt_tab``.

Task choices (zero-shot, chat template on, as in SPEC §3.2):
- ``ifeval``: lm-eval's ``ifeval`` (Zhou et al. 2023) on the 541 original prompts. Primary metric
  ``prompt_level_loose_acc`` (what Tulu 3 / OLMo reports); the strict and instruction-level
  accuracies are reported too.
- ``gsm8k``: lm-eval's ``gsm8k_cot_llama``, run zero-shot. Of the stock GSM8K variants it is the
  one written for instruct models behind a chat template: the user turn asks the model to reason
  and to end with "The final answer is N", and its strict filter reads exactly that. Plain
  ``gsm8k`` expects the few-shot "#### N" format a chat model never produces zero-shot, and
  ``gsm8k_cot_zeroshot`` is a completion prompt ("A: Let's think step by step.") that a chat
  template turns into an odd user turn. Primary metric ``exact_match`` with the
  ``flexible-extract`` filter (last number in the answer), so a small model is not scored on
  format alone; the strict filter is reported beside it.

Adding a task is one ``PolicyTask`` entry: the evolm name, the stock lm-eval task and its folder,
the split and file name the data come from, and the metrics to report.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evolm.errors import BackendError, InputError
from evolm.jsonl import read_jsonl

PROTOCOL = "lm-eval protocol"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyTask:
    """One evaluation task: a stock lm-eval task fed from a local JSONL file."""

    name: str  # evolm's name (CLI --tasks, result keys)
    lm_eval_task: str  # the stock task whose prompts, filters and metrics we keep
    lm_eval_dir: str  # its folder under lm_eval/tasks (indexed alone, to start fast)
    data_file: str  # default file, relative to the data folder
    split: str  # the split name the stock config reads its documents from
    required_fields: tuple[str, ...]  # fields each data row needs (checked before loading the model)
    metrics: tuple[str, ...]  # lm-eval result keys "metric,filter" to report, primary first
    needs_punkt: bool = False


POLICY_TASKS: dict[str, PolicyTask] = {
    "ifeval": PolicyTask(
        name="ifeval",
        lm_eval_task="ifeval",
        lm_eval_dir="ifeval",
        data_file="ifeval/input_data.jsonl",
        split="train",
        required_fields=("key", "prompt", "instruction_id_list", "kwargs"),
        metrics=(
            "prompt_level_loose_acc,none",
            "prompt_level_strict_acc,none",
            "inst_level_loose_acc,none",
            "inst_level_strict_acc,none",
        ),
        needs_punkt=True,
    ),
    "gsm8k": PolicyTask(
        name="gsm8k",
        lm_eval_task="gsm8k_cot_llama",
        lm_eval_dir="gsm8k",
        data_file="gsm8k/test.jsonl",
        split="test",
        required_fields=("question", "answer"),
        metrics=("exact_match,flexible-extract", "exact_match,strict-match"),
    ),
}


@dataclass(frozen=True)
class Decoding:
    """Generation settings. Defaults are SPEC §3.2's: sampled, temperature 0.6, top-p 0.95, 16k tokens."""

    greedy: bool = False
    temperature: float = 0.6
    top_p: float = 0.95
    max_gen_toks: int = 16384
    seed: int = 0

    def gen_kwargs(self, max_gen_toks: int) -> dict[str, Any]:
        """lm-eval ``gen_kwargs``; they update each task's own (whose stock values are greedy)."""
        if self.greedy:
            return {"do_sample": False, "temperature": 0.0, "max_gen_toks": max_gen_toks}
        return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "max_gen_toks": max_gen_toks}


@dataclass
class TaskResult:
    """One task's scores: ``metrics`` maps "metric,filter" to a value in [0, 1]; primary first."""

    task: str
    lm_eval_task: str
    n: int
    primary_metric: str
    metrics: dict[str, float]
    stderr: dict[str, float | None]
    data_file: str


@dataclass
class PolicyEvalResult:
    """Everything one ``evolm eval policy`` run measured, as written to the JSON file."""

    model: str
    tasks: list[TaskResult]
    decoding: dict[str, Any]
    limit: int | None
    seconds: float
    protocol: str = PROTOCOL
    lm_eval_version: str = ""
    num_fewshot: int = 0
    apply_chat_template: bool = True
    system_instruction: str | None = None
    think_end_token: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tasks"] = {t.task: {k: v for k, v in asdict(t).items() if k != "task"} for t in self.tasks}
        return d


# ----------------------------------------------------------------------------- inputs


def parse_tasks(spec: str | Sequence[str]) -> list[str]:
    """Task names from "ifeval,gsm8k" (order kept, duplicates dropped); unknown names are an InputError."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name not in POLICY_TASKS:
            raise InputError(f"unknown policy task '{name}' (known: {', '.join(sorted(POLICY_TASKS))})")
        if name not in out:
            out.append(name)
    if not out:
        raise InputError(f"no policy task given (known: {', '.join(sorted(POLICY_TASKS))})")
    return out


def default_data_dir(cwd: str | Path | None = None) -> Path | None:
    """``../shared/data`` next to the working directory when it exists (the project layout), else None."""
    candidate = Path(cwd or Path.cwd()) / ".." / "shared" / "data"
    return candidate.resolve() if candidate.is_dir() else None


def resolve_data_files(
    tasks: Sequence[str], data_dir: str | Path | None, overrides: Mapping[str, str | Path | None] | None = None
) -> dict[str, Path]:
    """The data file of each task (an override, else ``data_dir/<task default>``), checked row by row.

    Raises ``InputError`` for a missing file or a row without the fields the task reads, before any
    model is loaded, so a typo costs nothing.
    """
    overrides = overrides or {}
    files: dict[str, Path] = {}
    for name in tasks:
        task = POLICY_TASKS[name]
        given = overrides.get(name)
        if given is not None:
            path = Path(given).expanduser()
        elif data_dir is not None:
            path = Path(data_dir).expanduser() / task.data_file
        else:
            raise InputError(f"{name}: no data file (give --data-dir DIR holding {task.data_file}, or --{name}-data FILE)")
        if not path.is_file():
            raise InputError(f"{name} data file not found: {path} (set --data-dir or --{name}-data)")
        read_jsonl(path, required=task.required_fields)
        files[name] = path.resolve()
    return files


def default_output_path(model: str) -> Path | None:
    """``RUN/eval/policy-checkpoint-N.json`` for ``RUN/checkpoints/checkpoint-N``, where the report looks."""
    p = Path(model).expanduser()
    if re.fullmatch(r"checkpoint-\d+", p.name) and p.parent.name == "checkpoints" and p.is_dir():
        return p.parent.parent / "eval" / f"policy-{p.name}.json"
    return None


# ----------------------------------------------------------------------------- offline plumbing


def _punkt_tab_dirs() -> list[str]:
    """NLTK data folders holding ``tokenizers/punkt_tab`` from an installed package (none if absent)."""
    spec = importlib.util.find_spec("llama_index.core")  # located, not imported (its import is heavy)
    if spec is None or not spec.submodule_search_locations:
        return []
    cache = Path(list(spec.submodule_search_locations)[0]) / "_static" / "nltk_cache"
    return [str(cache)] if (cache / "tokenizers" / "punkt_tab" / "english").is_dir() else []


def ensure_punkt_tab() -> str:
    """Make NLTK find ``punkt_tab`` without downloading; returns the folder it is found in.

    Must run before lm-eval's IFEval module is imported: that import downloads the data when
    NLTK cannot find it. Raises ``BackendError`` when no offline copy is installed.
    """
    import nltk

    for extra in _punkt_tab_dirs():
        if extra not in nltk.data.path:
            nltk.data.path.append(extra)  # after the user's own NLTK folders, which win
    try:
        return str(nltk.data.find("tokenizers/punkt_tab/english/"))
    except LookupError:
        raise BackendError(
            "IFEval needs NLTK's punkt_tab data and none is installed: pip install 'evolm[eval]' "
            "(it ships in llama-index-core)"
        ) from None


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """Hugging Face hub and datasets in offline mode for the block, restored afterwards.

    The environment variables are read at import time, so the already-imported modules' flags
    are switched too.
    """
    keys = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    saved_env = {k: os.environ.get(k) for k in keys}
    flags: list[tuple[Any, str, Any]] = []
    for module_name, attr in (("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE"),
                              ("datasets.config", "HF_DATASETS_OFFLINE")):
        module = importlib.import_module(module_name)
        if hasattr(module, attr):
            flags.append((module, attr, getattr(module, attr)))
    try:
        for k in keys:
            os.environ[k] = "1"
        for module, attr, _ in flags:
            setattr(module, attr, True)
        yield
    finally:
        for module, attr, old in flags:
            setattr(module, attr, old)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _task_config(task: PolicyTask, data_file: Path) -> dict[str, Any]:
    """Overrides that keep the stock task but read its documents from ``data_file`` only."""
    return {
        "task": task.lm_eval_task,
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {task.split: str(data_file)}},
        "test_split": task.split,
        "training_split": None,
        "validation_split": None,
        "fewshot_split": None,
        "num_fewshot": 0,
    }


def _think_end_token(tokenizer: Any, requested: str | None) -> str | None:
    """``auto``: ``</think>`` when the tokenizer has it as a token (Qwen3-style thinking), else None."""
    if requested != "auto":
        return requested or None
    return "</think>" if "</think>" in tokenizer.get_vocab() else None


def effective_max_gen_toks(requested: int, max_length: int) -> int:
    """Cap generation so that a prompt still fits: lm-eval refuses ``max_gen_toks >= max_length``.

    Keeps ``min(1024, max_length // 2)`` tokens for the prompt (IFEval and GSM8K prompts are far
    shorter). SPEC's 16k default exceeds small models' context (SmolLM2: 8192).

    >>> effective_max_gen_toks(16384, 8192), effective_max_gen_toks(256, 8192), effective_max_gen_toks(64, 64)
    (7168, 256, 32)
    """
    reserve = min(1024, max_length // 2)
    return max(1, min(requested, max_length - reserve))


# ----------------------------------------------------------------------------- evaluation


def evaluate_policy(
    model: Any,
    tokenizer: Any,
    data_files: Mapping[str, Path],
    *,
    model_name: str = "",
    decoding: Decoding | None = None,
    limit: int | None = None,
    batch_size: int = 8,
    system_instruction: str | None = None,
    think_end_token: str | None = "auto",
    samples_path: str | Path | None = None,
) -> PolicyEvalResult:
    """Run the tasks of ``data_files`` (evolm task name -> JSONL) on an in-memory model.

    Zero-shot with the tokenizer's chat template. ``limit`` takes the first N documents of each
    task. With ``samples_path`` every prompt, response and per-sample score is written as JSONL.
    """
    decoding = decoding or Decoding()
    tasks = [POLICY_TASKS[name] for name in data_files]
    if any(t.needs_punkt for t in tasks):
        ensure_punkt_tab()

    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    started = time.monotonic()
    think = _think_end_token(tokenizer, think_end_token)
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, think_end_token=think)
    max_gen_toks = effective_max_gen_toks(decoding.max_gen_toks, lm.max_length)
    notes = []
    if max_gen_toks < decoding.max_gen_toks:
        notes.append(
            f"max_gen_toks lowered from {decoding.max_gen_toks} to {max_gen_toks}: the model's context is {lm.max_length}"
        )
        _log.warning(notes[-1])

    stock_root = Path(lm_eval.__file__).parent / "tasks"
    manager = TaskManager(include_defaults=False, include_path=sorted({str(stock_root / t.lm_eval_dir) for t in tasks}))
    group = {"group": "evolm_policy", "task": [_task_config(t, data_files[t.name]) for t in tasks]}
    with hub_offline():
        out = lm_eval.simple_evaluate(
            model=lm,
            tasks=[group],
            task_manager=manager,
            limit=limit,
            apply_chat_template=True,
            fewshot_as_multiturn=True,
            system_instruction=system_instruction,
            gen_kwargs=decoding.gen_kwargs(max_gen_toks),
            log_samples=samples_path is not None,
            random_seed=decoding.seed,
            numpy_random_seed=decoding.seed,
            torch_random_seed=decoding.seed,
            fewshot_random_seed=decoding.seed,
            bootstrap_iters=1000,
        )
    if out is None:  # only non-zero ranks get None; we run one process
        raise BackendError("lm-eval returned no results")

    results = [_task_result(t, out, data_files[t.name]) for t in tasks]
    if samples_path is not None:
        _write_samples(samples_path, tasks, out)
    return PolicyEvalResult(
        model=model_name,
        tasks=results,
        decoding={**asdict(decoding), "max_gen_toks": max_gen_toks, "max_gen_toks_requested": decoding.max_gen_toks},
        limit=limit,
        seconds=round(time.monotonic() - started, 1),
        lm_eval_version=lm_eval.__version__,
        system_instruction=system_instruction,
        think_end_token=think,
        notes=notes,
    )


def _clean(value: Any) -> float | None:
    """lm-eval writes "N/A" or NaN for a missing stderr; JSON gets null."""
    if isinstance(value, (int, float)) and not math.isnan(float(value)):
        return float(value)
    return None


def _task_result(task: PolicyTask, out: dict[str, Any], data_file: Path) -> TaskResult:
    row = out["results"][task.lm_eval_task]
    metrics: dict[str, float] = {}
    stderr: dict[str, float | None] = {}
    for key in task.metrics:
        value = _clean(row.get(key))
        if value is None:
            raise BackendError(f"lm-eval gave no '{key}' for {task.lm_eval_task} (lm-eval version change?)")
        metric, _, filt = key.partition(",")
        metrics[key] = value
        stderr[key] = _clean(row.get(f"{metric}_stderr,{filt}"))
    n = int(out["n-samples"][task.lm_eval_task]["effective"])
    return TaskResult(task.name, task.lm_eval_task, n, task.metrics[0], metrics, stderr, str(data_file))


def _write_samples(path: str | Path, tasks: Sequence[PolicyTask], out: dict[str, Any]) -> None:
    """One row per document: prompt as the model saw it, raw response, and each "metric,filter" score.

    lm-eval logs one record per (document, filter); they are merged here.
    """
    from evolm.jsonl import write_jsonl

    rows: list[dict[str, Any]] = []
    for task in tasks:
        by_doc: dict[Any, dict[str, Any]] = {}
        for s in out.get("samples", {}).get(task.lm_eval_task, []):
            row = by_doc.setdefault(s.get("doc_id"), {
                "task": task.name,
                "doc_id": s.get("doc_id"),
                "prompt": s["arguments"][0][0] if s.get("arguments") else None,
                "response": s["resps"][0][0] if s.get("resps") else None,
                "target": s.get("target"),
                "extracted": {},
                "scores": {},
            })
            filt = s.get("filter", "none")
            resps = s.get("filtered_resps") or [None]
            row["extracted"][filt] = resps[0]
            for metric in s.get("metrics", []):
                row["scores"][f"{metric},{filt}"] = s.get(metric)
        rows.extend(by_doc.values())
    write_jsonl(path, rows)


def run_policy_eval(
    model: str,
    tasks: Sequence[str],
    data_files: Mapping[str, Path],
    *,
    device: str = "auto",
    dtype: str = "auto",
    **kwargs: Any,
) -> PolicyEvalResult:
    """Load ``model`` (local dir, run checkpoint, built-in name, or a hub id the user gave) and evaluate it."""
    from evolm.models import load_model

    lm_model, tokenizer = load_model(model, device=device, dtype=dtype)
    return evaluate_policy(lm_model, tokenizer, {t: data_files[t] for t in tasks}, model_name=model, **kwargs)


def format_table(result: PolicyEvalResult) -> str:
    """A plain-text table: task, metric, value, stderr, n (primary metric first in each task)."""
    header = ("task", "metric", "value", "stderr", "n")
    rows = [header]
    for t in result.tasks:
        for key, value in t.metrics.items():
            se = t.stderr.get(key)
            label = key.replace(",none", "") + (" *" if key == t.primary_metric else "")
            rows.append((t.task, label, f"{value:.4f}", "" if se is None else f"{se:.4f}", str(t.n)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    dec = result.decoding
    mode = "greedy" if dec["greedy"] else f"sampled T={dec['temperature']} top-p={dec['top_p']}"
    lines.append(
        f"{PROTOCOL} (lm_eval {result.lm_eval_version}), zero-shot chat, {mode}, max_gen_toks={dec['max_gen_toks']}, "
        f"seed={dec['seed']}, limit={result.limit}; * = primary metric; {result.seconds:.0f} s"
    )
    return "\n".join(lines)
