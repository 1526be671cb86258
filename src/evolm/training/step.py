"""One optimizer step of either role, read top to bottom in the order it happens: its rows, the judges, its rewards,
its record. TRL owns the loop over steps, the generation from the rows and the GRPO update; ``TrainingSteps`` does the
rest, and is itself TRL's reward function. TRL reaches it at these moments, in this order (``trl_adapter`` makes the
calls; ``tests/training/test_step.py`` records the order on a real run and holds this list to it):

    begin         on_train_begin: TRL built the trainer and loaded the checkpoint; the judges are built, a resumed
                  run's logs are cut back
    materialise   training_step, first micro-batch: 1. the step's rows (step_rows): the rubrics for its questions (a
                  policy step) or the writer's pairs (a rubric step), on the trainer's engine; 2. TRL generates
    score         the reward function (``__call__``), this process's rows: 3. the judges score each completion
    finish        the reward function, every process's rows (gathered): 4. rewards (missing ones filled with the group
                  mean), the replay buffer, samples; 5. TRL updates
    is_phase_end  on_step_end: a phase end forces a save
    end_step      on_log (or on_save): 6. the step record (metrics.jsonl), held-out evaluation when due
    save          on_save: the replay buffer, then the completeness marker, into the checkpoint TRL wrote

What one hook leaves for a later one lives in ``StepState`` (``TrainingSteps.state``), never on the trainer.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from evolm.backends.base import Backend
from evolm.backends.replies import strip_thinking
from evolm.config import RunConfig
from evolm.errors import RunError
from evolm.eval.constraints import checker_failures, constraint_fields, newer_passes
from evolm.judge.cache import cached_judge
from evolm.judge.judge import Judge, build_judge
from evolm.rubrics import WrittenRubric, read_written, render_rubric, rubric_messages
from evolm.runs.records import (
    BUFFER_FILE,
    GPU_LOGGED,
    METRICS_FILE,
    TRL_LOGGED,
    CheckpointState,
    SampleRecord,
    StepRecord,
    append_record,
    append_records,
    read_metrics,
    samples_path,
)
from evolm.runs.rundir import append_frozen_rubrics, cut_logs_back, read_frozen_rubrics, write_checkpoint_state
from evolm.training.contrast import (
    Generate,
    Pair,
    ReplayBuffer,
    choose_builders,
    inferred_question_pairs,
    policy_messages,
    rubric_conditioned_pairs,
    temporal_pairs,
)
from evolm.training.extra_rewards import ExtraReward, extra_rewards, score_extra
from evolm.training.generate_calls import answer_params, fixed_model, rubric_params, writer_params
from evolm.training.heldout import HeldOut
from evolm.training.judging import (
    JudgeCost,
    RowReward,
    check_failures,
    completion_text,
    judge_rows,
    step_rewards,
    unjudged_rubric,
)
from evolm.training.monitor import LengthDrift, monitor_step
from evolm.training.plan import Plan, StepInfo
from evolm.training.trl_generation import TrainerGenerate, VLLMCounts, trl_version

# ======================================================================== 1. a step's rows: rubrics, or the pairs


@dataclass(frozen=True)
class Row(Mapping[str, Any]):
    """One slot of a step, materialised: what TRL generates from (``prompt``) and what the reward reads back. Both
    roles have every field, so TRL's columns are the same at every step; ``None`` is "not this role's" (a policy row
    has no pair, a rubric row no rubric) or "none" (no reference answer). A ``Mapping`` of its fields: the adapter
    hands TRL ``dict(row)``, and the reward function's rows (TRL's columns) read the same way."""

    prompt: Any  # the conversation TRL generates from: the policy prompt, or the rubric prompt
    question: str
    role: str  # "policy" | "rubric"
    step: int  # 1-based optimizer step
    slot: int  # the question's place in the step: its GRPO group
    cycle: int
    phase: int
    rubric: str | None = None  # policy: the shared rubric as JSON (None: none, or it did not parse)
    rubric_text: str | None = None  # policy: that rubric as its writer wrote it, thinking stripped
    rubric_valid: float | None = None  # policy: the shared rubric's format validity
    a_pos: str | None = None  # rubric: the pair its rubrics are judged on, and where it came from
    a_neg: str | None = None
    pair_source: str | None = None
    reference: str | None = None  # policy: the data's reference answer, if any
    constraints: str | None = None  # the question's checkable constraints as JSON (eval.constraints), if any

    def __getitem__(self, key: str) -> Any:
        if key not in _ROW_FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_ROW_FIELDS)

    def __len__(self) -> int:
        return len(_ROW_FIELDS)


_ROW_FIELDS = tuple(f.name for f in fields(Row))


def _make_row(info: StepInfo, slot: int, prompt: Any, question: str, written: WrittenRubric | None = None,
              pair: Pair | None = None, reference: str | None = None, constraints: str | None = None) -> Row:
    """A materialised row of either role."""
    return Row(prompt, question, info.role, info.step + 1, slot, info.cycle, info.phase,
               rubric=json.dumps(written.rubric.to_dict()) if written and written.rubric else None,
               rubric_text=strip_thinking(written.text) if written else None,
               rubric_valid=float(written.valid) if written else None,
               a_pos=pair.a_pos if pair else None, a_neg=pair.a_neg if pair else None,
               pair_source=pair.source if pair else None, reference=reference, constraints=constraints)


def policy_rows(cfg: RunConfig, plan: Plan, info: StepInfo, rubrics: Sequence[WrittenRubric | None]) -> list[Row]:
    """Policy step: each slot's question in the policy prompt, with the rubric its answers share (or none)."""
    questions = [plan.policy_question(info.policy_step, s) for s in range(plan.prompts_per_step)]
    return [_make_row(info, s, policy_messages(q, cfg.model.system_prompt), q, w,
                      reference=plan.references.get(q) or None, constraints=plan.constraints.get(q))
            for s, (q, w) in enumerate(zip(questions, rubrics, strict=True))]


