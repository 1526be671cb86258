"""Labelled pairs as the rubric role's pair source, and held-out evaluation during training (``evolm.training.heldout``).

The scoring and the schedule are checked with a scripted engine and judge; one tiny real run (rubric_only on
labelled pairs, evaluated after every step) checks the lines it leaves in metrics.jsonl and a resume.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from evolm.config import RunConfig, load_config
from evolm.errors import InputError
from evolm.eval.pairs import PreferencePair
from evolm.rubrics import RUBRIC_SYSTEM_PROMPT, read_written, rubric_messages
from evolm.runs.jsonl import read_jsonl
from evolm.runs.records import StepRecord, read_metrics
from evolm.runs.rundir import complete_checkpoints, resume_config
from evolm.scores import Judgment
from evolm.training.checks import launch_errors
from evolm.training.contrast import ReplayBuffer, policy_messages
from evolm.training.dry_run import launch_plan
from evolm.training.generate_calls import answer_params, rubric_params
from evolm.training.heldout import (
    EVAL_RUBRICS_FILE,
    HeldOut,
    describe,
    heldout_items_path,
    judge_heldout,
    summarize_heldout,
    summary_rows,
)
from evolm.training.plan import Plan
from evolm.training.prompt_length import fit_prompt_set
from evolm.training.run import run
from evolm.training.step import TrainingSteps

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo-cpu.yaml"
RUBRIC = json.dumps({"criteria": [
    {"criterion": "The answer is right.", "weight": 0.75, "scoring_levels": {"1.0": "right", "0.0": "wrong"}},
    {"criterion": "The answer is short.", "weight": 0.25, "scoring_levels": {"1.0": "yes", "0.0": "no"}},
]})


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class ScriptedJudge:
    """Scores an answer by a word in it: good 0.9, bad 0.1, tie 0.5, none: missing; every item recorded."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def score(self, items: list[Any], progress: bool = False) -> list[Judgment]:
        self.items += items
        table = {"good": 0.9, "bad": 0.1, "tie": 0.5}
        return [Judgment(next((v for k, v in table.items() if k in it.answer), None)) for it in items]


class ScriptedEngine:
    """The trainer's ``generate``: a rubric (valid unless the question says "garble"), else an answer."""

    def __init__(self, answer: str = "good answer") -> None:
        self.calls: list[tuple[list, Any]] = []
        self.answer = answer

    def __call__(self, convs: list, params: Any) -> list[str]:
        self.calls.append((convs, params))
        if convs and convs[0][0]["content"].startswith(RUBRIC_SYSTEM_PROMPT):
            return ["not json" if "garble" in c[-1]["content"] else RUBRIC for c in convs]
        return [f"{self.answer} to {c[-1]['content']}" for c in convs]


# ============================================================================= scoring


def _record(cfg, step, judges, pairs, written, answers, fixed):  # noqa: ANN001, ANN202
    return summarize_heldout(step, judge_heldout(cfg, judges, pairs, written, answers, fixed), written)


