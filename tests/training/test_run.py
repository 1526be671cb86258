"""The EvoLM loop on TRL (docs/METHOD.md §2.4-2.5, §6): the plan, the reward dispatch, whole runs of every regime
with a tiny random model, the logs they leave, and resuming after a hard kill.

The runs are short (1-2 steps per phase, 2 questions x 2 samples, 8 new tokens) so the file stays within
a few minutes on two CPU cores; what they check does not depend on the model being any good.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_run import DEMO, REPO, G, P, row_rewards, tiny_config, tiny_overrides

from evolm.config import load_config
from evolm.errors import InputError, RunError
from evolm.judge.judge import Judge, JudgeItem, build_judge
from evolm.report.report import summarise
from evolm.rewards import rubric_reward
from evolm.rubrics import RUBRIC_SYSTEM_PROMPT, Rubric, format_validity, parse_rubric, rubric_messages
from evolm.runs.jsonl import read_jsonl
from evolm.runs.records import BUFFER_FILE, STATE_FILE
from evolm.runs.records import FROZEN_RUBRICS_FILE as FROZEN_RUBRICS
from evolm.runs.rundir import complete_checkpoints, open_run, resume_config
from evolm.scores import scores_of
from evolm.training.contrast import ReplayBuffer, choose_builders, policy_messages
from evolm.training.judging import JudgeCost, RowReward, step_rewards
from evolm.training.plan import Plan
from evolm.training.prompts import load_prompts
from evolm.training.run import run
from evolm.training.step import TrainingSteps, rubric_rows

METRIC_FIELDS = ("step", "role", "cycle", "phase", "reward_mean", "reward_std", "pair_accuracy", "rubric_validity",
                 "kl", "completion_length", "seconds")
VALID_RUBRIC = json.dumps({"criteria": [
    {"criterion": "The answer says 4.", "weight": 0.75, "scoring_levels": {"1.0": "says 4", "0.0": "does not"}},
    {"criterion": "The answer is one short sentence.", "weight": 0.25, "scoring_levels": {"1.0": "yes", "0.0": "no"}},
]})


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return read_jsonl(run_dir / "metrics.jsonl")


def samples(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    return {p.name: read_jsonl(p) for p in sorted((run_dir / "samples").glob("*.jsonl"))}


def checkpoint_steps(run_dir: Path) -> list[int]:
    return [int(p.name.split("-")[1]) for p in complete_checkpoints(run_dir)]


def buffer_rows(path: Path) -> list[tuple[int, str, str]]:
    return [(e.step, e.question, e.answer) for e in ReplayBuffer.load(path, 10_000).entries]


# ============================================================================= the plan


def plan_for(*overrides: str, n_questions: int = 24, seed: int = 0) -> Plan:
    cfg = load_config(None, [f"seed={seed}", *overrides])
    return Plan(cfg, [f"q{i}" for i in range(n_questions)])


def test_plan_coevolve_roles_and_clock() -> None:
    plan = plan_for("schedule.cycles=2", "schedule.steps_per_phase=3", "schedule.prompts_per_step=2")
    assert plan.total_steps == 12
    infos = [plan.info(s) for s in range(12)]
    assert [i.role[0] for i in infos] == list("ppprrrppprrr")
    assert [i.phase for i in infos] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert [i.cycle for i in infos] == [0] * 6 + [1] * 6
    assert [i.policy_step for i in infos] == [0, 1, 2, 3, 3, 3, 3, 4, 5, 6, 6, 6]
    assert [plan.policy_steps_before(s) for s in range(13)] == [0, 1, 2, 3, 3, 3, 3, 4, 5, 6, 6, 6, 6]
    assert [s for s in range(1, 13) if plan.is_phase_end(s)] == [3, 6, 9, 12]


def test_plan_rubric_only_trains_the_writer_alone() -> None:
    plan = plan_for("schedule.regime=rubric_only", "schedule.cycles=2", "schedule.steps_per_phase=2")
    assert plan.total_steps == 4
    infos = [plan.info(s) for s in range(4)]
    assert [i.role for i in infos] == ["rubric"] * 4
    assert [(i.phase, i.cycle, i.policy_step) for i in infos] == [(0, 0, 0), (0, 0, 0), (1, 1, 0), (1, 1, 0)]


def test_sequential_is_two_stages_with_two_weight_sets(tmp_path: Path) -> None:
    from evolm.training.plan import sequential_stages

    cfg = load_config(None, [f"output_dir={tmp_path}", "schedule.regime=sequential", "schedule.cycles=2",
                             "schedule.steps_per_phase=3"])
    writer, policy = sequential_stages(cfg, writer_checkpoint="W")
    assert (writer.schedule.regime, writer.total_steps, writer.contrast.answerer) == ("rubric_only", 6, cfg.model.name)
    assert (policy.schedule.regime, policy.total_steps, policy.rubric.writer) == ("frozen_rubric", 6, "W")
    assert policy.model.name == cfg.model.name  # the policy starts from the base weights, not the writer's
    assert Path(writer.output_dir).parent == Path(policy.output_dir).parent == tmp_path
    assert cfg.schedule.regime == "sequential"  # the run's own config is untouched


def test_plan_frozen_rubric_is_policy_only() -> None:
    plan = plan_for("schedule.regime=frozen_rubric", "schedule.cycles=3", "schedule.steps_per_phase=2")
    assert plan.total_steps == 6
    infos = [plan.info(s) for s in range(6)]
    assert {i.role for i in infos} == {"policy"}
    assert [i.phase for i in infos] == [0, 0, 1, 1, 2, 2]
    assert [i.cycle for i in infos] == [0, 0, 1, 1, 2, 2]
    assert [i.policy_step for i in infos] == [0, 1, 2, 3, 4, 5]


def test_policy_questions_are_a_seeded_permutation() -> None:
    a = plan_for("schedule.prompts_per_step=4", n_questions=12)
    b = plan_for("schedule.prompts_per_step=4", n_questions=12)
    c = plan_for("schedule.prompts_per_step=4", n_questions=12, seed=1)
    first = [a.policy_question(p, s) for p in range(3) for s in range(4)]
    assert sorted(first) == sorted(f"q{i}" for i in range(12))  # one pass sees every question once
    assert first == [b.policy_question(p, s) for p in range(3) for s in range(4)]  # deterministic
    assert first != [c.policy_question(p, s) for p in range(3) for s in range(4)]  # the seed matters
    assert [a.policy_question(p, s) for p in range(3, 6) for s in range(4)] == first  # then it wraps around
    assert a.policy_question(1, 2) == first[6]  # slot s of policy step p is row p * prompts_per_step + s


def test_policy_questions_from_covers_the_remaining_policy_steps() -> None:
    plan = plan_for("schedule.regime=coevolve", "schedule.cycles=2", "schedule.steps_per_phase=1",
                    "schedule.prompts_per_step=3", n_questions=100)  # steps: policy, rubric, policy, rubric
    expected = [plan.policy_question(p, s) for p in range(2) for s in range(3)]
    assert plan.policy_questions_from(0) == expected  # from the start: both policy steps
    assert plan.policy_questions_from(1) == expected[3:]  # the next policy step is step 2
    assert plan.policy_questions_from(3) == []


def test_load_prompts(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "a"}\n{"prompt": "  "}\n{"prompt": "c"}\n')
    assert load_prompts(str(path)) == ["a", "b", "c"]  # deduplicated, blanks dropped, order kept
    assert load_prompts(str(path), limit=2) == ["a", "b"]
    assert len(load_prompts("builtin:demo")) == 24
    path.write_text('{"prompt": " "}\n')
    with pytest.raises(InputError, match="no prompts"):
        load_prompts(str(path))


# ============================================================================= rewards, row by row


@pytest.fixture(scope="module")
def tiny_judge(tiny_backend: Any) -> Judge:
    return Judge(tiny_backend, mode="prob")


def loop_for(tmp_path: Path, tiny_model_dir: Path, judge: Judge, *extra: str) -> TrainingSteps:
    cfg = tiny_config(tiny_model_dir, tmp_path / "run", *extra)
    (tmp_path / "run").mkdir()
    return TrainingSteps(cfg, Plan(cfg, ["q"]), ReplayBuffer(4), tmp_path / "run", judges=[judge])


@pytest.mark.parametrize("kind", ["binary", "margin_format", "separation"])
def test_rewards_dispatch_on_the_role(tiny_judge: Judge, kind: str) -> None:
    rubric = parse_rubric(VALID_RUBRIC)
    assert rubric is not None
    q = "What is 2 + 2?"
    rows = [{"role": "policy", "question": q, "rubric": json.dumps(rubric.to_dict()), "a_pos": "", "a_neg": ""},
            {"role": "policy", "question": q, "rubric": "", "a_pos": "", "a_neg": ""},
            {"role": "rubric", "question": q, "rubric": "", "a_pos": "The answer is 4.", "a_neg": "fish"},
            {"role": "rubric", "question": q, "rubric": "", "a_pos": "The answer is 4.", "a_neg": "fish"}]
    out = row_rewards(rows, ["It is 4.", "Five.", VALID_RUBRIC, "not a rubric at all"], [tiny_judge], kind)

    def j(items: list[JudgeItem]) -> list[float | None]:
        return scores_of(tiny_judge.score(items))

    (s_policy_rubric,) = j([JudgeItem(q, "It is 4.", rubric)])
    (s_policy_alone,) = j([JudgeItem(q, "Five.", None)])
    s_pos, s_neg = j([JudgeItem(q, "The answer is 4.", rubric), JudgeItem(q, "fish", rubric)])
    assert out[0].reward == pytest.approx(s_policy_rubric, abs=1e-6) and out[0].score == out[0].reward
    assert out[1].reward == pytest.approx(s_policy_alone, abs=1e-6)
    assert out[2].reward == pytest.approx(rubric_reward(s_pos, s_neg, kind, format_validity(VALID_RUBRIC)), abs=1e-6)
    assert out[2].s_pos == pytest.approx(s_pos, abs=1e-6) and out[2].s_neg == pytest.approx(s_neg, abs=1e-6)
    assert out[2].rubric_valid == 1.0 and out[2].parsed == rubric.to_dict()
    # a rubric that does not parse: the judge reads its raw text (reference); the format term does the rest
    raw = "not a rubric at all"
    s_pos_raw, s_neg_raw = j([JudgeItem(q, "The answer is 4.", None, rubric_text=raw),
                              JudgeItem(q, "fish", None, rubric_text=raw)])
    assert out[3].reward == pytest.approx(rubric_reward(s_pos_raw, s_neg_raw, kind, 0.0), abs=1e-6)
    assert out[3].rubric_valid == 0.0 and out[3].parsed is None


def test_invalid_rubrics_zero_option(tiny_judge: Judge) -> None:
    """rubric.invalid=zero: an unparseable rubric earns 0, and its policy question is judged alone."""
    q = "What is 2 + 2?"
    rows = [{"role": "rubric", "question": q, "rubric": "", "a_pos": "4", "a_neg": "fish"},
            {"role": "policy", "question": q, "rubric": "", "rubric_text": "garbled rubric", "a_pos": "", "a_neg": ""}]
    zero = row_rewards(rows, ["garbled rubric", "It is 4."], [tiny_judge], "margin_format", invalid_rubrics="zero")
    assert zero[0] == RowReward(0.0, rubric_valid=0.0)
    (alone,) = scores_of(tiny_judge.score([JudgeItem(q, "It is 4.", None)]))
    assert zero[1].reward == pytest.approx(alone, abs=1e-6)
    raw = row_rewards(rows, ["garbled rubric", "It is 4."], [tiny_judge], "margin_format")
    (with_raw,) = scores_of(tiny_judge.score([JudgeItem(q, "It is 4.", None, rubric_text="garbled rubric")]))
    assert raw[1].reward == pytest.approx(with_raw, abs=1e-6) and raw[0].s_pos is not None
    empty = row_rewards([rows[0]], ["<think>only thinking</think>"], [tiny_judge], "margin_format")
    assert empty[0] == RowReward(0.0, rubric_valid=0.0)  # nothing to read: 0 either way


def test_an_empty_policy_rubric_reaches_the_authors_judge_prompt_as_an_empty_rubric() -> None:
    """Their judge is sent its own template with "Rubric: " and nothing after it when the writer's rubric is empty
    once its thinking is removed; evolm's prompt judges such a question alone; judge_only rows have no rubric."""
    class Recording:
        name = "recording"

        def __init__(self) -> None:
            self.users: list[str] = []

        def generate(self, convs: list, params: Any, *, progress: bool = False) -> list[str]:
            self.users += [c[-1]["content"] for c in convs]
            return ['{"reasoning": "", "score": 0.5}'] * len(convs)

    empty = {"role": "policy", "question": "Q?", "rubric": "", "rubric_text": "", "rubric_valid": 0.0}
    alone = {**empty, "rubric_valid": None}  # judge_only: no rubric was written
    reference, ours = Recording(), Recording()
    row_rewards([empty, alone], ["A.", "A."], [Judge(reference, mode="generative", prompt="reference", defences=False)])
    assert "Rubric: \n\nAnswer to evaluate: A." in reference.users[0]
    assert "Rubric:" not in reference.users[1]
    row_rewards([empty], ["A."], [Judge(ours, mode="generative")])
    assert "Rubric" not in ours.users[0]


