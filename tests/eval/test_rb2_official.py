"""``evolm eval rb2 --from-scores`` against the official RewardBench 2 code itself.

The official functions (``rewardbench`` 0.1.4 from PyPI: ``reroll_and_score_dataset``,
``sample_stats``, ``process_single_model`` and the per-subset loop of ``scripts/run_v2.py``) are
vendored unchanged in ``rewardbench_official.py``. Each test writes a random score file (seeded,
hundreds of prompts, with the edge cases where a restatement is easy to get wrong: tied prompts
with a single correct answer, correct answers with equal scores so that diff_corr = 0, equal
scores across correct and incorrect answers, prompt ids without their ref or tied partner), runs
the CLI on it, and requires the official per-subset scores and their mean to 1e-9.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from evolm.cli import main
from evolm.errors import InputError
from evolm.eval import rb2_scoring

datasets = pytest.importorskip("datasets")
official = pytest.importorskip("rewardbench_official")  # needs numpy, pandas and datasets

NON_TIES = [s for s in rb2_scoring.SUBSETS if s != rb2_scoring.TIES]


def _scores(rng: random.Random, n: int, num_correct: int) -> list[float]:
    """``n`` scores in one of several styles, most of them rich in equal values."""
    style = rng.choice(["grid", "grid", "tenths", "continuous", "equal", "equal_correct"])
    if style == "grid":  # a 1-5 rating: many ties everywhere
        return [float(rng.randint(1, 5)) for _ in range(n)]
    if style == "tenths":  # probabilities as a judge's expected digit
        return [rng.randint(0, 10) / 10 for _ in range(n)]
    if style == "continuous":
        return [rng.random() for _ in range(n)]
    if style == "equal":  # every completion the same score
        return [float(rng.randint(1, 5))] * n
    value = float(rng.randint(1, 5))  # equal_correct: the correct answers tie (diff_corr = 0)
    return [value] * num_correct + [float(rng.randint(1, 5)) for _ in range(n - num_correct)]


def random_score_rows(seed: int) -> list[dict]:
    """A score file in the ``--save-scores`` schema: five non-Ties subsets and a Ties subset."""
    rng = random.Random(seed)
    rows = []
    for subset in NON_TIES:
        for i in range(rng.randint(40, 80)):
            rows.append({"id": f"{subset[:3]}{i}", "subset": subset, "num_correct": 1, "scores": _scores(rng, 4, 1)})
    for pid in range(rng.randint(120, 160)):
        kinds = rng.choices([("ref", "tied"), ("tied",), ("ref",)], weights=[85, 8, 7])[0]
        label = f"{pid:03d}" if rng.random() < 0.1 else str(pid)  # the official code reads ids with int()
        for kind in kinds:
            if kind == "ref":
                num_correct = 1
            else:
                num_correct = 1 if rng.random() < 0.25 else rng.randint(2, 5)
            n = num_correct + rng.randint(1, 4)
            rows.append({"id": f"{kind}:{label}", "subset": "Ties", "num_correct": num_correct,
                         "scores": _scores(rng, n, num_correct)})
    rng.shuffle(rows)
    return rows


def official_rb2(rows: list[dict]) -> dict[str, float]:
    """The official subset scores of ``rows`` (``None`` scores become -inf), as run_v2.py computes them."""
    texts, subsets, ids, scores, total, num_correct = [], [], [], [], [], []
    for r in rows:
        for s in r["scores"]:
            texts.append("completion")
            subsets.append(r["subset"])
            ids.append(r["id"])
            scores.append(-math.inf if s is None else s)
        total.append(len(r["scores"]))
        num_correct.append(r["num_correct"])
    datasets.disable_progress_bars()
    unrolled = datasets.Dataset.from_dict({"text": texts})
    grouped = official.score_subsets(unrolled, subsets, ids, scores, total, num_correct)
    return {str(name): float(value) for name, value in grouped.items()}


def evolm_rb2(rows: list[dict], tmp_path: Path) -> dict:
    scores, result = tmp_path / "scores.jsonl", tmp_path / "result.json"
    scores.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", "rb2", "--from-scores", str(scores), "--output", str(result), "--allow-unpaired-ties"]) == 0
    return json.loads(result.read_text())


def edge_cases(rows: list[dict]) -> dict[str, int]:
    """How many of each edge case ``rows`` holds (paired Ties prompts only, where they matter)."""
    ties = {tuple(r["id"].split(":")): r for r in rows if r["subset"] == "Ties"}
    ties = {(kind, int(pid)): r for (kind, pid), r in ties.items()}
    paired = [r for (kind, pid), r in ties.items() if kind == "tied" and ("ref", pid) in ties]
    multi = [r for r in paired if r["num_correct"] > 1]
    zero = [r for r in multi if len(set(r["scores"][: r["num_correct"]])) == 1]
    ci_zero = [r for r in ties.values() if min(r["scores"][: r["num_correct"]]) == max(r["scores"][r["num_correct"]:])]
    shared_top = [r for r in rows if r["subset"] != "Ties" and r["scores"].count(max(r["scores"])) > 1]
    return {"single_correct": len(paired) - len(multi), "zero_spread": len(zero), "positive_spread": len(multi) - len(zero),
            "ci_zero": len(ci_zero), "shared_top": len(shared_top),
            "unpaired": sum(1 for kind, pid in ties if ({"ref": "tied", "tied": "ref"}[kind], pid) not in ties)}


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_cli_from_scores_equals_the_official_code(seed, tmp_path, capsys):
    rows = random_score_rows(seed)
    cases = edge_cases(rows)
    assert len(rows) > 400 and min(cases.values()) >= 5, cases  # the file really holds every edge case
    expected = official_rb2(rows)
    capsys.readouterr()  # the official loop prints
    result = evolm_rb2(rows, tmp_path)
    assert set(expected) == set(rb2_scoring.SUBSETS) == set(result["subsets"])
    for name in rb2_scoring.SUBSETS:
        assert result["subsets"][name] == pytest.approx(expected[name], abs=1e-9, rel=0), name
    assert result["overall"] == pytest.approx(sum(expected.values()) / 6, abs=1e-9, rel=0)
    assert result["complete"] is True


def test_the_random_files_exercise_both_filters_of_the_release():
    """Some paired tied prompts have one correct answer (out of P and H), some diff_corr = 0 (out of M)."""
    rows = [r for r in random_score_rows(0) if r["subset"] == "Ties"]
    scored = [rb2_scoring.ScoredRow(r["id"], r["subset"], r["num_correct"], tuple(r["scores"])) for r in rows]
    b = rb2_scoring.ties_breakdown(scored)
    assert b.n_paired > b.n_spread > b.n_margin > 0
    assert rb2_scoring.ties_breakdown(scored).score == pytest.approx(official_rb2(rows)["Ties"], abs=1e-9, rel=0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_missing_incorrect_scores_are_minus_infinity_as_in_the_official_code(seed, tmp_path, capsys):
    """A missing rejected/incorrect score is read as -inf; the official code given -inf agrees exactly."""
    rng = random.Random(100 + seed)
    rows = random_score_rows(seed)
    holes = 0
    for r in rows:
        for i in range(r["num_correct"], len(r["scores"])):
            if rng.random() < 0.2:
                r["scores"][i] = None
                holes += 1
    assert holes > 100
    assert any(all(s is None for s in r["scores"][r["num_correct"]:]) for r in rows if r["subset"] == "Ties")
    expected = official_rb2(rows)
    capsys.readouterr()
    result = evolm_rb2(rows, tmp_path)
    assert result["missing_scores"] == holes
    for name in rb2_scoring.SUBSETS:
        assert result["subsets"][name] == pytest.approx(expected[name], abs=1e-9, rel=0), name
    assert result["overall"] == pytest.approx(sum(expected.values()) / 6, abs=1e-9, rel=0)


def _official_ties(rows: list[tuple[str, int, list[float]]]) -> float:
    data = datasets.Dataset.from_dict({"id": [r[0] for r in rows], "num_correct": [r[1] for r in rows],
                                       "scores": [r[2] for r in rows]})
    return float(official.process_single_model(data)[1])


def test_documented_departures_from_the_official_code():
    """Where the release has no usable answer, evolm's choice (see evolm.eval.rb2_scoring)."""
    # every paired tied prompt has one correct answer: the release averages an empty list (NaN)
    only_single = [("ref:1", 1, [4.0, 2.0]), ("tied:1", 1, [4.0, 1.0])]
    with pytest.warns(RuntimeWarning):
        assert math.isnan(_official_ties(only_single))
    assert rb2_scoring.ties_breakdown([rb2_scoring.ScoredRow(i, "Ties", n, tuple(s)) for i, n, s in only_single]).score == pytest.approx(0.6)
    # a duplicated Ties row: the release overwrites the first row's scores index by index; evolm refuses
    # (tied:1 becomes correct [5, 0] and incorrect [2, 1]: the second row's three scores and the first's fourth)
    duplicated = [("ref:1", 1, [4.0, 2.0]), ("tied:1", 2, [4.0, 3.0, 1.0, 1.0]), ("tied:1", 2, [5.0, 0.0, 2.0])]
    assert _official_ties(duplicated) == pytest.approx(0.3 + 0.01 * math.tanh(-2 / 5 - 1))
    with pytest.raises(InputError, match="appears twice"):
        rb2_scoring.ties_breakdown([rb2_scoring.ScoredRow(i, "Ties", n, tuple(s)) for i, n, s in duplicated])
