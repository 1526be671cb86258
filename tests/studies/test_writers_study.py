"""The learning study's writers study (studies/learning/): the table and its tests read the kept arms; the hand-written
rubrics parse."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def learning(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("learning_study", ROOT / "studies" / "learning" / "study.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"q{i}", "chosen": "a", "rejected": "b", "set": "Natural"}) + "\n"
                             for i in range(10)), encoding="utf-8")
    monkeypatch.setattr(mod, "writers_pairs", lambda: pairs)
    monkeypatch.setattr(mod, "WRITERS", tmp_path / "writers")
    monkeypatch.setattr(mod, "FIGURES", tmp_path / "fig")
    monkeypatch.setattr(mod, "RESULTS", tmp_path / "writers-table.md")
    (tmp_path / "writers").mkdir()
    mod.pairs_sha = __import__("hashlib").sha256(pairs.read_bytes()).hexdigest()
    return mod


def _arm(mod, name: str, credits: list[float], sha: str | None = None, dtype: str | None = None) -> None:
    judge = {"model": mod.JUDGE, "dtype": dtype or mod.JUDGE_DTYPE}
    result = {"arm": name, "label": mod.ARM_LABELS[name], "credits": credits, "sets": ["Natural"] * len(credits),
              "validity": None, "stats": None, "pairs_sha": sha or mod.pairs_sha, "key": {"arm": name, "judge": judge}}
    (mod.WRITERS / f"{name}.json").write_text(json.dumps(result), encoding="utf-8")


def test_table_pairs_each_arm_with_no_rubric_and_drops_arms_judged_on_other_pairs(learning):
    _arm(learning, "none", [0.0] * 10)
    _arm(learning, "hand", [1.0] * 9 + [0.0])  # 9 pairs better than no rubric, none worse: p = 2 / 2**9
    _arm(learning, "base", [1.0] * 10, sha="another set of pairs")
    learning.RESULTS.write_text("old\n", encoding="utf-8")
    out = learning.writers_table()
    assert [t[:5] for t in out["tests"]] == [["hand", "none", 9, 0, 2 / 2**9]]
    assert "base" not in out["results"]
    page = learning.RESULTS.read_text(encoding="utf-8")
    assert "old" not in page and page == "\n".join(out["lines"]) + "\n"  # the study's own file, written whole
    assert "| hand-written rubrics (ceiling) | 10 | 0.900 [" in page
    assert (learning.FIGURES / "writers.png").stat().st_size > 0


def test_table_leaves_out_an_arm_judged_by_other_judge_weights(learning):
    _arm(learning, "none", [0.0] * 10)
    _arm(learning, "hand", [1.0] * 10, dtype="float32" if learning.JUDGE_DTYPE != "float32" else "bfloat16")
    out = learning.writers_table(write_doc=False)
    assert "hand" not in out["results"] and out["tests"] == []
    (learning.WRITERS / "hand.json").write_text(json.dumps({**json.loads(
        (learning.WRITERS / "hand.json").read_text(encoding="utf-8")), "key": {"arm": "hand"}}), encoding="utf-8")
    assert ("hand" in learning.writers_table(write_doc=False)["results"]) == (learning.JUDGE_DTYPE == "float32")


def test_arms_judged_with_other_judge_weights_are_kept_and_tabled_apart(learning, monkeypatch):
    """--judge-dtype bfloat16: the table reads the arms in WRITERS/bfloat16 and leaves the kept table alone."""
    _arm(learning, "none", [0.0] * 10)
    study = learning.WRITERS
    monkeypatch.setattr(learning, "WRITERS", study / "bfloat16")
    monkeypatch.setattr(learning, "JUDGE_DTYPE", "bfloat16")
    learning.WRITERS.mkdir()
    _arm(learning, "hand", [1.0] * 10)
    monkeypatch.setattr(learning, "WRITERS", study)
    monkeypatch.setattr(learning, "JUDGE_DTYPE", "float32")
    learning.RESULTS.write_text("untouched", encoding="utf-8")
    monkeypatch.setattr("sys.argv", ["learning.py", "writers-table", "--judge-dtype", "bfloat16"])
    learning.main()
    assert learning.WRITERS == study / "bfloat16" and learning.RESULTS.read_text(encoding="utf-8") == "untouched"
    assert not (learning.FIGURES / "writers.png").exists()
    assert learning.probe_file().name.endswith("-bfloat16.json")
    monkeypatch.setattr(learning, "WRITERS", study)
    monkeypatch.setattr(learning, "JUDGE_DTYPE", "float32")
    out = learning.writers_table(write_doc=False)
    assert set(out["results"]) == {"none"}  # the bfloat16 arm is not the study's
    _arm(learning, "hand", [1.0] * 8 + [0.0] * 2)  # the study's weights: 2 pairs fewer than bfloat16's
    lines = "\n".join(learning.writers_table(write_doc=False)["lines"])
    assert "hand-written rubrics (ceiling) 1.000 in bfloat16 against 0.800 (better there on 2 pairs, worse on 0, p 0.5)" in lines


def test_handwritten_rubrics_parse_with_two_to_four_criteria_summing_to_one():
    from evolm.rubrics import parse_rubric

    rows = [json.loads(line) for line in (ROOT / "studies" / "learning" / "data" / "handwritten_rubrics.jsonl").open(encoding="utf-8")]
    assert "note" in rows[0]
    rubrics = rows[1:]
    assert len(rubrics) == 120 and len({r["prompt"] for r in rubrics}) == 120
    for r in rubrics:
        assert 2 <= len(r["criteria"]) <= 4
        assert abs(sum(c["weight"] for c in r["criteria"]) - 1) < 1e-9
        assert parse_rubric(json.dumps({"criteria": r["criteria"]})) is not None


def test_an_unfinished_arm_is_reported_as_partial_and_compared_on_the_pairs_it_judged(learning):
    _arm(learning, "none", [0.0] * 10)
    rows = [{"kind": "pair", "prompt": f"q{i}", "chosen": "a", "rejected": "b", "score_chosen": 0.6,
             "score_rejected": 0.4, "credit": 1.0} for i in range(4)]
    (learning.WRITERS / "base-items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (learning.WRITERS / "base-rubrics.jsonl").write_text(json.dumps(
        {"prompt": "q0", "text": json.dumps({"criteria": [{"criterion": "Gives 19.", "weight": 1.0}]})}) + "\n",
        encoding="utf-8")
    out = learning.writers_table(write_doc=False)
    assert out["results"]["base"]["partial"] and out["results"]["base"]["stats"]["n_rubrics"] == 1
    assert [t[:5] + t[7:] for t in out["tests"]] == [["base", "none", 4, 0, 2 / 2**4, 4]]
    assert any("partial, 4 of 10 pairs judged so far" in line for line in out["lines"])


def test_training_row_keeps_the_longer_metrics_when_a_run_folder_is_stale(learning, tmp_path, monkeypatch):
    run = tmp_path / "runs" / "evolm"
    run.mkdir(parents=True)
    monkeypatch.setattr(learning, "TRAINING_RUNS", (("EvoLM", str(ROOT / "configs/learning/judge-1b5/evolm.yaml"),
                                                     str(run)),))

    def step(i: int, role: str) -> dict:
        return {"step": i, "role": role, "reward_mean": 0.5, "reward_std": 0.02, "seconds": 3600.0,
                "pair_accuracy": 0.5 if role == "rubric" else None, "pair_judgements": 16 if role == "rubric" else 0}

    def write(path: Path, rows: list[dict]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    kept = learning.FIGURES / "training" / "evolm-metrics.jsonl"
    write(kept, [step(1, "policy"), step(2, "policy"), step(3, "rubric")])  # the copy in the repository: further on
    write(run / "metrics.jsonl", [step(1, "policy")])  # an old local run folder
    assert "| 2 + 1 | 4 of 200 | 3.0 h |" in "\n".join(learning._training_lines())
    assert len(kept.read_text(encoding="utf-8").splitlines()) == 3
    write(run / "metrics.jsonl", [step(1, "policy"), step(2, "policy"), step(3, "rubric"), step(4, "rubric")])
    assert "| 2 + 2 | 8 of 200 | 4.0 h |" in "\n".join(learning._training_lines())
    assert len(kept.read_text(encoding="utf-8").splitlines()) == 4
    other = [{**step(1, "policy"), "reward_mean": 0.4}] + [step(i, "policy") for i in range(2, 7)]
    write(run / "metrics.jsonl", other)  # a run started again in the same folder: longer, but another run
    assert "| 2 + 2 | 8 of 200 | 4.0 h |" in "\n".join(learning._training_lines())
    assert len(kept.read_text(encoding="utf-8").splitlines()) == 4


def test_heldout_policy_scores_are_kept_and_compared_by_question(learning, tmp_path, monkeypatch):
    """The EvoLM run's held-out evaluations (eval.questions) are kept beside its records; the table says each
    evaluation's mean score and the change from step 0 to the last, paired by question."""
    run = tmp_path / "runs" / "evolm"
    monkeypatch.setattr(learning, "TRAINING_RUNS", (("EvoLM", str(ROOT / "configs/learning/judge-1b5/evolm.yaml"),
                                                     str(run)),))
    (run / "heldout").mkdir(parents=True)

    def evaluation(step: int, scores: list[float | None]) -> None:
        rows = [{"kind": "question", "question": f"q{i}", "answer": "a", "score": x} for i, x in enumerate(scores)]
        (run / "heldout" / f"step-{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                                                 encoding="utf-8")

    evaluation(0, [0.2, 0.4, 0.6, 0.5])
    (run / "eval_rubrics.jsonl").write_text('{"question": "q0", "text": "r"}\n', encoding="utf-8")
    assert learning._heldout_policy_lines() == []  # no training step logged yet: nothing kept
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "role": "policy", "reward_mean": 0.5}) + "\n",
                                       encoding="utf-8")
    learning.keep_records(str(run))
    kept = learning.FIGURES / "training" / "evolm-heldout"
    assert sorted(f.name for f in kept.iterdir()) == ["eval_rubrics.jsonl", "step-000000.jsonl"]  # and what judged
    assert "step 0: 0.425 [" in learning._heldout_policy_lines()[-1] and "→" not in learning._heldout_policy_lines()[-1]
    evaluation(25, [0.3, 0.5, 0.6, None])  # q3 unscored: compared over q0-q2
    learning.keep_records(str(run))
    line = learning._heldout_policy_lines()[-1]
    assert "step 25: 0.467 [" in line and "(n = 3)" in line
    assert "step 0 → 25: +0.067 [" in line and "higher on 2 questions, lower on 0 (sign test p = 0.5, n = 3)" in line
    shutil.rmtree(run)  # a new machine: the kept items still make the line
    assert learning._heldout_policy_lines()[-1] == line
    (kept / "step-000050.jsonl").write_text(json.dumps({"kind": "question", "question": "other", "score": 0.9})
                                            + "\n", encoding="utf-8")  # no question in common with step 0
    assert learning._heldout_policy_lines()[-1].endswith("step 50: 0.900 (n = 1).")  # no change to compare


