"""Policy quality (docs/METHOD.md §3.2) with lm-evaluation-harness, on an in-memory model.

The paper scores policies with Ai2's OLMES ``olmo3:adapt`` suite; here we run the matching tasks of lm-eval
(``lm_eval`` on PyPI), one ``simple_evaluate`` call per task, and label every result "lm-eval protocol" so nobody
mistakes it for OLMES numbers (docs/POLICY_EVAL.md: the task map, the whole suite). How tasks decode:
``evolm.eval.policy_decoding``; what they read, checked first: ``evolm.eval.policy_inputs``; the tasks and how to add
one: ``evolm.eval.policy_tasks``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evolm.errors import BackendError
from evolm.eval.offline import code_eval_allowed, ensure_punkt_tab, hub_offline, quiet_git_hash
from evolm.eval.policy_decoding import (
    DEFAULT_PROTOCOL,
    Decoding,
    describe_generation,
    resolve_decoding,
    task_generation_kwargs,
)
from evolm.eval.policy_inputs import check_access
from evolm.eval.policy_tasks import POLICY_TASKS, PolicyTask

LABEL = "lm-eval protocol"  # docs/METHOD.md §3.2: what every result is labelled (not "OLMES")
_log = logging.getLogger(__name__)


@dataclass
class TaskResult:
    """One task's scores: ``metrics`` maps "metric,filter" to a value in [0, 1]; primary first.

    ``macro_metrics``: for a group task, the plain mean of each metric over its leaf tasks (the
    paper's macro average; lm-eval's group score weights them by size). ``generation_kwargs``: what
    the task generated with (its first leaf's, for a group); empty for log-likelihood tasks.
    """

    task: str
    lm_eval_task: str
    n: int
    primary_metric: str
    metrics: dict[str, float]
    stderr: dict[str, float | None]
    data_file: str | None  # None: lm-eval's stock data set from the hub
    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    macro_metrics: dict[str, float] = field(default_factory=dict)
    subtasks: int = 1
    seconds: float = 0.0
    olmes_task: str = ""
    paper_metric: str = ""


@dataclass
class PolicyEvalResult:
    """Everything one ``evolm eval policy`` run measured, as written to the JSON file."""

    model: str
    tasks: list[TaskResult]
    decoding: dict[str, Any]  # what was asked for (None: each task's own); per-task settings are in tasks
    limit: int | None
    seconds: float
    protocol: str = DEFAULT_PROTOCOL
    label: str = LABEL
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


# ----------------------------------------------------------------------------- building and running lm-eval tasks


def _task_spec(task: PolicyTask, data_file: Path | None) -> dict[str, Any]:
    """The lm-eval spec of ``task``: an inline group holding the stock task with our overrides.

    A local task keeps the stock config but reads its documents from ``data_file`` only.
    """
    member: dict[str, Any] | str = task.lm_eval_task
    overrides = dict(task.overrides)
    if data_file is not None:
        overrides.update({
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {task.split: str(data_file)}},
            "test_split": task.split,
            "training_split": None,
            "validation_split": None,
            "fewshot_split": None,
            "num_fewshot": 0,
        })
    if overrides:
        member = {"task": task.lm_eval_task, **overrides}
    return {"group": "evolm_policy", "task": [member]}


def _think_end_token(tokenizer: Any, requested: str | None) -> str | None:
    """``auto``: ``</think>`` when the tokenizer has it as a token (Qwen3-style thinking), else None."""
    if requested != "auto":
        return requested or None
    return "</think>" if "</think>" in tokenizer.get_vocab() else None


def _load_task(manager: Any, task: PolicyTask, data_file: Path | None) -> tuple[Any, dict[str, Any]]:
    """Build ``task``'s lm-eval objects (this reads its data): the root group and its leaf tasks by name.

    A hub task that cannot get its data is a one-line ``BackendError`` naming the task.
    """
    spec = _task_spec(task, data_file)
    if task.local:
        with hub_offline():
            loaded = manager.load(spec)
    else:
        try:
            loaded = manager.load(spec)
        except Exception as e:  # datasets raises many types (ConnectionError, DatasetNotFoundError, ...)
            first = (str(e).strip().splitlines() or [""])[0]
            raise BackendError(
                f"{task.name}: could not read lm-eval's data for {task.lm_eval_task} from the Hugging Face hub "
                f"({type(e).__name__}: {first}); see docs/POLICY_EVAL.md"
            ) from e
    return loaded["groups"]["evolm_policy"], loaded["tasks"]


def _doc_count(leaves: Mapping[str, Any], limit: int | None) -> int | None:
    """Documents that will be scored (``limit`` applies per leaf task); None if lm-eval cannot say."""
    try:
        return sum(len(leaf.eval_docs) if limit is None else min(limit, len(leaf.eval_docs))
                   for leaf in leaves.values())
    except Exception:  # noqa: BLE001 - only a progress message depends on it
        return None


def evaluate_policy(
    model: Any,
    tokenizer: Any,
    data_files: Mapping[str, Path | None],
    *,
    model_name: str = "",
    decoding: Decoding | None = None,
    limit: int | None = None,
    batch_size: int = 8,
    system_instruction: str | None = None,
    think_end_token: str | None = "auto",
    samples_path: str | Path | None = None,
    allow_hub: bool = False,
    allow_code: bool = False,
    progress: Callable[[str], None] | None = None,
) -> PolicyEvalResult:
    """Run the tasks of ``data_files`` (evolm task name -> local JSONL, or None for hub data) on an in-memory model.

    Zero-shot with the tokenizer's chat template (docs/METHOD.md §3.2), one task after the other, each its own
    ``simple_evaluate`` call (lm-eval's progress bar is per task). ``limit`` takes the first N documents of each
    (leaf) task. With ``samples_path`` every prompt, response and per-sample score is written as JSONL.
    ``progress`` is told when each task starts and ends. The settings each task ran with go into its result.

    A local task (``ifeval``, ``gsm8k``) is lm-eval's stock config with only its data source replaced (an inline
    group whose member names the stock task with overrides), so prompts, metrics and answer filters stay lm-eval's.
    Offline: the model goes to lm-eval's ``HFLM`` as an object, so lm-eval never resolves a name on the hub; the
    TaskManager indexes only the stock folders the tasks use (~0.1 s instead of ~10 s); local tasks are built, and
    every task evaluated, with the hub in offline mode (``evolm.eval.offline``); only hub tasks are built outside it.
    """
    decoding = decoding or resolve_decoding()
    tasks = [POLICY_TASKS[name] for name in data_files]
    check_access([t.name for t in tasks], allow_hub=allow_hub, allow_code=allow_code)
    if any(t.needs_punkt for t in tasks):
        ensure_punkt_tab()
    say = progress or (lambda _msg: None)

    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    started = time.monotonic()
    stock_root = Path(lm_eval.__file__).parent / "tasks"
    dirs = sorted({str(stock_root / d) for t in tasks for d in t.lm_eval_dirs})
    runs_code = any(t.runs_code for t in tasks)
    results: list[TaskResult] = []
    samples: dict[str, list[dict[str, Any]]] = {}
    notes: list[str] = []
    with code_eval_allowed(runs_code):
        manager = TaskManager(include_defaults=False, include_path=dirs)
        loaded = [_load_task(manager, t, data_files[t.name]) for t in tasks]  # data errors before any generation
        think = _think_end_token(tokenizer, think_end_token)
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, think_end_token=think)
        for i, (task, (root, leaves)) in enumerate(zip(tasks, loaded, strict=True), start=1):
            generation, generating = _configure(task, leaves, decoding, lm, notes)
            docs = _doc_count(leaves, limit)
            mixed = f" ({generating} of {len(leaves)} subtasks generate)" if 0 < generating < len(leaves) else ""
            say(f"[{i}/{len(tasks)}] {task.name} (lm-eval {task.lm_eval_task}"
                + (f", {len(leaves)} subtasks" if len(leaves) > 1 else "")
                + (f", {docs} docs" if docs is not None else "") + f"): {describe_generation(generation)}{mixed}")
            t0 = time.monotonic()
            with hub_offline(), quiet_git_hash():
                out = lm_eval.simple_evaluate(
                    model=lm,
                    tasks=[root],
                    task_manager=manager,
                    limit=limit,
                    apply_chat_template=True,
                    fewshot_as_multiturn=True,
                    system_instruction=system_instruction,
                    log_samples=samples_path is not None,
                    random_seed=decoding.seed,
                    numpy_random_seed=decoding.seed,
                    torch_random_seed=decoding.seed,
                    fewshot_random_seed=decoding.seed,
                    bootstrap_iters=1000,
                    confirm_run_unsafe_code=task.runs_code,
                )
            if out is None:  # only non-zero ranks get None; we run one process
                raise BackendError("lm-eval returned no results")
            result = _task_result(task, out, leaves, data_files[task.name], generation, time.monotonic() - t0)
            results.append(result)
            samples[task.name] = _sample_rows(task, out, leaves)
            say(f"[{i}/{len(tasks)}] {task.name}: {result.primary_metric} {result.metrics[result.primary_metric]:.4f} "
                f"(n={result.n}, {result.seconds:.0f} s)")
    if samples_path is not None:
        from evolm.runs.jsonl import write_jsonl

        write_jsonl(samples_path, [row for rows in samples.values() for row in rows])
    return PolicyEvalResult(
        model=model_name,
        tasks=results,
        decoding=asdict(decoding),
        limit=limit,
        seconds=round(time.monotonic() - started, 1),
        protocol=decoding.protocol,
        lm_eval_version=lm_eval.__version__,
        system_instruction=system_instruction,
        think_end_token=think,
        notes=notes,
    )


def _configure(
    task: PolicyTask, leaves: Mapping[str, Any], decoding: Decoding, lm: Any, notes: list[str]
) -> tuple[dict[str, Any], int]:
    """Set each leaf task zero-shot with its generation settings.

    Returns the first generating leaf's settings and how many leaves generate (the others score
    options by log-likelihood). Notes (one per task, not per leaf) say where a token budget had to
    be cut to fit the context.
    """
    first: dict[str, Any] | None = None
    cut: str | None = None
    generating = 0
    for leaf in leaves.values():
        leaf.set_config("num_fewshot", 0)
        if leaf.get_config("output_type") != "generate_until":
            continue
        generating += 1
        kwargs, note = task_generation_kwargs(
            leaf.get_config("generation_kwargs") or {}, decoding, lm.max_gen_toks, lm.max_length
        )
        leaf.set_config("generation_kwargs", kwargs)
        first = first if first is not None else kwargs
        cut = cut or note
    if cut:
        notes.append(f"{task.name}: {cut}")
        _log.warning(notes[-1])
    return dict(first or {}), generating


def _clean(value: Any) -> float | None:
    """lm-eval writes "N/A" or NaN for a missing stderr; JSON gets null."""
    if isinstance(value, (int, float)) and not math.isnan(float(value)):
        return float(value)
    return None


def _task_result(
    task: PolicyTask, out: dict[str, Any], leaves: Mapping[str, Any], data_file: Path | None,
    generation: dict[str, Any], seconds: float,
) -> TaskResult:
    row = out["results"][task.lm_eval_task]
    metrics: dict[str, float] = {}
    stderr: dict[str, float | None] = {}
    for key in task.metrics:
        value = _clean(row.get(key))
        if value is None:
            given = sorted(k for k in row if "," in k and "_stderr" not in k)
            raise BackendError(
                f"lm-eval gave no '{key}' for {task.lm_eval_task} (it gave: {', '.join(given) or 'nothing'}; "
                "lm-eval version change?)"
            )
        metric, _, filt = key.partition(",")
        metrics[key] = value
        stderr[key] = _clean(row.get(f"{metric}_stderr,{filt}"))
    macro: dict[str, float] = {}
    if len(leaves) > 1:
        for key in task.metrics:
            values = [v for name in leaves if (v := _clean(out["results"].get(name, {}).get(key))) is not None]
            if values:
                macro[key] = sum(values) / len(values)
    n = sum(int(out["n-samples"][name]["effective"]) for name in leaves if name in out["n-samples"])
    return TaskResult(
        task=task.name, lm_eval_task=task.lm_eval_task, n=n, primary_metric=task.metrics[0], metrics=metrics,
        stderr=stderr, data_file=None if data_file is None else str(data_file), generation_kwargs=generation,
        macro_metrics=macro, subtasks=len(leaves), seconds=round(seconds, 1), olmes_task=task.olmes_task,
        paper_metric=task.paper_metric,
    )


def _sample_rows(task: PolicyTask, out: dict[str, Any], leaves: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per document: prompt as the model saw it, raw response, and each "metric,filter" score.

    lm-eval logs one record per (document, filter); they are merged here.
    """
    rows: list[dict[str, Any]] = []
    for leaf in leaves:
        by_doc: dict[Any, dict[str, Any]] = {}
        for s in out.get("samples", {}).get(leaf, []):
            row = by_doc.setdefault(s.get("doc_id"), {
                "task": task.name,
                **({"subtask": leaf} if len(leaves) > 1 else {}),
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
    return rows


def run_policy_eval(
    model: str,
    tasks: Sequence[str],
    data_files: Mapping[str, Path | None],
    *,
    device: str = "auto",
    dtype: str = "auto",
    **kwargs: Any,
) -> PolicyEvalResult:
    """Load ``model`` (local dir, run checkpoint, built-in name, or a hub id the user gave) and evaluate it.

    Access to hub data and code execution is checked first, so a refused request loads nothing.
    """
    from evolm.backends.loading import load_model

    check_access(tasks, allow_hub=kwargs.get("allow_hub", False), allow_code=kwargs.get("allow_code", False))
    lm_model, tokenizer = load_model(model, device=device, dtype=dtype)
    return evaluate_policy(lm_model, tokenizer, {t: data_files[t] for t in tasks}, model_name=model, **kwargs)


def format_table(result: PolicyEvalResult) -> str:
    """A plain-text table: task, metric, value, stderr, n (primary metric first), then how each task decoded."""
    header = ("task", "metric", "value", "stderr", "n")
    rows = [header]
    for t in result.tasks:
        for key, value in t.metrics.items():
            se = t.stderr.get(key)
            label = key.replace(",none", "") + (" *" if key == t.primary_metric else "")
            rows.append((t.task, label, f"{value:.4f}", "" if se is None else f"{se:.4f}", str(t.n)))
        for key, value in t.macro_metrics.items():
            rows.append((t.task, f"{key.replace(',none', '')} (macro of {t.subtasks})", f"{value:.4f}", "", str(t.n)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if result.protocol == "olmo3-adapt":
        how = "--protocol olmo3-adapt: the paper's decoding on lm-eval's tasks (not OLMES)"
    else:
        how = "--protocol lm-eval: each task's own decoding"
    lines.append(f"{result.label} (lm_eval {result.lm_eval_version}), {how}; zero-shot chat")
    lines.append("decoding: " + "; ".join(f"{t.task} {describe_generation(t.generation_kwargs)}" for t in result.tasks))
    lines.append(f"seed={result.decoding['seed']}, limit={result.limit}; * = primary metric; {result.seconds:.0f} s")
    lines.extend(f"note: {n}" for n in result.notes)
    return "\n".join(lines)
