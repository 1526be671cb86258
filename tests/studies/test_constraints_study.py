"""The constraints study (studies/constraints/): its pairs are what the checker says, its table's statistics are
paired, and its watch stops a run whose newer answers are not better."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import studies.constraints.__main__ as study

from evolm.eval.constraints import check

ROOT = Path(__file__).resolve().parents[2]
END = [{"id": "startend:end_checker", "kwargs": {"end_phrase": "That is all."}}]
JSON = [{"id": "detectable_format:json_format", "kwargs": {}}]
PS = [{"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}]


def _answer(prompt: str, family: str, constraints: list[dict], answer: str, model: str = "m") -> dict:
    return {"prompt": prompt, "question": prompt, "constraints": constraints, "family": family, "model": model,
            "answer": answer, "passed": check(answer, prompt, constraints)}


@pytest.mark.parametrize("constraints", [END, JSON], ids=["end phrase", "json"])
def test_a_comply_edit_makes_the_answer_pass_and_is_the_chosen_answer(constraints: list[dict]) -> None:
    rows = [_answer("q", constraints[0]["id"], constraints, "Paris is the capital, I think.")]
    assert not any(rows[0]["passed"])
    (pair,) = study.edited_pairs(rows, 5)
    assert all(check(pair["chosen"], "q", constraints)) and pair["rejected"] == rows[0]["answer"]
    assert pair["kind"] == "edited" and pair["chosen_model"] == "m (edited)"


def test_a_natural_pair_comes_from_one_model_when_one_gave_both() -> None:
    family = "detectable_content:postscript"
    rows = [_answer("q", family, PS, "Good answer.\nP.S. more", "big"),
            _answer("q", family, PS, "Plain answer.", "small"),
            _answer("q", family, PS, "Another.\nP.S. yes", "small")]
    (pair,) = study.natural_pairs(rows, 5)
    assert (pair["chosen_model"], pair["rejected_model"]) == ("small", "small")
    assert pair["chosen"] == "Another.\nP.S. yes"


def _arm_file(results: Path, name: str, credits: list[float], named: list[bool] | None = None,
              judge_code: str = "abc") -> None:
    end = {"id": "startend:end_checker", "kwargs": {"end_phrase": "Any other questions?"}}
    asked = [[{"id": "detectable_content:postscript", "kwargs": {}}] if i % 2 else [end] for i in range(len(credits))]
    said = ["Ends with a postscript that starts with P.S.", "Ends with Any other questions?"]
    rows = [{"prompt": f"q{i}", "family": asked[i][0]["id"], "split": "trained family" if i % 2 else "held-out family",
             "credit": c, "s_pos": 0.5 + (c - 0.5) * (i + 1) / 100, "s_neg": 0.5, "rubric": None if named is None else said[1 - i % 2] if named[i] else said[i % 2]}
            for i, c in enumerate(credits)]  # not named: the other family's criterion (a postscript also "ends with")
    (results / "heldout-pairs.jsonl").write_text("".join(json.dumps({"prompt": f"q{i}", "constraints": c}) + "\n"
                                                         for i, c in enumerate(asked)))
    (results / "arms").mkdir(parents=True, exist_ok=True)
    key = {"judge": "j", "mode": "yesno", "dtype": "float32", "judge_code": judge_code}
    (results / "arms" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [{"key": key}, *rows]))


def test_the_table_gives_paired_sign_tests_against_no_rubric_and_the_base_writer(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(study, "RESULTS", tmp_path)
    _arm_file(tmp_path, "none", [0.0] * 10)
    _arm_file(tmp_path, "base", [0.0] * 8 + [1.0, 1.0], [False] * 10)
    _arm_file(tmp_path, "trained", [1.0] * 9 + [0.5], [True] * 10)
    study.table(None)
    lines = (tmp_path / "heldout-table.md").read_text().splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]][:1] == ["| none"]  # no rubric first, then the base writer
    trained_all = next(line for line in lines if line.startswith("| trained | all |"))
    # 9.5 of 10; against no rubric 10 better (p = 2/1024), against the base writer 8 better, 1 worse
    assert "| 10 | 0.950 [" in trained_all and "10 / 0, p = 0.002" in trained_all
    assert "8 / 1, p = 0.039" in trained_all and trained_all.endswith("| 1.00 |")
    # the margin (s+ minus s-, here growing with the pair's index): larger than no rubric's on all 10 pairs
    assert "| +0.050, r = +1.00, p = 0.002 (n = 10) | +0.040, r = +0.76, p = 0.043 (n = 9) |" in trained_all
    assert any(line.startswith("| trained | held-out family | 5 |") for line in lines)
    assert any(line.startswith("| trained |   end_checker | 5 |") for line in lines)
    assert (tmp_path / "heldout.png").stat().st_size > 10_000  # the same, as a picture


def test_the_policy_table_compares_each_trained_policy_with_step_0_and_the_control(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(study, "RESULTS", tmp_path)
    (tmp_path / "policies").mkdir()
    title = [{"id": "detectable_format:title", "kwargs": {}}]

    def answers(titled: str, ended: str, samples: int = 1) -> list[dict]:
        rows = [_answer(f"t{i}", "detectable_format:title", title, titled) for i in range(4) for _ in range(samples)]
        rows += [_answer(f"e{i}", "startend:end_checker", END, ended) for i in range(2) for _ in range(samples)]
        return [{**r, "sample": n % samples} for n, r in enumerate(rows)]

    base = answers("no title", "That is all.", samples=4)  # four answers a prompt, as step 0's
    base[0] = {**base[0], "answer": "<<T>>", "passed": [True]}  # sample 0 of t0 complies: t0 is no longer higher
    for path, rows in ((tmp_path / f"heldout-answers-{study.POLICY}.jsonl", base),
                       (tmp_path / "policies" / "pure-step6.jsonl", answers("<<T>> yes", "no")),
                       (tmp_path / "policies" / "control-step6.jsonl", answers("no title", "That is all."))):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = study.policy_table()
    assert "| step 0 (base) | trained family | 4 / 16 | 0.062 [" in text  # 1 of 16 answers
    # against step 0 on sample 0 alone: t0 ties, t1-t3 higher; against the control all four higher
    assert "| pure-step6 | trained family | 4 / 4 | 1.000 [" in text and "| 3 / 0, p = 0.250 | 4 / 0, p = 0.125 |" in text
    assert "| pure-step6 |   title | 4 / 4 |" in text
    assert "| pure-step6 | held-out family | 2 / 2 | 0.000 [" in text and "| 0 / 2, p = 0.500 | 0 / 2, p = 0.500 |" in text
    assert "| control-step6 | all | 6 / 6 | 0.333 [" in text and text.count("| - |") >= 6  # the control against itself: -
    for f in (tmp_path / "policies").glob("*-step6.jsonl"):
        f.unlink()
    assert study.policy_table() == ""  # step 0 alone: nothing to compare


def test_the_table_refuses_arms_judged_by_different_judge_code(tmp_path, monkeypatch) -> None:
    """A change to the judge's defences between arms would change the study's judge silently: refused."""
    monkeypatch.setattr(study, "RESULTS", tmp_path)
    _arm_file(tmp_path, "none", [0.0] * 4)
    _arm_file(tmp_path, "base", [1.0] * 4, judge_code="def")
    with pytest.raises(SystemExit, match="different judges"):
        study.table(None)
    assert len(study.judge_code()) == 16


def test_watch_stops_a_run_whose_newer_answers_are_not_better(tmp_path) -> None:
    """Under 60% of the first 40 pairs that differ: the run's process gets SIGTERM, the watch exits 3."""
    run = tmp_path / "run"
    run.mkdir()
    steps = [{"step": s, "role": "rubric", "newer_passes_more": 2, "newer_passes_fewer": 2, "newer_passes_same": 1}
             for s in range(1, 12)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run / ".evolm.lock").write_text(str(victim.pid))
        out = subprocess.run([sys.executable, "-m", "studies.constraints", "watch", str(run), "--stop"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 3, out.stderr
        assert "precondition failed: the newer answer was better in 50% of the first 40" in out.stdout
        assert victim.wait(timeout=10) == -signal.SIGTERM
    finally:
        if victim.poll() is None:
            victim.kill()


def test_progress_follows_the_policy_the_precondition_and_the_writers_naming(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    two = [*PS, {"id": "detectable_format:title", "kwargs": {}}]
    policy = [{"step": 1, "role": "policy", "question": "q", "constraints": two, "constraints_passed": k,
               "score": score, "rubric_text": "1. Adds a P.S. at the end. 2. Has a title in <<double angular brackets>>."}
              for k, score in ((0, 0.1), (1, 0.5), (2, 0.4), (2, 0.9))]  # the judge wrong on (1, 2) once: 4 of 5
    # the newer answer follows the P.S. and the older does not: the judge is right where it scores the newer higher
    rubric = [{"step": 2, "role": "rubric", "cycle": 0, "slot": 0, "constraints": PS, "completion": text,
               "reward": reward, "passed_pos": 1, "passed_neg": 0, "s_pos": s_pos, "s_neg": 0.5}
              for text, reward, s_pos in (("1. Ends with a P.S.", 1.0, 0.9), ("1. Is correct.", 0.0, 0.4),
                                          ("1. Is correct.", 0.5, 0.6))]
    (run / "samples" / "phase-000-policy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in policy))
    (run / "samples" / "phase-000-rubric.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rubric))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"step": 1, "role": "policy"},
        {"step": 2, "role": "rubric", "newer_passes_more": 3, "newer_passes_fewer": 1, "newer_passes_same": 0}]))
    assert study.main(["progress", str(run), "--out", str(tmp_path / "p.md")]) == 0
    text = (tmp_path / "p.md").read_text()
    assert "| 1 | policy | 0.62 (n 4) | - | 1.00 (n 1) | - | 0.80 (n 5) |" in text  # 5 of 8 followed; one rubric
    assert "| 2 | rubric | - | 3 / 1 / 0 | 0.50 (n 2) | 0.408 | 0.67 (n 3) |" in text  # one of two rubrics names it
    assert "by cycle: 0: 2/3" in text  # the writer's pairs only, not the policy step's
    assert "largest margin: 1 of 1" in text  # the P.S. rubric: the highest reward and the largest margin
    assert "over the run: 3 / 1 / 0 (sign p = 0.625)" in text
    assert "following more constraints in 4 of 5 answer pairs" in text
    assert "reward higher in 1, lower in 0 of 1 groups (sign p = 1.000; mean difference +0.7500)" in text  # 1 vs 0.25
    assert "pairs (to step" not in text  # 4 pairs: no line for the first 40
    with (run / "metrics.jsonl").open("a") as f:  # 20 + 20 more pairs: the step that passes 40 counts whole
        f.writelines(json.dumps({"step": s, "role": "rubric", "newer_passes_more": 2, "newer_passes_fewer": 1,
                                 "newer_passes_same": 17}) + "\n" for s in (4, 6))
    assert study.main(["progress", str(run)]) == 0
    assert "the first 44 pairs (to step 6): 7 / 3 / 34" in capsys.readouterr().out


def test_train_pairs_take_the_most_and_least_compliant_answer_of_a_question_that_differs(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    rows = [{"step": 1, "role": "policy", "question": q, "constraints": PS, "constraints_passed": k, "completion": a}
            for q, k, a in (("q1", 0, "no"), ("q1", 1, "yes P.S. x"), ("q1", 0, "no 2"), ("q2", 1, "a"), ("q2", 1, "b"))]
    (run / "samples" / "phase-000-policy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "pairs.jsonl"
    assert study.main(["train-pairs", str(run), "--out", str(out)]) == 0
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(p["prompt"], p["chosen"], p["rejected"]) for p in pairs] == [("q1", "yes P.S. x", "no")]  # q2: no pair
    from evolm.eval.pairs import load_pairs  # what contrast.pairs=labelled reads

    assert load_pairs(out)[0].better == "yes P.S. x"
    (run / "samples" / "phase-000-policy.jsonl").write_text(json.dumps(rows[3]) + "\n")
    assert study.main(["train-pairs", str(run), "--out", str(out)]) == 1
    assert "no question's answers differ" in capsys.readouterr().err


def test_an_interrupted_survey_goes_on_from_the_answers_it_kept(tmp_path, monkeypatch, tiny_model_dir) -> None:
    """The answers are kept a chunk at a time: a survey stopped halfway (a machine lost) samples only the rest."""
    monkeypatch.setattr(study, "RESULTS", tmp_path)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Say {i}.\n\nAdd a P.S.", "question": f"Say {i}.",
                                           "constraints": PS, "families": [PS[0]["id"]]}) + "\n" for i in range(6)))
    calls: list[int] = []
    from evolm.backends.hf import HFBackend

    real = HFBackend.generate

    def generate(self, convs, params, **kw):
        calls.append(len(convs))
        if len(calls) == 2 and not (tmp_path / "stop").exists():
            (tmp_path / "stop").touch()
            raise KeyboardInterrupt  # the machine goes away after the first chunk
        return real(self, convs, params, **kw)

    monkeypatch.setattr(HFBackend, "generate", generate)
    argv = ["survey", "--prompts", str(prompts), "--model", str(tiny_model_dir), "--per-family", "6", "--samples",
            "2", "--batch-size", "1", "--max-new-tokens", "4"]
    with pytest.raises(KeyboardInterrupt):
        study.main(argv)
    name = "survey-" + str(tiny_model_dir).replace("/", "_")
    assert len(study.read_jsonl(tmp_path / f"{name}.partial.jsonl")) == 4  # one chunk of 4 kept
    calls.clear()
    assert study.main(argv) == 0
    assert calls == [4, 4]  # only the 8 answers still missing
    out = study.read_jsonl(tmp_path / f"{name}.jsonl")
    assert [(r["question"], r["sample"]) for r in out] == [(f"Say {i}.", s) for i in range(6) for s in range(2)]
    assert not (tmp_path / f"{name}.partial.jsonl").exists()