@pytest.mark.slow
def test_training_row_pair_accuracy_is_over_every_judgement(learning, tmp_path, monkeypatch):
    run = tmp_path / "runs" / "evolm"
    monkeypatch.setattr(learning, "TRAINING_RUNS", (("EvoLM", str(ROOT / "configs/learning/judge-1b5/evolm.yaml"),
                                                     str(run)),))
    rows = [{"step": i, "role": "rubric", "reward_mean": 0.5, "reward_std": 0.02, "seconds": 60.0,
             "pair_accuracy": acc, "pair_judgements": n} for i, (acc, n) in enumerate([(1.0, 4), (0.25, 12)], 1)]
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    samples = run / "samples"
    samples.mkdir()
    votes = {0: (0.6, 0.6, 0.4, 0.4), 1: (0.6, 0.6, 0.6, 0.4), 2: (0.4, 0.4, 0.4, 0.6)}  # s_pos per rubric, s_neg 0.5
    (samples / "phase-001-rubric.jsonl").write_text("".join(
        json.dumps({"step": 2, "slot": slot, "role": "rubric", "s_pos": sp, "s_neg": 0.5}) + "\n"
        for slot, sps in votes.items() for sp in sps)
        + json.dumps({"step": 3, "slot": 0, "role": "rubric", "s_pos": 0.6, "s_neg": 0.5}) + "\n",  # no record yet
        encoding="utf-8")
    line = "\n".join(learning._training_lines())
    assert "| 0.438 (16 judgements) |" in line, line  # (4 x 1.0 + 12 x 0.25) / 16, not the steps' mean 0.625
    assert "| 1 / 1 of 3 (p 1) |" in line, line  # a tie (2 and 2) votes neither way; one vote per pair, not per rubric
    assert len((learning.FIGURES / "training" / "evolm-pairs.jsonl").read_text(encoding="utf-8").splitlines()) == 3
    assert learning._figure_training(learning.FIGURES / "training.png")  # from the kept copy _training_lines made
    assert (learning.FIGURES / "training.png").stat().st_size > 0