def rubric_rows(cfg: RunConfig, plan: Plan, info: StepInfo, buffer: ReplayBuffer, generate: Generate,
                answer: Generate | None = None) -> list[Row]:
    """Rubric step: each slot's question in the rubric prompt, with the (a+, a-) pair its rubrics are judged on.

    ``generate`` writes with the trained weights (the rubrics a rubric-conditioned pair shows); ``answer``
    writes the pairs' answers: the same engine, or a frozen policy (``contrast.answerer``).
    """
    answer = answer or generate
    c, n, sys_prompt = cfg.contrast, plan.prompts_per_step, cfg.model.system_prompt
    rng = random.Random(f"{cfg.seed}:{info.step}")  # the same draws on every process
    builders = choose_builders(n, c.pairs, c.combined_weights, rng)
    picked = buffer.sample(info.policy_step - 1, n, c.min_age, c.max_age, rng)  # the newest answer has age 0
    params = answer_params(cfg, info)

    def question(s: int) -> str:
        return picked[s][0].question if picked else plan.policy_question(info.policy_step, s)

    labelled = plan.labelled.take(info.step - info.policy_step, n) if plan.labelled else []  # rubric steps done
    pairs: dict[int, Pair] = dict(enumerate(labelled))
    temporal = [s for s in range(n) if builders[s] == "temporal" and picked]
    pairs.update(zip(temporal, temporal_pairs([picked[s] for s in temporal], answer, params, sys_prompt)))
    inferred = [s for s in range(n) if builders[s] == "inferred_question"]
    pairs.update(zip(inferred, inferred_question_pairs([question(s) for s in inferred], answer, params, sys_prompt)))
    conditioned = [s for s in range(n) if s not in pairs]  # rubric_conditioned, and temporal with an empty buffer
    if conditioned:
        qs = [question(s) for s in conditioned]
        written = [read_written(t) for t in generate([rubric_conversation(cfg, q) for q in qs],
                                                     rubric_params(cfg, info))]
        texts = [render_rubric(w.rubric) if w.rubric else strip_thinking(w.text) for w in written]
        pairs.update(zip(conditioned, rubric_conditioned_pairs(qs, texts, answer, params, sys_prompt)))
    return [_make_row(info, s, rubric_conversation(cfg, pairs[s].question), pairs[s].question, pair=pairs[s],
                      constraints=plan.constraints.get(pairs[s].question)) for s in range(n)]