def test_step_rewards_by_hand() -> None:
    raw = [RowReward(0.7, s_pos=0.9, s_neg=0.1, rubric_valid=1.0), RowReward(0.3, s_pos=0.2, s_neg=0.2, rubric_valid=1.0),
           RowReward(0.0, rubric_valid=0.0), RowReward(None, s_pos=0.3, s_neg=0.6, rubric_valid=0.0)]
    r = step_rewards(["rubric"] * 4, raw, [0, 0, 1, 1])
    assert (r.missing_rewards, r.pair_accuracy, r.rubric_validity, r.tied_groups) == (0.25, 0.25, 0.5, 0.5)
    assert (r.pair_judgements, r.pairs) == (4, 2)  # the pair accuracy's n: 4 rubrics judging 2 pairs
    assert r.rewards == [0.7, 0.3, 0.0, 0.0]  # the missing reward takes its group's mean: zero advantage
    assert r.reward_mean == pytest.approx(0.25) and r.reward_std == pytest.approx((0.2 + 0.0) / 2)
    r = step_rewards(["policy"] * 4, [RowReward(x) for x in (0.5, 0.5, 0.1, 0.2)], [0, 0, 1, 1], [1.0, 0.0])
    assert (r.missing_rewards, r.pair_accuracy, r.rubric_validity) == (0.0, None, 0.5)  # one rubric per question
    assert (r.pair_judgements, r.pairs) == (None, None)