@pytest.mark.slow
def test_writers_check_finds_a_writer_that_writes_the_kept_rubrics_and_one_that_does_not(learning, tiny_model_dir):
    """writers-check: the writer that wrote an arm's kept rubrics writes them again (a retrained warm start is shown to
    be the measured one this way); a kept rubric changed by one character is counted as different."""
    learning.writer_arm("warm", str(tiny_model_dir), max_tokens=16, write_only=True, max_criteria=3)
    assert learning.writers_check("warm", str(tiny_model_dir), limit=10) == 0
    rub_file = learning.WRITERS / "warm-rubrics.jsonl"
    rows = [json.loads(line) for line in rub_file.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 10
    rows[9]["text"] += " "
    rub_file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert learning.writers_check("warm", str(tiny_model_dir), limit=10) == 1
    assert learning.writers_check("warm", str(tiny_model_dir), limit=8) == 0


def test_a_writers_arm_keeps_its_rubrics_for_the_five_everyday_prompts_once(learning, tiny_model_dir, monkeypatch,
                                                                            capsys):
    """A trained writer's checkpoint does not outlive its machine: its arm keeps the five everyday prompts' rubrics
    too, as `evolm rubric` rows that bench/rubrics_md.py lays out (studies/learning/results/five_prompts.md)."""
    learning.writer_arm("warm-evolm-half", str(tiny_model_dir), max_tokens=16, write_only=True, max_criteria=3)
    five = learning.WRITERS / "warm-evolm-half-five.jsonl"
    rows = [json.loads(line) for line in five.read_text(encoding="utf-8").splitlines()]
    prompts = [json.loads(line)["prompt"] for line in learning.FIVE_PROMPTS.read_text(encoding="utf-8").splitlines()]
    assert [r["prompt"] for r in rows] == prompts and len(prompts) == 5
    assert all(set(r) == {"prompt", "rubric", "rubric_valid", "rubric_text"} for r in rows)
    spec = importlib.util.spec_from_file_location("rubrics_md", ROOT / "bench" / "rubrics_md.py")
    rubrics_md = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rubrics_md)
    capsys.readouterr()
    rubrics_md.main([f"half={five}"])
    assert capsys.readouterr().out.count("**half** (format-valid") == 5
    monkeypatch.setattr(learning, "_write_rubrics", lambda *a: pytest.fail("written again"))
    learning.writer_arm("warm-evolm-half", str(tiny_model_dir), max_tokens=16, write_only=True, max_criteria=3)


def test_a_finished_arm_run_again_keeps_the_minutes_it_took(learning, tmp_path, monkeypatch):
    """`writers ARM` on a finished arm only reads it back: its summary keeps the time the arm took."""
    import evolm.training.heldout as heldout

    monkeypatch.setattr(learning, "ROOT", tmp_path)
    monkeypatch.setattr(learning, "load_judge", lambda *a, **k: object())
    monkeypatch.setattr(heldout, "judge_heldout", lambda cfg, judges, pairs, written, *a: [
        {"prompt": p.prompt, "chosen": p.better, "rejected": p.worse, "credit": 1.0} for p in pairs])
    first = learning.writer_arm("none", None, max_tokens=16)
    assert first["n"] == 10 and first["credits"] == [1.0] * 10
    summary = learning.WRITERS / "none.json"
    summary.write_text(json.dumps({**first, "minutes": 54.2, "minutes_write": 0.0}), encoding="utf-8")
    monkeypatch.setattr(heldout, "judge_heldout", lambda *a: pytest.fail("judged again"))
    again = learning.writer_arm("none", None, max_tokens=16)
    assert again["minutes"] == 54.2 and json.loads(summary.read_text(encoding="utf-8"))["minutes"] == 54.2