def fixed_model_spec(cfg: RunConfig, role: str) -> tuple[str, dict[str, Any]]:
    """The model of a fixed ``writer`` or ``answerer`` (``generate_calls.fixed_model``; default the model being
    trained) and its ``models.load_backend`` settings."""
    r, c = cfg.rubric, cfg.contrast
    backend, url = (r.writer_backend, r.writer_base_url) if role == "writer" else \
        (c.answerer_backend, c.answerer_base_url)
    return fixed_model(cfg, role) or cfg.model.name, {"backend": backend, "base_url": url, "dtype": cfg.model.dtype,
                                    "timeout": r.writer_timeout, "max_retries": r.writer_max_retries,
                                    "fallback_model": r.writer_fallback if role == "writer" else None}


def rubric_conversation(cfg: RunConfig, question: str) -> Any:
    """The rubric role's conversation for ``question`` under the run's rubric prompt (``rubric.prompt``)."""
    return rubric_messages(question, cfg.rubric.prompt)


def _shared_by_processes(engine: Generate, fixed: Generate) -> Generate:
    """A fixed model's ``generate`` spread over the processes by the engine's ``share`` (each writes a share, all get
    the same texts: a server samples anew per request), or as it is."""
    return engine.share(fixed) if hasattr(engine, "share") else fixed


def plan_digest(rows: list[dict[str, Any]]) -> str:
    """A fingerprint of a step's rows (every column, in order): equal on every process, or the step is refused."""
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _check_same_rows(processes: Any, step: int, rows: list[dict[str, Any]]) -> None:
    """Every process (``processes``: accelerate's ``PartialState``) must materialise the same rows for a step: each
    trains on its slice of them, and the rewards are computed over all of them. A ``RunError`` names the step when
    their digests differ (e.g. a server-side writer or answerer that sampled differently on two processes)."""
    if processes.num_processes == 1:
        return
    from accelerate.utils import gather_object

    digests = gather_object([plan_digest(rows)])
    if len(set(digests)) != 1:
        raise RunError(f"step {step + 1}: the processes planned different rows (digests {', '.join(digests)}); "
                       "every process must write the same rubrics and pairs")


# ======================================================================== 3. the judges; 4. TRL's table of the rewards


def build_judges(cfg: RunConfig, trainer: Any) -> list[Judge]:
    """The run's judges (``judge.model``, then ``judge.extra_models``), each behind the judge cache; a failed request
    is a missing score. A judge of the initial model reads TRL's frozen reference model (``reference_model``)."""
    return [cached_judge(build_judge(cfg.judge, m, seed=cfg.seed, fallback_dtype=cfg.model.dtype,
                                     loaded=reference_model(trainer, cfg, m), failures="missing"),
                         cfg.judge.cache, cfg.judge.cache_mb) for m in [cfg.judge.model, *cfg.judge.extra_models]]


def reference_model(trainer: Any, cfg: RunConfig, judge_model: str) -> Any:
    """TRL's reference model when a judge of ``judge_model`` can read it instead of loading another copy, else None.

    It can when they are the same frozen weights: the judge is the run's initial model (same resolved path, no
    adapter, same dtype, transformers backend) and TRL built a reference that never moves (``beta != 0``, no PEFT,
    no ``sync_ref_model``) whole on one process (no DeepSpeed / FSDP shards). TRL's fused LM head leaves the
    model's plain forward as it was (``add_fused_lm_head``: only ``fused_lm_head=True`` changes it).
    """
    from evolm.backends.loading import adapter_base, resolve_model_path

    ref, j = getattr(trainer, "ref_model", None), cfg.judge
    if ref is None or j.backend != "hf" or j.mode == "reward_model" or j.dtype not in ("auto", cfg.model.dtype) \
            or getattr(trainer.args, "sync_ref_model", False) or trainer.accelerator.num_processes != 1 \
            or getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        return None
    path = resolve_model_path(cfg.model.name)
    same = resolve_model_path(judge_model) == path and getattr(ref.config, "_name_or_path", None) == path
    return ref if same and adapter_base(path) is None else None