def test_heldout_record_scores_pairs_validity_and_policy() -> None:
    cfg = load_config(None, [])
    pairs = [PreferencePair("p1", "good", "bad"), PreferencePair("p1", "bad", "good"),  # a win and a loss
             PreferencePair("garble p2", "tie", "tie"), PreferencePair("garble p2", "none", "good")]  # two ties
    written = {"p1": read_written(RUBRIC), "garble p2": read_written("not json"), "q1": read_written(RUBRIC)}
    judge = ScriptedJudge()
    rec = _record(cfg, 3, [judge], pairs, written, {"q1": "good", "q2": "bad", "q3": "none"},
                         {"q1": RUBRIC, "q2": "fixed text"})
    assert (rec.step, rec.role, rec.cycle, rec.phase) == (3, "eval", None, None)
    assert (rec.heldout_pair_accuracy, rec.heldout_pairs) == (pytest.approx((1 + 0 + 0.5 + 0.5) / 4), 4)
    assert rec.heldout_validity == pytest.approx(2 / 3)  # every rubric written: pairs' prompts and questions
    # q3 has no fixed rubric: not scored; q1, q2 under the fixed set (not the current writer's rubrics)
    assert (rec.heldout_policy_score, rec.heldout_questions) == (pytest.approx(0.5), 2)
    assert rec.heldout_policy_score_std == pytest.approx(0.4)
    assert len(judge.items) == 2 * 4 + 2  # one call: both answers of each pair, then the policy answers
    assert [it.rubric_text for it in judge.items[-2:]] == [RUBRIC, "fixed text"]
    assert judge.items[4].rubric is None and judge.items[4].rubric_text == "not json"  # as training reads it
    zero = _record(load_config(None, ["rubric.invalid=zero"]), 3, [judge], pairs[2:3], written, {}, {})
    assert judge.items[-1].rubric_text is None and zero.heldout_policy_score is None  # judged alone, as in training
    two = _record(cfg, 0, [ScriptedJudge(), ScriptedJudge()], pairs[:1], written, {}, {})
    assert two.heldout_pair_accuracy == 1.0  # several judges: mean score per answer


# ============================================================================= when, and what is written


def load_heldout(cfg: RunConfig, run_dir: Path) -> HeldOut:
    """As ``training.run`` loads it: the eval files without the prompts over data.max_prompt_tokens."""
    first = Plan(cfg, ["q"]).info(0)
    fit = fit_prompt_set(cfg)
    return HeldOut.load(cfg, run_dir, rubric_params(cfg, first), answer_params(cfg, first), fit.eval_pairs,
                        fit.eval_questions)


def heldout_for(tmp_path: Path, *overrides: str) -> HeldOut:
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": "p1", "chosen": "good", "rejected": "bad"},
                                                    {"prompt": "p2", "chosen": "good", "rejected": "bad"}])
    questions = write_jsonl(tmp_path / "questions.jsonl", [{"prompt": "q1"}, {"prompt": "q2"}, {"prompt": "q3"}])
    cfg = load_config(None, [f"eval.pairs={pairs}", f"eval.questions={questions}", "schedule.regime=rubric_only",
                             "schedule.cycles=5", "schedule.steps_per_phase=1", *overrides])
    (tmp_path / "run").mkdir(exist_ok=True)
    return load_heldout(cfg, tmp_path / "run")


def test_evaluations_at_step_0_every_n_and_the_end(tmp_path: Path) -> None:
    held = heldout_for(tmp_path, "eval.every=2", "eval.limit=2")
    assert [q for q in held.questions] == ["q1", "q2"] and len(held.pairs) == 2  # eval.limit
    seen: list[StepRecord] = []
    held.on_record = seen.append
    engine, judge = ScriptedEngine(), ScriptedJudge()
    assert held.before_step(0, engine, [judge]) > 0.0  # step 0: the initial weights
    for step in range(1, 6):
        held.before_step(step, engine, [judge])
        held.after_step(step, [judge])
    assert [r.step for r in seen] == [0, 2, 4, 5]  # every 2 steps, and after the last (5)
    lines = [r for r in read_metrics(tmp_path / "run")]
    assert [(r.step, r.role) for r in lines] == [(0, "eval"), (2, "eval"), (4, "eval"), (5, "eval")]
    assert all((r.heldout_pairs, r.heldout_questions, r.heldout_pair_accuracy, r.heldout_validity,
                r.heldout_policy_score) == (2, 2, 1.0, 1.0, 0.9) for r in lines)
    assert all(r.seconds is not None and r.time is not None for r in lines)
    items = read_jsonl(heldout_items_path(tmp_path / "run", 5))  # each evaluation's items, for paired tests
    assert [(r["kind"], r.get("prompt") or r.get("question")) for r in items] == [
        ("pair", "p1"), ("pair", "p2"), ("question", "q1"), ("question", "q2")]
    assert [(r["credit"], r["rubric_valid"], r["rubric"]) for r in items[:2]] == [(1.0, True, RUBRIC)] * 2
    assert [r["score"] for r in items[2:]] == [pytest.approx(0.9)] * 2 and items[2]["answer"]
    assert sorted(p.name for p in (tmp_path / "run" / "heldout").iterdir()) == [
        f"step-{s:06d}.jsonl" for s in (0, 2, 4, 5)]
    is_rubric = [convs[0][0]["content"].startswith(RUBRIC_SYSTEM_PROMPT) for convs, _ in engine.calls]
    rubric_calls = [p for (_, p), r in zip(engine.calls, is_rubric) if r]
    answer_calls = [call for call, r in zip(engine.calls, is_rubric) if not r]
    assert len(rubric_calls) == len(answer_calls) == 4  # one batched call of each per evaluation
    assert {p.seed for p in rubric_calls} == {held.cfg.seed} and {p.temperature for _, p in answer_calls} == {0.0}
    assert answer_calls[0][0] == [policy_messages(q, held.cfg.model.system_prompt) for q in ("q1", "q2")]
    assert engine.calls[0][0] == [rubric_messages(t) for t in ("p1", "p2", "q1", "q2")]
    assert read_jsonl(tmp_path / "run" / EVAL_RUBRICS_FILE) == [{"question": "q1", "text": RUBRIC},
                                                                 {"question": "q2", "text": RUBRIC}]
    assert "held-out at step 5: judge pair accuracy 1.000 (2 pairs)" in describe(lines[-1])
    assert summary_rows(lines) == [("step", "0", "5"), ("judge pair accuracy", "1.000 (n=2)", "1.000 (n=2)"),
                                   ("rubric validity", "1.000", "1.000"),
                                   ("policy score", "0.900 (n=2)", "0.900 (n=2)")]


