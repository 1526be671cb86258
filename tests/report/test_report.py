"""The HTML run report: a tiny run directory in the training loop's format, rendered end to end."""

from __future__ import annotations

import base64
import html
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from evolm.cli import main
from evolm.errors import RunError
from evolm.eval.rubric_stats import RunSamples
from evolm.report.report import load_run, pick_early_late, write_report

Q_MATH = "What is 17 * 24?"
Q_POEM = "Write a haiku about autumn."
EARLY_MATH = {"criteria": [{"criterion": "Accuracy", "weight": 0.5, "scoring_levels": {"1.0": "ok", "0.0": "no"}},
                           {"criterion": "Clarity", "weight": 0.5, "scoring_levels": {"1.0": "ok", "0.0": "no"}}]}
LATE_MATH = {"criteria": [
    {"criterion": "The final answer is equivalent to 408.", "weight": 0.8, "scoring_levels": {"1.0": "408", "0.0": "no"}},
    {"criterion": "Shows the multiplication steps in at most five lines.", "weight": 0.2, "scoring_levels": {}},
]}
POEM = {"criteria": [{"criterion": "Has three lines of 5, 7 and 5 syllables.", "weight": 0.6},
                     {"criterion": "Evokes autumn imagery", "weight": 0.4}]}

# (phase, cycle, role, steps, rewards, reward stds, pair accuracies, validities)
PHASES = [
    (0, 0, "policy", [1, 2, 3], [0.2, 0.3, 0.4], [0.1, 0.1, None], [None] * 3, [0.5, 0.5, 1.0]),
    (1, 0, "rubric", [4, 5, 6], [0.5, 0.6, 0.7], [0.2, 0.2, 0.2], [0.5, None, 0.75], [0.5, 1.0, 1.0]),
    (2, 1, "policy", [7, 8, 9], [0.45, 0.55, 0.65], [0.1, 0.1, 0.1], [None] * 3, [1.0, 1.0, 1.0]),
    (3, 1, "rubric", [10, 11, 12], [0.6, 0.7, 0.8], [0.2, 0.2, 0.2], [0.75, 0.875, 1.0], [1.0, 1.0, 1.0]),
]


def _metric(phase, cycle, role, step, reward, std, acc, valid) -> dict:
    return {"step": step, "role": role, "cycle": cycle, "phase": phase, "reward_mean": reward, "reward_std": std,
            "pair_accuracy": acc, "rubric_validity": valid, "kl": 0.01 * step, "completion_length": 30 + step,
            "seconds": 2.0, "time": 1_700_000_000 + 2 * step, "extra_key": "ignored",
            **({"pair_judgements": 4, "pairs": 1} if role == "rubric" and acc is not None else {})}


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _policy_rows(phase, cycle, step, question, rubric) -> list[dict]:
    return [{"step": step, "role": "policy", "cycle": cycle, "phase": phase, "question": question,
             "completion": f"answer {i}", "reward": 0.5, "rubric": rubric, "score": 0.5} for i in range(2)]


def _rubric_row(phase, cycle, step, question, rubric) -> dict:
    return {"step": step, "role": "rubric", "cycle": cycle, "phase": phase, "question": question,
            "completion": json.dumps(rubric) if rubric else "not json", "reward": 1.0, "rubric": rubric,
            "rubric_valid": 1.0 if rubric else 0.0, "a_pos": "new", "a_neg": "old", "s_pos": 0.8, "s_neg": 0.3}