# ============================================================================= per-step materialisation


class FakeEngine:
    """Stands in for the trainer's generation engine: scripted replies, every call recorded."""

    def __init__(self) -> None:
        self.calls: list[list[list[dict[str, str]]]] = []

    def generate(self, convs: list, params: Any) -> list[str]:
        self.calls.append(convs)
        out = []
        for c in convs:
            text = c[-1]["content"]
            if c[0]["content"].startswith(RUBRIC_SYSTEM_PROMPT):
                out.append(VALID_RUBRIC)
            elif text.startswith("Here is an answer"):
                out.append("GUESSED")
            else:
                out.append(("RUBRIC-AWARE " if "rubric" in c[0]["content"] else "") + "ANS(" + text + ")")
        return out


def test_rubric_step_rows_from_every_builder(tmp_path: Path, tiny_model_dir: Path, tiny_judge: Judge) -> None:
    loop = loop_for(tmp_path, tiny_model_dir, tiny_judge, "schedule.prompts_per_step=6", "contrast.pairs=combined",
                        "contrast.combined_weights={temporal: 1, rubric_conditioned: 1, inferred_question: 1}",
                        "contrast.min_age=1", "contrast.max_age=3")
    loop.buffer = ReplayBuffer(64)
    for step in range(3):
        for k in range(6):
            loop.buffer.add(step, f"Q{step}-{k}", f"OLD{step}-{k}")
    info = replace(loop.plan.info(0), role="rubric", policy_step=3)
    engine = FakeEngine()
    filled = dict(enumerate(rubric_rows(loop.cfg, loop.plan, info, loop.buffer, engine.generate)))

    rng = random.Random(f"{loop.cfg.seed}:{info.step}")  # the same draws as the loop makes
    builders = choose_builders(6, "combined", loop.cfg.contrast.combined_weights, rng)
    picked = loop.buffer.sample(2, 6, 1, 3, rng)  # the clock: the newest entry (step 2) has age 0
    assert set(builders) == {"temporal", "rubric_conditioned", "inferred_question"}
    for slot, row in filled.items():
        q = picked[slot][0].question
        assert row["question"] == q and row["prompt"] == rubric_messages(q)
        if builders[slot] == "temporal":
            assert row["pair_source"] == "temporal:window"
            assert (row["a_pos"], row["a_neg"]) == (f"ANS({q})", picked[slot][0].answer)
        elif builders[slot] == "rubric_conditioned":
            assert row["pair_source"] == "rubric_conditioned"
            assert (row["a_pos"], row["a_neg"]) == (f"RUBRIC-AWARE ANS({q})", f"ANS({q})")
        else:
            assert row["pair_source"] == "inferred_question"
            assert (row["a_pos"], row["a_neg"]) == (f"ANS({q})", "ANS(GUESSED)")
    assert sorted(filled) == list(range(6))


def test_rubric_step_with_an_empty_buffer_uses_conditioned_pairs(tmp_path: Path, tiny_model_dir: Path,
                                                                   tiny_judge: Judge) -> None:
    loop = loop_for(tmp_path, tiny_model_dir, tiny_judge, "schedule.regime=rubric_only")
    info = loop.plan.info(0)
    for slot, row in enumerate(rubric_rows(loop.cfg, loop.plan, info, loop.buffer, FakeEngine().generate)):
        assert row["question"] == loop.plan.policy_question(0, slot)
        assert row["pair_source"] == "rubric_conditioned"


def test_policy_step_rows_carry_the_written_rubric(tmp_path: Path, tiny_model_dir: Path, tiny_judge: Judge) -> None:
    loop = loop_for(tmp_path, tiny_model_dir, tiny_judge)
    engine = FakeEngine()
    rows = loop.step_rows(0, engine.generate)
    assert len(engine.calls) == 1 and len(engine.calls[0]) == 2  # one rubric per question, batched
    for slot, row in enumerate(rows):
        assert (row["role"], row["step"], row["slot"], row["cycle"], row["phase"]) == ("policy", 1, slot, 0, 0)
        q = loop.plan.policy_question(0, slot)
        assert row["prompt"] == policy_messages(q, loop.cfg.model.system_prompt)
        assert Rubric.from_obj(row["rubric"]) == parse_rubric(VALID_RUBRIC)
        assert row["rubric_valid"] == 1.0


# ============================================================================= a whole co-evolving run


GENERATED: list[int] = []  # what coevolve_run's on_tokens was told (tokens the trained model decoded, as it went)