def test_the_fixed_rubric_set_is_written_once_and_reused(tmp_path: Path) -> None:
    held = heldout_for(tmp_path)
    held.before_step(0, ScriptedEngine(), [ScriptedJudge()])
    saved = tmp_path / "run" / EVAL_RUBRICS_FILE
    before = (saved.read_text(), saved.stat().st_ino, saved.stat().st_mtime_ns)
    resumed = heldout_for(tmp_path)  # a resumed run reads it back ...
    assert resumed.fixed == {"q1": RUBRIC, "q2": RUBRIC, "q3": RUBRIC}
    garbling = ScriptedEngine(answer="bad")  # ... and scores under it, whatever the writer writes now
    assert resumed.before_step(3, garbling, [ScriptedJudge()]) == 0.0  # no step-0 evaluation on resume
    resumed.after_step(resumed.cfg.total_steps, [ScriptedJudge()])
    assert (saved.read_text(), saved.stat().st_ino, saved.stat().st_mtime_ns) == before  # never rewritten
    last = read_metrics(tmp_path / "run")[-1]
    assert (last.step, last.heldout_policy_score, last.heldout_questions) == (5, pytest.approx(0.1), 3)


def test_only_the_main_process_writes(tmp_path: Path) -> None:
    held = heldout_for(tmp_path)
    held.is_main = False
    judge, engine = ScriptedJudge(), ScriptedEngine()
    held.before_step(0, engine, [judge])
    held.after_step(5, [judge])
    assert len(engine.calls) == 4  # generation is collective: every process takes part
    assert judge.items == [] and not (tmp_path / "run" / "metrics.jsonl").exists()
    assert not (tmp_path / "run" / EVAL_RUBRICS_FILE).exists() and held.fixed is not None


def test_no_eval_settings_evaluate_nothing(tmp_path: Path) -> None:
    held = load_heldout(load_config(None, []), tmp_path)
    engine = ScriptedEngine()
    assert held.before_step(0, engine, []) == 0.0 and held.after_step(1, []) == 0.0
    assert engine.calls == [] and not (tmp_path / "metrics.jsonl").exists()
    assert HeldOut().after_step(3, []) == 0.0  # the default


# ============================================================================= labelled pairs in the loop


