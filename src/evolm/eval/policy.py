"""Policy quality (docs/METHOD.md §3.2) with lm-evaluation-harness, on an in-memory model.

The paper scores policies with Ai2's OLMES ``olmo3:adapt`` suite; here we run the matching tasks of
lm-eval (``lm_eval`` on PyPI) instead, and label every result "lm-eval protocol" so nobody mistakes
it for OLMES numbers. docs/POLICY_EVAL.md has the task map and how to run the whole suite.

Two decoding protocols (``--protocol``):
- ``lm-eval`` (default): each lm-eval task's own generation settings (``generation_kwargs`` in its
  YAML: greedy, its stop sequences and token budget; HFLM's 256 tokens where a task sets none).
  This is what lm-eval users expect, and it keeps a small CPU run short: the paper's sampling with
  16k tokens lets a small model that never stops run every batch to thousands of tokens.
- ``olmo3-adapt``: the paper's decoding on the same tasks: sampled at temperature 0.6, top-p 0.95,
  up to 16384 new tokens. Each task keeps its stop sequences.
Explicit ``greedy``/``temperature``/``top_p``/``max_gen_toks`` override either protocol. Under both,
every task runs zero-shot with the tokenizer's chat template (docs/METHOD.md §3.2), and the token budget is
capped so that a prompt still fits the model's context (lm-eval refuses a budget >= the context).
The settings each task actually ran with are written into its result.

Tasks and data:
- ``ifeval`` and ``gsm8k`` read local JSONL files (shared/data): lm-eval's *stock* config with only
  its data source replaced (``dataset_path: json`` + ``data_files``), so prompts, metrics and answer
  filters stay lm-eval's. The override is an inline group whose member names the stock task with
  overrides (the documented group syntax). These run fully offline.
- The other tasks of the ``olmo3_adapt`` group read lm-eval's stock data sets from the Hugging Face
  hub (or its local cache), which needs ``allow_hub`` (CLI ``--hub``); HumanEval+ and MBPP+ also
  run model-written code to score it, which needs ``allow_code`` (CLI ``--allow-code-execution``).
  Without them the request is refused up front, in one line, before any model is loaded.
- Each task runs as its own ``simple_evaluate`` call, so lm-eval's progress bar (with ETA) is per
  task, and the caller's ``progress`` callback hears when each task starts and ends.

How it stays offline:
- The model is loaded by ``evolm.backends.loading.load_model`` and handed to lm-eval's ``HFLM`` as an
  object, so lm-eval never resolves a name on the hub.
- A TaskManager indexes only the stock folders the requested tasks use (~0.1 s instead of ~10 s
  for the whole catalogue).
- Local tasks are built, and every task is evaluated, with the hub in offline mode (restored
  after); only hub tasks are built outside it (that is where they read data). IFEval's sentence
  model comes from a local copy. Both are ``evolm.eval.offline``'s.

The tasks, and how to add one, are ``evolm.eval.policy_tasks``'s.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evolm.errors import BackendError, InputError
from evolm.eval.offline import code_eval_allowed, ensure_punkt_tab, hub_offline, quiet_git_hash
from evolm.eval.policy_tasks import POLICY_TASKS, PolicyTask
from evolm.runs.jsonl import read_jsonl

LABEL = "lm-eval protocol"  # docs/METHOD.md §3.2: what every result is labelled (not "OLMES")
PROTOCOLS = ("lm-eval", "olmo3-adapt")
DEFAULT_PROTOCOL = "lm-eval"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decoding:
    """The decoding asked for. ``None`` (and ``greedy=False``) leaves a setting to each task's own config.

    Build it with ``resolve_decoding``, which fills in a protocol's values and checks the combination.
    """

    protocol: str = DEFAULT_PROTOCOL
    greedy: bool = False
    temperature: float | None = None
    top_p: float | None = None
    max_gen_toks: int | None = None
    seed: int = 0


# The paper's decoding (docs/METHOD.md §3.2): sampled, temperature 0.6, top-p 0.95, up to 16k new tokens.
OLMO3_ADAPT_DECODING = {"temperature": 0.6, "top_p": 0.95, "max_gen_toks": 16384}


def resolve_decoding(
    protocol: str = DEFAULT_PROTOCOL,
    *,
    greedy: bool = False,
    temperature: float | None = None,
    top_p: float | None = None,
    max_gen_toks: int | None = None,
    seed: int = 0,
) -> Decoding:
    """The decoding of ``protocol`` with the given settings on top (``None``: not given).

    ``lm-eval`` leaves everything not given to each task; ``olmo3-adapt`` fills in the paper's values.
    Raises ``InputError`` for an unknown protocol or settings that contradict each other.
    """
    if protocol not in PROTOCOLS:
        raise InputError(f"unknown protocol '{protocol}' (known: {', '.join(PROTOCOLS)})")
    if greedy and (temperature is not None or top_p is not None):
        raise InputError("--greedy contradicts --temperature/--top-p: give one or the other")
    if temperature is not None and temperature <= 0:
        raise InputError(f"temperature must be > 0, got {temperature} (for greedy decoding use --greedy)")
    if top_p is not None and not 0 < top_p <= 1:
        raise InputError(f"top-p must be in (0, 1], got {top_p}")
    if max_gen_toks is not None and max_gen_toks < 1:
        raise InputError(f"max-gen-toks must be >= 1, got {max_gen_toks}")
    if protocol == "olmo3-adapt":
        if not greedy:
            temperature = OLMO3_ADAPT_DECODING["temperature"] if temperature is None else temperature
            top_p = OLMO3_ADAPT_DECODING["top_p"] if top_p is None else top_p
        max_gen_toks = OLMO3_ADAPT_DECODING["max_gen_toks"] if max_gen_toks is None else max_gen_toks
    elif top_p is not None and temperature is None:
        raise InputError("--top-p needs --temperature under --protocol lm-eval (its tasks decode greedily)")
    return Decoding(protocol, greedy, temperature, top_p, max_gen_toks, seed)


def task_generation_kwargs(
    stock: Mapping[str, Any], decoding: Decoding, default_max_gen_toks: int, max_length: int
) -> tuple[dict[str, Any], str | None]:
    """The generation settings one lm-eval task runs with, and a note when its token budget was cut.

    ``stock`` is the task's own ``generation_kwargs``; ``decoding`` overrides what it sets. The
    budget is always made explicit (``default_max_gen_toks``, HFLM's default, where neither sets
    one) and capped by ``effective_max_gen_toks`` so that the prompt still fits ``max_length``.
    Stop sequences (``until``) always stay the task's.
    """
    out = dict(stock)
    if decoding.greedy:
        out.update(do_sample=False, temperature=0.0)
        out.pop("top_p", None)
    elif decoding.temperature is not None:
        out.update(do_sample=True, temperature=decoding.temperature)
        if decoding.top_p is not None:
            out["top_p"] = decoding.top_p
    if decoding.max_gen_toks is not None:
        requested = decoding.max_gen_toks
    else:
        requested = int(stock.get("max_gen_toks", default_max_gen_toks))
    out["max_gen_toks"] = effective_max_gen_toks(requested, max_length)
    note = None
    if out["max_gen_toks"] < requested:
        note = f"max_gen_toks lowered from {requested} to {out['max_gen_toks']}: the model's context is {max_length}"
    return out, note


def describe_generation(kwargs: Mapping[str, Any]) -> str:
    """A task's decoding in words: "greedy, max_gen_toks 1280" or "sampled T=0.6 top-p=0.95, max_gen_toks 7168"."""
    if not kwargs:
        return "log-likelihood (no generation)"
    if kwargs.get("do_sample"):
        mode = f"sampled T={kwargs.get('temperature')}" + (f" top-p={kwargs['top_p']}" if "top_p" in kwargs else "")
    else:
        mode = "greedy"
    return f"{mode}, max_gen_toks {kwargs.get('max_gen_toks')}"


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