@pytest.fixture(scope="module")
def coevolve_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 cycles x (2 policy + 2 rubric steps); save_every is larger than the run: only phase ends save."""
    out = tmp_path_factory.mktemp("coevolve") / "run"
    cfg = tiny_config(tiny_model_dir, out, "schedule.cycles=2", "schedule.steps_per_phase=2",
                      "schedule.save_every=100", "grpo.learning_rate=1e-3",
                      "grpo.save_total_limit=null")  # every checkpoint kept (the demo keeps its last two)
    assert run(cfg, on_tokens=GENERATED.append) == out
    return out


@pytest.mark.slow
def test_run_tells_the_tokens_it_generates_within_each_step(coevolve_run: Path) -> None:
    """`evolm train`'s bar moves inside a step: on_tokens hears at least every answer token of the policy steps
    (their completion_length x rows), told a decoding step at a time rather than once per step."""
    cfg = load_config(coevolve_run / "config.yaml")
    rows = cfg.schedule.prompts_per_step * cfg.schedule.samples_per_prompt
    answers = sum(r["completion_length"] * rows for r in metrics(coevolve_run) if r["role"] == "policy")
    assert sum(GENERATED) >= answers - len(metrics(coevolve_run)) * rows  # less each row's first token (prefill)
    assert len(GENERATED) > 4 * len(metrics(coevolve_run))  # many times per step


def test_run_logs_per_criterion_readings_in_metrics_and_samples(coevolve_run: Path) -> None:
    """The yesno judge's criteria (the tiny writer's rubrics never parse: one criterion, its raw text) per step and
    per sample: pass rate per position, criteria per rubric, the share of criteria that separate no answers."""
    for r in metrics(coevolve_run):
        assert r["criteria_per_rubric"] == 1.0 and set(r["criterion_pass_rates"]) == {"1"}, r
        assert r["criterion_pass_rates"]["1"] == r["judge_pass_rate"] and 0.0 <= r["flat_criteria"] <= 1.0
    rows = [s for part in samples(coevolve_run).values() for s in part]
    for s in rows:
        judged = [s["criteria"]] if s["role"] == "policy" else [s["criteria_pos"], s["criteria_neg"]]
        for crit in judged:
            assert len(crit) == 1 and crit[0]["weight"] == 1.0 and 0.0 < crit[0]["value"] < 1.0, s
        if s["role"] == "policy":
            assert s["score"] == pytest.approx(s["criteria"][0]["value"])  # one criterion: the score is its P(Yes)


def test_run_metrics_alternate_roles(coevolve_run: Path) -> None:
    rows = metrics(coevolve_run)
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert [r["role"] for r in rows] == ["policy"] * 2 + ["rubric"] * 2 + ["policy"] * 2 + ["rubric"] * 2
    assert [r["phase"] for r in rows] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [r["cycle"] for r in rows] == [0] * 4 + [1] * 4
    for r in rows:
        assert set(METRIC_FIELDS) <= set(r), r
        for key in ("reward_mean", "reward_std", "rubric_validity", "kl", "completion_length", "seconds"):
            assert isinstance(r[key], int | float) and math.isfinite(r[key]), (key, r)
        assert 0 < r["completion_length"] <= 8
        if r["role"] == "policy":
            assert r["pair_accuracy"] is None
        else:
            assert 0.0 <= r["pair_accuracy"] <= 1.0
    summary = summarise(coevolve_run)
    assert [(p["phase"], p["role"], p["steps"]) for p in summary] == [(0, "policy", 2), (1, "rubric", 2),
                                                                     (2, "policy", 2), (3, "rubric", 2)]
    pairs = [(p["pair_judgements"], p["pairs"]) for p in summary]  # pair accuracy's n, logged by every rubric step
    assert pairs[0] == pairs[2] == (None, None) and pairs[1][0] > 0 and pairs[1][1] > 0 and pairs[1] == pairs[3]


def test_run_metrics_have_judge_cost_and_the_monitor(coevolve_run: Path) -> None:
    """Every step: what judging cost and the cache's share; policy steps: the reward-hacking monitor's numbers."""
    for r in metrics(coevolve_run):
        assert r["judge_prompt_tokens"] > 0 and r["judge_generated_tokens"] > 0 and r["judge_requests"] > 0, r
        assert r["judge_tokens"] == r["judge_prompt_tokens"] + r["judge_generated_tokens"] and r["judge_latency_s"] > 0
        assert 0.0 <= r["judge_cache_hit_rate"] <= 1.0
        if r["role"] == "policy":
            assert 0.0 <= r["rubric_copy_share"] <= 1.0 and 0.0 <= r["score_string_share"] <= 1.0
            assert r["length_reward_corr"] is None or -1.0 <= r["length_reward_corr"] <= 1.0
        else:
            assert r["rubric_copy_share"] is None and r["length_reward_corr"] is None


def test_run_checkpoints_at_phase_ends(coevolve_run: Path, tiny_model_dir: Path) -> None:
    assert checkpoint_steps(coevolve_run) == [2, 4, 6, 8]  # save_every=100: the phase ends alone force a save
    states = [json.loads((coevolve_run / "checkpoints" / f"checkpoint-{s}" / STATE_FILE).read_text())
              for s in (2, 4, 6, 8)]
    assert [(s["step"], s["phase"], s["cycle"], s["role"]) for s in states] == [
        (2, 0, 0, "policy"), (4, 1, 0, "rubric"), (6, 2, 1, "policy"), (8, 3, 1, "rubric")]
    assert [s["buffer_entries"] for s in states] == [2 * P, 2 * P, 4 * P, 4 * P]  # one answer per policy question
    for s in (2, 4, 6, 8):
        buf = buffer_rows(coevolve_run / "checkpoints" / f"checkpoint-{s}" / BUFFER_FILE)
        assert len(buf) == states[[2, 4, 6, 8].index(s)]["buffer_entries"]
    assert [b[0] for b in buf] == [0, 0, 1, 1, 2, 2, 3, 3]  # stamped with the policy-step clock

    initial = load_file(tiny_model_dir / "model.safetensors")
    trained = load_file(coevolve_run / "checkpoints" / "checkpoint-8" / "model.safetensors")
    assert set(initial) == set(trained)
    changed = [k for k in initial if not torch.equal(initial[k], trained[k])]
    assert changed, "training did not change any weight"
    after_policy = load_file(coevolve_run / "checkpoints" / "checkpoint-2" / "model.safetensors")
    assert any(not torch.equal(initial[k], after_policy[k]) for k in initial)


def test_run_samples_cover_both_roles(coevolve_run: Path) -> None:
    files = samples(coevolve_run)
    assert sorted(files) == ["phase-000-policy.jsonl", "phase-001-rubric.jsonl", "phase-002-policy.jsonl",
                             "phase-003-rubric.jsonl"]
    for name, rows in files.items():
        phase, role = int(name[6:9]), name[10:-6]
        assert len(rows) == 2 * P * G  # samples_logged_per_step=0: every row of both steps
        assert {r["phase"] for r in rows} == {phase} and {r["role"] for r in rows} == {role}
        assert Counter((r["step"], r["slot"]) for r in rows) == {(s, k): G for s in {r["step"] for r in rows}
                                                                for k in range(P)}
        for r in rows:
            assert isinstance(r["completion"], str)
            if role == "rubric":
                assert r["pair_source"].startswith("temporal:")  # the buffer is never empty at a rubric step
                assert isinstance(r["a_pos"], str) and isinstance(r["a_neg"], str)


def test_run_policy_questions_follow_the_plan_and_feed_the_buffer(coevolve_run: Path) -> None:
    cfg = load_config(coevolve_run / "config.yaml")
    plan = Plan(cfg, load_prompts(cfg.data.prompts, cfg.data.limit))
    policy = [r for name, rows in samples(coevolve_run).items() if "policy" in name for r in rows]
    for r in policy:
        assert r["question"] == plan.policy_question(plan.policy_steps_before(r["step"] - 1), r["slot"])
    firsts = {}
    for r in policy:  # the buffer keeps the first sample of each question's group
        firsts.setdefault((r["step"], r["slot"]), r)
    expected = [(plan.policy_steps_before(st - 1), r["question"], r["completion"])
                for (st, _), r in sorted(firsts.items())]
    assert buffer_rows(coevolve_run / "checkpoints" / "checkpoint-8" / BUFFER_FILE) == expected


def test_run_rubric_pairs_use_stored_answers(coevolve_run: Path) -> None:
    buffered = {(q, a) for _, q, a in buffer_rows(coevolve_run / "checkpoints" / "checkpoint-8" / BUFFER_FILE)}
    for name, rows in samples(coevolve_run).items():
        if "rubric" in name:
            for r in rows:
                assert (r["question"], r["a_neg"]) in buffered  # a- is an answer the policy gave earlier


def test_logged_rewards_match_the_samples(coevolve_run: Path) -> None:
    kind = load_config(coevolve_run / "config.yaml").rubric.reward
    by_step: dict[int, list[float]] = {}
    for rows in samples(coevolve_run).values():
        for r in rows:
            if r["role"] == "policy":
                assert r["reward"] == pytest.approx(r["score"], rel=1e-6, abs=1e-7)
            else:
                # an unparseable rubric is judged as raw text (rubric.invalid=judge_raw); only an empty one earns 0
                expected = 0.0 if r["s_pos"] is None else rubric_reward(r["s_pos"], r["s_neg"], kind, r["rubric_valid"])
                assert r["reward"] == pytest.approx(expected, rel=1e-6, abs=1e-7)
                assert r["rubric_valid"] == format_validity(r["completion"])
            by_step.setdefault(r["step"], []).append(r["reward"])
    for m in metrics(coevolve_run):
        step_rewards = by_step[m["step"]]
        assert len(step_rewards) == P * G
        assert m["reward_mean"] == pytest.approx(sum(step_rewards) / len(step_rewards), rel=1e-5, abs=1e-6)


def test_saved_judge_scores_are_reproducible(coevolve_run: Path, tiny_judge: Judge) -> None:
    """The scores a run saved are those its judge (the run's own mode) gives the saved rows again."""
    mode = load_config(coevolve_run / "config.yaml").judge.mode
    rows = [r for name, rs in samples(coevolve_run).items() if "policy" in name for r in rs][:: G + 1][:4]
    items = [JudgeItem(r["question"], r["completion"], Rubric.from_obj(r["rubric"]) if r["rubric"] else None,
                       rubric_text=r.get("rubric_text")) for r in rows]
    fresh = scores_of(Judge(tiny_judge.backend, mode=mode).score(items))
    assert fresh == pytest.approx([r["score"] for r in rows], rel=1e-4, abs=1e-5)


# ============================================================================= a judge server that fails


def test_the_failure_share_stops_a_step_only_past_the_limit_and_says_what_to_do(tmp_path: Path) -> None:
    from evolm.training.judging import check_failures

    def step(failed: int, sent: int) -> Any:
        return step_rewards(["policy"], [RowReward(0.5)], ["q"],
                            cost=JudgeCost(sent=sent, failures=failed, error="HTTP 500"))

    assert step(3, 6).judge_failure_share == 0.5 and step(3, 6).metrics()["judge_failures"] == 3
    check_failures(step(3, 6), 4, 0.5, tmp_path)  # at the limit: the failures stay missing scores
    check_failures(step(0, 0), 4, 0.0, tmp_path)  # nothing judged (a reward model, an empty step): no share
    with pytest.raises(RunError, match=r"^step 4: 4 of 6 judge requests failed after their retries \(67%, over "
                       r"judge.max_failure_share=0.5\); the run stops, it has no checkpoint yet: remove .* and start "
                       r"it again. First error: HTTP 500$"):
        check_failures(step(4, 6), 4, 0.5, tmp_path)


@pytest.mark.slow
def test_failed_judge_requests_are_missing_scores_until_their_share_stops_the_run(
        tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A judge request that fails after its retries costs its reward (the group mean), counted per step; a step where
    more than judge.max_failure_share of them fail stops the run in one line, and --resume continues it."""
    import threading

    from openai_server import serve

    from evolm.cli import main

    def overrides(server: Any, out: Path, *extra: str) -> list[str]:
        return tiny_overrides(tiny_model_dir, out, "judge.backend=openai", f"judge.base_url={server.base_url}",
                              "judge.model=test-echo-model", "judge.max_retries=0", "judge.cache=0",
                              "schedule.cycles=1", "schedule.steps_per_phase=1", *extra)

    with serve() as server:
        server.state.fail_every, server.state.fail_status = 3, 500  # every third request: HTTP 500
        assert main(["train", "--config", str(DEMO), *overrides(server, tmp_path / "soft")]) == 0
        logged = metrics(tmp_path / "soft")
        assert [r["role"] for r in logged] == ["policy", "rubric"]
        assert all(r["judge_failures"] >= 1 and 0 < r["judge_failure_share"] <= 0.5 for r in logged)
        assert sum(r["judge_failures"] for r in logged) == server.state.failed
        capsys.readouterr()

        server.state.fail_every, server.state.failed = 0, 0
        out = tmp_path / "hard"
        marker = out / "checkpoints" / "checkpoint-1" / STATE_FILE

        def fail_after_step_1() -> None:  # every request fails from step 2 (the rubric step) on
            deadline = time.time() + 600
            while not marker.exists() and time.time() < deadline:
                time.sleep(0.02)
            server.state.fail_every = 1

        watcher = threading.Thread(target=fail_after_step_1, daemon=True)
        watcher.start()
        assert main(["train", "--config", str(DEMO), *overrides(server, out, "schedule.save_every=1")]) == 2
        watcher.join()
        err = capsys.readouterr().err.strip().split("\n")[-1].split("\r")[-1]  # after the start line and the bar
        assert re.match(r"evolm train: error: step 2: (\d+) of \1 judge requests failed after their retries", err), err
        assert "judge.max_failure_share=0.5" in err and f"--resume {out}` continues it from step 1" in err
        assert "HTTP 500" in err
        assert [r["step"] for r in metrics(out)] == [1]
        server.state.fail_every = 0
        assert main(["train", "--resume", str(out)]) == 0
        assert [(r["step"], r["judge_failures"]) for r in metrics(out)] == [(1, 0), (2, 0)]


@pytest.mark.slow
def test_stop_after_step_ends_the_run_there_with_a_checkpoint_and_resume_goes_on(
        tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`evolm train --stop-after-step N`: the run ends after step N with a checkpoint there (the phase-end ones
    before it kept), `--resume` goes on from it; a step out of the run's range is one line and exit 2."""
    from evolm.cli import main

    out = tmp_path / "run"
    train = ["train", "--config", str(DEMO), *tiny_overrides(tiny_model_dir, out, "schedule.cycles=1")]
    assert main([*train, "--stop-after-step", "9"]) == 2  # 4 steps: 2 policy, 2 rubric
    assert "--stop-after-step 9: the run has steps 1 to 4" in capsys.readouterr().err
    assert not out.exists()
    assert main([*train, "--stop-after-step", "3"]) == 0
    assert [r["step"] for r in metrics(out)] == [1, 2, 3]
    assert [c.name for c in complete_checkpoints(out)] == ["checkpoint-2", "checkpoint-3"]  # phase end 2 kept
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--stop-after-step", "3"]) == 2
    assert f"--stop-after-step 3: {out} is already past it (its last complete checkpoint is step 3)" in \
        capsys.readouterr().err
    assert main(["train", "--resume", str(out)]) == 0
    assert [r["step"] for r in metrics(out)] == [1, 2, 3, 4]


# ============================================================================= the other regimes


@pytest.mark.slow
def test_sequential_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Stage 1 trains the writer (answers from the frozen base model); stage 2 trains the policy from the base
    weights on the rubrics of stage 1's final checkpoint."""
    out = tmp_path / "seq"
    cfg = tiny_config(tiny_model_dir, out, "schedule.regime=sequential", "schedule.cycles=2",
                      "schedule.steps_per_phase=1", "schedule.save_every=100")
    assert run(cfg) == out
    writer, policy = out / "stage1-writer", out / "stage2-policy"
    assert [(r["step"], r["role"]) for r in metrics(writer)] == [(1, "rubric"), (2, "rubric")]
    assert [(r["step"], r["role"]) for r in metrics(policy)] == [(1, "policy"), (2, "policy")]
    assert checkpoint_steps(writer) == [1, 2] and checkpoint_steps(policy) == [1, 2]
    # no policy is trained in stage 1: the buffer stays empty, pairs are rubric-conditioned
    assert {r["pair_source"] for r in samples(writer)["phase-000-rubric.jsonl"]} == {"rubric_conditioned"}
    stage2 = load_config(policy / "config.yaml")
    assert stage2.model.name == str(tiny_model_dir)  # from the base weights
    assert stage2.rubric.writer == str(writer / "checkpoints" / "checkpoint-2")  # the trained writer, frozen
    frozen = read_jsonl(policy / FROZEN_RUBRICS)
    plan = Plan(stage2, load_prompts(cfg.data.prompts))
    assert [f["question"] for f in frozen] == [plan.policy_question(p, s) for p in range(2) for s in range(P)]
    assert load_config(out / "config.yaml").schedule.regime == "sequential"
    # resuming a finished sequential run trains nothing again
    from evolm.runs.rundir import resume_config

    before = (policy / "metrics.jsonl").read_text()
    run(resume_config(out), resume=True)
    assert (policy / "metrics.jsonl").read_text() == before


@pytest.mark.slow
def test_frozen_rubric_run_with_a_fixed_writer(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "frozen"
    cfg = tiny_config(tiny_model_dir, out, "schedule.regime=frozen_rubric", "schedule.cycles=2",
                      "schedule.steps_per_phase=1", f"rubric.writer={tiny_model_dir}")
    run(cfg)
    rows = metrics(out)
    assert [(r["step"], r["role"], r["phase"], r["cycle"]) for r in rows] == [(1, "policy", 0, 0), (2, "policy", 1, 1)]
    assert checkpoint_steps(out) == [1, 2]
    plan = Plan(cfg, load_prompts(cfg.data.prompts))
    frozen = [f["question"] for f in read_jsonl(out / FROZEN_RUBRICS)]
    # a fixed writer writes each question's rubric when the question first comes up, never twice
    assert frozen == [plan.policy_question(p, s) for p in range(2) for s in range(P)]
    assert sorted(samples(out)) == ["phase-000-policy.jsonl", "phase-001-policy.jsonl"]


# ============================================================================= run directories and resuming


def _fake_checkpoint(run_dir: Path, step: int, complete: bool = True) -> Path:
    ckpt = run_dir / "checkpoints" / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{}")
    save_file({"w": torch.zeros(1)}, str(ckpt / "model.safetensors"))
    (ckpt / BUFFER_FILE).write_text(json.dumps({"step": 0, "question": "q", "answer": "a"}) + "\n")
    if complete:
        (ckpt / STATE_FILE).write_text(json.dumps({"step": step}))
    return ckpt


def _logs(run_dir: Path) -> None:
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 12))
                                           + '{"step": 12, "ro')  # torn last line
    (run_dir / "samples").mkdir(exist_ok=True)
    (run_dir / "samples" / "phase-000-policy.jsonl").write_text(
        "".join(json.dumps({"step": s, "slot": 0}) + "\n" for s in (9, 10, 10, 11)))


