"""The EvoLM loop: one model, two roles, trained in alternation with TRL's GRPO (SPEC §2.4-2.5).

Algorithm (co-evolving regime)::

    for cycle in 1..C:
        K policy steps:  for each question, the model (rubric role, T=0.6) writes one rubric shared
                         by the question's G sampled answers; reward = judge(question, rubric, answer);
                         one answer per question goes into the replay buffer.
        K rubric steps:  for each buffer entry picked in the age window, a+ = a fresh policy answer
                         (T=1.0), a- = the stored one; the model samples G rubrics for the question;
                         reward = f(judge(q, rubric, a+), judge(q, rubric, a-)) (binary / margin_format /
                         separation).

``sequential`` runs all rubric steps first, then all policy steps with the rubric writer frozen;
``frozen_rubric`` runs policy steps only, with rubrics from a fixed writer (the paper's baselines).

How it sits on TRL: ONE ``GRPOTrainer`` serves the whole run (at 8B scale a trainer with
DeepSpeed, a reference model and a vLLM engine costs minutes to build). Its dataset is the
*plan*: row i is slot ``i % P`` of optimizer step ``i // P``; the sampler does not shuffle, so
one generation batch is one step of one role. Three hooks in a small subclass do the EvoLM part:

1. ``_generate_and_score_completions``: before TRL generates, the step's rows are *materialised*
   with the current weights: the role's prompt, the question's rubric (policy) or the pair
   (rubric). This is the phase-boundary work, done per step so that it always uses the newest model.
2. the reward function: one function for both roles, dispatching on the row's ``role``; everything
   it needs is in the row, so TRL splitting a group across processes stays correct.
3. ``_calculate_rewards``: after TRL gathers rewards from all processes, a missing reward
   becomes its group's mean (zero advantage, never a silent 0), the buffer is updated identically
   on every process, and metrics and samples are recorded.

Departures from the reference, and why:
- Rubrics for policy questions are written at every step (not once per phase), with the weights
  of that step: same cost, always the current rubric writer.
- Groups whose rewards are all equal are not removed from the batch; GRPO gives them zero
  advantage, so they add no policy-gradient term (only the small KL term), which is what
  dropping them achieves, without changing batch shapes under DeepSpeed.
- A rubric that does not parse cannot guide the judge: its reward is 0 (the writer is at fault),
  not missing. A policy question whose rubric does not parse is judged without a rubric.
- When the buffer is empty (the start of ``sequential``), temporal pairs fall back to
  rubric-conditioned pairs; the pair's ``source`` records it.
"""

from __future__ import annotations

import json
import math
import random
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolm.backends.base import Backend, Conversation, SamplingParams
from evolm.config import RunConfig, load_config, save_config, to_dict
from evolm.contrast import (
    Pair,
    ReplayBuffer,
    choose_builders,
    inferred_question_pairs,
    policy_messages,
    rubric_conditioned_pairs,
    temporal_pairs,
)
from evolm.errors import InputError, RunError
from evolm.jsonl import append_jsonl, atomic_writer, iter_jsonl_lenient, read_jsonl, write_jsonl
from evolm.judge import Judge, JudgeItem, score_with_judges
from evolm.rewards import completion_text, fill_missing_with_group_mean, policy_reward, rubric_reward
from evolm.rubrics import Rubric, WrittenRubric, read_written, render_rubric, rubric_messages, strip_thinking

BUILTIN_PROMPTS = {"builtin:demo": Path(__file__).parent / "data" / "demo_prompts.jsonl"}
STATE_FILE = "evolm_state.json"  # written last into a checkpoint: its presence marks the checkpoint complete
BUFFER_FILE = "evolm_buffer.jsonl"
FROZEN_RUBRICS = "frozen_rubrics.jsonl"


# ============================================================================= the run


