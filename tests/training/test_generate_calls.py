"""The generate calls of a step, described once (training/generate_calls.py): held to the calls the step's own code
makes, and to the parameters it samples with."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from evolm.config import load_config
from evolm.training.contrast import ReplayBuffer, choose_builders
from evolm.training.generate_calls import (
    ANSWERER,
    TRAINED,
    WRITER,
    step_calls,
    usual_builders,
    writer_params,
)
from evolm.training.plan import Plan, StepInfo

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PAPER = ["data.prompts=builtin:demo"]


def _calls(cfg, role: str, **situation) -> list[tuple[str, str, int, int]]:  # noqa: ANN001 - RunConfig
    return [(c.what, c.model, c.prompts, c.samples) for c in step_calls(cfg, role, **situation)]


@pytest.mark.parametrize(("pairs", "answerer", "filled"), [
    ("temporal", None, True), ("temporal", None, False), ("rubric_conditioned", None, True),
    ("inferred_question", None, True), ("combined", None, True), ("combined", None, False),
    ("temporal", "Qwen/Qwen3-0.6B", True), ("inferred_question", "Qwen/Qwen3-0.6B", True),
])
def test_a_rubric_step_makes_the_calls_described(pairs: str, answerer: str | None, filled: bool) -> None:
    """step.rubric_rows with a recording generate: the calls it makes (who, how many conversations, the sampling)
    are step_calls' calls before TRL's, in order (a call over no conversation is never made)."""
    from evolm.training.step import rubric_rows

    cfg = load_config(None, [f"contrast.pairs={pairs}", "schedule.prompts_per_step=6", "schedule.steps_per_phase=2",
                             *([f"contrast.answerer={answerer}"] if answerer else [])])
    plan = Plan(cfg, [f"question {i}?" for i in range(20)])
    info = plan.info(2)  # the first rubric step
    assert info.role == "rubric"
    buffer = ReplayBuffer(64)
    for i in range(6 if filled else 0):
        buffer.add(0, f"question {i}?", f"an older answer {i}")
    made = []

    def recorder(who: str):  # noqa: ANN202
        def generate(convs, params):  # noqa: ANN001, ANN202
            if convs:
                made.append((who, len(convs), params))
            return [f"text {i}" for i in range(len(convs))]
        return generate

    rubric_rows(cfg, plan, info, buffer, recorder(TRAINED), recorder(ANSWERER) if answerer else None)
    builders = choose_builders(6, pairs, cfg.contrast.combined_weights, random.Random(f"{cfg.seed}:{info.step}"))
    described = step_calls(cfg, "rubric", builders=builders, buffer_empty=not filled, step=info.step)
    assert described[-1].by_trl and not any(c.by_trl for c in described[:-1])
    assert made == [(c.model, c.sequences, c.params) for c in described[:-1]]


def test_policy_steps_by_regime() -> None:
    paper = load_config(CONFIGS / "paper-qwen3-8b.yaml", PAPER)
    assert _calls(paper, "policy") == [("its rubrics", TRAINED, 64, 1), ("answers", TRAINED, 64, 8)]
    writes = step_calls(paper, "policy")[0].params
    assert (writes.max_new_tokens, writes.temperature) == (paper.rubric.max_new_tokens, paper.rubric.temperature)
    base = load_config(CONFIGS / "baselines" / "base-rubrics.yaml", PAPER)  # frozen_rubric, the base model writes
    assert _calls(base, "policy") == [("answers", TRAINED, 64, 8)]
    assert _calls(base, "policy", first_step=True, questions=300)[0] == ("the frozen rubrics", TRAINED, 300, 1)
    gpt = load_config(CONFIGS / "baselines" / "gpt41-rubrics.yaml", PAPER)  # a served fixed writer
    first = step_calls(gpt, "policy")[0]
    assert (first.model, first.local) == (WRITER, False)
    assert first.params == writer_params(gpt, StepInfo(0, "policy", 0, 0, 0))
    assert first.params.chat_template_kwargs == {}  # the policy model's are not the writer's
    judge_only = load_config(None, ["schedule.regime=judge_only", "rubric.max_new_tokens=64"])
    assert [c.by_trl for c in step_calls(judge_only, "policy")] == [True]


def test_rubric_steps_by_pairs_and_regime() -> None:
    paper = load_config(CONFIGS / "paper-qwen3-8b.yaml", PAPER)
    trl = step_calls(paper, "rubric")[-1]
    assert (trl.what, trl.sequences, trl.params.max_new_tokens, trl.grammar) == ("rubrics", 512, 16384, False)
    assert step_calls(load_config(CONFIGS / "demo-cpu.yaml"), "rubric")[-1].grammar  # rubric.constrained
    # the writer stage of sequential (and any rubric_only run) has no policy steps to fill the buffer
    seq = load_config(CONFIGS / "baselines" / "sequential.yaml", PAPER)
    assert _calls(seq, "rubric")[:2] == [("rubrics to condition on", TRAINED, 64, 1),
                                         ("answers with and without them", ANSWERER, 128, 1)]
    assert step_calls(seq, "rubric")[1].local  # the base model, loaded in the training processes (hf)
    assert step_calls(seq, "policy")[0].model == WRITER  # the writer stage's checkpoint
    assert _calls(load_config(None, ["contrast.pairs=labelled", "data.pairs=pairs.jsonl"]), "rubric") == \
        [("rubrics", TRAINED, 64, 8)]


def test_usual_builders_follow_the_combined_weights() -> None:
    cfg = load_config(None, ["contrast.pairs=combined", "schedule.prompts_per_step=7"])
    # 7 x (0.5, 0.25, 0.25) = 3.5, 1.75, 1.75: 3, 1, 1 and the two largest remainders (0.75) rounded up
    assert Counter(usual_builders(cfg)) == {"temporal": 3, "rubric_conditioned": 2, "inferred_question": 2}
    assert usual_builders(load_config(None, ["contrast.pairs=inferred_question"])) == ["inferred_question"] * 64