def test_rubric_steps_take_labelled_pairs_without_an_answerer(tmp_path: Path) -> None:
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": f"P{i}", "chosen": f"C{i}", "rejected": f"R{i}"}
                                                    for i in range(3)])
    cfg = load_config(DEMO, ["model.lora.r=0", f"data.pairs={pairs}", "contrast.pairs=labelled", "schedule.regime=coevolve",
                             "contrast.answerer=/no/such/model", f"output_dir={tmp_path / 'run'}",
                             "schedule.steps_per_phase=2", "schedule.prompts_per_step=2"])
    plan = Plan(cfg, ["q"])
    loop = TrainingSteps(cfg, plan, ReplayBuffer(4), tmp_path, judges=[])
    engine = ScriptedEngine()
    # coevolve with K=2: steps 2, 3 are the first rubric phase (rubric steps 0, 1), 6, 7 the second (2, 3)
    dealt = {step: loop.step_rows(step, engine) for step in (2, 3, 6, 7)}
    assert all(convs == [] for convs, _ in engine.calls)  # nothing generated (empty builder calls), no answerer loaded
    for k, step in enumerate((2, 3, 6, 7)):
        expected = plan.labelled.take(k, 2)
        assert [(r["question"], r["a_pos"], r["a_neg"], r["pair_source"]) for r in dealt[step]] == [
            (p.question, p.a_pos, p.a_neg, "labelled") for p in expected]
        assert [r["prompt"] for r in dealt[step]] == [rubric_messages(p.question) for p in expected]
    assert {r["question"] for step in (2, 3) for r in dealt[step][:2]} | {dealt[6][0]["question"]} == {"P0", "P1", "P2"}
    policy = loop.step_rows(0, engine)  # policy questions still come from data.prompts
    assert [r["question"] for r in policy] == [plan.policy_question(0, s) for s in range(2)]


# ============================================================================= settings


def test_labelled_pairs_and_eval_files_are_checked_before_any_model_loads(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="contrast.pairs=labelled needs data.pairs"):
        load_config(None, ["contrast.pairs=labelled"])
    absent = tmp_path / "absent.jsonl"
    cfg = load_config(DEMO, ["model.lora.r=0", f"data.pairs={absent}", "contrast.pairs=labelled", f"eval.pairs={absent}",
                             f"eval.questions={absent}"])
    errors = launch_errors(cfg)
    assert [e.split(":")[0] for e in errors] == ["data.pairs", "eval.pairs", "eval.questions"]
    assert all(f"no such file {absent}" in e for e in errors)
    ok = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": "p", "chosen": "c", "rejected": "r"}])
    cfg = load_config(DEMO, ["model.lora.r=0", f"data.pairs={ok}", "contrast.pairs=labelled", "schedule.regime=rubric_only",
                             f"eval.pairs={ok}", "eval.every=2"])
    assert launch_errors(cfg) == []
    plan = dict(launch_plan(cfg, 1))
    assert "labelled pairs from data.pairs" in plan["optimizer steps"]
    assert plan["held-out evaluation"] == f"{ok}: before step 1, every 2 steps and after the last step"
    # a real launch: one-line errors, before any model loads (the model does not exist)
    for overrides, message in (([f"data.pairs={absent}", "contrast.pairs=labelled"], r"^data.pairs: .*no such file"),
                               ([f"eval.questions={absent}"], r"^eval: .*no such file")):
        cfg = load_config(DEMO, ["model.lora.r=0", f"output_dir={tmp_path / 'run'}", "model.name=/no/such/model", *overrides])
        with pytest.raises(InputError, match=message):
            run(cfg)


# ============================================================================= a tiny real run, resumed


