"""The records of a run directory: one schema for the writer (training) and every reader.

A run directory holds::

    config.yaml                      the resolved RunConfig (a resume's overrides rewrite it)
    config_history.jsonl             what each such resume changed: step, time, {key: {from, to}}
    .evolm.lock                      held (flock) by the one process training here; holds its PID
    metrics.jsonl                    one StepRecord per optimizer step (appended, fsync'ed), and one with role
                                     "eval" per held-out evaluation (``evolm.training.heldout``; step readers skip
                                     it)
    samples/phase-XXX-<role>.jsonl   SampleRecords: every generated row with its reward and details
    frozen_rubrics.jsonl             rubrics of a fixed writer (sequential / frozen_rubric), written once
    eval_rubrics.jsonl               the fixed rubric set of held-out policy scores, written once at step 0
    checkpoints/checkpoint-N/        TRL's checkpoint + the replay buffer + CheckpointState (written last)

Training appends these; resume, the report, ``evolm eval stats``, the summary table and the
benchmarks read them back through ``read_lenient`` (a crash may leave a torn last line: it is
skipped and counted, never an error) and the ``from_json`` constructors (a value of the wrong
type becomes ``None`` rather than breaking the reader).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolm.errors import RunError
from evolm.runs.jsonl import split_lines

METRICS_FILE = "metrics.jsonl"
SAMPLES_DIR = "samples"
FROZEN_RUBRICS_FILE = "frozen_rubrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"
STATE_FILE = "evolm_state.json"  # written last into a checkpoint: its presence marks the checkpoint complete
BUFFER_FILE = "evolm_buffer.jsonl"
SMOKE_MARKER = "evolm_smoke.json"  # `evolm train --smoke`: in its OUTPUT_DIR-smoke, which a later smoke run may reuse
SEQUENTIAL_STAGES = ("stage1-writer", "stage2-policy")  # run directories under a sequential run's output_dir


def read_buffer_file(path: str | Path) -> list[tuple[int, str, str]]:
    """The (step, question, answer) entries of a checkpoint's replay buffer file, oldest first; ``RunError`` naming
    the line for anything unreadable (a resume then passes over that checkpoint)."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except (OSError, ValueError) as e:
        raise RunError(f"{path}: unreadable replay buffer ({e.__class__.__name__})") from None
    entries = []
    for lineno, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            entries.append((int(d["step"]), str(d["question"]), str(d["answer"])))
        except (ValueError, KeyError, TypeError) as e:
            raise RunError(f"{path}: unreadable replay buffer ({e.__class__.__name__} near line {lineno})") from None
    return entries


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _floats(v: Any) -> dict[str, float | None] | None:
    return {str(k): _float(x) for k, x in v.items()} if isinstance(v, dict) else None


_READERS = {float: _float, int: _int, str: _str, dict: _floats}