def test_writers_study_chain_starts_resumes_or_skips_a_run_then_judges_its_final_checkpoint(learning, tmp_path,
                                                                                          monkeypatch):
    """writers-study: a run with no folder is started from its config, an unfinished one resumed, a finished one left
    alone; each is followed by its writer's arm from the final complete checkpoint."""
    monkeypatch.setattr(learning, "ROOT", tmp_path)
    config = str(ROOT / "configs/learning/judge-1b5/labelled.yaml")  # 50 steps
    run = tmp_path / "runs" / "labelled"
    calls = []

    def checkpoint(step: int, complete: bool = True) -> None:
        ckpt = run / "checkpoints" / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        (ckpt / "trainer_state.json").write_text("{}", encoding="utf-8")
        if complete:
            (ckpt / "evolm_state.json").write_text(json.dumps({"step": step}), encoding="utf-8")

    def fake_call(cmd, log, env=None):
        calls.append([str(c) for c in cmd])
        if "train" in calls[-1]:
            run.mkdir(parents=True, exist_ok=True)
            (run / "config.yaml").write_text("{}", encoding="utf-8")
            checkpoint(50)

    monkeypatch.setattr(learning, "_call", fake_call)
    (learning.WRITERS / "warm-key.json").write_text(json.dumps(  # the warm arm's decoding, which the arm repeats
        {"decoding": {"max_new_tokens": 320, "max_criteria": 3}}), encoding="utf-8")
    learning._study_chain("warm-grpo", config, "runs/labelled")
    assert calls[0][-3:] == ["train", "--config", config]
    assert calls[1][-7:] == ["warm-grpo", "--writer", "runs/labelled/checkpoints/checkpoint-50",
                             "--max-tokens", "320", "--max-criteria", "3"]
    assert learning._finished(run, config)
    calls.clear()
    learning._study_chain("warm-grpo", config, "runs/labelled")
    assert [c[3] for c in calls] == ["writers"]  # finished: only the arm (which reads back a finished arm)
    for d in (run / "checkpoints").iterdir():
        __import__("shutil").rmtree(d)
    checkpoint(20)
    checkpoint(21, complete=False)
    assert not learning._finished(run, config)
    calls.clear()
    learning._study_chain("warm-grpo", config, "runs/labelled")
    assert calls[0][-3:] == ["train", "--resume", "runs/labelled"]
    # stopped in its first step: a folder with no complete checkpoint is set aside, and the run starts afresh
    __import__("shutil").rmtree(run / "checkpoints")
    checkpoint(1, complete=False)
    calls.clear()
    learning._study_chain("warm-grpo", config, "runs/labelled")
    assert calls[0][-3:] == ["train", "--config", config]
    assert (run.parent / "labelled.no-checkpoint-1" / "checkpoints" / "checkpoint-1").is_dir()


def test_writers_study_keeps_a_checkpoint_the_rotation_deletes_and_judges_it_beside_the_training(learning, tmp_path,
                                                                                               monkeypatch):
    """The run keeps its last few checkpoints: the halfway one is copied while the run goes on, and its arm is
    written and judged at once, at one thread, without waiting for the run's end."""
    import shutil
    import time

    monkeypatch.setattr(learning, "ROOT", tmp_path)
    monkeypatch.setattr(learning, "KEPT_CHECKPOINTS", (("runs/evolm", 3, "warm-evolm-half"),))
    (learning.WRITERS / "warm-key.json").write_text(json.dumps(
        {"decoding": {"max_new_tokens": 320, "max_criteria": 3}}), encoding="utf-8")
    run, calls = tmp_path / "runs" / "evolm", []

    def checkpoint(step: int) -> Path:
        ckpt = run / "checkpoints" / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        (ckpt / "trainer_state.json").write_text("{}", encoding="utf-8")
        (ckpt / "evolm_state.json").write_text(json.dumps({"step": step}), encoding="utf-8")
        return ckpt

    def fake_call(cmd, log, env=None):
        calls.append([str(c) for c in cmd] + [f"OMP={(env or {}).get('OMP_NUM_THREADS')}"])
        if "train" in calls[-1]:  # the run passes step 3, its arm starts, then rotation deletes the checkpoint
            (run / "checkpoints" / "checkpoint-2").mkdir(parents=True)  # incomplete: no state files
            third = checkpoint(3)
            for _ in range(500):
                if len(calls) > 1:
                    break
                time.sleep(0.01)
            shutil.rmtree(third)
            checkpoint(50)
            calls.append(["train ended"])

    monkeypatch.setattr(learning, "_call", fake_call)
    learning._study_chain("warm-evolm", str(ROOT / "configs/learning/judge-1b5/labelled.yaml"), "runs/evolm",
                          poll_s=0.01)
    assert (run / "kept" / "checkpoint-3" / "evolm_state.json").is_file()
    assert not (run / "kept" / "checkpoint-3.part").exists()
    assert [c[4] if len(c) > 4 else c[0] for c in calls[1:]] == ["warm-evolm-half", "train ended", "warm-evolm"]
    assert calls[1][5:7] == ["--writer", "runs/evolm/kept/checkpoint-3"] and calls[1][-1] == "OMP=1"
    assert learning.keep_checkpoint(run, 7) is None  # never reached: nothing kept, no arm
    calls.clear()  # run again (finished): the kept checkpoint's arm (read back) and the final one's
    learning._study_chain("warm-evolm", str(ROOT / "configs/learning/judge-1b5/labelled.yaml"), "runs/evolm")
    assert sorted(c[4] for c in calls) == ["warm-evolm", "warm-evolm-half"]


def test_writers_study_leaves_a_checkpoint_whose_arm_was_judged_elsewhere(learning, tmp_path, monkeypatch, capsys):
    """A run resumed on another machine after its halfway arm was judged: the halfway checkpoint is neither copied nor
    judged again, and no line says it was not kept."""
    monkeypatch.setattr(learning, "ROOT", tmp_path)
    monkeypatch.setattr(learning, "KEPT_CHECKPOINTS", (("runs/evolm", 3, "warm-evolm-half"),))
    (learning.WRITERS / "warm-key.json").write_text(json.dumps(
        {"decoding": {"max_new_tokens": 320, "max_criteria": 3}}), encoding="utf-8")
    (learning.WRITERS / "warm-evolm-half.json").write_text("{}", encoding="utf-8")
    run, calls = tmp_path / "runs" / "evolm", []

    def fake_call(cmd, log, env=None):
        calls.append([str(c) for c in cmd])
        if "train" in calls[-1]:
            for step in (3, 50):
                ckpt = run / "checkpoints" / f"checkpoint-{step}"
                ckpt.mkdir(parents=True)
                (ckpt / "trainer_state.json").write_text("{}", encoding="utf-8")
                (ckpt / "evolm_state.json").write_text(json.dumps({"step": step}), encoding="utf-8")

    monkeypatch.setattr(learning, "_call", fake_call)
    learning._study_chain("warm-evolm", str(ROOT / "configs/learning/judge-1b5/labelled.yaml"), "runs/evolm",
                          poll_s=0.01)
    assert [c[4] for c in calls if "train" not in c] == ["warm-evolm"]
    assert not (run / "kept").exists()
    assert "not kept" not in capsys.readouterr().err