def run(cfg: RunConfig, resume: bool = False) -> Path:
    """Train (or resume) the run described by ``cfg``; returns the run directory."""
    run_dir = Path(cfg.output_dir)
    checkpoint = _prepare_run_dir(cfg, run_dir, resume)
    questions = load_prompts(cfg.data.prompts, cfg.data.limit)
    plan = Plan(cfg, questions)

    from evolm.models import load_model

    model, tokenizer = load_model(cfg.model.name, device="auto", dtype=cfg.model.dtype)
    judges = [_build_judge(cfg, m) for m in [cfg.judge.model, *cfg.judge.extra_models]]
    buffer = ReplayBuffer.load(checkpoint / BUFFER_FILE, cfg.contrast.buffer_size) if checkpoint \
        else ReplayBuffer(cfg.contrast.buffer_size)
    loop = Orchestrator(cfg, plan, judges, buffer, run_dir, tokenizer)
    trainer = _build_trainer(cfg, plan, loop, model, tokenizer, run_dir)

    start = int(json.loads((checkpoint / STATE_FILE).read_text())["step"]) if checkpoint else 0
    print(f"evolm: {cfg.schedule.regime} run in {run_dir}: {plan.total_steps} steps "
          f"({'resuming after step ' + str(start) if checkpoint else 'fresh start'})", flush=True)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM: stop like Ctrl-C
    try:
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    loop.close()
    return run_dir


# ============================================================================= the plan (schedule)


@dataclass(frozen=True)
class StepInfo:
    """Which role an optimizer step trains, and where it sits in the run (all 0-based)."""

    step: int
    role: str  # "policy" | "rubric"
    cycle: int
    phase: int
    policy_step: int  # policy steps completed before this step (the buffer's clock)


class Plan:
    """The schedule of roles over optimizer steps, and the question each policy slot gets."""

    def __init__(self, cfg: RunConfig, questions: Sequence[str]) -> None:
        s = cfg.schedule
        self.regime, self.k, self.cycles = s.regime, s.steps_per_phase, s.cycles
        self.prompts_per_step = s.prompts_per_step
        self.total_steps = cfg.total_steps
        self.questions = list(questions)
        order = list(range(len(self.questions)))
        random.Random(cfg.seed).shuffle(order)
        self._order = order

    def role_phase(self, step: int) -> tuple[str, int, int]:
        phase = step // self.k
        if self.regime == "coevolve":
            return ("policy" if phase % 2 == 0 else "rubric"), phase // 2, phase
        if self.regime == "sequential":
            return ("rubric" if phase < self.cycles else "policy"), phase % self.cycles, phase
        return "policy", phase, phase

    def info(self, step: int) -> StepInfo:
        role, cycle, phase = self.role_phase(step)
        return StepInfo(step, role, cycle, phase, self.policy_steps_before(step))

    def policy_steps_before(self, step: int) -> int:
        return sum(1 for s in range(step) if self.role_phase(s)[0] == "policy")

    def is_phase_end(self, step: int) -> bool:
        """True after the last step of a phase (``step`` counts completed steps, 1-based)."""
        return step % self.k == 0

    def policy_question(self, policy_step: int, slot: int) -> str:
        i = policy_step * self.prompts_per_step + slot
        return self.questions[self._order[i % len(self._order)]]

    def policy_questions_from(self, step: int) -> list[str]:
        """Every question the policy steps from ``step`` on will see (for freezing a rubric writer)."""
        seen: dict[str, None] = {}
        p = self.policy_steps_before(step)
        for s in range(step, self.total_steps):
            if self.role_phase(s)[0] == "policy":
                for slot in range(self.prompts_per_step):
                    seen.setdefault(self.policy_question(p, slot))
                p += 1
        return list(seen)


def load_prompts(spec: str, limit: int = 0) -> list[str]:
    """Training questions from a JSONL file with a ``prompt`` field (or a built-in set)."""
    path = BUILTIN_PROMPTS.get(spec, Path(spec))
    rows = read_jsonl(path, required=["prompt"])
    questions = list(dict.fromkeys(str(r["prompt"]) for r in rows if str(r["prompt"]).strip()))  # deduplicated
    if limit:
        questions = questions[:limit]
    if not questions:
        raise InputError(f"{spec}: no prompts")
    return questions