def test_resume_touches_nothing_until_the_checkpoint_loaded(tmp_path: Path) -> None:
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    _fake_checkpoint(tmp_path, 2)
    _fake_checkpoint(tmp_path, 10)
    _fake_checkpoint(tmp_path, 3, complete=False)  # killed while saving: no marker
    _logs(tmp_path)
    before = (tmp_path / "metrics.jsonl").read_text()
    start = open_run(cfg, resume=True)
    assert (start.run_dir, start.checkpoint, start.step, start.skipped) == (
        tmp_path, tmp_path / "checkpoints" / "checkpoint-10", 10, [])
    assert (tmp_path / "metrics.jsonl").read_text() == before  # not cut yet
    trainer = SimpleNamespace(is_world_process_zero=lambda: True)  # as TRL's on_train_begin hands it
    TrainingSteps(cfg, Plan(cfg, ["q"]), ReplayBuffer(4), tmp_path, resume_step=start.step, judges=[]).begin(trainer)
    assert [r["step"] for r in metrics(tmp_path)] == list(range(1, 11))  # cut once TRL has loaded it
    assert [r["step"] for r in read_jsonl(tmp_path / "samples" / "phase-000-policy.jsonl")] == [9, 10, 10]


def test_resume_falls_back_past_a_corrupt_checkpoint(tmp_path: Path) -> None:
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    _fake_checkpoint(tmp_path, 4)
    bad = _fake_checkpoint(tmp_path, 8)
    (bad / "model.safetensors").write_bytes(b"\x00garbage")
    _logs(tmp_path)
    before = (tmp_path / "metrics.jsonl").read_text()
    start = open_run(cfg, resume=True)
    assert start.checkpoint == tmp_path / "checkpoints" / "checkpoint-4"
    assert len(start.skipped) == 1 and "checkpoint-8" in start.skipped[0] and "unreadable model weights" in start.skipped[0]
    assert (tmp_path / "metrics.jsonl").read_text() == before
    (tmp_path / "checkpoints" / "checkpoint-4" / "model.safetensors").write_bytes(b"")
    with pytest.raises(RunError, match="no checkpoint validates"):
        open_run(cfg, resume=True)
    assert (tmp_path / "metrics.jsonl").read_text() == before


