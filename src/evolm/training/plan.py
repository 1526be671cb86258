"""The plan of a run: cycles -> phases -> optimizer steps, the role each step trains, the question each policy slot
gets; and the sequential regime as two runs (``sequential_stages``)."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evolm.config import RunConfig
from evolm.runs.records import SEQUENTIAL_STAGES
from evolm.training.contrast import LabelledPairs, Pair


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

    def __init__(self, cfg: RunConfig, questions: Sequence[str], references: dict[str, str] | None = None,
                 labelled: Sequence[Pair] | None = None, constraints: dict[str, str] | None = None) -> None:
        s = cfg.schedule
        self.references = dict(references or {})  # question -> the data's reference answer (reference-aware judges)
        self.constraints = dict(constraints or {})  # question -> its checkable constraints, JSON (eval.constraints)
        self.regime, self.k, self.cycles = s.regime, s.steps_per_phase, s.cycles
        self.prompts_per_step = s.prompts_per_step
        self.total_steps = cfg.total_steps
        self.questions = list(questions)
        self._order = list(range(len(self.questions)))
        random.Random(cfg.seed).shuffle(self._order)
        self.labelled: LabelledPairs | None = None  # contrast.pairs=labelled: ``labelled`` (the data.pairs kept under
        if cfg.contrast.pairs == "labelled":  # data.max_prompt_tokens, prompt_length.fit_prompt_set), or the file
            self.labelled = LabelledPairs(labelled, cfg.seed) if labelled is not None \
                else LabelledPairs.load(str(cfg.data.pairs), cfg.seed)

    def role_phase(self, step: int) -> tuple[str, int, int]:
        phase = step // self.k
        if self.regime == "coevolve":  # policy, rubric, policy, rubric, ...
            return ("policy" if phase % 2 == 0 else "rubric"), phase // 2, phase
        if self.regime == "rubric_only":  # the writer stage of ``sequential``
            return "rubric", phase, phase
        return "policy", phase, phase  # frozen_rubric, judge_only, and the policy stage of ``sequential``

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


def sequential_stages(cfg: RunConfig, writer_checkpoint: str | None = None) -> tuple[RunConfig, RunConfig]:
    """The paper's sequential baseline as two runs with two weight sets (docs/METHOD.md §2.5).

    Stage 1 trains the rubric writer (``rubric_only``: cycles x K rubric steps) while the policy is
    frozen: the pairs' answers come from ``contrast.answerer`` (default: the base model). Stage 2
    trains the policy from the *base* weights (``frozen_rubric``: cycles x K policy steps) with
    rubrics from stage 1's final checkpoint, frozen. Each stage is a run directory of its own under
    ``output_dir`` (``stage1-writer``, ``stage2-policy``).
    """
    out = Path(cfg.output_dir)
    writer = copy.deepcopy(cfg)
    writer.output_dir, writer.schedule.regime = str(out / SEQUENTIAL_STAGES[0]), "rubric_only"
    writer.contrast.answerer = cfg.contrast.answerer or cfg.model.name
    policy = copy.deepcopy(cfg)
    policy.output_dir, policy.schedule.regime = str(out / SEQUENTIAL_STAGES[1]), "frozen_rubric"
    policy.rubric.writer, policy.rubric.writer_backend, policy.rubric.writer_base_url = writer_checkpoint, "hf", None
    return writer, policy