def _from_json(cls: type, d: dict[str, Any]) -> Any:
    """``cls`` from a JSON object: unknown keys ignored, a value of the wrong type read as ``None``."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in d:
            continue
        base = f.metadata.get("type")
        kwargs[f.name] = _READERS[base](d[f.name]) if base in _READERS else d[f.name]
    return cls(**kwargs)


def _typed(base: type, default: Any = None) -> Any:
    return field(default=default, metadata={"type": base})


# ----------------------------------------------------------------------------- metrics.jsonl


TRL_LOGGED = ("kl", "loss", "evolm/vllm_weight_syncs", "evolm/vllm_generate_calls")  # StepRecord's from TRL's log
GPU_LOGGED = ("gpu_gib_generating", "gpu_gib_training", "gpu_reserved_gib")  # StepRecord's from GpuMemory


@dataclass
class StepRecord:
    """One optimizer step of either role (a line of ``metrics.jsonl``; steps count from 1).

    Every value is computed by evolm from its own rows, except those of ``TRL_LOGGED`` (``loss``, ``kl``, the vLLM
    counts), which are taken from TRL's log when TRL reports them (``None`` otherwise): a renamed TRL log key can
    blank those columns, never stop the log that resume relies on.
    """

    step: int = _typed(int, 0)
    role: str = _typed(str, "unknown")  # "policy" | "rubric" | "eval" (a held-out evaluation, not a training step)
    cycle: int | None = _typed(int)
    phase: int | None = _typed(int)
    reward_mean: float | None = _typed(float)  # mean reward after missing rewards took their group's mean
    reward_std: float | None = _typed(float)  # mean over groups of the within-group standard deviation
    pair_accuracy: float | None = _typed(float)  # rubric steps: share of rows where the judge scored a+ > a-
    pair_judgements: int | None = _typed(int)  # rubric steps: n of pair_accuracy (rows: one rubric judging one pair)
    pairs: int | None = _typed(int)  # rubric steps: distinct pairs those rows judged (one per question)
    pairs_for: int | None = _typed(int)  # rubric steps: pairs more of whose rubrics scored a+ > a- than a- > a+
    pairs_against: int | None = _typed(int)  # rubric steps: pairs more of whose rubrics scored a- > a+
    rubric_validity: float | None = _typed(float)  # share of format-valid rubrics (rubric samples / policy rubrics)
    missing_rewards: float | None = _typed(float)  # share of rows whose judge score was unreadable
    tied_groups: float | None = _typed(float)  # share of groups whose rewards all tie (zero advantage)
    reward_components: dict[str, float | None] | None = _typed(dict)  # rewards.extra: "judge" and each extra's mean
    judge_p_yes: float | None = _typed(float)  # mean per-criterion value of the step's judging (yesno: P(Yes))
    judge_pass_rate: float | None = _typed(float)  # share of those criteria with a value > 0.5
    criterion_pass_rates: dict[str, float | None] | None = _typed(dict)  # that share per criterion position ("1", ...)
    criteria_per_rubric: float | None = _typed(float)  # mean number of criteria per judged rubric
    flat_criteria: float | None = _typed(float)  # share of criteria whose value spans < 0.05 over the answers judged
    judge_tokens: int | None = _typed(int)  # the judges' prompt + generated tokens for the step's rewards
    judge_latency_s: float | None = _typed(float)  # wall seconds of the step's judging (the slowest process's)
    judge_prompt_tokens: int | None = _typed(int)  # prompt tokens the judges read for the step (local: counted)
    judge_generated_tokens: int | None = _typed(int)  # tokens the judges generated (probability modes: 1 per read)
    judge_requests: int | None = _typed(int)  # judge requests (server attempts; local: prompts run)
    judge_cache_hit_rate: float | None = _typed(float)  # share of the step's judgments answered by the judge cache
    judge_failures: int | None = _typed(int)  # judge requests that failed after their retries (scores missing)
    judge_failure_share: float | None = _typed(float)  # their share of the step's judge requests
    completion_length: float | None = _typed(float)  # mean completion length in tokens
    # reward-hacking monitor (policy steps; evolm.training.monitor, docs/SECURITY.md)
    length_reward_corr: float | None = _typed(float)  # within-group correlation of judge score and answer length
    rubric_copy_share: float | None = _typed(float)  # share of answers repeating rubric text
    score_string_share: float | None = _typed(float)  # share of answers with a score-like string ("score: 9")
    length_drift: float | None = _typed(float)  # mean answer length over the first policy steps' mean
    monitor_flagged: float | None = _typed(float)  # share of answers flagged (score string or rubric copy)
    # rubric steps on prompts with checkable constraints (eval.constraints.newer_passes): temporal pairs whose newer
    # answer follows more constraints than the older one, fewer, as many: whether the writer's reward had a direction
    newer_passes_more: int | None = _typed(int)
    newer_passes_fewer: int | None = _typed(int)
    newer_passes_same: int | None = _typed(int)
    # the step's constraint checks that failed (a checker that raised, an answer too long to check: not followed)
    checker_failures: int | None = _typed(int)
    kl: float | None = _typed(float)
    loss: float | None = _typed(float)
    # grpo.use_vllm: the step's vLLM work since the previous step's rewards (mean over processes; trl_adapter item 4)
    vllm_weight_syncs: float | None = _typed(float)  # every weight pushed to the engine (sleep level 2: 1 per step)
    vllm_generate_calls: float | None = _typed(float)  # evolm's rubrics and fresh answers, then TRL's completions
    # on a GPU, the main process's peak memory (GiB, torch.cuda's statistics: trl_adapter.GpuMemory): what
    # `evolm train --dry-run` estimates per phase, measured
    gpu_gib_generating: float | None = _typed(float)  # allocated, from the step's start to its rewards (generation,
    # then TRL's old and reference log-probs)
    gpu_gib_training: float | None = _typed(float)  # allocated, from the rewards to the step's end (rewards, loss,
    # backward, the optimizer step)
    gpu_reserved_gib: float | None = _typed(float)  # the caching allocator's most reserved over the step
    # held-out evaluation (role "eval" lines: eval.* settings; step = optimizer steps completed, 0 = before training)
    heldout_pair_accuracy: float | None = _typed(float)  # judge accuracy on eval.pairs, the current writer's rubrics
    heldout_pairs: int | None = _typed(int)  # n of those pairs (a tie or missing score counts 1/2)
    heldout_validity: float | None = _typed(float)  # format-valid share of rubrics for eval.questions + eval.pairs
    heldout_policy_score: float | None = _typed(float)  # mean judge score of the policy's answers (fixed rubrics)
    heldout_policy_score_std: float | None = _typed(float)  # their standard deviation (for a confidence interval)
    heldout_questions: int | None = _typed(int)  # n of held-out questions
    seconds: float | None = _typed(float)  # wall time since the previous record (or the run's start)
    time: float | None = _typed(float)  # unix time when the record was written

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepRecord:
        rec = _from_json(cls, d)
        rec.step = rec.step if isinstance(rec.step, int) else 0
        rec.role = rec.role if isinstance(rec.role, str) else "unknown"
        return rec


METRIC_FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord) if f.metadata.get("type") is float)


# ----------------------------------------------------------------------------- samples/


@dataclass
class SampleRecord:
    """One generated row of a step, with its reward and how it was computed (``samples/*.jsonl``).

    Policy rows: ``completion`` is the answer, ``rubric`` the parsed rubric it was judged by
    (``None``: it did not parse, and the judge read ``rubric_text``; both empty: judged alone),
    ``score`` the judge's score. Rubric rows: ``completion`` is the
    rubric text the model wrote, ``rubric`` its parse, ``s_pos``/``s_neg`` the judge's scores of the
    pair (``a_pos``, ``a_neg``), ``pair_source`` the builder that made the pair.
    ``reward`` is the raw reward (``None``: missing, given the group mean in training).
    """

    step: int = _typed(int, 0)
    role: str = _typed(str, "unknown")
    cycle: int | None = _typed(int)
    phase: int | None = _typed(int)
    slot: int | None = _typed(int)
    question: str = _typed(str, "")
    completion: str = _typed(str, "")
    reward: float | None = _typed(float)
    rubric: dict[str, Any] | None = None
    rubric_text: str | None = _typed(str)  # policy rows: the rubric as written (thinking stripped), as judged
    reference: str | None = _typed(str)  # policy rows: the data's reference answer, when it has one
    rubric_valid: float | None = _typed(float)
    score: float | None = _typed(float)
    s_pos: float | None = _typed(float)
    s_neg: float | None = _typed(float)
    a_pos: str | None = _typed(str)
    a_neg: str | None = _typed(str)
    pair_source: str | None = _typed(str)
    constraints: list[dict[str, Any]] | None = None  # the question's checkable constraints (eval.constraints)
    constraints_passed: int | None = _typed(int)  # policy rows: how many of them the completion follows
    passed_pos: int | None = _typed(int)  # rubric rows: how many the pair's a+ follows
    passed_neg: int | None = _typed(int)  # ... and its a-
    # per criterion of the judgment, {text, weight, value} (judge modes that read criteria: yesno P(Yes), generative
    # ratings): policy rows' answer; rubric rows' a+ and a-
    criteria: list[dict[str, Any]] | None = None
    criteria_pos: list[dict[str, Any]] | None = None
    criteria_neg: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        keep_none = {"reward", "rubric", "score", "s_pos", "s_neg"}  # None means something for these
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None or k in keep_none}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SampleRecord:
        rec = _from_json(cls, d)
        if not isinstance(rec.rubric, dict):
            rec.rubric = None
        return rec


def samples_path(run_dir: Path, phase: int, role: str) -> Path:
    return run_dir / SAMPLES_DIR / f"phase-{phase:03d}-{role}.jsonl"


# ----------------------------------------------------------------------------- checkpoints


@dataclass
class CheckpointState:
    """EvoLM's part of a checkpoint; written last, so its presence marks the checkpoint complete."""

    step: int = _typed(int, 0)
    phase: int | None = _typed(int)
    cycle: int | None = _typed(int)
    role: str | None = _typed(str)
    buffer_entries: int | None = _typed(int)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckpointState:
        return _from_json(cls, d)


# ----------------------------------------------------------------------------- the one lenient reader


@dataclass
class Lenient:
    """The JSON objects of a JSONL file, and what could not be read."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # lines that were not a JSON object
    torn_last: bool = False  # the last line was one of them: a crash (or a writer still at work)


def read_lenient(path: str | Path) -> Lenient:
    """Read a JSONL file that a crash may have cut short; an absent file reads as empty. Never raises
    on content (bad lines are skipped and counted)."""
    out = Lenient()
    p = Path(path)
    if not p.is_file():
        return out
    lines = [ln for ln in split_lines(p.read_bytes().decode("utf-8", errors="replace")) if ln.strip()]
    for i, line in enumerate(lines):
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # malformed, a 5000-digit number, nested 100k deep
            obj = None
        if isinstance(obj, dict):
            out.rows.append(obj)
        else:
            out.skipped += 1
            out.torn_last = i == len(lines) - 1
    return out


def iter_lenient(path: str | Path) -> Iterator[dict[str, Any]]:
    yield from read_lenient(path).rows


def read_metrics(run_dir: str | Path) -> list[StepRecord]:
    """The run's step records in step order (unreadable lines skipped)."""
    recs = [StepRecord.from_json(d) for d in iter_lenient(Path(run_dir) / METRICS_FILE)]
    return sorted(recs, key=lambda r: r.step)


def append_records(path: Path, records: Iterable[StepRecord | SampleRecord | dict[str, Any]]) -> None:
    """Append records with one write and one fsync (a crash loses at most the lines being written)."""
    from evolm.runs.jsonl import append_jsonl

    path.parent.mkdir(parents=True, exist_ok=True)
    append_jsonl(path, [r if isinstance(r, dict) else r.to_json() for r in records])


def append_record(path: Path, record: StepRecord | SampleRecord | dict[str, Any]) -> None:
    append_records(path, [record])