@pytest.mark.slow
def test_labelled_rubric_only_run_with_heldout_evaluation(tiny_model_dir: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    data = write_jsonl(tmp_path / "train.jsonl", [{"prompt": f"Train question {i}?", "chosen": f"A good answer {i}.",
                                                   "rejected": "No.", "metadata": {"score_chosen": 9}}
                                                  for i in range(5)])
    held = write_jsonl(tmp_path / "eval.jsonl", [{"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"},
                                                 {"prompt": "What is 2 + 2?", "chosen": "Four", "rejected": "Fish"},
                                                 {"prompt": "Name a colour.", "chosen": "Red", "rejected": "Seven"}])
    questions = write_jsonl(tmp_path / "questions.jsonl", [{"prompt": "Say hello."}, {"prompt": "Count to 3."}])
    out = tmp_path / "run"
    cfg = load_config(DEMO, ["model.lora.r=0",
        f"model.name={tiny_model_dir}", f"judge.model={tiny_model_dir}", f"output_dir={out}",
        "schedule.prompts_per_step=2", "schedule.samples_per_prompt=2", "grpo.per_device_train_batch_size=4",
        "grpo.max_completion_length=8", "rubric.max_new_tokens=8", "contrast.max_new_tokens=8", "grpo.report_to=[]",
        "schedule.regime=rubric_only", "schedule.cycles=2", "schedule.steps_per_phase=1",
        "contrast.pairs=labelled", f"data.pairs={data}", "contrast.answerer=/no/such/model",  # never loaded
        f"eval.pairs={held}", f"eval.questions={questions}", "eval.every=1", "grpo.gradient_checkpointing=false",
        "grpo.save_total_limit=2"])
    printed: list[StepRecord] = []
    run(cfg, on_step=printed.append)

    lines = read_jsonl(out / "metrics.jsonl")
    assert [(r["step"], r["role"]) for r in lines] == [(0, "eval"), (1, "rubric"), (1, "eval"), (2, "rubric"),
                                                       (2, "eval")]
    for r in (r for r in lines if r["role"] == "eval"):
        assert (r["heldout_pairs"], r["heldout_questions"]) == (3, 2)
        for key in ("heldout_pair_accuracy", "heldout_validity", "heldout_policy_score"):
            assert 0.0 <= r[key] <= 1.0, key
        assert r["heldout_policy_score_std"] >= 0.0 and r["reward_mean"] is None and r["cycle"] is None
    assert [(r.step, r.role) for r in printed] == [(r["step"], r["role"]) for r in lines]  # the CLI sees them too
    rows = [json.loads(x) for f in sorted((out / "samples").glob("*.jsonl")) for x in f.read_text().splitlines()]
    assert {r["pair_source"] for r in rows} == {"labelled"}
    train = {f"Train question {i}?": f"A good answer {i}." for i in range(5)}
    assert all(train[r["question"]] == r["a_pos"] and r["a_neg"] == "No." for r in rows)
    plan = Plan(cfg, ["unused"])
    assert [r["question"] for r in rows[::2]] == [p.question for k in range(2) for p in plan.labelled.take(k, 2)]
    saved = out / EVAL_RUBRICS_FILE
    assert [r["question"] for r in read_jsonl(saved)] == ["Say hello.", "Count to 3."]
    from evolm.cli.train import _print_summary
    from evolm.report.report import summarise

    capsys.readouterr()
    _print_summary(out, summarise(out))  # the end of `evolm train`: training phases, then held-out first and last
    shown = capsys.readouterr().out
    assert "held-out evaluation (eval.*): first and last" in shown and "judge pair accuracy" in shown
    assert [ph["role"] for ph in summarise(out)] == ["rubric", "rubric"]  # the two phases; held-out lines are none

    # resume from checkpoint 1: the step-0 evaluation is not repeated, the fixed rubric set is read, not rewritten
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-1", "checkpoint-2"]
    shutil.rmtree(out / "checkpoints" / "checkpoint-2")
    before = (saved.read_text(), saved.stat().st_ino, saved.stat().st_mtime_ns)
    run(resume_config(out), resume=True)
    again = read_jsonl(out / "metrics.jsonl")
    assert [(r["step"], r["role"]) for r in again] == [(r["step"], r["role"]) for r in lines]
    assert again[:3] == lines[:3]  # kept as written before the checkpoint
    assert (saved.read_text(), saved.stat().st_ino, saved.stat().st_mtime_ns) == before


@pytest.mark.parametrize("name", ["writer-labelled", "coevolve-heldout"])
def test_study_configs(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The study configs load; from the repository root (their paths are relative to it) they pass the launch checks
    when the shared data is there."""
    cfg = load_config(REPO / "configs" / "study" / f"{name}.yaml")
    assert (cfg.eval.pairs, cfg.eval.limit) == ("data/ultrafeedback_sample/eval_clean.jsonl", 40)
    if name == "writer-labelled":
        assert (cfg.schedule.regime, cfg.contrast.pairs, cfg.contrast.answerer) == ("rubric_only", "labelled", None)
        assert cfg.data.pairs == "data/ultrafeedback_sample/train_clean.jsonl"
    monkeypatch.chdir(REPO)
    if not Path(cfg.eval.pairs).is_file():
        pytest.skip("no UltraFeedback sample in data/ (python scripts/fetch_data.py ultrafeedback_sample)")
    assert launch_errors(cfg) == []
    if cfg.data.pairs:
        assert len(Plan(cfg, ["q"]).labelled.pairs) == 1000
    assert len(load_heldout(cfg, REPO / "runs" / "not-created").pairs) == 40


@pytest.mark.slow
def test_heldout_prompts_over_max_prompt_tokens_are_skipped_and_said(tmp_path: Path) -> None:
    """A held-out question or pair prompt is generated from in the run as a training one is: one over
    data.max_prompt_tokens would overflow vLLM's context (or run a 135M writer out of its own), so it is skipped
    and counted in the start line, after eval.limit, like data.prompts."""
    long = " ".join(["lorem", "ipsum"] * 2000)
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": p, "chosen": "good", "rejected": "bad"}
                                                    for p in (long, "p1", "p2")])
    questions = write_jsonl(tmp_path / "questions.jsonl", [{"prompt": q} for q in ("q1", long, "q2", "q3")])
    cfg = load_config(DEMO, [f"eval.pairs={pairs}", f"eval.questions={questions}", "eval.limit=3",
                             "data.max_prompt_tokens=1024"])
    fit = fit_prompt_set(cfg)
    assert ([p.prompt for p in fit.eval_pairs], fit.eval_questions) == (["p1", "p2"], ["q1", "q2"])
    assert fit.note() == ("1 of 3 held-out pairs (eval.pairs) over data.max_prompt_tokens (1024): skipped; "
                          "1 of 3 held-out questions (eval.questions) over data.max_prompt_tokens (1024): skipped")
    held = load_heldout(cfg, tmp_path / "run")
    assert ([p.prompt for p in held.pairs], held.questions) == (["p1", "p2"], ["q1", "q2"])
    # the longest kept prompt (the dry run's memory row) is a training prompt's: held-out ones are not trained on
    longer = write_jsonl(tmp_path / "longer.jsonl", [{"prompt": " ".join(["word"] * 300)}])
    alone = fit_prompt_set(load_config(DEMO, ["data.max_prompt_tokens=1024"])).longest
    assert fit_prompt_set(load_config(DEMO, [f"eval.questions={longer}", "data.max_prompt_tokens=1024"])).longest == alone
    assert fit_prompt_set(load_config(DEMO, [f"eval.questions={questions}"])).eval_questions == [
        "q1", long, "q2", "q3"]  # no limit: every question
    only_long = write_jsonl(tmp_path / "long.jsonl", [{"prompt": long}])
    with pytest.raises(InputError, match=r"^eval.questions: all 1 prompts are over data.max_prompt_tokens \(1024"):
        fit_prompt_set(load_config(DEMO, [f"eval.questions={only_long}", "data.max_prompt_tokens=1024"]))


def test_resuming_with_new_eval_questions_is_refused(tmp_path: Path) -> None:
    """The fixed rubric set is the initial writer's: a run that did not write it at step 0 cannot make one later."""
    held = heldout_for(tmp_path)  # a fresh run: no metrics.jsonl yet, no fixed set yet
    assert held.fixed is None
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"step": 1, "role": "rubric"}) + "\n")
    with pytest.raises(InputError, match=r"^eval.questions: .*eval_rubrics.jsonl is missing"):
        heldout_for(tmp_path)