def build_run(root: Path) -> Path:
    """2 cycles x (policy phase, rubric phase), 3 steps each, a torn last metrics line, samples, eval JSON."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text(
        "model: smollm2-135m-instruct\njudge:\n  model: smollm2-135m-instruct\n  mode: prob\n"
        "schedule:\n  cycles: 2\n  steps_per_phase: 3\nseed: 0\n", encoding="utf-8")
    rows = [_metric(ph, cy, role, s, r, sd, a, v)
            for ph, cy, role, steps, rs, sds, accs, vs in PHASES
            for s, r, sd, a, v in zip(steps, rs, sds, accs, vs, strict=True)]
    _write_jsonl(root / "metrics.jsonl", rows)
    with open(root / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 13, "role": "policy", "cycle": 2, "reward_me')  # the crash tore this line
    s = root / "samples"
    _write_jsonl(s / "phase-000-policy.jsonl", _policy_rows(0, 0, 1, Q_MATH, EARLY_MATH) + _policy_rows(0, 0, 1, Q_POEM, POEM))
    _write_jsonl(s / "phase-001-rubric.jsonl", [_rubric_row(1, 0, 4, Q_MATH, EARLY_MATH), _rubric_row(1, 0, 4, Q_MATH, None)])
    _write_jsonl(s / "phase-002-policy.jsonl", _policy_rows(2, 1, 7, Q_POEM, POEM))
    _write_jsonl(s / "phase-003-rubric.jsonl", [_rubric_row(3, 1, 10, Q_MATH, LATE_MATH)])
    (root / "eval").mkdir()
    (root / "eval" / "rb2-final.json").write_text(json.dumps(
        {"benchmark": "RewardBench 2", "subsets": {"Factuality": 0.3125, "Math": 0.5625}, "overall": 0.4375,
         "counts": {"Factuality": 16, "Math": 16}}), encoding="utf-8")
    (root / "eval" / "pairs-final.json").write_text(json.dumps(
        {"files": {"a.jsonl": {"pairs": 8, "accuracy": 0.625}}, "total": {"pairs": 8, "accuracy": 0.625}}),
        encoding="utf-8")
    return root


def _images(text: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)]


def test_load_run_reads_phases_and_skips_the_torn_line(tmp_path):
    d = load_run(build_run(tmp_path / "run"))
    assert [(p.index, p.role, p.cycle, p.first, p.last) for p in d.phases] == [
        (0, "policy", 0, 1, 3), (1, "rubric", 0, 4, 6), (2, "policy", 1, 7, 9), (3, "rubric", 1, 10, 12)]
    assert d.phases[0].mean("reward_mean") == pytest.approx(0.3)
    assert d.phases[1].mean("pair_accuracy") == pytest.approx(0.625)  # null skipped: (0.5 + 0.75) / 2
    assert math.isnan(d.metrics[2]["reward_std"])  # null -> NaN
    assert any("torn" in n for n in d.notes)
    assert set(d.evals) == {"rb2-final.json", "pairs-final.json"}


@pytest.mark.slow
def test_report_is_one_self_contained_html_file(tmp_path):
    run = build_run(tmp_path / "run")
    before = {p for p in run.rglob("*")}
    out = write_report(run)
    assert out == run / "report.html"
    assert {p for p in run.rglob("*")} - before == {out}  # nothing else written
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "<script" not in text and "<link" not in text and "http://" not in text and "https://" not in text
    images = _images(text)
    assert len(images) >= 4 and all(img.startswith(b"\x89PNG\r\n\x1a\n") for img in images)
    assert text.count("<img") == len(images)  # every image is embedded
    for alt in ("reward curves", "pair accuracy and policy reward", "rubric validity"):
        assert f'alt="{alt}"' in text
    assert "Fewer than 3 phases of each source: no plot" in text  # rubric statistics: 2 phases per source
    # header: steps per role and summed step time (12 steps x 2 s)
    assert "policy steps</td><td class=\"n\">6" in text and "rubric steps</td><td class=\"n\">6" in text
    assert "0:00:24" in text
    assert "steps_per_phase" in text and "smollm2-135m-instruct" in text
    assert "torn" in text



@pytest.mark.slow
def test_report_reads_the_age_window_from_the_run_and_spans_from_the_first_steps_start(tmp_path):
    run = build_run(tmp_path / "run")
    with open(run / "config.yaml", "a", encoding="utf-8") as f:
        f.write("contrast:\n  min_age: 0\n  max_age: 1\n")
    text = write_report(run).read_text(encoding="utf-8")
    assert "0–1 policy steps earlier in this run" in text and "20–100" not in text
    # 12 back-to-back steps of 2 s: the span from the first step's start equals the summed step time (was 22 s)
    span = text[text.index("wall-clock span"):]
    assert span[:span.index("</tr>")].count("0:00:24") == 1

@pytest.mark.slow
def test_report_shows_early_and_late_rubrics_for_the_same_question(tmp_path):
    text = write_report(build_run(tmp_path / "run"), tmp_path / "r.html").read_text(encoding="utf-8")
    section = text[text.index("Example rubrics, early versus late"):text.index("Evaluation results")]
    assert "rubrics from phase 0 and phase 3" in section  # the math question spans the whole run
    assert "What is 17 * 24?" in section
    assert "Accuracy" in section and "The final answer is equivalent to 408." in section
    assert "label-only" in section and "value" in section


def test_rubric_text_from_the_samples_is_escaped(tmp_path, monkeypatch):
    """A rubric is model-written text: the report shows it as text, never as markup that would run."""
    from evolm.report import plots

    for name in ("reward_plot", "pairs_plot", "validity_plot", "rubric_stats_plot"):  # plots are not tested here
        monkeypatch.setattr(plots, name, lambda *a: b"\x89PNG\r\n\x1a\n")
    run = build_run(tmp_path / "run")
    rubric = {"criteria": [{"criterion": "<script>alert(1)</script> & \"more\"", "weight": 1.0}]}
    with open(run / "samples" / "phase-003-rubric.jsonl", "a", encoding="utf-8") as f:  # Q_POEM's late rubric
        f.write(json.dumps(_rubric_row(3, 1, 11, Q_POEM, rubric)) + "\n")
    text = write_report(run).read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &#34;more&#34;" in text and "<script" not in text


@pytest.mark.slow
def test_report_shows_eval_numbers_and_phase_table(tmp_path):
    text = write_report(build_run(tmp_path / "run")).read_text(encoding="utf-8")
    evals = text[text.index("<h2>Evaluation results"):]
    for number in ("0.3125", "0.5625", "0.4375", "0.625", "Factuality", "overall"):
        assert number in evals
    assert "0.625" in text[text.index("Per-phase summary"):text.index("How the rubrics evolve")]


def test_pick_early_late_falls_back_to_first_and_last(tmp_path):
    samples = RunSamples({(0, "policy"): [{"step": 1, "question": "A?", "rubric": EARLY_MATH}],
                          (1, "rubric"): [{"step": 4, "question": "B?", "rubric": LATE_MATH}]})
    pairs, shared = pick_early_late(samples)
    assert not shared and [(early.question, late.question) for early, late in pairs] == [("A?", "B?")]
    assert pick_early_late(RunSamples()) == ([], False)


@pytest.mark.slow
def test_partial_run_one_role_no_samples_nulls(tmp_path):
    run = tmp_path / "partial"
    rows = [_metric(0, 0, "policy", s, r, None, None, None) for s, r in ((1, None), (2, float("nan")), (3, 0.4))]
    rows.append({"step": "x", "role": 3, "reward_mean": "high"})  # garbage types must not crash either
    _write_jsonl(run / "metrics.jsonl", rows)
    text = write_report(run).read_text(encoding="utf-8")
    assert "reward curves: fewer than 3 steps with a value, so a table" in text  # one finite reward of three
    for missing in ("no rubric steps", "no samples", "no config.yaml", "No rubric steps with a pair accuracy yet"):
        assert missing in text


@pytest.mark.slow
def test_a_run_without_evaluation_files_has_nothing_missing(tmp_path):
    """Training writes no eval/*.json: a complete run without them opens with no "What is missing" box."""
    run = build_run(tmp_path / "run")
    for f in (run / "eval").iterdir():
        f.unlink()
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in (run / "metrics.jsonl").read_text(
        encoding="utf-8").splitlines()[:-1]), encoding="utf-8")  # the torn line off: a complete run
    text = write_report(run).read_text(encoding="utf-8")
    assert "What is missing" not in text
    assert "training writes no evaluation files" in text[text.index("<h2>Evaluation results"):]


def test_empty_metrics_file_still_renders(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("", encoding="utf-8")
    text = write_report(tmp_path).read_text(encoding="utf-8")
    assert "holds no readable step yet" in text and "No reward values logged yet" in text


def test_not_a_run_dir_raises(tmp_path):
    with pytest.raises(RunError, match="not a run directory"):
        write_report(tmp_path)


@pytest.mark.slow
def test_cli_report(tmp_path, capsys):
    run = build_run(tmp_path / "run")
    assert main(["report", str(run), "--output", str(tmp_path / "out.html")]) == 0
    assert (tmp_path / "out.html").is_file()
    assert main(["report", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("evolm report: error:") and "not a run directory" in err[-1]


def test_highlighted_settings_exist_in_run_config() -> None:
    """The report's header settings are RunConfig paths: a renamed setting fails here, not silently."""
    from evolm.config import RunConfig, to_dict
    from evolm.report.report import HIGHLIGHTS

    def has(d: dict, path: str) -> bool:
        head, _, rest = path.partition(".")
        return head in d and (not rest or (isinstance(d[head], dict) and has(d[head], rest)))

    cfg = to_dict(RunConfig())
    assert [h for h in HIGHLIGHTS if not has(cfg, h)] == []


def test_report_survives_absurd_values(tmp_path: Path) -> None:
    from evolm.report.report import write_report

    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "role": "policy", "time": 1e20, "seconds": 1e308, "reward_mean": 0.5}\n'
        '{"step": {"a": 1}, "role": "policy", "time": -1e30, "reward_mean": "x"}\n')
    out = write_report(tmp_path)
    assert out.is_file() and "unreadable" in out.read_text(encoding="utf-8")


def _with_eval_lines(run: Path) -> Path:
    """build_run plus held-out evaluation lines at step 0, inside phase 0 (after step 2) and at the end (step 12)."""
    evals = {0: 0.5, 2: 0.6, 12: 0.8}
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    out = []
    for line in lines:
        step = json.loads(line)["step"] if line.endswith("\n") else None
        if step == 1:
            out.append(json.dumps(_eval_line(0, evals[0])) + "\n")
        out.append(line)
        if step in (2, 12):
            out.append(json.dumps(_eval_line(step, evals[step])) + "\n")
    torn = out.pop(-1)  # keep the torn line last
    (run / "metrics.jsonl").write_text("".join(out) + torn, encoding="utf-8")
    return run


def _eval_line(step: int, acc: float) -> dict:
    # reward_mean and phase on an eval line must not reach a reward curve, a phase or a step count
    return {"step": step, "role": "eval", "phase": 0, "reward_mean": 99.0, "heldout_pair_accuracy": acc,
            "heldout_pairs": 10, "heldout_validity": 1.0, "heldout_questions": 4, "heldout_policy_score": 0.5,
            "heldout_policy_score_std": 0.2, "seconds": 30.0}


@pytest.mark.slow
def test_eval_lines_are_not_training_steps(tmp_path, monkeypatch):
    from evolm.report import plots
    from evolm.report.report import summarise

    run = _with_eval_lines(build_run(tmp_path / "run"))
    d = load_run(run)
    assert [(p.index, p.role, p.first, p.last, len(p.rows)) for p in d.phases] == [
        (0, "policy", 1, 3, 3), (1, "rubric", 4, 6, 3), (2, "policy", 7, 9, 3), (3, "rubric", 10, 12, 3)]
    assert [r["step"] for r in d.heldout] == [0, 2, 12] and all(r["role"] != "eval" for r in d.metrics)
    assert [(s["phase"], s["steps"]) for s in summarise(run)] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert summarise(run)[0]["reward"] == pytest.approx(0.3)
    assert summarise(run)[0]["reward_std"] == pytest.approx(0.1) and summarise(run)[1]["reward_std"] == pytest.approx(0.2)
    seen = []
    real = plots.reward_plot
    monkeypatch.setattr(plots, "reward_plot", lambda series, *a: seen.append(series) or real(series, *a))
    text = write_report(run).read_text(encoding="utf-8")
    assert list(seen[0]["policy"].x) == [1, 2, 3, 7, 8, 9] and 99.0 not in seen[0]["policy"].y
    # the header counts training steps only (12 x 2 s), and the evaluations apart (3 x 30 s)
    assert "policy steps</td><td class=\"n\">6" in text and "0:00:24" in text
    assert "held-out evaluations</td><td class=\"n\">3 (at steps 0, 2, 12)" in text and "0:01:30" in text


@pytest.mark.slow
def test_report_shows_held_out_evaluations_with_intervals(tmp_path):
    text = write_report(_with_eval_lines(build_run(tmp_path / "run"))).read_text(encoding="utf-8")
    section = text[text.index("<h2>Held-out evaluation"):text.index("Per-phase summary")]
    assert "0.800 [0.490, 0.943]" in section  # Wilson 8/10 at step 12
    assert "1.000 [0.510, 1.000]" in section  # validity 4/4: Wilson (0.510, 1)
    assert "0.500 [0.133, 0.867]" in section  # 0.5 ± t(3) 3.1824 * s / 2, s = 0.2 * sqrt(4/3) (population std logged)
    for alt in ("held-out judge pair accuracy", "held-out rubric validity", "held-out policy score"):
        assert f'alt="{alt}"' in section
    # a run without eval lines keeps the report it had
    assert "Held-out evaluation" not in write_report(build_run(tmp_path / "plain")).read_text(encoding="utf-8")


@pytest.mark.slow
def test_report_plots_the_criteria_per_step_when_logged(tmp_path):
    run = build_run(tmp_path / "run")
    assert 'alt="criteria per step"' not in write_report(run).read_text(encoding="utf-8")  # none logged: no section
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()[:-1]]
    for r in rows:
        r.update(flat_criteria=0.1 * (r["step"] % 4), criteria_per_rubric=3.0, judge_pass_rate=0.5,
                 criterion_pass_rates={"1": 0.75, "2": 0.25})
    _write_jsonl(run / "metrics.jsonl", rows)
    text = write_report(run).read_text(encoding="utf-8")
    assert 'alt="criteria per step"' in text and "does not discriminate" in text


@pytest.mark.slow
def test_report_counts_the_judge_requests_that_failed(tmp_path):
    run = build_run(tmp_path / "run")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()[:-1]]
    for r in rows:
        r.update(judge_requests=10, judge_failures=r["step"] % 2, judge_failure_share=(r["step"] % 2) / 10)
    _write_jsonl(run / "metrics.jsonl", rows)
    text = write_report(run).read_text(encoding="utf-8")
    assert "judge failures (missing scores)" in text
    total = re.search(r"judge failures \(missing scores\)</td><td[^>]*>([^<]+)<", text)
    assert total is not None and float(total.group(1).replace(",", "")) == 6  # steps 1, 3, ..., 11


def test_a_phase_of_one_step_draws_its_std_as_a_bar_the_longer_phases_as_a_band():
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    from evolm.report import plots

    ax = Figure().add_subplot()
    # phase 0: steps 1-2 (a band between them); phase 1: step 3 alone (nothing to fill: a ± bar)
    plots.band(ax, plots.Series([1, 2, 3], [0.2, 0.3, 0.5], [0.05, 0.05, 0.1], [0, 0, 1]), "#000")
    bars = [seg for c in ax.collections if isinstance(c, LineCollection) for seg in c.get_segments()]
    assert [(x0, round(y0, 6), x1, round(y1, 6)) for (x0, y0), (x1, y1) in bars] == [(3, 0.4, 3, 0.6)]


@pytest.mark.slow
def test_phase_table_shows_the_reward_spread_and_the_pair_accuracys_n(tmp_path):
    """demo.sh says to check the rubric steps' reward spread and the pair accuracy: the page prints both, with n."""
    text = write_report(build_run(tmp_path / "run")).read_text(encoding="utf-8")
    table = text[text.index("Per-phase summary"):text.index("How the rubrics evolve")]
    assert "reward spread (std)" in table and "pair accuracy&#39;s n" in table
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
    # phase 1 (rubric): std 0.2 on every step; pair accuracy (0.5 + 0.75) / 2 over 2 steps that logged 4 judgements
    # of 1 pair each (the step with no accuracy logged no n)
    assert cells[1][6:9] == ["0.2", "0.625", "8 judgements of 2 pairs"]
    assert cells[0][6:9] == ["0.1", "–", "–"]  # a policy phase: its spread, no pairs
    pairs = text[text.index("Judge accuracy on temporal pairs"):text.index("<h2>Rubric validity")]
    # the run's pair accuracy over its 5 rubric steps with a value: (0.5 + 0.75 + 0.75 + 0.875 + 1.0) / 5
    assert "pair accuracy over the run: 0.775, n = 20 judgements of 5 pairs in 5 rubric steps" in pairs


def test_fewer_than_three_steps_show_a_table_instead_of_a_plot(tmp_path):
    """The demo's run (one policy and one rubric step): a plot of one point per curve shows nothing but odd ticks,
    so each section shows its values in a small table instead, the reward's std included."""
    run = tmp_path / "demo"
    _write_jsonl(run / "metrics.jsonl", [
        {**_metric(0, 0, "policy", 1, 0.258, 0.043, None, 1.0), "judge_prompt_tokens": 900, "judge_requests": 12},
        {**_metric(1, 0, "rubric", 2, 0.293, 0.007, 0.25, 1.0), "judge_prompt_tokens": 1800, "judge_requests": 24}])
    text = write_report(run).read_text(encoding="utf-8")
    assert "<img" not in text
    for alt in ("reward curves", "pair accuracy and policy reward", "rubric validity", "judge cost per step"):
        assert f"{alt}: fewer than 3 steps with a value, so a table instead of a plot" in text, alt
    rewards = text[text.index("<h2>Rewards"):text.index("<h2>Judge accuracy")]
    rows = [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r) for r in re.findall(r"<tr>(.*?)</tr>", rewards, re.S)]
    assert rows == [["step", "policy reward (mean)", "policy reward std", "rubric reward (mean)", "rubric reward std"],
                    ["1", "0.258", "0.043", "–", "–"], ["2", "–", "–", "0.293", "0.007"]]


# ----------------------------------------------------------------------------- the page in a real browser

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# headless, sandbox off (CI runs as root), and nothing that reaches the network or a profile
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync")
# appended to a copy of the page: what overflows the 1,280 px window (the page's width, and each element whose box
# ends right of the window or of the body's column), written into the DOM that --dump-dom prints
_MEASURE = """<script>
const cw = document.documentElement.clientWidth, col = document.body.getBoundingClientRect().right;
const wide = [...document.body.querySelectorAll('*')].filter(e => e.tagName !== 'SCRIPT').map(e => [e, e.getBoundingClientRect()])
  .filter(([e, r]) => r.right > Math.min(cw, col) + 1)
  .map(([e, r]) => e.tagName + ' ' + Math.round(r.right) + 'px: ' + (e.textContent || '').trim().slice(0, 60));
document.body.setAttribute('data-layout', JSON.stringify({scrollWidth: document.documentElement.scrollWidth,
  clientWidth: cw, column: Math.round(col), wide: wide.slice(0, 10)}));
</script>"""


def _browser() -> str:
    found = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if found is None:
        pytest.skip("no Chromium to render the report in (.ci/run installs it: apt-get install chromium)")
    return found


def _layout(browser: str, page: Path, tmp: Path, width: int = 1280) -> dict:
    """The page's layout at ``width`` px in headless Chromium (``_MEASURE``), and a screenshot of it (tmp/page.png)."""
    tmp.mkdir(parents=True, exist_ok=True)
    measured = tmp / "measured.html"
    measured.write_text(page.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    flags = [browser, *BROWSER_FLAGS, f"--window-size={width},1000"]
    dom = subprocess.run([*flags, f"--user-data-dir={tmp / 'profile'}", "--dump-dom", measured.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    subprocess.run([*flags, f"--user-data-dir={tmp / 'profile'}", f"--screenshot={tmp / 'page.png'}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    found = re.search(r'data-layout="([^"]*)"', dom)
    assert found, dom[-2000:]
    return json.loads(html.unescape(found.group(1)))


DEMO_RUBRIC = {"criteria": [  # as SmolLM2-135M writes them under the grammar (3 criteria, levels up to 30 characters)
    {"criterion": "Describes the fur, the size and the eyes of a cat in plain words a child knows.", "weight": 0.3,
     "scoring_levels": {"1.0": "Fur, size and eyes described.", "0.5": "Two of the three described.",
                        "0.0": "None of them is described."}},
    {"criterion": "Stays under 50 words, as the question asks, without a list.", "weight": 0.3,
     "scoring_levels": {"1.0": "Under 50 words, no list.", "0.5": "Slightly over 50 words.", "0.0": "Far longer."}},
    {"criterion": "Mentions how a cat moves and sounds (purring, meowing, jumping).", "weight": 0.4,
     "scoring_levels": {"1.0": "Movement and sound.", "0.5": "One of them.", "0.0": "Neither."}}]}


def build_demo_run(root: Path) -> Path:
    """A run shaped like `bash scripts/demo.sh`'s: configs/demo-cpu.yaml, one policy and one rubric step of one
    question x 4 samples, every column the demo logs, samples with SmolLM2-sized rubrics and answers."""
    q = "Describe a cat to someone who has never seen one, in under 50 words."
    answer = "A cat is a small furry animal with soft fur, pointed ears and bright eyes. " * 6
    cost = {"judge_prompt_tokens": 5313, "judge_generated_tokens": 12, "judge_tokens": 5325, "judge_requests": 12,
            "judge_latency_s": 4.2, "judge_cache_hit_rate": 0.0, "judge_p_yes": 0.31, "judge_pass_rate": 0.0,
            "criteria_per_rubric": 3.0, "flat_criteria": 0.33, "criterion_pass_rates": {"1": 0.0, "2": 0.0, "3": 0.0}}
    _write_jsonl(root / "metrics.jsonl", [
        {**_metric(0, 0, "policy", 1, 0.258, 0.043, None, 1.0), **cost, "missing_rewards": 0.0, "tied_groups": 0.0,
         "length_reward_corr": -0.21, "rubric_copy_share": 0.0, "score_string_share": 0.0, "seconds": 127.0},
        {**_metric(1, 0, "rubric", 2, 0.293, 0.007, 0.25, 1.0), **cost, "missing_rewards": 0.0, "tied_groups": 0.0,
         "seconds": 292.0}])
    (root / "config.yaml").write_text((Path(__file__).resolve().parents[2] / "configs" / "demo-cpu.yaml")
                                      .read_text(encoding="utf-8"), encoding="utf-8")
    criteria = [{"text": c["criterion"], "weight": c["weight"], "value": 0.3} for c in DEMO_RUBRIC["criteria"]]
    _write_jsonl(root / "samples" / "phase-000-policy.jsonl", [
        {"step": 1, "role": "policy", "cycle": 0, "phase": 0, "slot": 0, "question": q, "completion": answer,
         "reward": 0.25, "score": 0.25, "rubric": DEMO_RUBRIC, "rubric_text": json.dumps(DEMO_RUBRIC),
         "rubric_valid": 1.0, "criteria": criteria} for _ in range(4)])
    _write_jsonl(root / "samples" / "phase-001-rubric.jsonl", [
        {"step": 2, "role": "rubric", "cycle": 0, "phase": 1, "slot": 0, "question": q,
         "completion": json.dumps(DEMO_RUBRIC), "reward": 0.29, "rubric": DEMO_RUBRIC, "rubric_valid": 1.0,
         "s_pos": 0.31, "s_neg": 0.30, "a_pos": answer, "a_neg": answer[:200], "pair_source": "temporal",
         "criteria_pos": criteria, "criteria_neg": criteria} for _ in range(4)])
    return root


def test_the_demo_report_fits_a_1280px_window_in_a_real_browser(tmp_path):
    """The report of a run shaped like the demo's (and of a longer run), opened in headless Chromium at 1,280 px:
    nothing runs past the window or the page's column (the rubric-statistics table did), and a screenshot of each is
    taken."""
    browser = _browser()
    too_wide = tmp_path / "too-wide.html"  # the check itself can fail: a 2,000 px table is caught
    too_wide.write_text("<!DOCTYPE html><html><body><table style='width:2000px'><tr><td>x</td></tr></table></body>"
                        "</html>", encoding="utf-8")
    caught = _layout(browser, too_wide, tmp_path / "check")
    assert caught["scrollWidth"] > 1280 and caught["wide"]
    for name, build in (("demo", build_demo_run), ("two-cycles", build_run)):
        page = write_report(build(tmp_path / name))
        layout = _layout(browser, page, tmp_path / f"{name}-page")
        assert layout["clientWidth"] <= 1280 and layout["scrollWidth"] <= layout["clientWidth"], (name, layout)
        assert layout["wide"] == [], (name, layout)
        shot = (tmp_path / f"{name}-page" / "page.png").read_bytes()
        assert shot.startswith(b"\x89PNG\r\n\x1a\n") and int.from_bytes(shot[16:20], "big") == 1280  # its width
    demo = (tmp_path / "demo" / "report.html").read_text(encoding="utf-8")
    assert "What is missing" not in demo and "<img" not in demo  # two steps: tables, not one-point plots
    table = demo[demo.index("Per-phase summary"):demo.index("How the rubrics evolve")]
    assert "0.007" in table and "4 judgements of 1 pair" in table  # what demo.sh says to check


def test_cells_durations_and_config_paths_read_as_the_page_shows_them() -> None:
    import doctest

    from evolm.report import page

    assert doctest.testmod(page).failed == 0