# ============================================================================= per-step work


@dataclass
class Orchestrator:
    """EvoLM's per-step work around TRL: materialise rows, score them, update the buffer, record."""

    cfg: RunConfig
    plan: Plan
    judges: list[Judge]
    buffer: ReplayBuffer
    run_dir: Path
    tokenizer: Any
    frozen: dict[str, WrittenRubric] = field(default_factory=dict)
    step_metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    last_details: list[dict[str, Any]] = field(default_factory=list)
    _fixed_writer: Backend | None = None

    def __post_init__(self) -> None:
        path = self.run_dir / FROZEN_RUBRICS
        for row in iter_jsonl_lenient(path):
            self.frozen[row["question"]] = read_written(row["text"])

    # ------------------------------------------------------------------ materialise

    def materialise(self, trainer: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Fill the plan rows of one generation batch with prompts, rubrics or pairs (current weights)."""
        step = trainer.state.global_step
        info = self.plan.info(step)
        slots = sorted({int(r["plan_index"]) % self.plan.prompts_per_step for r in rows})
        backend = _TrainerEngine(trainer)
        if info.role == "policy":
            filled = self._policy_slots(info, slots, backend)
        else:
            filled = self._rubric_slots(info, slots, backend)
        filled = _merge_across_processes(trainer, filled)
        out = []
        for r in rows:
            slot = int(r["plan_index"]) % self.plan.prompts_per_step
            out.append({**r, **filled[slot], "step": step + 1, "slot": slot, "role": info.role,
                        "cycle": info.cycle, "phase": info.phase})
        return out

    def _policy_slots(self, info: StepInfo, slots: list[int], engine: _TrainerEngine) -> dict[int, dict]:
        questions = [self.plan.policy_question(info.policy_step, s) for s in slots]
        written = self._rubrics_for(info, questions, engine)
        sys_prompt = self.cfg.model.system_prompt
        return {
            s: _row(policy_messages(q, sys_prompt), q, w.rubric, w.valid)
            for s, q, w in zip(slots, questions, written, strict=True)
        }

    def _rubrics_for(self, info: StepInfo, questions: list[str], engine: _TrainerEngine) -> list[WrittenRubric]:
        r = self.cfg.rubric
        params = SamplingParams(r.temperature, 0.95, r.max_new_tokens, self.cfg.seed + info.step,
                                self.cfg.model.chat_template_kwargs)
        if self.plan.regime == "coevolve":
            return [read_written(t) for t in engine.generate([rubric_messages(q) for q in questions], params)]
        # sequential / frozen_rubric: a fixed writer, whose rubrics are written once and kept.
        missing = [q for q in questions if q not in self.frozen]
        if missing:
            if self.cfg.rubric.writer is not None:
                batch, gen = missing, self._writer().generate
            else:  # the model itself, frozen now: write every question the remaining policy steps will see
                batch, gen = [q for q in self.plan.policy_questions_from(info.step) if q not in self.frozen], engine.generate
            texts = gen([rubric_messages(q) for q in batch], params)
            for q, t in zip(batch, texts, strict=True):
                self.frozen[q] = read_written(t)
                append_jsonl(self.run_dir / FROZEN_RUBRICS, {"question": q, "text": t})
        return [self.frozen[q] for q in questions]

    def _writer(self) -> Backend:
        if self._fixed_writer is None:
            from evolm.models import load_backend

            r = self.cfg.rubric
            self._fixed_writer = load_backend(r.writer or self.cfg.model.name, backend=r.writer_backend,
                                              base_url=r.writer_base_url, dtype=self.cfg.model.dtype)
        return self._fixed_writer

    def _rubric_slots(self, info: StepInfo, slots: list[int], engine: _TrainerEngine) -> dict[int, dict]:
        c = self.cfg.contrast
        rng = random.Random(f"{self.cfg.seed}:{info.step}")  # same picks on every process
        builders = choose_builders(self.plan.prompts_per_step, c.pairs, c.combined_weights, rng)
        picked = self.buffer.sample(info.policy_step, self.plan.prompts_per_step, c.min_age, c.max_age, rng)
        params = SamplingParams(c.temperature, self.cfg.grpo.get("top_p", 1.0), c.max_new_tokens,
                                self.cfg.seed + info.step, self.cfg.model.chat_template_kwargs)
        sys_prompt = self.cfg.model.system_prompt
        pairs: dict[int, Pair] = {}
        temporal = [s for s in slots if builders[s] == "temporal" and picked]
        if temporal:
            for s, p in zip(temporal, temporal_pairs([picked[s] for s in temporal], engine.generate, params,
                                                     sys_prompt), strict=True):
                pairs[s] = p
        inferred = [s for s in slots if builders[s] == "inferred_question"]
        if inferred:
            qs = [self._question_for(s, picked, info) for s in inferred]
            for s, p in zip(inferred, inferred_question_pairs(qs, engine.generate, params, sys_prompt), strict=True):
                pairs[s] = p
        conditioned = [s for s in slots if s not in pairs]  # rubric_conditioned, and temporal with an empty buffer
        if conditioned:
            qs = [self._question_for(s, picked, info) for s in conditioned]
            r = self.cfg.rubric
            rparams = SamplingParams(r.temperature, 0.95, r.max_new_tokens, self.cfg.seed + info.step,
                                     self.cfg.model.chat_template_kwargs)
            written = [read_written(t) for t in engine.generate([rubric_messages(q) for q in qs], rparams)]
            texts = [render_rubric(w.rubric) if w.rubric else strip_thinking(w.text) for w in written]
            for s, p in zip(conditioned, rubric_conditioned_pairs(qs, texts, engine.generate, params, sys_prompt),
                            strict=True):
                pairs[s] = p
        return {s: {**_row(rubric_messages(p.question), p.question, None, 0.0), "a_pos": p.a_pos, "a_neg": p.a_neg,
                    "pair_source": p.source} for s, p in pairs.items()}

    def _question_for(self, slot: int, picked: list, info: StepInfo) -> str:
        return picked[slot][0].question if picked else self.plan.policy_question(info.policy_step, slot)

    # ------------------------------------------------------------------ reward (row by row)

    def reward(self, completions: list[Any], **cols: Any) -> list[float | None]:
        """TRL reward function for both roles; uses only the rows' own columns."""
        texts = [completion_text(c) for c in completions]
        items: list[JudgeItem] = []
        plan: list[tuple[str, Any]] = []  # per row: ("policy", item index) | ("rubric", (i+, i-, written))
        for i, text in enumerate(texts):
            question = cols["question"][i]
            if cols["role"][i] == "policy":
                rubric = Rubric.from_obj(cols["rubric"][i]) if cols["rubric"][i] else None
                plan.append(("policy", len(items)))
                items.append(JudgeItem(question, text, rubric))
            else:
                written = read_written(text)
                if written.rubric is None:
                    plan.append(("rubric", (None, None, written)))
                    continue
                plan.append(("rubric", (len(items), len(items) + 1, written)))
                items += [JudgeItem(question, cols["a_pos"][i], written.rubric),
                          JudgeItem(question, cols["a_neg"][i], written.rubric)]
        scores = score_with_judges(self.judges, items, self.cfg.judge.aggregate) if items else []
        rewards: list[float | None] = []
        self.last_details = []
        for kind, ref in plan:
            if kind == "policy":
                s = scores[ref]
                rewards.append(policy_reward(s))
                self.last_details.append({"score": s})
            else:
                i_pos, i_neg, written = ref
                if i_pos is None:
                    rewards.append(0.0)
                    self.last_details.append({"s_pos": None, "s_neg": None, "rubric_valid": written.valid,
                                              "parsed": None})
                    continue
                sp, sn = scores[i_pos], scores[i_neg]
                rewards.append(rubric_reward(sp, sn, self.cfg.rubric.reward, written.valid))
                self.last_details.append({"s_pos": sp, "s_neg": sn, "rubric_valid": written.valid,
                                          "parsed": written.rubric.to_dict()})
        return rewards

    # ------------------------------------------------------------------ after the gather

    def after_rewards(self, trainer: Any, inputs: list[dict[str, Any]], completions: list[Any], rewards: Any) -> Any:
        """Fill missing rewards with their group mean, update the buffer, record metrics and samples."""
        import torch
        from accelerate.utils import gather_object

        g = self.cfg.schedule.samples_per_prompt
        local = [
            {**{k: r.get(k) for k in ("step", "role", "cycle", "phase", "slot", "question", "rubric", "rubric_valid",
                                      "a_pos", "a_neg", "pair_source")},
             "completion": completion_text(c), **d}
            for r, c, d in zip(inputs, completions, self.last_details, strict=True)
        ]
        rows = gather_object(local)  # every process: the whole batch, in TRL's gathered order
        raw = [None if math.isnan(float(x)) else float(x) for x in rewards[:, 0].tolist()]
        filled = fill_missing_with_group_mean(raw, [i // g for i in range(len(raw))])
        rewards[:, 0] = torch.tensor(filled, dtype=rewards.dtype, device=rewards.device)

        info = self.plan.info(rows[0]["step"] - 1)
        if info.role == "policy":
            for start in range(0, len(rows), g):  # one answer per question: the group's first sample
                self.buffer.add(info.policy_step, rows[start]["question"], rows[start]["completion"])
        metrics = _step_metrics(rows, raw, info.role, g)
        self.step_metrics[info.step + 1] = metrics
        for k, v in metrics.items():
            if v is not None:
                trainer._metrics["train"][f"evolm/{k}"].append(v)
        if trainer.accelerator.is_main_process:
            self._write_samples(rows, raw, info)
        return rewards

    def _write_samples(self, rows: list[dict], raw: list[float | None], info: StepInfo) -> None:
        keep = self.cfg.schedule.samples_logged_per_step or len(rows)
        path = self.run_dir / "samples" / f"phase-{info.phase:03d}-{info.role}.jsonl"
        path.parent.mkdir(exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            for row, r in list(zip(rows, raw, strict=True))[:keep]:
                out = {k: v for k, v in row.items() if v is not None or k in ("score", "s_pos", "s_neg")}
                out["reward"] = r
                if info.role == "policy":
                    out["rubric"] = json.loads(row["rubric"]) if row.get("rubric") else None
                    for k in ("a_pos", "a_neg", "pair_source", "parsed"):
                        out.pop(k, None)
                else:
                    out["rubric"] = out.pop("parsed", None)
                f.write(json.dumps(out, ensure_ascii=False) + "\n")

    def close(self) -> None:
        pass


def _row(prompt: Conversation, question: str, rubric: Rubric | None, valid: float) -> dict[str, Any]:
    """A materialised row; both roles carry the same columns (TRL reads the keys of the first row)."""
    return {"prompt": prompt, "question": question, "rubric": json.dumps(rubric.to_dict()) if rubric else "",
            "rubric_valid": float(valid), "a_pos": "", "a_neg": "", "pair_source": ""}


def _step_metrics(rows: list[dict], raw: list[float | None], role: str, g: int) -> dict[str, float | None]:
    """Per-step numbers TRL does not log: judge pair accuracy, rubric validity, missing rewards."""
    present = [r for r in raw if r is not None]
    out: dict[str, float | None] = {
        "missing_rewards": (len(raw) - len(present)) / len(raw) if raw else 0.0,
        "pair_accuracy": None,
    }
    if role == "rubric":
        pairs = [(r["s_pos"], r["s_neg"]) for r in rows]
        out["pair_accuracy"] = sum(1.0 for p, n in pairs if p is not None and n is not None and p > n) / len(pairs)
        out["rubric_validity"] = sum(float(r["rubric_valid"]) for r in rows) / len(rows)
    else:
        firsts = rows[::g]  # one written rubric per question
        out["rubric_validity"] = sum(float(r["rubric_valid"]) for r in firsts) / len(firsts)
    return out


def _merge_across_processes(trainer: Any, filled: dict[int, dict]) -> dict[int, dict]:
    """Every process gets every slot's data (a group may span processes); the first writer wins."""
    if trainer.accelerator.num_processes == 1:
        return filled
    from accelerate.utils import gather_object

    merged: dict[int, dict] = {}
    for part in gather_object([filled]):
        for slot, data in part.items():
            merged.setdefault(slot, data)
    return merged


# ============================================================================= generation on the trainer's engine


class _TrainerEngine:
    """Generation with the trainer's current weights: its colocated vLLM engine when on, else transformers.

    At scale this avoids a second copy of the model; under DeepSpeed ZeRO-3 the transformers path
    gathers the parameters for the duration of the call (TRL's ``unwrap_model_for_generation``).
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[str]:
        if not conversations:
            return []
        t = self.trainer
        if getattr(t, "use_vllm", False) and getattr(t, "vllm_mode", "") == "colocate":
            from evolm.backends.vllm import VLLMBackend

            if t.state.global_step != t._last_loaded_step:
                t.vllm_generation.sync_weights()
                t._last_loaded_step = t.state.global_step
            return VLLMBackend(llm=t.vllm_generation.llm).generate(conversations, params)
        from trl.models import unwrap_model_for_generation

        from evolm.backends.hf import HFBackend

        with unwrap_model_for_generation(t.model_wrapped, t.accelerator,
                                         gather_deepspeed3_params=t.args.ds3_gather_for_generation) as model:
            backend = HFBackend(model, t.processing_class, batch_size=max(8, t.args.per_device_train_batch_size))
            return backend.generate(conversations, params)


# ============================================================================= building the trainer


def _build_judge(cfg: RunConfig, model_name: str) -> Judge:
    from evolm.models import load_backend

    j = cfg.judge
    backend = load_backend(model_name, backend=j.backend, base_url=j.base_url, api_key_env=j.api_key_env,
                           dtype=cfg.model.dtype if j.dtype == "auto" else j.dtype, batch_size=j.batch_size)
    return Judge(backend, mode=j.mode, temperature=j.temperature, top_p=j.top_p, max_new_tokens=j.max_new_tokens,
                 seed=cfg.seed, chat_template_kwargs=dict(j.chat_template_kwargs))


def _build_trainer(cfg: RunConfig, plan: Plan, loop: Orchestrator, model: Any, tokenizer: Any, run_dir: Path) -> Any:
    import datasets
    from accelerate import PartialState
    from trl import GRPOConfig

    s = cfg.schedule
    world = PartialState().num_processes
    rows_per_step = s.prompts_per_step * s.samples_per_prompt
    per_device = int(cfg.grpo.get("per_device_train_batch_size", 8))
    if rows_per_step % (per_device * world):
        raise InputError(f"prompts_per_step x samples_per_prompt ({rows_per_step}) must be a multiple of "
                         f"grpo.per_device_train_batch_size x processes ({per_device} x {world})")
    accum = rows_per_step // (per_device * world)
    grpo = {k: v for k, v in cfg.grpo.items()}
    grpo.setdefault("report_to", _report_to())
    args = GRPOConfig(
        output_dir=str(run_dir / "checkpoints"),
        num_generations=s.samples_per_prompt,
        gradient_accumulation_steps=accum,
        steps_per_generation=accum,  # one generation batch == one optimizer step == one step of one role
        max_steps=plan.total_steps,
        shuffle_dataset=False,
        save_strategy="steps",
        save_steps=s.save_every,
        logging_steps=1,
        seed=cfg.seed,
        disable_tqdm=True,
        chat_template_kwargs=dict(cfg.model.chat_template_kwargs) or None,
        **grpo,
    )
    n_rows = plan.total_steps * s.prompts_per_step
    placeholder = [{"role": "user", "content": "(filled in at the step)"}]
    dataset = datasets.Dataset.from_dict({"prompt": [placeholder] * n_rows, "plan_index": list(range(n_rows))})

    def evolm_reward(prompts: list, completions: list, **cols: Any) -> list[float | None]:
        return loop.reward(completions, **cols)

    trainer_cls = _trainer_class()
    trainer = trainer_cls(model=model, reward_funcs=[evolm_reward], args=args, train_dataset=dataset,
                          processing_class=tokenizer)
    trainer.evolm = loop
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(_run_recorder_class()(loop, plan))
    return trainer


def _report_to() -> list[str]:
    import importlib.util

    return ["tensorboard"] if importlib.util.find_spec("tensorboard") else []


def _trainer_class() -> type:
    from trl import GRPOTrainer

    class EvolmGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer plus EvoLM's two hooks (see the module docstring); nothing else changes."""

        evolm: Orchestrator

        def _generate_and_score_completions(self, inputs):  # type: ignore[override]
            if self.model.training:
                inputs = self.evolm.materialise(self, inputs)
            return super()._generate_and_score_completions(inputs)

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[override]
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            return self.evolm.after_rewards(self, inputs, completions, rewards)

    return EvolmGRPOTrainer


# ============================================================================= run directory, metrics, resume


def _run_recorder_class() -> type:
    """The callback class, built on first use: importing transformers at module import would make every
    ``evolm train`` error (a bad config, nothing to resume) wait for seconds of imports."""
    from transformers import TrainerCallback

    class _RunRecorder(TrainerCallback):
        """Writes metrics.jsonl, saves the buffer into each checkpoint, forces phase-end saves, shows progress."""

        def __init__(self, loop: Orchestrator, plan: Plan) -> None:
            self.loop, self.plan = loop, plan
            self.last_time = time.time()
            self.bar: Any = None

        def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001
            from tqdm.auto import tqdm

            if state.is_world_process_zero:
                self.bar = tqdm(total=self.plan.total_steps, initial=state.global_step, desc="evolm", unit="step",
                                dynamic_ncols=True)
            self.last_time = time.time()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            if self.plan.is_phase_end(state.global_step):
                control.should_save = True

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            logs = logs or {}
            if "reward" not in logs or not state.is_world_process_zero:
                return
            step = state.global_step
            info = self.plan.info(step - 1)
            extra = self.loop.step_metrics.pop(step, {})
            now = time.time()
            line = {
                "step": step, "role": info.role, "cycle": info.cycle, "phase": info.phase,
                "reward_mean": logs.get("reward"), "reward_std": logs.get("reward_std"),
                "pair_accuracy": extra.get("pair_accuracy"), "rubric_validity": extra.get("rubric_validity"),
                "missing_rewards": extra.get("missing_rewards"),
                "kl": logs.get("kl"), "completion_length": logs.get("completions/mean_length"),
                "loss": logs.get("loss"), "seconds": round(now - self.last_time, 3), "time": now,
            }
            self.last_time = now
            append_jsonl(self.loop.run_dir / "metrics.jsonl", line)
            if self.bar is not None:
                self.bar.set_postfix(role=info.role, cycle=info.cycle, reward=f"{line['reward_mean']:.3f}")
                self.bar.update(step - self.bar.n)

        def on_save(self, args, state, control, **kw):  # noqa: ANN001
            if not state.is_world_process_zero:
                return
            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            self.loop.buffer.save(ckpt / BUFFER_FILE)
            info = self.plan.info(state.global_step - 1)
            state_json = {"step": state.global_step, "phase": info.phase, "cycle": info.cycle, "role": info.role,
                          "buffer_entries": len(self.loop.buffer)}
            with atomic_writer(ckpt / STATE_FILE) as f:  # the completeness marker: never half-written
                f.write(json.dumps(state_json))

        def on_train_end(self, args, state, control, **kw):  # noqa: ANN001
            if self.bar is not None:
                self.bar.close()

    return _RunRecorder


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoints with both TRL's state and EvoLM's marker (written last), oldest first."""
    ckpts = [p for p in (run_dir / "checkpoints").glob("checkpoint-*")
             if (p / STATE_FILE).is_file() and (p / "trainer_state.json").is_file()]
    return sorted(ckpts, key=lambda p: int(p.name.split("-")[1]))


def _prepare_run_dir(cfg: RunConfig, run_dir: Path, resume: bool) -> Path | None:
    """Create a fresh run dir, or validate one for resuming and cut its logs back to the checkpoint."""
    if not resume:
        if (run_dir / "metrics.jsonl").exists() or (run_dir / "checkpoints").exists():
            raise RunError(f"{run_dir} already holds a run: resume it with `evolm train --resume {run_dir}` "
                           "or choose another output_dir")
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
        return None
    ckpts = complete_checkpoints(run_dir)
    if not ckpts:
        raise RunError(f"{run_dir}: no complete checkpoint to resume from (a run saves every "
                       f"schedule.save_every steps and at each phase end); to start over, delete {run_dir}")
    ckpt = ckpts[-1]
    try:
        step = int(json.loads((ckpt / STATE_FILE).read_text())["step"])
    except (OSError, ValueError, KeyError) as e:
        raise RunError(f"{ckpt}: corrupt checkpoint state ({e.__class__.__name__})") from None
    if not (ckpt / BUFFER_FILE).is_file():
        raise RunError(f"{ckpt}: checkpoint has no replay buffer")
    _truncate_after(run_dir / "metrics.jsonl", step)
    for f in (run_dir / "samples").glob("*.jsonl"):
        _truncate_after(f, step)
    return ckpt


def _truncate_after(path: Path, step: int) -> None:
    """Keep only the records of steps <= ``step`` (a resumed run writes the later ones again)."""
    if path.is_file():
        write_jsonl(path, [r for r in iter_jsonl_lenient(path) if int(r.get("step", 0)) <= step])


def resume_config(run_dir: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """The saved config of a run directory (overrides may change e.g. judge endpoints, not the schedule)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise RunError(f"{run_dir}: not a run directory (no config.yaml)")
    cfg = load_config(path, overrides)
    cfg.output_dir = str(run_dir)
    saved = load_config(path)
    if to_dict(cfg)["schedule"] != to_dict(saved)["schedule"] or cfg.seed != saved.seed:
        raise RunError("the schedule and seed of a run cannot change on resume")
    return cfg


def summarise(run_dir: Path) -> list[dict[str, Any]]:
    """Per phase: role, steps, mean reward, judge pair accuracy, rubric validity (from metrics.jsonl)."""
    phases: dict[int, list[dict]] = {}
    for row in iter_jsonl_lenient(run_dir / "metrics.jsonl"):
        phases.setdefault(int(row["phase"]), []).append(row)

    def mean(rows: list[dict], key: str) -> float | None:
        vals = [r[key] for r in rows if isinstance(r.get(key), int | float) and not math.isnan(r[key])]
        return sum(vals) / len(vals) if vals else None

    return [{"phase": p, "role": rows[0]["role"], "cycle": rows[0]["cycle"], "steps": len(rows),
             "reward": mean(rows, "reward_mean"), "pair_accuracy": mean(rows, "pair_accuracy"),
             "rubric_validity": mean(rows, "rubric_validity"), "seconds": sum(r.get("seconds") or 0 for r in rows)}
            for p, rows in sorted(phases.items())]