def test_writers_study_keeps_a_runs_step_records_in_the_repository_as_the_run_goes(learning, tmp_path, monkeypatch):
    """runs/ is lost with its machine: writers-study copies each step record into studies/learning/results/training/ while the
    run is still going (the recovered working tree then holds them up to its last step)."""
    monkeypatch.setattr(learning, "ROOT", tmp_path)
    config = str(ROOT / "configs/learning/judge-1b5/labelled.yaml")  # 50 steps
    run = tmp_path / "runs" / "labelled"
    kept = learning.FIGURES / "training" / "labelled-metrics.jsonl"
    while_running = []

    def fake_call(cmd, log, env=None):
        if "train" not in [str(c) for c in cmd]:
            return
        run.mkdir(parents=True, exist_ok=True)
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "role": "rubric", "reward_mean": 0.5}) + "\n",
                                           encoding="utf-8")
        deadline = time.monotonic() + 10
        while not kept.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        while_running.append(kept.exists())
        ckpt = run / "checkpoints" / "checkpoint-50"
        ckpt.mkdir(parents=True)
        (ckpt / "trainer_state.json").write_text("{}", encoding="utf-8")
        (ckpt / "evolm_state.json").write_text(json.dumps({"step": 50}), encoding="utf-8")

    monkeypatch.setattr(learning, "_call", fake_call)
    (learning.WRITERS / "warm-key.json").write_text(json.dumps(
        {"decoding": {"max_new_tokens": 320, "max_criteria": 3}}), encoding="utf-8")
    learning._study_chain("warm-grpo", config, "runs/labelled", poll_s=0.02)
    assert while_running == [True]
    assert [json.loads(line)["step"] for line in kept.read_text(encoding="utf-8").splitlines()] == [1]


def test_writers_study_watcher_outlives_a_failed_poll(learning, tmp_path, monkeypatch, capsys):
    """Copying the step records fails (as on a full disk) until the halfway arm has started: each failure is said in
    one line, the checkpoint is still kept and its arm started while the run goes on (the two jobs of a poll are
    tried apart), and the records are kept once copying works again, all before training ends."""
    monkeypatch.setattr(learning, "ROOT", tmp_path)
    monkeypatch.setattr(learning, "KEPT_CHECKPOINTS", (("runs/labelled", 1, "warm-grpo-half"),))
    (learning.WRITERS / "warm-key.json").write_text(json.dumps(
        {"decoding": {"max_new_tokens": 320, "max_criteria": 3}}), encoding="utf-8")
    run, arms, during = tmp_path / "runs" / "labelled", [], []
    kept = learning.FIGURES / "training" / "labelled-metrics.jsonl"
    failures, keep_records = [], learning.keep_records

    def flaky_keep_records(name, say=False):
        if not arms:
            failures.append(name)
            raise OSError(28, "No space left on device")
        return keep_records(name, say)

    def checkpoint(step: int) -> None:
        ckpt = run / "checkpoints" / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        (ckpt / "trainer_state.json").write_text("{}", encoding="utf-8")
        (ckpt / "evolm_state.json").write_text(json.dumps({"step": step}), encoding="utf-8")

    def fake_call(cmd, log, env=None):
        cmd = [str(c) for c in cmd]
        if "train" not in cmd:
            arms.append(cmd[4])
            return
        run.mkdir(parents=True, exist_ok=True)
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "role": "rubric"}) + "\n", encoding="utf-8")
        checkpoint(1)
        deadline = time.monotonic() + 10
        while not (kept.exists() and arms) and time.monotonic() < deadline:
            time.sleep(0.01)
        during.append((kept.exists(), list(arms)))
        checkpoint(50)

    monkeypatch.setattr(learning, "keep_records", flaky_keep_records)
    monkeypatch.setattr(learning, "_call", fake_call)
    learning._study_chain("warm-grpo", str(ROOT / "configs/learning/judge-1b5/labelled.yaml"), "runs/labelled",
                          poll_s=0.02)
    assert during == [(True, ["warm-grpo-half"])] and failures
    assert arms == ["warm-grpo-half", "warm-grpo"] and (run / "kept" / "checkpoint-1").is_dir()
    err = capsys.readouterr().err
    assert "runs/labelled: keeping the step records (again in 0.02 s) failed: OSError: [Errno 28] No space left" in err


def _run_with_checkpoints(run, steps, base="/elsewhere/runs/learning/judge-1b5/sft-writer"):
    """A LoRA run folder as `evolm train` leaves it: config, logs, samples, complete checkpoints with every file."""
    (run / "samples").mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text("output_dir: x\n", encoding="utf-8")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "role": "rubric"}) + "\n" for s in steps),
                                       encoding="utf-8")
    (run / "samples" / "phase-1-rubric.jsonl").write_text('{"step": 1}\n', encoding="utf-8")
    for step in steps:
        ckpt = run / "checkpoints" / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        for name, data in (("adapter_model.safetensors", f"weights {step}"), ("optimizer.pt", f"adam {step}"),
                           ("trainer_state.json", "{}"), ("evolm_state.json", json.dumps({"step": step})),
                           ("adapter_config.json", json.dumps({"base_model_name_or_path": base, "r": 16}))):
            (ckpt / name).write_text(data, encoding="utf-8")


def test_writers_study_leaves_a_run_whose_arms_are_all_judged(learning, tmp_path, monkeypatch):
    """A fresh clone has no runs/: once every arm of a run is judged, the run is not trained again."""
    monkeypatch.setattr(learning, "ROOT", tmp_path)
    monkeypatch.setattr(learning, "_call", lambda cmd, log, env=None: pytest.fail(f"called {cmd}"))
    for arm in ("warm-grpo", "warm-grpo-half"):
        (learning.WRITERS / f"{arm}.json").write_text("{}", encoding="utf-8")
    learning._study_chain("warm-grpo", str(ROOT / "configs/learning/judge-1b5/labelled.yaml"),
                          learning.LABELLED_RUN[1])


