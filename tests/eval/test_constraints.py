"""Checkable constraints (evolm.eval.constraints): lm-eval's IFEval checkers on a prompt's constraint ids, the prompt
sets the builder makes, and a run that carries the constraints from its prompts file to its records."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evolm.errors import InputError
from evolm.eval.constraints import (
    FAMILIES,
    check,
    constraint_reward,
    constraints_json,
    describe,
    newer_passes,
    parse_constraints,
    prompt_constraints,
)
from evolm.runs.jsonl import read_jsonl, write_jsonl

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("build_constraint_prompts", REPO / "scripts" / "build_constraint_prompts.py")
builder = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(builder)

POSTSCRIPT = {"id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}
QUOTES = {"id": "startend:quotation", "kwargs": {}}
TITLE = {"id": "detectable_format:title", "kwargs": {}}


@pytest.mark.parametrize(("answer", "expected"), [
    ('"<<Rain>>\nIt rains.\nP.S. Bring a coat."', [True, True, True]),
    ("<<Rain>>\nIt rains.\nP.S. Bring a coat.", [True, False, True]),
    ('"It rains. PS: bring a coat."', [False, True, False]),  # "PS:" is not the marker "P.S."
    ('"<<>> It rains."', [False, True, False]),  # an empty title is no title (IFEval's rule)
    ("", [False, False, False]),  # an empty answer follows nothing
])
def test_check_reads_ifevals_instructions(answer: str, expected: list[bool]) -> None:
    assert check(answer, "Will it rain?", [POSTSCRIPT, QUOTES, TITLE]) == expected


def test_the_prompt_says_each_constraint_in_ifevals_own_words() -> None:
    assert describe(QUOTES) == "Wrap your entire response with double quotation marks."
    assert "P.S." in describe(POSTSCRIPT)


def test_every_family_builds_a_description_and_checks_an_answer() -> None:
    import random

    for family, kwargs in FAMILIES.items():
        c = {"id": family, "kwargs": kwargs(random.Random(0))}
        assert describe(c)
        assert check("A plain answer.", "A question?", [c]) in ([True], [False])


@pytest.mark.parametrize(("value", "message"), [
    ('[{"id": "no:such", "kwargs": {}}]', "x[0]: unknown IFEval instruction id 'no:such'"),
    ("{not json", "x: not a JSON list of constraints"),
    ('{"id": "startend:quotation"}', "x: must be a list of {id, kwargs} objects"),
    ('[{"id": "startend:quotation", "kwargs": 3}]', "x[0]: must be an object {id: str, kwargs: object}"),
])
def test_bad_constraints_are_one_line_errors(value: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        parse_constraints(value, "x")
    assert str(e.value) == message


def test_the_reward_is_the_share_followed_and_none_without_constraints() -> None:
    both = constraints_json([QUOTES, POSTSCRIPT])
    got = constraint_reward(['"Hi."', '"Hi.\nP.S. Bye."', "Hi."], constraints=[both, both, None])
    assert got == [0.5, 1.0, None]
    conversational = [[{"role": "assistant", "content": '"Hi."'}]]
    assert constraint_reward(conversational, constraints=[constraints_json([QUOTES])]) == [1.0]


def test_newer_passes_counts_only_temporal_pairs_with_constraints() -> None:
    c = constraints_json([QUOTES, POSTSCRIPT])
    row = {"pair_source": "temporal:window", "constraints": c, "question": "q"}
    rows = [{**row, "a_pos": '"A."\nP.S. x', "a_neg": '"A."'},  # 1 vs 1... a_pos ends with x: not quoted
            {**row, "a_pos": '"A.\nP.S. x"', "a_neg": "A."},  # 2 vs 0
            {**row, "a_pos": "A.", "a_neg": '"A."'},  # 0 vs 1
            {**row, "a_pos": "A.", "a_neg": '"A."', "pair_source": "rubric_conditioned"},  # not temporal
            {**row, "a_pos": "A.", "a_neg": "B.", "constraints": None}]  # no constraints
    assert newer_passes(rows) == {"newer_passes_more": 1, "newer_passes_fewer": 1, "newer_passes_same": 1}
    assert newer_passes(rows[3:]) == {}


# ----------------------------------------------------------------------------- the builder


def fake_data(root: Path) -> Path:
    uf = root / "ultrafeedback_sample"
    gsm = root / "gsm8k"
    uf.mkdir(parents=True)
    gsm.mkdir()
    write_jsonl(uf / "train_clean.jsonl", [{"prompt": f"Describe training topic number {i} briefly."}
                                           for i in range(60)] + [{"prompt": "Shared question that is in both."}])
    write_jsonl(uf / "eval_clean.jsonl", [{"prompt": f"Explain held-out topic number {i} to a child."}
                                          for i in range(30)] + [{"prompt": "Shared question that is in both."}])
    write_jsonl(gsm / "train.jsonl", [{"question": f"What is {i} plus {i} apples?"} for i in range(10)])
    write_jsonl(gsm / "test.jsonl", [{"question": f"What is {i} times 3 pears?"} for i in range(10)])
    return root


def test_builder_keeps_held_out_questions_and_families_apart(tmp_path: Path) -> None:
    data = fake_data(tmp_path / "data")
    argv = ["--data", str(data), "--survey-per-family", "2", "--train-n", "30", "--heldout-per-family", "4"]
    assert builder.main([*argv, "--out", str(tmp_path / "a")]) == 0
    assert builder.main([*argv, "--out", str(tmp_path / "b")]) == 0
    for name in ("survey", "train", "heldout"):  # the same files from the same data: every draw is seeded
        assert (tmp_path / "a" / f"{name}.jsonl").read_bytes() == (tmp_path / "b" / f"{name}.jsonl").read_bytes()
    train, heldout, survey = (read_jsonl(tmp_path / "a" / f"{n}.jsonl") for n in ("train", "heldout", "survey"))
    trained_qs = {r["question"] for r in train} | {r["question"] for r in survey}
    assert not trained_qs & {r["question"] for r in heldout}
    assert "Shared question that is in both." not in {r["question"] for r in heldout}
    assert {f for r in train for f in r["families"]} <= set(builder.TRAIN_FAMILIES)
    held = [r for r in heldout if r["split"] == "held-out family"]
    assert {r["families"][0] for r in held} == set(builder.HELDOUT_FAMILIES)
    assert len(heldout) == 4 * (len(builder.TRAIN_FAMILIES) + len(builder.HELDOUT_FAMILIES))
    for r in train + heldout:
        cs = parse_constraints(r["constraints"])
        assert r["prompt"].startswith(r["question"]) and all(describe(c) in r["prompt"] for c in cs)
    assert {len(r["constraints"]) for r in train} == {1, 2}
    assert prompt_constraints(str(tmp_path / "a" / "train.jsonl"))[train[0]["prompt"]] == \
        constraints_json(train[0]["constraints"])


def test_builder_refuses_missing_data_and_unknown_families_in_one_line(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    assert builder.main(["--data", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "not found (run `python scripts/fetch_data.py" in capsys.readouterr().err
    data = fake_data(tmp_path / "data")
    assert builder.main(["--data", str(data), "--out", str(tmp_path / "o"), "--heldout-families", "no:such"]) == 2
    assert "unknown family 'no:such'" in capsys.readouterr().err
    assert builder.main(["--data", str(data), "--out", str(tmp_path / "o"),
                         "--heldout-families", builder.TRAIN_FAMILIES[0]]) == 2
    assert "both trained and held out" in capsys.readouterr().err


# ----------------------------------------------------------------------------- a run carries them to its records


@pytest.mark.slow
def test_a_run_on_constraint_prompts_records_the_precondition(tiny_model_dir: Path, tmp_path: Path) -> None:
    from evolm.config import load_config
    from evolm.training.run import run

    prompts = tmp_path / "prompts.jsonl"
    write_jsonl(prompts, [{"prompt": f"Say hello number {i}. Wrap your entire response with double quotation marks.",
                           "constraints": [QUOTES]} for i in range(4)])
    out = tmp_path / "run"
    cfg = load_config(REPO / "configs" / "demo-cpu.yaml", [
        f"model.name={tiny_model_dir}", f"judge.model={tiny_model_dir}", f"output_dir={out}", f"data.prompts={prompts}",
        "schedule.prompts_per_step=2", "schedule.samples_per_prompt=2", "grpo.per_device_train_batch_size=4",
        "grpo.max_completion_length=8", "rubric.max_new_tokens=8", "contrast.max_new_tokens=8", "grpo.report_to=[]",
        "rubric.constrained=false", "schedule.cycles=1", "schedule.steps_per_phase=2", "schedule.save_every=100",
        "contrast.min_age=0", "contrast.max_age=4", "grpo.gradient_checkpointing=false", "model.lora.r=0",
        "rewards.extra=[{name: evolm.eval.constraints.constraint_reward, weight: 1.0}]"])
    run(cfg)
    steps = read_jsonl(out / "metrics.jsonl")
    rubric = [s for s in steps if s["role"] == "rubric"]
    assert rubric and all(sum(s[f"newer_passes_{k}"] for k in ("more", "fewer", "same")) == s["pairs"]
                          for s in rubric)  # every pair is temporal and has constraints
    policy = [s for s in steps if s["role"] == "policy"]
    assert all("constraint_reward" in s["reward_components"] for s in policy)
    assert all(s.get("newer_passes_more") is None for s in policy)
    rows = [r for p in sorted((out / "samples").glob("*.jsonl")) for r in read_jsonl(p)]
    for r in rows:
        assert r["constraints"] == [QUOTES]
        if r["role"] == "policy":
            assert r["constraints_passed"] == int(check(r["completion"], r["question"], [QUOTES])[0])
        else:
            assert r["passed_pos"] == int(check(r["a_pos"], r["question"], [QUOTES])[0])
    from evolm.report.report import write_report

    page = write_report(out).read_text()
    assert "Is the newer answer better?" in page and "over the run: " in page