def test_the_warm_start_seed_states_only_trained_families_and_the_constrained_writer_can_write_it() -> None:
    from evolm.backends.constrained import CRITERION_CHARS, LEVEL_CHARS, LEVELS
    from evolm.rubrics import format_validity

    rows = study.read_jsonl(study.RESULTS / "warmstart-seed.jsonl")
    assert len(rows) == 400 and len({r["prompt"] for r in rows}) == 400
    for r in rows:
        assert format_validity(json.dumps(r["rubric"])) == 1.0 and len(r["rubric"]["criteria"]) <= 3
        for c in r["rubric"]["criteria"]:
            assert len(c["criterion"]) <= CRITERION_CHARS and tuple(c["scoring_levels"]) == LEVELS
            assert all(len(v) <= LEVEL_CHARS for v in c["scoring_levels"].values())
        stated = [c["criterion"] for c in r["rubric"]["criteria"] if c["criterion"] in study.STATED.values()]
        assert stated and study.names_constraint(" ".join(stated).lower(), _constraints_of(r["prompt"]))
    heldout = {c["id"] for r in study.read_jsonl(study.RESULTS / "heldout-pairs.jsonl") if r["split"] == "held-out family"
               for c in r["constraints"]}
    assert heldout and not heldout & set(study.STATED)  # no writer is taught a held-out family