def test_writers_study_resumes_its_run_from_the_last_checkpoint(learning, tmp_path, monkeypatch):
    """Nothing of a run is carried in the repository: a run folder on this machine resumes, a lost one restarts."""
    monkeypatch.setattr(learning, "ROOT", tmp_path)
    run = tmp_path / "runs" / "labelled"
    _run_with_checkpoints(run, [7])
    calls = []

    def fake_call(cmd, log, env=None):
        calls.append([str(c) for c in cmd])
        if "train" in calls[-1]:
            _run_with_checkpoints(tmp_path / "next", [50])
            shutil.move(tmp_path / "next" / "checkpoints" / "checkpoint-50", run / "checkpoints" / "checkpoint-50")

    monkeypatch.setattr(learning, "_call", fake_call)
    (learning.WRITERS / "warm-key.json").write_text(json.dumps(
        {"decoding": {"max_new_tokens": 320, "max_criteria": 3}}), encoding="utf-8")
    learning._study_chain("warm-grpo", str(ROOT / "configs/learning/judge-1b5/labelled.yaml"), "runs/labelled")
    assert calls[0][-3:] == ["train", "--resume", "runs/labelled"]
    assert not (learning.FIGURES / "training" / "carry").exists()  # no checkpoint is copied into the repository


def test_an_arm_of_another_runs_checkpoint_at_the_same_path_starts_afresh(learning, tmp_path, monkeypatch, capsys):
    """A run started again writes its kept checkpoint where the lost run's was: the arm's key holds the adapter's
    sha256, so the lost writer's rubrics are not taken for the new writer's."""
    ckpt = tmp_path / "kept" / "checkpoint-25"
    ckpt.mkdir(parents=True)
    (ckpt / "adapter_model.safetensors").write_bytes(b"first run")
    written = []

    def fake_write(writer, prompts, decoding):
        written.append(len(prompts))
        yield list(prompts), ['{"criteria": []}'] * len(prompts)

    monkeypatch.setattr(learning, "_write_rubrics", fake_write)
    monkeypatch.setattr(learning, "five_rubrics", lambda *a: None)
    for _ in range(2):
        learning.writer_arm("warm-grpo-half", str(ckpt), max_tokens=16, write_only=True, max_criteria=3)
    assert written == [10]  # the same checkpoint: read back
    (ckpt / "adapter_model.safetensors").write_bytes(b"second run")
    learning.writer_arm("warm-grpo-half", str(ckpt), max_tokens=16, write_only=True, max_criteria=3)
    assert written == [10, 10] and "writer, pairs or decoding changed: starting the arm afresh" in capsys.readouterr().out
    shutil.rmtree(ckpt)  # a machine without the checkpoint: the rubrics it wrote stand (and are not written again)
    learning.writer_arm("warm-grpo-half", str(ckpt), max_tokens=16, write_only=True, max_criteria=3)
    assert written == [10, 10] and "changed" not in capsys.readouterr().out
    key = json.loads((learning.WRITERS / "warm-grpo-half-key.json").read_text(encoding="utf-8"))
    assert key["writer_sha"] == __import__("hashlib").sha256(b"second run").hexdigest()


def test_writers_study_one_at_a_time_runs_labelled_then_evolm_on_all_cores(learning, tmp_path, monkeypatch):
    monkeypatch.setattr(learning, "ROOT", tmp_path)
    (tmp_path / learning.WARM_START).mkdir(parents=True)  # the warm start is there: not rebuilt
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    order = []
    monkeypatch.setattr(learning, "_study_chain",
                        lambda arm, config, run: order.append((arm, os.environ.get("OMP_NUM_THREADS"))))
    monkeypatch.setattr(learning, "other_pair_arms", lambda: order.append(("other pairs", None)))
    monkeypatch.setattr(learning, "writers_table", lambda: order.append(("table", None)))
    learning.writers_study(one_at_a_time=True)
    assert order == [("warm-grpo", None), ("warm-evolm", None), ("other pairs", None), ("table", None)]