def _log_table_columns(log_extra: Any, rows: list[dict[str, Any]], scored: list[RowReward]) -> None:
    """evolm's columns in TRL's completions table (a W&B table with ``grpo.log_completions``); the same columns at
    every step of either role, so TRL's per-column buffers stay aligned."""
    policy = [r["role"] == "policy" for r in rows]
    log_extra("role", [r["role"] for r in rows])
    log_extra("rubric", [str(r.get("rubric_text") or "") if p else "" for r, p in zip(rows, policy, strict=True)])
    for key in ("a_pos", "a_neg"):
        log_extra(key, [str(r.get(key) or "") for r in rows])
    for key in ("score", "s_pos", "s_neg"):
        log_extra(key, [getattr(s, key, None) for s in scored])


# ======================================================================== the step, around TRL


@dataclass
class StepState:
    """What crosses TRL's hooks within a run (the only state that does): set by one hook, read by a later one."""

    awaiting_update: dict[int, StepRecord] = field(default_factory=dict)  # step -> its record: finish -> end_step
    last_time: float = field(default_factory=time.time)  # when the last step record was written (its ``seconds``)


@dataclass
class TrainingSteps:
    """The work of each training step around TRL, one method per moment TRL reaches it (the table above), in TRL's
    order. An instance is the run's reward function (TRL's keyword contract, ``__call__``), built before the trainer;
    what needs the trainer (the judges, its engine) comes with ``begin``."""

    cfg: RunConfig
    plan: Plan
    buffer: ReplayBuffer
    run_dir: Path
    on_step: Callable[[StepRecord], None] | None = None
    resume_step: int = 0  # the checkpoint's step when resuming: logs are cut back to it once TRL loaded it
    heldout: HeldOut = field(default_factory=HeldOut)  # eval.*: held-out evaluation with the current weights
    judges: list[Judge] | None = None  # None: built by ``begin``, where they may read TRL's reference model
    frozen: dict[str, WrittenRubric] = field(default_factory=dict)  # a fixed writer's rubrics, by question
    drift: LengthDrift = field(default_factory=LengthDrift)  # the monitor's length baseline (first policy steps)
    _fixed: dict[str, Backend] = field(default_factory=dict)
    is_main: bool = True  # the process that writes files (set by ``begin`` from the trainer)
    state: StepState = field(default_factory=StepState)
    generate: TrainerGenerate | None = None  # the trainer's engine (set by ``begin``)
    memory: Any = None  # ``trl_adapter.GpuMemory``, told when a step's generation is done (set by ``begin``)
    vllm_counts: VLLMCounts | None = None  # the trainer's vLLM work, logged with each step's rewards (set by ``begin``)
    extras: list[ExtraReward] = field(init=False)  # rewards.extra, resolved

    def __post_init__(self) -> None:
        self.__name__ = "evolm_reward"  # TRL logs a reward function by its name (rewards/evolm_reward/mean)
        self.extras = extra_rewards(self.cfg.rewards.extra)  # imported, factories called: once for the run
        self.frozen = {q: read_written(t) for q, t in read_frozen_rubrics(self.run_dir).items()}
        if self.resume_step:  # the length baseline from the policy steps already logged
            for rec in read_metrics(self.run_dir):
                if rec.role == "policy" and rec.step <= self.resume_step:
                    self.drift.update(rec.completion_length)

    def begin(self, trainer: Any, memory: Any = None, vllm_counts: VLLMCounts | None = None) -> None:
        """TRL built ``trainer`` and loaded the checkpoint: the judges are built (one of the initial model reads TRL's
        frozen reference model), extra text is generated on the trainer's engine, and only now are a resumed run's
        logs cut back (a failed load changes nothing). ``memory``, ``vllm_counts``: read as a step's rewards begin."""
        self.heldout.is_main = self.is_main = trainer.is_world_process_zero()
        if self.judges is None:
            self.judges = build_judges(self.cfg, trainer)
        self.generate, self.memory, self.vllm_counts = TrainerGenerate(trainer), memory, vllm_counts
        if self.resume_step and self.is_main:
            cut_logs_back(self.run_dir, self.resume_step)

    # ---------------------------------------------------------------- 1. the step's rows; 2. TRL generates from them

    def materialise(self, inputs: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
        """This process's plan rows of optimizer step ``step`` (0-based), filled in before TRL generates from them:
        the step's rows, made alike on every process (and checked so), each input taking its slot's."""
        from accelerate import PartialState

        slots = self.plan.prompts_per_step
        for r in inputs:
            if int(r["plan_index"]) // slots != step:
                raise RunError(f"TRL handed row {r['plan_index']} to optimizer step {step}: the plan is read out of "
                               f"order (trl {trl_version()}); the adapter's contract is broken")
        with self.generate.materialising():  # colocated vLLM stays awake until TRL's generation (trl_generation)
            full = [dict(row) for row in self.step_rows(step, self.generate)]  # TRL's columns
        _check_same_rows(PartialState(), step, full)
        return [{**r, **full[int(r["plan_index"]) % slots]} for r in inputs]

    def step_rows(self, step: int, generate: Generate) -> list[Row]:
        """All rows of optimizer step ``step`` (0-based), identical on every process: a policy step's questions with
        their rubrics, written now (coevolve) or by a fixed writer; a rubric step's questions with their pairs."""
        self.state.last_time += self.heldout.before_step(step, generate, self.judges)  # step 0: the initial weights
        info = self.plan.info(step)
        if info.role == "rubric":  # labelled pairs need no answerer
            answer = _shared_by_processes(generate, self.fixed_backend("answerer").generate) \
                if fixed_model(self.cfg, "answerer") else generate
            return rubric_rows(self.cfg, self.plan, info, self.buffer, generate, answer)
        questions = [self.plan.policy_question(info.policy_step, s) for s in range(self.plan.prompts_per_step)]
        rubrics = None if self.plan.regime == "judge_only" else self.policy_rubrics(info, questions, generate)
        return policy_rows(self.cfg, self.plan, info, rubrics or [None] * len(questions))

    def policy_rubrics(self, info: StepInfo, questions: list[str], generate: Generate) -> list[WrittenRubric]:
        """coevolve: written now, by the current weights. Otherwise by a fixed writer, once, and kept."""
        params = rubric_params(self.cfg, info)
        if self.plan.regime == "coevolve":
            return [read_written(t) for t in generate([rubric_conversation(self.cfg, q) for q in questions], params)]
        if missing := [q for q in questions if q not in self.frozen]:
            if fixed_model(self.cfg, "writer"):  # another model, sampled as rubric.writer_* say (no template kwargs)
                batch, gen = missing, _shared_by_processes(generate, lambda convs, p: self.fixed_backend(
                    "writer").generate(convs, writer_params(self.cfg, info)))
            else:  # the model itself, frozen from now on: every question the remaining policy steps will see
                batch, gen = [q for q in self.plan.policy_questions_from(info.step) if q not in self.frozen], generate
            texts = dict(zip(batch, gen([rubric_conversation(self.cfg, q) for q in batch], params), strict=True))
            self.frozen.update({q: read_written(t) for q, t in texts.items()})
            if self.is_main:  # every process wrote the same rubrics (generation is gathered): one copy on disk
                append_frozen_rubrics(self.run_dir, texts)
        return [self.frozen[q] for q in questions]

    def fixed_backend(self, role: str) -> Backend:
        """The fixed rubric writer (``rubric.writer``) or answerer (``contrast.answerer``), loaded once."""
        if role not in self._fixed:
            from evolm.backends.loading import load_backend

            name, settings = fixed_model_spec(self.cfg, role)
            self._fixed[role] = load_backend(name, **settings)
        return self._fixed[role]

    # ---------------------------------------------------------------- 3. judging and 4. rewards: TRL's reward function

    def __call__(self, prompts: list, completions: list, completion_ids: list | None = None, log_metric: Any = None,
                 **cols: Any) -> list[float]:
        """TRL's reward function: this process's rows (TRL's columns) and completions in, their rewards out. Every
        process's rows are gathered (a collective each reaches: TRL calls reward functions on all of them), so the
        rewards, the buffer and the step's numbers are the whole step's, the same on every process."""
        from accelerate import PartialState
        from accelerate.utils import gather_object

        if self.memory is not None:  # the step's generation is done
            self.memory.generated()
        if "role" not in cols or any(not r for r in cols["role"]):
            raise RunError("TRL generated from rows evolm did not materialise: the adapter's contract with "
                           f"trl {trl_version()} is broken")
        keys = [k for k in cols if k not in ("trainer_state", "log_extra", "environments")]
        rows = [{k: cols[k][i] for k in keys} for i in range(len(completions))]
        texts = [completion_text(c) for c in completions]
        scored, cost = self.score(rows, texts)
        if mine := [e for e in self.extras if rows and e.role == rows[0]["role"]]:  # rewards.extra of the step's role
            kwargs = {**cols, "prompts": prompts, "completions": completions, "completion_ids": completion_ids,
                      "log_metric": log_metric}
            scored = [replace(s, extras=e) for s, e in zip(scored, score_extra(mine, len(texts), kwargs), strict=True)]
        if cols.get("log_extra") is not None:
            _log_table_columns(cols["log_extra"], rows, scored)
        lengths = [len(ids) for ids in completion_ids] if completion_ids is not None else [0] * len(texts)
        state = PartialState()
        local = list(zip(rows, texts, scored, lengths, strict=True))
        parts = [(local, cost)] if state.num_processes == 1 else gather_object([(local, cost)])
        everyone = [x for part, _ in parts for x in part]
        rewards, metrics = self.finish([x[0] for x in everyone], [x[1] for x in everyone], [x[2] for x in everyone],
                                       [x[3] for x in everyone], state.is_main_process, [c for _, c in parts])
        if self.vllm_counts is not None:  # TRL's generation of the step is done: the step's vLLM work, since the last
            metrics = {**metrics, **self.vllm_counts.take()}
        if log_metric is not None:
            for k, v in metrics.items():
                log_metric(f"evolm/{k}", v)
        start = sum(len(p) for p, _ in parts[: state.process_index]) if state.num_processes > 1 else 0
        return rewards[start : start + len(local)]  # this process's slice

    def score(self, rows: list[dict[str, Any]], completions: list[str]) -> tuple[list[RowReward], JudgeCost]:
        """This process's completions judged, row by row: each row's raw reward, and what judging took (with
        ``rewards.judge_weight`` 0, nothing is judged: the rubric rows' format alone is read)."""
        if self.cfg.rewards.judge_weight == 0:
            return [RowReward(None) if r["role"] == "policy" else unjudged_rubric(t) for r, t in
                    zip(rows, completions, strict=True)], JudgeCost()
        return judge_rows(rows, completions, self.judges, self.cfg.rubric.reward, self.cfg.judge.aggregate,
                          self.cfg.rubric.invalid)

    def finish(self, rows: list[dict[str, Any]], completions: list[str], scored: list[RowReward], lengths: list[int],
               is_main: bool, costs: Sequence[JudgeCost] = ()) -> tuple[list[float], dict[str, float]]:
        """All processes' rows of one step (and each process's judge cost): group-mean filling, the replay buffer,
        samples, the step record."""
        info = self.plan.info(int(rows[0]["step"]) - 1)
        groups = [int(r["slot"]) for r in rows]
        firsts = {g: i for i, g in reversed(list(enumerate(groups)))}  # each question's first row
        signals, scored = monitor_step(self.cfg.rewards, self.drift, info.step, rows, completions, scored, lengths,
                                       groups) if info.role == "policy" else ({}, scored)  # the reward-hacking monitor
        result = step_rewards([r["role"] for r in rows], scored, groups,
                              [rows[i]["rubric_valid"] for i in firsts.values()],
                              drop_flat_criteria=self.cfg.rewards.drop_flat_criteria, cost=JudgeCost.total(costs),
                              judge_weight=self.cfg.rewards.judge_weight)
        check_failures(result, info.step + 1, self.cfg.judge.max_failure_share, self.run_dir)  # same on every process
        if info.role == "rubric":  # the precondition, where a program can check it: is the newer answer better?
            signals = newer_passes([rows[i] for i in firsts.values()])
        signals = {**signals, **checker_failures(rows, completions)}  # checks that raised count as not followed
        if info.role == "policy":  # one answer per question into the buffer, identically on every process
            for g in sorted(firsts):
                self.buffer.add(info.policy_step, rows[firsts[g]]["question"], completions[firsts[g]])
        if is_main:
            self.write_samples(info, rows, completions, scored)
        logged = {k: v for k, v in vars(result).items() if k not in ("rewards", "judge_error")}  # numbers, by name
        self.state.awaiting_update[info.step + 1] = StepRecord(
            step=info.step + 1, role=info.role, cycle=info.cycle, phase=info.phase,
            completion_length=sum(lengths) / len(lengths) if lengths else None, **logged, **signals)
        return result.rewards, {**result.metrics(), **{k: v for k, v in signals.items() if v is not None}}

    def write_samples(self, info: StepInfo, rows: list[dict], completions: list[str], scored: list[RowReward]) -> None:
        keep, recs = self.cfg.schedule.samples_logged_per_step or len(rows), []
        for row, text, sc in list(zip(rows, completions, scored, strict=True))[:keep]:
            common = {k: row[k] for k in ("step", "role", "cycle", "phase", "slot", "question")}
            common.update(constraint_fields(row, text))
            if info.role == "policy":
                rec = SampleRecord(**common, completion=text, reward=sc.reward, score=sc.score,
                                   rubric=json.loads(row["rubric"]) if row["rubric"] else None,
                                   rubric_text=row["rubric_text"] or None, reference=row["reference"] or None,
                                   rubric_valid=row["rubric_valid"], criteria=sc.criteria_json(0))
            else:
                rec = SampleRecord(**common, completion=text, reward=sc.reward, rubric=sc.parsed,
                                   rubric_valid=sc.rubric_valid, s_pos=sc.s_pos, s_neg=sc.s_neg,
                                   a_pos=row["a_pos"], a_neg=row["a_neg"], pair_source=row["pair_source"],
                                   criteria_pos=sc.criteria_json(0), criteria_neg=sc.criteria_json(1))
            recs.append(rec)
        append_records(samples_path(self.run_dir, info.phase, info.role), recs)  # one write and fsync per step

    # ---------------------------------------------------------------- 5. after TRL's update: records, checkpoints

    def is_phase_end(self, step: int) -> bool:
        """Whether step ``step`` (1-based) ends a phase: TRL then saves a checkpoint."""
        return self.plan.is_phase_end(step)

    def end_step(self, step: int, trl_logs: dict[str, Any], is_main: bool) -> None:
        rec = self.state.awaiting_update.pop(step, None)
        if rec is not None and is_main:
            now = time.time()
            rec.kl, rec.loss, rec.vllm_weight_syncs, rec.vllm_generate_calls = (trl_logs.get(k) for k in TRL_LOGGED)
            rec.gpu_gib_generating, rec.gpu_gib_training, rec.gpu_reserved_gib = (trl_logs.get(k) for k in GPU_LOGGED)
            rec.seconds, rec.time, self.state.last_time = round(now - self.state.last_time, 3), now, now
            append_record(self.run_dir / METRICS_FILE, rec)
            if self.on_step is not None:
                self.on_step(rec)
        self.state.last_time += self.heldout.after_step(step, self.judges)  # on every process: generation is collective

    def save(self, checkpoint: Path, step: int) -> None:
        from evolm.backends.loading import base_model_name, name_adapter_base

        # a LoRA adapter of a built-in model (a warm start's too) names that model: it loads anywhere
        name_adapter_base(checkpoint, base_model_name(self.cfg.model.name))
        info = self.plan.info(step - 1)
        self.buffer.save(checkpoint / BUFFER_FILE)  # then the state, last: the checkpoint is complete
        write_checkpoint_state(checkpoint, CheckpointState(step, info.phase, info.cycle, info.role, len(self.buffer)))