# ----------------------------------------------------------------------------- inputs


def check_access(tasks: Sequence[str], *, allow_hub: bool = False, allow_code: bool = False) -> None:
    """Refuse, in one line and before any model is loaded, tasks that need what was not allowed.

    Tasks without a local data file read lm-eval's stock data set from the Hugging Face hub (or its
    cache); HumanEval+ and MBPP+ execute the model's code to score it.
    """
    hub = [n for n in tasks if not POLICY_TASKS[n].local]
    if hub and not allow_hub:
        local = [n for n in tasks if POLICY_TASKS[n].local]
        instead = f", or keep the local ones: --tasks {','.join(local)}" if local else ""
        raise InputError(
            f"{', '.join(hub)}: data not available locally (lm-eval reads them from the Hugging Face hub): "
            f"add --hub on a machine with hub access or a filled HF datasets cache{instead} (docs/POLICY_EVAL.md)"
        )
    code = [n for n in tasks if POLICY_TASKS[n].runs_code]
    if code and not allow_code:
        raise InputError(
            f"{', '.join(code)}: scoring runs the model's code on this machine: add --allow-code-execution "
            "(in a sandbox or container), or leave these tasks out"
        )


def default_data_dir(cwd: str | Path | None = None) -> Path | None:
    """``data/`` in the working directory (where ``scripts/fetch_data.py`` puts the sets) when it exists, else
    ``../shared/data`` next to it (the development layout), else None."""
    for candidate in (Path(cwd or Path.cwd()) / "data", Path(cwd or Path.cwd()) / ".." / "shared" / "data"):
        if candidate.is_dir():
            return candidate.resolve()
    return None


def resolve_data_files(
    tasks: Sequence[str], data_dir: str | Path | None, overrides: Mapping[str, str | Path | None] | None = None
) -> dict[str, Path | None]:
    """The data file of each task (an override, else ``data_dir/<task default>``), checked row by row.

    Tasks whose data come from the hub map to None. Raises ``InputError`` for a missing file or a
    row without the fields the task reads, before any model is loaded, so a typo costs nothing.
    """
    overrides = overrides or {}
    files: dict[str, Path | None] = {}
    for name in tasks:
        task = POLICY_TASKS[name]
        if task.data_file is None:
            files[name] = None
            continue
        given = overrides.get(name)
        if given is not None:
            path = Path(given).expanduser()
        elif data_dir is not None:
            path = Path(data_dir).expanduser() / task.data_file
        else:
            raise InputError(f"{name}: no data file (give --data-dir DIR holding {task.data_file}, "
                             f"or --{name}-data FILE)")
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


def effective_max_gen_toks(requested: int, max_length: int) -> int:
    """Cap generation so that a prompt still fits: lm-eval refuses ``max_gen_toks >= max_length``.

    Keeps ``min(1024, max_length // 2)`` tokens for the prompt (IFEval and GSM8K prompts are far
    shorter). The paper's 16k exceeds small models' context (SmolLM2: 8192).

    >>> effective_max_gen_toks(16384, 8192), effective_max_gen_toks(256, 8192), effective_max_gen_toks(64, 64)
    (7168, 256, 32)
    """
    reserve = min(1024, max_length // 2)
    return max(1, min(requested, max_length - reserve))


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

    Zero-shot with the tokenizer's chat template, one task after the other. ``limit`` takes the
    first N documents of each (leaf) task. With ``samples_path`` every prompt, response and
    per-sample score is written as JSONL. ``progress`` is told when each task starts and ends.
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