def test_resume_needs_a_complete_checkpoint(tmp_path: Path) -> None:
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    _fake_checkpoint(tmp_path, 3, complete=False)
    with pytest.raises(RunError, match="no complete checkpoint"):
        open_run(cfg, resume=True)
    ckpt = _fake_checkpoint(tmp_path, 4)
    (ckpt / BUFFER_FILE).unlink()
    with pytest.raises(RunError, match="unreadable replay buffer"):
        open_run(cfg, resume=True)


def test_fresh_run_refuses_a_used_directory(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text("")
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    with pytest.raises(RunError, match="already holds a run: resume it with `evolm train --resume"):
        run(cfg)  # before any model is loaded


def test_fresh_run_refuses_a_directory_holding_files_not_its_own(tmp_path: Path) -> None:
    """A config.yaml (or anything) already in output_dir, with no metrics or checkpoints yet: refused, not
    overwritten."""
    (tmp_path / "config.yaml").write_text("mine: true\n")
    (tmp_path / "notes.txt").write_text("keep\n")
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    with pytest.raises(RunError, match=r"holds files that are not a run's \(config.yaml, notes.txt\)"):
        open_run(cfg, resume=False)
    assert (tmp_path / "config.yaml").read_text() == "mine: true\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert open_run(load_config(None, [f"output_dir={empty}"]), resume=False).run_dir == empty


def test_resume_config_keeps_schedule_and_seed(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="not a run directory"):
        resume_config(tmp_path)
    cfg = load_config(DEMO, [f"output_dir={tmp_path / 'elsewhere'}"])
    from evolm.runs.rundir import save_config

    save_config(cfg, tmp_path / "config.yaml")
    again = resume_config(tmp_path, ["judge.backend=openai", "judge.base_url=http://judge:8000/v1"])
    assert again.output_dir == str(tmp_path)  # the directory given wins over the saved one
    assert again.judge.base_url == "http://judge:8000/v1"
    with pytest.raises(RunError, match="schedule and seed"):
        resume_config(tmp_path, ["schedule.cycles=5"])
    with pytest.raises(RunError, match="schedule and seed"):
        resume_config(tmp_path, ["seed=9"])


def _evolm(*args: str, log: Path | None = None, **kw: Any) -> subprocess.Popen:
    """A real ``evolm train`` process; its output goes to ``log`` (or to pipes when no log is given)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "evolm.cli", "train", *args]
    if log is None:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    with open(log, "w") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, **kw)


@pytest.mark.slow
def test_resume_without_checkpoint_is_one_line_error(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(DEMO.read_text())
    proc = _evolm("--resume", str(run_dir))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert err.startswith("evolm train: error: ") and "no complete checkpoint" in err


def test_cli_refuses_to_start_over_a_run(tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture) -> None:
    from evolm.cli import main

    run_dir = tmp_path / "r"
    (run_dir / "checkpoints").mkdir(parents=True)
    assert main(["train", "--config", str(DEMO), *tiny_overrides(tiny_model_dir, run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"evolm train: error: {run_dir} already holds a run: resume it with "
                           f"`evolm train --resume {run_dir}` or choose another output_dir")
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    assert "not a run directory (no config.yaml)" in capsys.readouterr().err


@pytest.mark.slow
def test_resume_after_sigkill(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Kill a real `evolm train` process mid-phase, resume it, and check nothing is lost or repeated."""
    run_dir = tmp_path / "run"
    overrides = tiny_overrides(tiny_model_dir, run_dir, "schedule.cycles=1", "schedule.steps_per_phase=2",
                               "schedule.save_every=1")
    # steps 1-2 policy, 3-4 rubric; killed as soon as checkpoint 1 (mid policy phase) is complete
    proc = _evolm("--config", str(DEMO), *overrides, log=tmp_path / "first.log", start_new_session=True)
    marker = run_dir / "checkpoints" / "checkpoint-1" / STATE_FILE
    deadline = time.time() + 300
    while not marker.exists():
        assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        assert time.time() < deadline, "the run did not reach step 1"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    last = checkpoint_steps(run_dir)[-1]
    assert last in (1, 2), last  # the kill lands during step 2 (a later save would need step 2 to finish)
    before_kill = buffer_rows(run_dir / "checkpoints" / f"checkpoint-{last}" / BUFFER_FILE)
    assert len(before_kill) == last * P
    assert [r["step"] for r in metrics(run_dir)][:1] == [1]

    proc = _evolm("--resume", str(run_dir), log=tmp_path / "second.log")
    assert proc.wait(timeout=300) == 0, (tmp_path / "second.log").read_text()[-3000:]
    log = (tmp_path / "second.log").read_text()
    assert f"resuming after step {last}" in log
    assert f"| {last}/4 [" in log and "in step 1]" not in log, log[-2000:]  # the bar counts on from the checkpoint

    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # all planned steps, each once, in order
    assert [r["role"] for r in rows] == ["policy", "policy", "rubric", "rubric"]

    assert checkpoint_steps(run_dir) == [3, 4]  # the demo config keeps two checkpoints (each 1.6 GB for SmolLM2)
    assert json.loads((run_dir / "checkpoints" / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
    state = json.loads((run_dir / "checkpoints" / "checkpoint-4" / STATE_FILE).read_text())
    assert state == {"step": 4, "phase": 1, "cycle": 0, "role": "rubric", "buffer_entries": 2 * P}
    final = buffer_rows(run_dir / "checkpoints" / "checkpoint-4" / BUFFER_FILE)
    assert final[: len(before_kill)] == before_kill  # the pre-kill entries survive, unchanged
    assert [b[0] for b in final] == [0] * P + [1] * P  # no entry lost or stored twice; same clock

    cfg = resume_config(run_dir)
    plan = Plan(cfg, load_prompts(cfg.data.prompts, cfg.data.limit))
    files = samples(run_dir)
    assert sorted(files) == ["phase-000-policy.jsonl", "phase-001-rubric.jsonl"]
    per_step = Counter(r["step"] for rs in files.values() for r in rs)
    assert per_step == {s: P * G for s in range(1, 5)}  # nothing written twice, nothing missing
    for rs in files.values():
        assert Counter((r["step"], r["slot"]) for r in rs) == {k: G for k in {(r["step"], r["slot"]) for r in rs}}
    firsts: dict[tuple[int, int], dict] = {}
    for r in files["phase-000-policy.jsonl"]:
        # the resumed trainer gives each slot the question the plan gave it
        assert r["question"] == plan.policy_question(plan.policy_steps_before(r["step"] - 1), r["slot"])
        firsts.setdefault((r["step"], r["slot"]), r)
    assert final == [(plan.policy_steps_before(st - 1), r["question"], r["completion"])
                     for (st, _), r in sorted(firsts.items())]
    buffered = {(q, a) for _, q, a in final}
    assert all((r["question"], r["a_neg"]) in buffered for r in files["phase-001-rubric.jsonl"])


@pytest.mark.parametrize(("setting", "native", "expected"), [
    ("auto", True, torch.float32), ("auto", False, torch.float32), ("bfloat16", False, torch.bfloat16),
    ("bfloat16", True, torch.bfloat16),
    ("float32", True, torch.float32)])
def test_judge_dtype_setting(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, setting: str,
                             native: bool, expected: torch.dtype) -> None:
    """judge.dtype=auto is float32 even where the CPU computes bfloat16 natively (AVX512-BF16 / AMX): a score must not
    depend on its batch; another value loads the judge's weights in that type. bfloat16 on a CPU that only emulates
    it (about 6x slower than float32 there) says so, once, and nothing else does."""
    import warnings

    from evolm.backends.devices import CPU_BF16_WARNING

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    cfg = tiny_config(tiny_model_dir, tmp_path / "run", f"judge.dtype={setting}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        judge = build_judge(cfg.judge, seed=cfg.seed, device="cpu", fallback_dtype=cfg.model.dtype)
    assert next(judge.backend.model.parameters()).dtype == expected
    emulated = [w for w in caught if str(w.message) == CPU_BF16_WARNING]
    assert len(emulated) == (setting == "bfloat16" and not native)


def test_several_judges_vote_on_each_pair(tiny_backend: Any) -> None:
    """With extra judges, a rubric's reward is the reference's vote over the judges; a policy score their mean."""
    from evolm.rewards import multi_judge_reward

    judges = [Judge(tiny_backend, mode="prob"), Judge(tiny_backend, mode="yesno")]
    q = "What is 2 + 2?"
    rows = [{"role": "rubric", "question": q, "rubric": "", "a_pos": "The answer is 4.", "a_neg": "fish"},
            {"role": "policy", "question": q, "rubric": "", "rubric_text": VALID_RUBRIC, "a_pos": "", "a_neg": ""}]
    rubric = parse_rubric(VALID_RUBRIC)
    for how in ("majority_vote", "average_vote", "margin_kappa_format", "mean"):
        out = row_rewards(rows, [VALID_RUBRIC, "It is 4."], judges, "margin_format", aggregate=how)
        items = [JudgeItem(q, "The answer is 4.", rubric, rubric_text=VALID_RUBRIC),
                 JudgeItem(q, "fish", rubric, rubric_text=VALID_RUBRIC)]
        per = [scores_of(j.score(items)) for j in judges]
        assert out[0].reward == pytest.approx(multi_judge_reward([p[0] for p in per], [p[1] for p in per], how, 1.0,
                                                                 "margin_format"), abs=1e-6)
        policy = [scores_of(j.score([JudgeItem(q, "It is 4.", None, rubric_text=VALID_RUBRIC)]))[0] for j in judges]
        assert out[1].reward == pytest.approx(sum(policy) / 2, abs=1e-6)


def test_rubric_prompt_setting_reaches_both_roles(tmp_path: Path, tiny_model_dir: Path, tiny_judge: Judge) -> None:
    """``rubric.prompt=older``: rubric-step prompts and policy-step rubrics both use it (the reference used one per role)."""
    loop = loop_for(tmp_path, tiny_model_dir, tiny_judge, "schedule.regime=rubric_only", "rubric.prompt=older")
    for row in rubric_rows(loop.cfg, loop.plan, loop.plan.info(0), loop.buffer, FakeEngine().generate):
        assert row["prompt"] == rubric_messages(row["question"], "older")
    (tmp_path / "p").mkdir()
    loop = loop_for(tmp_path / "p", tiny_model_dir, tiny_judge, "rubric.prompt=older")
    engine = FakeEngine()
    loop.step_rows(0, engine.generate)
    assert all(c[:-1] == rubric_messages("x", "older")[:-1] for c in engine.calls[0])


@pytest.mark.slow
def test_prompts_over_max_prompt_tokens_are_skipped_and_said_at_the_start(tiny_model_dir: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.test_rubric_and_judge_commands import _long_prompts

    from evolm.training import run as run_module

    class Stop(Exception):
        pass

    seen: dict[str, Any] = {}

    def stop(cfg: Any) -> None:
        raise Stop

    monkeypatch.setattr(run_module, "training_args", stop)  # the plan is made by then; nothing loads
    plan_init = Plan.__init__

    def recorded(self: Plan, cfg: Any, questions: Any, *rest: Any, **kw: Any) -> None:
        seen["questions"] = list(questions)
        plan_init(self, cfg, questions, *rest, **kw)
        seen["pairs"] = None if self.labelled is None else sorted({p.question for p in self.labelled.pairs})

    monkeypatch.setattr(Plan, "__init__", recorded)
    prompts = _long_prompts(tmp_path / "p.jsonl")
    with pytest.raises(Stop):
        run(tiny_config(tiny_model_dir, tmp_path / "run", f"data.prompts={prompts}", "data.max_prompt_tokens=4096"),
            on_start=lambda start: seen.setdefault("note", start.prompts_skipped))
    assert seen["note"] == "1 of 4 prompts over data.max_prompt_tokens (4096): skipped"
    assert seen["questions"] == ["What is 2 + 2?", "Write a haiku.", "Why is the sky blue?"]
    assert seen["pairs"] is None

    # labelled pairs (a rubric step's question is the pair's prompt): the long one is skipped the same way
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": json.loads(line)["prompt"], "chosen": "Good.", "rejected": "Bad."})
                             + "\n" for line in prompts.read_text().splitlines()))
    seen.clear()
    with pytest.raises(Stop):
        run(tiny_config(tiny_model_dir, tmp_path / "run2", "schedule.regime=rubric_only", "contrast.pairs=labelled",
                        f"data.pairs={pairs}", "data.max_prompt_tokens=4096"),
            on_start=lambda start: seen.setdefault("note", start.prompts_skipped))
    assert seen["note"] == "1 of 4 labelled pairs (data.pairs) over data.max_prompt_tokens (4096): skipped"
    assert seen["pairs"] == ["What is 2 + 2?", "Why is the sky blue?", "Write a haiku."]

    # held-out questions: the long one is not evaluated (the held-out evaluation gets the kept ones)
    from evolm.training.heldout import HeldOut

    load = HeldOut.load.__func__

    def loaded(cls: Any, cfg: Any, run_dir: Any, rubric: Any, answer: Any, pairs: Any, questions: Any,
               *rest: Any) -> HeldOut:
        seen["heldout"] = list(questions)
        return load(cls, cfg, run_dir, rubric, answer, pairs, questions, *rest)

    monkeypatch.setattr(HeldOut, "load", classmethod(loaded))
    seen.clear()
    with pytest.raises(Stop):
        run(tiny_config(tiny_model_dir, tmp_path / "run3", f"eval.questions={prompts}", "data.max_prompt_tokens=4096"),
            on_start=lambda start: seen.setdefault("note", start.prompts_skipped))
    assert seen["note"] == "1 of 4 held-out questions (eval.questions) over data.max_prompt_tokens (4096): skipped"
    assert seen["heldout"] == ["What is 2 + 2?", "Write a haiku.", "Why is the sky blue?"]


def test_a_steps_vllm_weight_syncs_and_generate_calls_reach_metrics_jsonl(tmp_path: Path) -> None:
    from evolm.runs.records import StepRecord

    cfg = load_config(None, [f"output_dir={tmp_path}"])
    loop = TrainingSteps(cfg, Plan(cfg, ["q"]), ReplayBuffer(8), tmp_path, judges=[])
    loop.state.awaiting_update[1] = StepRecord(step=1, role="policy")
    loop.end_step(1, {"kl": 0.01, "loss": 0.2, "evolm/vllm_weight_syncs": 1.0, "evolm/vllm_generate_calls": 2.0},
                  is_main=True)
    row = metrics(tmp_path)[0]
    assert (row["kl"], row["vllm_weight_syncs"], row["vllm_generate_calls"]) == (0.01, 1.0, 2.0)


def test_the_model_card_beside_the_checkpoints_names_the_base_model(coevolve_run: Path) -> None:
    """TRL's card named a local base model "[None]" and loaded model="None" in its quick start."""
    card = (coevolve_run / "checkpoints" / "README.md").read_text(encoding="utf-8")
    base = load_config(coevolve_run / "config.yaml").model.name
    assert "None" not in card and f"fine-tuned version of `{base}` (a local model)" in card
    assert 'model="checkpoint-8"' in card  # the last checkpoint the card was written with


def test_a_steps_peak_gpu_memory_per_phase_reaches_metrics_jsonl(tmp_path: Path) -> None:
    """On a GPU each step record holds the main process's peak memory while generating (to the rewards) and while
    training (to the step's end), and the most reserved: torch.cuda's statistics, reset at each step's start and at
    its rewards (a fake torch.cuda here: the sequence of peaks the callbacks read)."""
    from types import SimpleNamespace

    from evolm.runs.records import StepRecord
    from evolm.training.trl_adapter import GpuMemory, _StepCallbacks

    class FakeCuda:
        def __init__(self) -> None:
            self.allocated, self.reserved, self.resets = 0, 0, 0

        def reset_peak_memory_stats(self) -> None:
            self.resets += 1
            self.allocated = self.reserved = 0

        def max_memory_allocated(self) -> int:
            return self.allocated

        def max_memory_reserved(self) -> int:
            return self.reserved

    cfg = load_config(None, [f"output_dir={tmp_path}"])
    loop = TrainingSteps(cfg, Plan(cfg, ["q"]), ReplayBuffer(8), tmp_path, judges=[])
    cuda = FakeCuda()
    memory = GpuMemory(cuda)
    recorder = _StepCallbacks(loop, None, None, memory)
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    for step, (gen, train, res_gen, res_train) in enumerate([(3, 5, 4, 6), (7, 2, 8, 3)], start=1):
        memory.on_step_begin(None, state, None)
        cuda.allocated, cuda.reserved = gen << 30, res_gen << 30
        memory.generated()
        cuda.allocated, cuda.reserved = cuda.allocated + (1 << 30), cuda.reserved + (1 << 30)  # ignored: reset
        memory.generated()  # a second reward call in the step does not move the boundary
        cuda.allocated, cuda.reserved = train << 30, res_train << 30
        state.global_step = step
        memory.on_step_end(None, state, None)
        loop.state.awaiting_update[step] = StepRecord(step=step, role="policy")
        recorder.on_log(None, state, None, logs={"loss": 0.1})
    rows = metrics(tmp_path)
    assert [(r["gpu_gib_generating"], r["gpu_gib_training"], r["gpu_reserved_gib"]) for r in rows] == \
        [(3.0, 5.0, 6.0), (7.0, 2.0, 8.0)]
    assert cuda.resets == 4  # each step's start and its rewards
    memory = GpuMemory(None)  # no CUDA device in use: nothing recorded
    memory.on_step_begin(None, state, None)
    memory.generated()
    memory.on_step_end(None, state, None)
    assert memory.values == {}
