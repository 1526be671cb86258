"""One optimizer step of either role, read top to bottom: its rows (pure functions over ``generate``), then
``TrainingSteps``, the work TRL's hooks call. TRL owns the loop over steps; it calls these methods in this order
(``tests/training/test_step.py`` records the order on a real run and holds this list to it):

    begin         on_train_begin: TRL built the run and loaded the checkpoint; a resumed run's logs are cut back
    step_rows     training_step, first micro-batch: 1. the rubrics for the step's questions (a policy step) or the
                  writer's pairs (a rubric step), and the rows TRL generates from; 2. TRL generates
    score         the reward function, this process's rows: 3. the judges score each completion
    finish        the reward function, every process's rows: 4. rewards (missing ones filled with the group mean),
                  the replay buffer, samples; 5. TRL updates
    is_phase_end  on_step_end: a phase end forces a save
    end_step      on_log (or on_save): 6. the step record (metrics.jsonl), held-out evaluation when due
    save          on_save: the replay buffer, then the completeness marker, into the checkpoint TRL wrote

What one hook leaves for a later one lives in ``StepState`` (``TrainingSteps.state``), never on the trainer.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from evolm.backends.base import Backend, SamplingParams
from evolm.backends.constrained import rubric_schema
from evolm.config import RunConfig
from evolm.eval.constraints import checker_failures, constraint_fields, newer_passes
from evolm.judge.judge import Judge
from evolm.rubrics import WrittenRubric, read_written, render_rubric, rubric_messages, strip_thinking
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
from evolm.training.heldout import HeldOut
from evolm.training.monitor import LengthDrift, monitor_step
from evolm.training.plan import Plan, StepInfo
from evolm.training.rewards import JudgeCost, RowReward, check_failures, judge_rows, step_rewards, unjudged_rubric

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


def _row(info: StepInfo, slot: int, prompt: Any, question: str, written: WrittenRubric | None = None,
         pair: Pair | None = None, reference: str | None = None, constraints: str | None = None) -> Row:
    """A materialised row of either role."""
    return Row(prompt, question, info.role, info.step + 1, slot, info.cycle, info.phase,
               rubric=json.dumps(written.rubric.to_dict()) if written and written.rubric else None,
               rubric_text=strip_thinking(written.text) if written else None,
               rubric_valid=float(written.valid) if written else None,
               a_pos=pair.a_pos if pair else None, a_neg=pair.a_neg if pair else None,
               pair_source=pair.source if pair else None, reference=reference, constraints=constraints)


def rubric_params(cfg: RunConfig, info: StepInfo) -> SamplingParams:
    r, seed = cfg.rubric, cfg.seed + info.step
    return SamplingParams(r.temperature, r.top_p, r.max_new_tokens, seed, cfg.model.chat_template_kwargs,
                          rubric_schema(r.max_criteria) if r.constrained else None)


def answer_params(cfg: RunConfig, info: StepInfo) -> SamplingParams:
    c = cfg.contrast
    return SamplingParams(c.temperature, cfg.grpo.get("top_p", 1.0), cfg.pair_answer_tokens, cfg.seed + info.step,
                          cfg.model.chat_template_kwargs)


def policy_rows(cfg: RunConfig, plan: Plan, info: StepInfo, rubrics: Sequence[WrittenRubric | None]) -> list[Row]:
    """Policy step: each slot's question in the policy prompt, with the rubric its answers share (or none)."""
    questions = [plan.policy_question(info.policy_step, s) for s in range(plan.prompts_per_step)]
    return [_row(info, s, policy_messages(q, cfg.model.system_prompt), q, w, reference=plan.references.get(q) or None,
                 constraints=plan.constraints.get(q)) for s, (q, w) in enumerate(zip(questions, rubrics, strict=True))]


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
        written = [read_written(t) for t in generate([ask(cfg, q) for q in qs], rubric_params(cfg, info))]
        texts = [render_rubric(w.rubric) if w.rubric else strip_thinking(w.text) for w in written]
        pairs.update(zip(conditioned, rubric_conditioned_pairs(qs, texts, answer, params, sys_prompt)))
    return [_row(info, s, ask(cfg, pairs[s].question), pairs[s].question, pair=pairs[s],
                 constraints=plan.constraints.get(pairs[s].question)) for s in range(n)]


def fixed_model_spec(cfg: RunConfig, role: str) -> tuple[str, dict[str, Any]]:
    """The model of a fixed ``writer`` (``rubric.writer``) or ``answerer`` (``contrast.answerer``), default the model
    being trained, and its ``models.load_backend`` settings."""
    r, c = cfg.rubric, cfg.contrast
    name, backend, url = (r.writer, r.writer_backend, r.writer_base_url) if role == "writer" else \
        (c.answerer, c.answerer_backend, c.answerer_base_url)
    return name or cfg.model.name, {"backend": backend, "base_url": url, "dtype": cfg.model.dtype,
                                    "timeout": r.writer_timeout, "max_retries": r.writer_max_retries,
                                    "fallback_model": r.writer_fallback if role == "writer" else None}


def ask(cfg: RunConfig, question: str) -> Any:
    """The rubric role's conversation for ``question`` under the run's rubric prompt (``rubric.prompt``)."""
    return rubric_messages(question, cfg.rubric.prompt)