def test_writers_study_on_a_fresh_machine_rebuilds_the_warm_start_where_runs_does_not_exist(learning, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setattr(learning, "ROOT", tmp_path)  # a fresh clone: no runs/ at all
    monkeypatch.setattr(learning, "EVOLM", [sys.executable, "-c", "import sys; print(sys.argv[1:])"])
    checked = []
    monkeypatch.setattr(learning, "writers_check", lambda arm, writer, limit: checked.append((arm, writer)) or 0)
    monkeypatch.setattr(learning, "_study_chain", lambda arm, config, run: None)
    monkeypatch.setattr(learning, "other_pair_arms", lambda: None)
    monkeypatch.setattr(learning, "writers_table", lambda: None)
    learning.writers_study(one_at_a_time=True)
    log = (tmp_path / f"{learning.WARM_START}.log").read_text(encoding="utf-8")
    assert "'sft-rubrics', '--output', 'runs/learning/judge-1b5/sft-writer'" in log
    assert checked == [("warm", learning.WARM_START)]


def test_gap_closed_is_the_share_of_the_ceiling_gap_with_an_interval_only_when_the_gap_is_clear(learning):
    start = [0.0] * 20 + [1.0] * 20
    ceiling = [1.0] * 20 + [1.0] * 20  # 20 pairs of room
    trained = [1.0] * 10 + [0.0] * 10 + [1.0] * 20  # half of them closed
    share, ci, no_room = learning.gap_closed(start, trained, ceiling)
    assert share == 0.5 and no_room == 0 and ci[0] < 0.5 < ci[1] and 0.2 < ci[0] and ci[1] < 0.8
    share, ci, no_room = learning.gap_closed(start, trained, start)  # no room: the ceiling is the start
    assert math.isnan(share) and ci is None and no_room == 1
    # a thin gap: the ceiling better on 3 pairs and worse on 2, so many resamples have none: no bounded interval
    start, ceiling = [0.0] * 3 + [1.0] * 2 + [0.0] * 35, [1.0] * 3 + [0.0] * 2 + [0.0] * 35
    share, ci, no_room = learning.gap_closed(start, [1.0] + start[1:], ceiling)
    assert share == 1.0 and ci is None and 0.025 < no_room < 0.9


@pytest.mark.slow
def test_the_kept_table_is_what_writers_table_makes_from_the_kept_files():
    """studies/learning/results/writers-table.md is what `python -m studies.learning writers-table` makes from the files kept in
    the repository (arms, training records), so a fresh clone regenerates it; the training-source overlap line depends
    on the data sets on the machine and is left out."""
    spec = importlib.util.spec_from_file_location("learning_study_kept", ROOT / "studies" / "learning" / "study.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.TRAINING_RUNS = tuple((label, config, f"no-such-folder/{Path(run).name}")  # the kept records only
                              for label, config, run in mod.TRAINING_RUNS)
    made = mod.writers_table(write_doc=False)["lines"]
    kept = mod.RESULTS.read_text(encoding="utf-8").strip("\n").split("\n")

    def drop(lines: list[str]) -> list[str]:
        return [line for line in lines if not line.startswith("Held-out prompts found in a training source")]

    assert drop(kept) == drop(made)


def test_heldout_ultrafeedback_pairs_leave_out_trained_questions_ties_and_long_answers(learning):
    from evolm.training.contrast import Pair

    pairs = [Pair("trained", "a", "b", "labelled"), Pair("kept", "a", "b", "labelled"),
             Pair("tie", "a", "b", "labelled"), Pair("long", "a" * 1201, "b", "labelled"),
             Pair("also kept", "c" * 1200, "d", "labelled")]
    scores = {"trained": (8, 6), "kept": (7, 6.5), "tie": (7, 7), "long": (9, 2), "also kept": (5, 1)}
    rows = learning.uf_heldout_rows(pairs, {"trained"}, scores, max_chars=1200)
    assert [r["prompt"] for r in rows] == ["kept", "also kept"]
    assert rows[0] == {"prompt": "kept", "chosen": "a", "rejected": "b", "set": "UltraFeedback"}


def test_arms_on_the_ultrafeedback_pairs_are_kept_and_tabled_apart(learning, tmp_path, monkeypatch):
    """`writers ARM --pairs ultrafeedback`: the arm's files go to WRITERS/ultrafeedback (the LLMBar arm of the same
    name is untouched), no five-prompt rubrics are written again, and writers-table adds the set's own table and
    paired comparisons."""
    import evolm.training.heldout as heldout

    uf = learning.WRITERS / "ultrafeedback"
    uf.mkdir()
    (uf / "heldout_pairs.jsonl").write_text("".join(json.dumps({"prompt": f"u{i}", "chosen": "a", "rejected": "b",
                                                                "set": "UltraFeedback"}) + "\n" for i in range(6)),
                                            encoding="utf-8")
    _arm(learning, "none", [0.0] * 10)  # the LLMBar arm
    monkeypatch.setattr(learning, "ROOT", tmp_path)
    monkeypatch.setattr(learning, "load_judge", lambda *a, **k: object())
    monkeypatch.setattr(heldout, "judge_heldout", lambda cfg, judges, pairs, written, *a: [
        {"prompt": p.prompt, "chosen": p.better, "rejected": p.worse,
         "credit": 1.0 if written[p.prompt].rubric is not None else 0.0} for p in pairs])
    monkeypatch.setattr(learning, "five_rubrics", lambda *a: pytest.fail("the five prompts written again"))
    rubric = json.dumps({"criteria": [{"criterion": "Says 5.", "weight": 1.0,
                                       "scoring_levels": {"1.0": "yes", "0.5": "partly", "0.0": "no"}}]})
    monkeypatch.setattr(learning, "_write_rubrics", lambda writer, prompts, decoding: iter([(list(prompts),
                                                                                             [rubric] * len(prompts))]))
    assert learning.writer_arm("none", None, 16, pairs_name="ultrafeedback")["credits"] == [0.0] * 6
    assert learning.writer_arm("warm", str(tmp_path / "w"), 16, pairs_name="ultrafeedback")["credits"] == [1.0] * 6
    assert sorted(p.name for p in uf.iterdir()) == sorted(
        ["heldout_pairs.jsonl", "none.json", "none-items.jsonl", "none-key.json", "warm.json", "warm-items.jsonl",
         "warm-key.json", "warm-rubrics.jsonl"])
    assert json.loads((learning.WRITERS / "none.json").read_text(encoding="utf-8"))["credits"] == [0.0] * 10
    lines = learning.writers_table()["lines"]
    assert "The same writers on 6 held-out UltraFeedback pairs" in "\n".join(lines)
    assert "| warm-started writer (SFT) | 6 | 1.000 [" in "\n".join(lines)
    assert "| warm-started writer (SFT) vs no rubric | 6 / 0 | 0.0312 |" in "\n".join(lines)
    assert any(line.startswith("Not finished on these pairs: warm start + labelled-pair GRPO") for line in lines)


def test_writers_refuses_the_handwritten_arm_on_other_pairs(learning, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["learning.py", "writers", "hand", "--pairs", "ultrafeedback"])
    with pytest.raises(SystemExit) as e:
        learning.main()
    assert e.value.code == 2 and "for the LLMBar pairs only" in capsys.readouterr().err


def test_writers_study_judges_the_other_pair_sets_with_the_writers_this_machine_has(learning, tmp_path, monkeypatch,
                                                                                  capsys):
    """After the training runs: on the UltraFeedback pairs no rubric and the warm start always, a run's final
    checkpoint once the run finished here; no rubric on each finished run's own pairs. A finished arm is left as it
    is, and one whose run is not here is said in one line."""
    monkeypatch.setattr(learning, "ROOT", tmp_path)
    (learning.WRITERS / "warm-key.json").write_text(json.dumps({"decoding": {"max_new_tokens": 320,
                                                                             "max_criteria": 3}}), encoding="utf-8")
    (learning.WRITERS / "ultrafeedback").mkdir()
    (learning.WRITERS / "ultrafeedback" / "none.json").write_text("{}", encoding="utf-8")  # finished
    labelled = tmp_path / learning.LABELLED_RUN[1]
    monkeypatch.setattr(learning, "_finished", lambda run_dir, config: run_dir == labelled)
    monkeypatch.setattr(learning, "final_checkpoint", lambda run_dir: run_dir / "checkpoints" / "checkpoint-50")
    calls = []
    monkeypatch.setattr(learning, "_call", lambda cmd, log, env=None: calls.append([str(c) for c in cmd[3:]]))
    learning.other_pair_arms()
    assert calls == [["writers", "warm", "--writer", learning.WARM_START, "--max-tokens", "320", "--max-criteria", "3",
                      "--pairs", "ultrafeedback"],
                     ["writers", "warm-grpo", "--writer", f"{learning.LABELLED_RUN[1]}/checkpoints/checkpoint-50",
                      "--max-tokens", "320", "--max-criteria", "3", "--pairs", "ultrafeedback"],
                     ["writers", "none", "--pairs", "labelled-train"]]
    out = capsys.readouterr().out
    assert "warm-evolm on ultrafeedback: runs/learning/judge-1b5/evolm has not finished on this machine" in out
    assert "none on evolm-train: runs/learning/judge-1b5/evolm has not finished on this machine" in out


def test_a_runs_own_pairs_come_from_its_samples_once_it_has_finished(learning, tmp_path, monkeypatch):
    """The EvoLM run's temporal pairs, one per (step, slot) in that order, the fresh answer as the chosen one; not
    built (one line) before the run has finished."""
    monkeypatch.setattr(learning, "ROOT", tmp_path)
    samples = tmp_path / learning.EVOLM_RUN[1] / "samples"
    samples.mkdir(parents=True)
    rows = [{"step": s, "role": "rubric", "slot": k, "question": f"q{s}{k}", "a_pos": "new", "a_neg": "old"}
            for s in (7, 6) for k in (1, 0) for _ in range(4)]  # 4 sampled rubrics per pair
    (samples / "phase-001-rubric.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    monkeypatch.setattr(learning, "_finished", lambda run_dir, config: False)
    with pytest.raises(SystemExit, match="has not finished on this machine"):
        learning.train_pairs("evolm-train")
    monkeypatch.setattr(learning, "_finished", lambda run_dir, config: True)
    kept = [json.loads(line) for line in learning.train_pairs("evolm-train").read_text(encoding="utf-8").splitlines()]
    assert [(r["step"], r["slot"], r["prompt"]) for r in kept] == [(6, 0, "q60"), (6, 1, "q61"), (7, 0, "q70"),
                                                                   (7, 1, "q71")]
    assert kept[0]["chosen"] == "new" and kept[0]["rejected"] == "old"


def test_the_labelled_runs_training_pairs_set_the_writers_votes_against_no_rubric_pair_by_pair(learning):
    """Per half of the labelled run: the no-rubric judge's verdicts on its training pairs, the in-training rubrics'
    majority votes on the same pairs, and where the two differ."""
    train = learning.WRITERS / "labelled-train"
    train.mkdir()
    steps = [1, 1, 1, 1, 26, 26, 26, 26]
    (train / "heldout_pairs.jsonl").write_text("".join(
        json.dumps({"prompt": f"t{i}", "chosen": "a", "rejected": "b", "set": "UltraFeedback train", "step": s}) + "\n"
        for i, s in enumerate(steps)), encoding="utf-8")
    sha = __import__("hashlib").sha256((train / "heldout_pairs.jsonl").read_bytes()).hexdigest()
    judge = {"model": learning.JUDGE, "dtype": learning.JUDGE_DTYPE}
    (train / "none.json").write_text(json.dumps({"arm": "none", "label": "no rubric", "credits": [1, 0, 0, 0.5, 1, 1, 0, 0],
                                                 "pairs_sha": sha, "key": {"arm": "none", "judge": judge}}),
                                     encoding="utf-8")
    votes = [(4, 0), (3, 1), (0, 4), (2, 2), (1, 3), (4, 0), (3, 1), (4, 0)]  # (higher, lower) per (step, slot)
    (learning.FIGURES / "training").mkdir(parents=True)
    (learning.FIGURES / "training" / "labelled-pairs.jsonl").write_text("".join(
        json.dumps({"step": s, "slot": i % 4, "source": "labelled", "higher": h, "lower": lo}) + "\n"
        for i, (s, (h, lo)) in enumerate(zip(steps, votes))), encoding="utf-8")
    lines = learning._train_pairs_lines("labelled-train")
    assert lines[-2] == "| 1-25 | 4 | 1 / 2 | 2 / 1 | 1 / 0 (1) |"
    assert lines[-1] == "| 26-50 | 4 | 2 / 2 | 3 / 1 | 2 / 1 (1) |"


@pytest.mark.slow
def test_a_judge_that_is_not_there_is_a_one_line_error_not_a_traceback():
    out = subprocess.run([sys.executable, "-m", "studies.learning", "writers-probe", "--judge", "/no/such/judge"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()]
    assert out.stderr.startswith("studies.learning: error: unknown model '/no/such/judge'")


def test_training_overlap_says_which_sources_it_could_not_check(learning, tmp_path, monkeypatch):
    """A fresh clone without the fetched data sets: the overlap line names the sources it did not check, rather than
    leaving them out as if checked."""
    monkeypatch.setattr(learning, "DATA", tmp_path / "no-data")
    (tmp_path / "no-data" / "gsm8k").mkdir(parents=True)
    (tmp_path / "no-data" / "gsm8k" / "train.jsonl").write_text(json.dumps({"question": "Q3"}) + "\n", encoding="utf-8")
    overlap = learning.training_overlap(learning.writers_pairs())
    assert overlap["GSM8K train"] == 1 and overlap["UltraFeedback train"] is None
    line = next(x for x in learning.writers_table(write_doc=False)["lines"]
                if x.startswith("Held-out prompts found in a training source"))
    assert "GSM8K train 1" in line and "UltraFeedback train not checked" in line