def _constraints_of(prompt: str) -> list[dict]:
    return [{"id": i} for i, text in (("detectable_format:title", "double angular brackets"),
                                      ("detectable_content:postscript", "postscript")) if text in prompt]


def test_keep_copies_the_adapter_alone_in_bfloat16_and_refuses_a_base_named_by_a_path(tmp_path, monkeypatch) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    monkeypatch.setattr(study, "ADAPTERS", tmp_path / "adapters")
    src = tmp_path / "checkpoint-3"
    src.mkdir()
    save_file({"base_model.model.x.lora_A.weight": torch.randn(4, 8)}, src / "adapter_model.safetensors")
    for extra in ("optimizer.pt", "evolm_buffer.jsonl", "tokenizer.json"):
        (src / extra).write_text("x")
    (src / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/home/me/models/smollm2", "r": 4}))
    assert study.main(["keep", str(src), "--name", "a"]) == 1  # a path: would not load on another machine
    assert not (tmp_path / "adapters" / "a").exists()
    (src / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": study.POLICY, "r": 4}))
    assert study.main(["keep", str(src), "--name", "a"]) == 0
    out = tmp_path / "adapters" / "a"
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    kept = load_file(out / "adapter_model.safetensors")
    assert kept["base_model.model.x.lora_A.weight"].dtype == torch.bfloat16
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == study.POLICY


def test_the_margin_test_pairs_arms_by_prompt_and_says_which_way_and_how_strongly() -> None:
    """Wilcoxon on the paired margin (s+ minus s-): an arm whose margin is larger on every pair gets r = +1 and a
    small p; pairs with equal margins are dropped; the other arm's order does not matter."""
    def rows(margins: list[float]) -> list[dict]:
        return [{"prompt": f"q{i}", "s_pos": 0.5 + m, "s_neg": 0.5} for i, m in enumerate(margins)]

    ref = rows([0.0] * 12)
    better = rows([0.01 * (i + 1) for i in range(12)])
    out = study.margin_test(better, list(reversed(ref)))
    assert out.startswith("+0.065, r = +1.00, p = 0.000") and out.endswith("(n = 12)")
    assert study.margin_test(ref, better).startswith("-0.065, r = -1.00")
    assert study.margin_test(rows([0.0] * 11 + [0.3]), ref) == "n = 1"  # eleven ties dropped
    assert study.margin_test(better, None) == "-"