def _shared(engine: Generate, fixed: Generate) -> Generate:
    """A fixed model's ``generate`` spread over the processes by the engine's ``share`` (each writes a share, all get
    the same texts: a server samples anew per request), or as it is."""
    return engine.share(fixed) if hasattr(engine, "share") else fixed


# ============================================================================= the step body, around TRL


@dataclass
class StepState:
    """What crosses TRL's hooks within a run (the only state that does): set by one hook, read by a later one."""

    materialising: bool = False  # inside step_rows: colocated vLLM stays awake until TRL's generation (trl_generation)
    awaiting_update: dict[int, StepRecord] = field(default_factory=dict)  # step -> its record: finish -> end_step
    last_time: float = field(default_factory=time.time)  # when the last step record was written (its ``seconds``)


@dataclass
class TrainingSteps:
    """The work of each training step around TRL, one method per hook (``trl_adapter.StepHooks``), in TRL's order."""

    cfg: RunConfig
    plan: Plan
    judges: list[Judge]
    buffer: ReplayBuffer
    run_dir: Path
    on_step: Callable[[StepRecord], None] | None = None
    resume_step: int = 0  # the checkpoint's step when resuming: logs are cut back to it once TRL loaded it
    heldout: HeldOut = field(default_factory=HeldOut)  # eval.*: held-out evaluation with the current weights
    frozen: dict[str, WrittenRubric] = field(default_factory=dict)  # a fixed writer's rubrics, by question
    drift: LengthDrift = field(default_factory=LengthDrift)  # the monitor's length baseline (first policy steps)
    _fixed: dict[str, Backend] = field(default_factory=dict)
    is_main: bool = True  # the process that writes files (set by ``begin`` from TRL's state)
    state: StepState = field(default_factory=StepState)

    def __post_init__(self) -> None:
        self.frozen = {q: read_written(t) for q, t in read_frozen_rubrics(self.run_dir).items()}
        if self.resume_step:  # the length baseline from the policy steps already logged
            for rec in read_metrics(self.run_dir):
                if rec.role == "policy" and rec.step <= self.resume_step:
                    self.drift.update(rec.completion_length)

    def begin(self, is_main: bool) -> None:
        """TRL has loaded the checkpoint: only now are the logs cut back to it (a failed load changes nothing)."""
        self.heldout.is_main = self.is_main = is_main
        if self.resume_step and is_main:
            cut_logs_back(self.run_dir, self.resume_step)

    # ---------------------------------------------------------------- 1. the step's rows (before TRL generates)

    def step_rows(self, step: int, generate: Generate) -> list[Row]:
        """All rows of optimizer step ``step`` (0-based), identical on every process: a policy step's questions with
        their rubrics, written now (coevolve) or by a fixed writer; a rubric step's questions with their pairs."""
        self.state.last_time += self.heldout.before_step(step, generate, self.judges)  # step 0: the initial weights
        info = self.plan.info(step)
        if info.role == "rubric":  # labelled pairs need no answerer
            answer = _shared(generate, self.fixed_model("answerer").generate) \
                if self.cfg.contrast.answerer and self.plan.labelled is None else generate
            return rubric_rows(self.cfg, self.plan, info, self.buffer, generate, answer)
        questions = [self.plan.policy_question(info.policy_step, s) for s in range(self.plan.prompts_per_step)]
        rubrics = None if self.plan.regime == "judge_only" else self.policy_rubrics(info, questions, generate)
        return policy_rows(self.cfg, self.plan, info, rubrics or [None] * len(questions))

    def policy_rubrics(self, info: StepInfo, questions: list[str], generate: Generate) -> list[WrittenRubric]:
        """coevolve: written now, by the current weights. Otherwise by a fixed writer, once, and kept."""
        params = rubric_params(self.cfg, info)
        if self.plan.regime == "coevolve":
            return [read_written(t) for t in generate([ask(self.cfg, q) for q in questions], params)]
        if missing := [q for q in questions if q not in self.frozen]:
            if self.cfg.rubric.writer is not None:  # another model, sampled as rubric.writer_* say (no template kwargs)
                batch, gen = missing, _shared(generate, lambda convs, p: self.fixed_model("writer").generate(
                    convs, replace(p, **self.cfg.rubric.writer_sampling())))
            else:  # the model itself, frozen from now on: every question the remaining policy steps will see
                batch, gen = [q for q in self.plan.policy_questions_from(info.step) if q not in self.frozen], generate
            texts = dict(zip(batch, gen([ask(self.cfg, q) for q in batch], params), strict=True))
            self.frozen.update({q: read_written(t) for q, t in texts.items()})
            if self.is_main:  # every process wrote the same rubrics (generation is gathered): one copy on disk
                append_frozen_rubrics(self.run_dir, texts)
        return [self.frozen[q] for q in questions]

    def fixed_model(self, role: str) -> Backend:
        """The fixed rubric writer (``rubric.writer``) or answerer (``contrast.answerer``), loaded once."""
        if role not in self._fixed:
            from evolm.backends.loading import load_backend

            name, settings = fixed_model_spec(self.cfg, role)
            self._fixed[role] = load_backend(name, **settings)
        return self._fixed[role]

    # ---------------------------------------------------------------- 3. judging and 4. rewards (after TRL generates)

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
