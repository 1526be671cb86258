"""`evolm report RUN_A RUN_B ...`: several runs of different regimes overlaid on one page, final values with CIs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evolm.cli import main
from evolm.errors import InputError, RunError
from evolm.report import plots
from evolm.report.compare import default_labels, last_phase_estimate, load_compare_run, write_comparison
from evolm.runs.records import StepRecord


def _eval(step: int, acc: float | None, pairs: int | None = 10, validity: float | None = 0.9, questions: int = 20,
          score: float | None = 0.5, score_std: float | None = 0.2) -> StepRecord:
    # an eval line also carries a reward_mean here: it must never reach a training curve or mean
    return StepRecord(step=step, role="eval", reward_mean=99.0, heldout_pair_accuracy=acc, heldout_pairs=pairs,
                      heldout_validity=validity, heldout_questions=questions, heldout_policy_score=score,
                      heldout_policy_score_std=score_std, seconds=4.0)


def _step(step: int, role: str, phase: int, reward: float, acc: float | None = None) -> StepRecord:
    return StepRecord(step=step, role=role, cycle=phase // 2, phase=phase, reward_mean=reward, reward_std=0.1,
                      pair_accuracy=acc, rubric_validity=0.9, seconds=2.0)


def _write(run: Path, records: list[StepRecord], regime: str | None = None) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records), encoding="utf-8")
    if regime:
        (run / "config.yaml").write_text(f"schedule:\n  regime: {regime}\n  steps_per_phase: 3\nseed: 0\n",
                                         encoding="utf-8")
    return run


def coevolve_run(root: Path) -> Path:
    """policy 1-3, rubric 4-6, policy 7-9, rubric 10-12; held-out at 0, 6 (mid-run) and 12: accuracy 0.5 -> 0.8."""
    recs = [_eval(0, 0.5)]
    recs += [_step(s, "policy", 0, 0.1 * s) for s in (1, 2, 3)]
    recs += [_step(s, "rubric", 1, 0.5, acc=0.6) for s in (4, 5, 6)]
    recs.append(_eval(6, 0.6))
    recs += [_step(s, "policy", 2, r) for s, r in ((7, 0.5), (8, 0.6), (9, 0.7))]
    recs += [_step(s, "rubric", 3, 0.6, acc=a) for s, a in ((10, 0.7), (11, 0.8), (12, 0.9))]
    recs.append(_eval(12, 0.8, score=0.6))
    return _write(root / "coevolve", recs, "coevolve")


def frozen_run(root: Path) -> Path:
    """frozen_rubric: policy steps only, two phases; held-out without pair accuracy (no writer is trained)."""
    recs = [_eval(0, None, pairs=None)]
    recs += [_step(s, "policy", 0, 0.1) for s in (1, 2, 3)]
    recs += [_step(s, "policy", 1, r) for s, r in ((4, 0.2), (5, 0.4))]
    recs.append(_eval(5, None, pairs=None, score=0.55))
    return _write(root / "frozen", recs, "frozen_rubric")


def sequential_run(root: Path) -> Path:
    """A sequential top directory: stage 1 trains the writer (3 steps), stage 2 the policy (3 steps)."""
    top = root / "seq"
    _write(top / "stage1-writer", [_eval(0, 0.5)] + [_step(s, "rubric", 0, 0.4, acc=0.7) for s in (1, 2, 3)]
           + [_eval(3, 0.7)])
    _write(top / "stage2-policy", [_eval(0, 0.7)] + [_step(s, "policy", 0, 0.3 + 0.1 * s) for s in (1, 2, 3)]
           + [_eval(3, 0.7, score=0.65)])
    (top / "config.yaml").write_text("schedule:\n  regime: sequential\n", encoding="utf-8")
    return top


def _row(text: str, first_cell: str, label: str) -> str:
    """The text of the table row starting with ``first_cell`` for run ``label`` (tags stripped)."""
    for row in re.findall(r"<tr>(.*?)</tr>", text, flags=re.S):
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        if cells[:2] == [first_cell, label]:
            return " | ".join(cells)
    raise AssertionError(f"no row {first_cell!r} for {label!r}")


@pytest.mark.slow
def test_comparison_page_labels_and_final_values(tmp_path):
    runs = [coevolve_run(tmp_path), frozen_run(tmp_path), sequential_run(tmp_path)]
    out = write_comparison(runs, tmp_path / "cmp.html")
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text and "https://" not in text
    for label in ("coevolve", "frozen", "seq"):
        assert f"{label}</td>" in text
    # held-out pair accuracy, coevolve: 5/10 at step 0 -> 8/10 at step 12; Wilson 8/10 = (0.490, 0.943);
    # change 0.3 with Newcombe's interval from Wilson 5/10 = (0.2366, 0.7634):
    # 0.3 - sqrt((0.8 - 0.4902)^2 + (0.7634 - 0.5)^2) = -0.107
    # 0.3 + sqrt((0.9433 - 0.8)^2 + (0.5 - 0.2366)^2) = 0.600
    assert _row(text, "held-out judge pair accuracy", "coevolve") == (
        "held-out judge pair accuracy | coevolve | 0 | 0.500 [0.237, 0.763] | 10 | 12 | 0.800 [0.490, 0.943] | 10 | "
        "0.300 [-0.107, 0.600]")
    assert _row(text, "held-out judge pair accuracy", "frozen").endswith("frozen" + " | —" * 7)
    # policy score 0.6, population std 0.2 over n = 20: sample s = 0.2 * sqrt(20/19) = 0.2052,
    # 0.6 ± t(19) 2.093 * 0.2052 / sqrt(20) = 0.6 ± 0.0960; change 0.1 ± t(38) 2.0244 * sqrt(2 * 0.2052^2 / 20)
    assert _row(text, "held-out policy score", "coevolve").endswith(
        "| 12 | 0.600 [0.504, 0.696] | 20 | 0.100 [-0.031, 0.231]")
    # sequential: first = stage 1's step 0, last = stage 2's end, shifted after stage 1's 3 steps
    assert _row(text, "held-out judge pair accuracy", "seq").startswith(
        "held-out judge pair accuracy | seq | 0 | 0.500 [0.237, 0.763] | 10 | 6 | 0.700 [0.397, 0.892]")
    # training: last policy phase of coevolve = steps 7-9 (rewards 0.5, 0.6, 0.7): 0.6 ± t(2) 4.3027 * 0.1 / sqrt(3)
    assert _row(text, "policy reward", "coevolve") == (
        "policy reward | coevolve | 2 (steps 7–9) | 3 | 0.600 [0.352, 0.848]")
    # frozen: last phase = steps 4-5 (0.2, 0.4): 0.3 ± t(1) 12.7062 * 0.1414 / sqrt(2) = 0.3 ± 1.2706
    assert _row(text, "policy reward", "frozen") == (
        "policy reward | frozen | 1 (steps 4–5) | 2 | 0.300 [-0.971, 1.571]")
    assert _row(text, "rubric reward", "frozen") == "rubric reward | frozen | — | — | —"  # a regime without it
    assert _row(text, "policy reward", "seq") == "policy reward | seq | 1 (steps 4–6) | 3 | 0.500 [0.252, 0.748]"
    # judge pair accuracy on temporal pairs, last rubric phase (0.7, 0.8, 0.9): 0.8 ± 0.248 (a t-interval over 3 steps
    # is not clipped to [0, 1]: it says how little 3 steps pin the mean down)
    assert _row(text, "judge pair accuracy (temporal pairs)", "coevolve").endswith("3 | 0.800 [0.552, 1.048]")
    for alt in ("held-out judge pair accuracy", "held-out policy score", "Policy reward (mean per policy step)",
                "Judge accuracy on temporal pairs (rubric steps)"):
        assert f'alt="{alt}"' in text
    assert "approximate, unpaired" in text
    assert "Not logged by: frozen" in text  # rubric curves: frozen_rubric has no rubric steps


@pytest.mark.slow
def test_eval_lines_never_enter_training_curves_or_means(tmp_path, monkeypatch):
    seen: list[plots.RunCurve] = []

    def record(curves, *args):
        seen.extend(curves)
        return b"\x89PNG\r\n\x1a\n"

    monkeypatch.setattr(plots, "overlay_plot", record)
    write_comparison([coevolve_run(tmp_path), frozen_run(tmp_path)], tmp_path / "cmp.html")
    assert seen
    for c in seen:
        assert 0 not in c.series.x and 99.0 not in c.series.y  # eval lines sit at step 0 and carry reward 99
    policy = [c for c in seen if c.label == "coevolve" and 7 in c.series.x][0]
    assert list(policy.series.x) == [1, 2, 3, 7, 8, 9]
    run = load_compare_run(tmp_path / "coevolve", "c")
    assert [p.role for p in run.phases] == ["policy", "rubric", "policy", "rubric"]  # the step-6 eval splits nothing
    assert [r["step"] for r in run.heldout] == [0, 6, 12]
    _, est = last_phase_estimate(run, "rubric", "reward_mean")
    assert est.value == pytest.approx(0.6) and est.n == 3


def test_sequential_top_dir_reads_both_stages_in_a_row(tmp_path):
    run = load_compare_run(sequential_run(tmp_path), "seq")
    assert run.stages == ("stage1-writer", "stage2-policy")
    assert [(r["step"], r["role"]) for r in run.rows] == [(1, "rubric"), (2, "rubric"), (3, "rubric"),
                                                         (4, "policy"), (5, "policy"), (6, "policy")]
    assert [r["step"] for r in run.heldout] == [0, 3, 3, 6]
    assert [(p.index, p.role) for p in run.phases] == [(0, "rubric"), (1, "policy")]
    only_stage1 = tmp_path / "seq2"
    _write(only_stage1 / "stage1-writer", [_step(1, "rubric", 0, 0.4)])
    assert any("only stage1-writer shown" in n for n in load_compare_run(only_stage1, "s").notes)


@pytest.mark.slow
def test_missing_metrics_absurd_values_and_torn_lines_are_noted_not_fatal(tmp_path):
    a = coevolve_run(tmp_path)
    b = _write(tmp_path / "odd", [_eval(0, 1.5, pairs=0), _step(1, "policy", 0, 1e300)])  # no config either
    with open(b / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 2, "role": "pol')
    text = write_comparison([a, b], tmp_path / "cmp.html").read_text(encoding="utf-8")
    assert "torn" in text and "out-of-range value(s) read as missing" in text and "no config.yaml" in text
    assert _row(text, "held-out judge pair accuracy", "odd").endswith("odd | — | — | — | — | — | — | —")
    assert _row(text, "policy reward", "odd") == "policy reward | odd | 0 (steps 1–1) | — | —"


@pytest.mark.slow
def test_labels_are_escaped_and_default_labels_distinct(tmp_path):
    a, b = coevolve_run(tmp_path), frozen_run(tmp_path)
    (a / "config.yaml").write_text("model:\n  name: <img src=x onerror=alert(1)>\n", encoding="utf-8")
    text = write_comparison([a, b], tmp_path / "cmp.html", labels=["<b>A&B</b>", "$x_1$"]).read_text(encoding="utf-8")
    assert "&lt;b&gt;A&amp;B&lt;/b&gt;" in text and "<b>A&B</b>" not in text
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert default_labels([tmp_path / "x" / "run", tmp_path / "y" / "run", tmp_path / "y" / "run"]) == [
        "x/run", "y/run", "y/run (2)"]
    with pytest.raises(InputError, match="label"):
        write_comparison([a, b], tmp_path / "cmp.html", labels=["only one"])


def test_output_that_is_an_input_is_refused(tmp_path, capsys):
    a, b = coevolve_run(tmp_path), sequential_run(tmp_path)
    before = (a / "metrics.jsonl").read_bytes()
    with pytest.raises(InputError, match="also an input"):
        write_comparison([a, b], a / "metrics.jsonl")
    assert main(["report", str(a), str(b), "--output", str(b / "stage2-policy" / "metrics.jsonl")]) == 2
    assert (a / "metrics.jsonl").read_bytes() == before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evolm report: error:") and "also an input" in err[0]


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "no such run directory"),
    (lambda p: p.mkdir(), "not a run directory"),
    (lambda p: (p.mkdir(), (p / "metrics.jsonl").write_text("")), "holds no readable line"),
    (lambda p: (p.mkdir(), (p / "metrics.jsonl").write_text('{"step": 1, "ro')), "holds no readable line"),
])
def test_cli_bad_run_is_one_error_line(tmp_path, capsys, make, message):
    bad = tmp_path / "bad"
    make(bad)
    assert main(["report", str(coevolve_run(tmp_path)), str(bad), "--output", str(tmp_path / "c.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evolm report: error:") and message in err[0]
    assert str(bad) in err[0] and not (tmp_path / "c.html").exists()


@pytest.mark.slow
def test_cli_default_output_and_labels(tmp_path, capsys, monkeypatch):
    a, b = coevolve_run(tmp_path), frozen_run(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["report", str(a), str(b), "--labels", "co, fr"]) == 0
    text = (work / "comparison.html").read_text(encoding="utf-8")
    assert "co</td>" in text and "fr</td>" in text
    assert main(["report", str(a), str(b), "--labels", "co"]) == 2
    assert main(["report", str(a), "--labels", "co"]) == 2  # one run: the single-run report has no labels
    err = capsys.readouterr().err.strip().splitlines()
    assert "1 label(s) for 2 run(s)" in err[-2] and "two or more run directories" in err[-1]


def test_single_run_report_of_a_sequential_top_dir_points_at_its_stages(tmp_path):
    from evolm.report.report import write_report

    with pytest.raises(RunError, match="sequential run's top directory"):
        write_report(sequential_run(tmp_path))
