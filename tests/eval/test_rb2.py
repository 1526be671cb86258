"""RewardBench 2: official scoring on hand-computed values, data loading, the runner, and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from rb2_fakes import RUBRIC, FakeBackend

from evolm.cli import main
from evolm.errors import InputError
from evolm.eval import rb2, rb2_scoring
from evolm.eval.rb2_scoring import ScoredRow, prompt_stats, row_credit, score_rows, ties_breakdown
from evolm.eval.rubric_source import read_rubric_table
from evolm.judge.judge import Judge

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RB2_SMALL = FIXTURES / "rb2_small.jsonl"
RB2_SCORES = FIXTURES / "rb2_scores.jsonl"


def ties(*rows: tuple[str, int, list]) -> list[ScoredRow]:
    return [ScoredRow(i, "Ties", n, tuple(s)) for i, n, s in rows]


# ----------------------------------------------------------------------------- non-Ties rows


def test_row_credit_is_one_over_k_when_the_chosen_ties_at_the_top():
    assert row_credit([0.9, 0.1, 0.2, 0.3]) == 1.0
    assert row_credit([0.9, 0.9, 0.2, 0.3]) == 0.5
    assert row_credit([0.9, 0.9, 0.9, 0.3]) == pytest.approx(1 / 3)
    assert row_credit([0.2, 0.9, 0.1, 0.1]) == 0.0  # a rejected answer on top: no credit


def test_row_credit_all_equal_scores_share_the_credit():
    assert row_credit([0.5, 0.5, 0.5, 0.5]) == 0.25


def test_row_credit_missing_scores_rank_below_every_present_score():
    assert row_credit([None, 0.1, 0.2, 0.3]) == 0.0  # missing chosen: 0 even though it might have won
    assert row_credit([None, None, None, None]) == 0.0  # all missing: 0, not 1/4
    assert row_credit([0.1, None, None, None]) == 1.0  # present beats missing
    assert row_credit([0.4, None, 0.4, None]) == 0.5  # tie among the present, missing below
    assert row_credit([float("nan"), 0.1, 0.2, 0.3]) == 0.0  # NaN is missing too


def test_only_the_first_completion_counts_as_chosen_outside_ties():
    # the official reroll_and_score_dataset looks at scores[0] only
    assert score_rows([ScoredRow("x", "Math", 1, (0.3, 0.9, 0.1, 0.1))]).subsets == {"Math": 0.0}


# ----------------------------------------------------------------------------- Ties


def test_prompt_stats():
    s = prompt_stats([8, 7, 5, 2], 2)
    assert (s.accurate, s.diff_corr, s.ci) == (True, 1.0, 2.0)
    s = prompt_stats([3, 1, 2], 2)  # worst correct 1 < best incorrect 2
    assert (s.accurate, s.diff_corr, s.ci) == (False, 2.0, -1.0)


REF_TIED = [
    ("ref:1", 1, [9, 5, 3]),  # ci_ref = 9 - 5 = 4, accurate
    ("tied:1", 2, [8, 7, 5, 2]),  # diff = 8 - 7 = 1, ci = 7 - 5 = 2, accurate
    ("ref:2", 1, [4, 6]),  # ci_ref = 4 - 6 = -2, not accurate
    ("tied:2", 2, [9, 5, 4]),  # diff = 9 - 5 = 4, ci = 5 - 4 = 1, accurate
]
# tied accuracy 1, ref accuracy 1/2
# preferred:      pid 1: 2 > 1 yes; pid 2: 1 > 4 no                        -> 1/2
# preferred hard: pid 1: min(4, 2) = 2 > 1 yes; pid 2: min(-2, 1) = -2 > 4 no -> 1/2
# margin: pid 1 tanh(2/1 - 1) = tanh(1); pid 2 tanh(-2/4 - 1) = tanh(-1.5)
MARGIN = (math.tanh(1) + math.tanh(-1.5)) / 2  # = -0.0717770488...
REF_TIED_SCORE = 0.3 * 1 + 0.3 * 0.5 + 0.2 * 0.5 + 0.2 * 0.5 + 0.01 * MARGIN  # = 0.649282229511554


def test_ties_formula_with_ref_and_tied_pairs():
    b = ties_breakdown(ties(*REF_TIED))
    assert (b.tied_accuracy, b.ref_accuracy) == (1.0, 0.5)
    assert (b.correctness_preferred, b.correctness_preferred_hard) == (0.5, 0.5)
    assert b.margin == pytest.approx(-0.07177704884455075)
    assert (b.n_tied, b.n_ref, b.n_paired) == (2, 2, 2)
    assert b.score == pytest.approx(REF_TIED_SCORE) and b.score == pytest.approx(0.649282229511554)


def test_row_order_does_not_matter_for_ties():
    assert ties_breakdown(ties(*reversed(REF_TIED))).score == pytest.approx(REF_TIED_SCORE)


def test_tied_prompt_without_its_ref_counts_only_in_tied_accuracy():
    # tied:3 has no ref:3. It is inaccurate (worst correct 1 < best incorrect 2), so tied accuracy
    # drops to 2/3; the paired terms stay over pids 1 and 2 only:
    # 0.3 * 2/3 + 0.3 * 1/2 + 0.2 * 1/2 + 0.2 * 1/2 + 0.01 * MARGIN = 0.5492822295115541
    b = ties_breakdown(ties(*REF_TIED, ("tied:3", 2, [3, 1, 2])))
    assert (b.n_tied, b.n_ref, b.n_paired) == (3, 2, 2)
    assert b.tied_accuracy == pytest.approx(2 / 3)
    assert (b.correctness_preferred, b.correctness_preferred_hard) == (0.5, 0.5)
    assert b.score == pytest.approx(0.5492822295115541)


def test_ref_prompt_without_its_tied_counts_only_in_ref_accuracy():
    # ref:4 accurate: ref accuracy 2/3, the rest unchanged:
    # 0.3 + 0.3 * 2/3 + 0.1 + 0.1 + 0.01 * MARGIN = 0.699282229511554
    b = ties_breakdown(ties(*REF_TIED, ("ref:4", 1, [5, 1])))
    assert b.ref_accuracy == pytest.approx(2 / 3) and b.n_paired == 2
    assert b.score == pytest.approx(0.699282229511554)


def test_no_paired_prompt_at_all_gives_zero_paired_terms():
    # accurate tied prompt, no ref anywhere: 0.3 * 1 + 0.3 * 0 (no ref prompts) + 0 + 0 + 0
    b = ties_breakdown(ties(("tied:1", 2, [8, 7, 5])))
    assert b.n_paired == 0 and b.score == pytest.approx(0.3)


def test_zero_spread_counts_in_preferred_but_not_in_the_margin_term():
    # tied:5 diff = 3 - 3 = 0, ci = 2; ref:5 ci = 1. preferred 2 > 0 and hard min(1, 2) > 0 hold;
    # the official release averages the margin term over diff_corr > 0 only: none here, so 0.
    b = ties_breakdown(ties(("ref:5", 1, [2, 1]), ("tied:5", 2, [3, 3, 1])))
    assert (b.n_paired, b.n_spread, b.n_margin) == (1, 1, 0)
    assert b.margin == 0.0 and b.score == pytest.approx(1.0)
    # with a losing ref: hard min(-1, 2) > 0 fails; 0.3 (tied accurate) + 0.2 (preferred)
    b = ties_breakdown(ties(("ref:5", 1, [1, 2]), ("tied:5", 2, [3, 3, 1])))
    assert b.margin == 0.0 and b.score == pytest.approx(0.5)
    # everything equal: nothing accurate, 0 > 0 fails
    b = ties_breakdown(ties(("ref:5", 1, [1, 1]), ("tied:5", 2, [1, 1, 1])))
    assert b.score == 0.0
    # next to a prompt with a spread, the margin term is that prompt's alone: tanh(min(4, 2) / 1 - 1) = tanh(1)
    b = ties_breakdown(ties(("ref:5", 1, [2, 1]), ("tied:5", 2, [3, 3, 1]), *REF_TIED[:2]))
    assert (b.n_spread, b.n_margin) == (2, 1)
    assert b.margin == pytest.approx(math.tanh(1)) and b.score == pytest.approx(1.0 + 0.01 * math.tanh(1))


def test_tied_prompt_with_one_correct_answer_is_left_out_of_the_paired_terms():
    assert prompt_stats([4, 2, 1], 1).diff_corr is None
    # tied:7 has one correct answer: it counts in tied accuracy (accurate), not in preferred/hard/margin,
    # which stay those of REF_TIED (1/2, 1/2, MARGIN over pids 1 and 2)
    b = ties_breakdown(ties(*REF_TIED, ("ref:7", 1, [1, 5]), ("tied:7", 1, [4, 1])))
    assert (b.n_paired, b.n_spread, b.n_margin) == (3, 2, 2)
    assert (b.tied_accuracy, b.ref_accuracy) == (1.0, pytest.approx(1 / 3))
    assert (b.correctness_preferred, b.correctness_preferred_hard) == (0.5, 0.5)
    assert b.margin == pytest.approx(MARGIN)
    assert b.score == pytest.approx(0.3 + 0.1 + 0.1 + 0.1 + 0.01 * MARGIN)


def test_only_single_correct_tied_prompts_give_zero_paired_terms():
    # the official mean of an empty list is NaN; evolm reports 0 for those terms
    b = ties_breakdown(ties(("ref:1", 1, [4, 2]), ("tied:1", 1, [4, 1])))
    assert (b.n_paired, b.n_spread) == (1, 0)
    assert b.score == pytest.approx(0.6)


def test_duplicate_ties_ids_are_an_input_error():
    with pytest.raises(InputError, match="appears twice"):
        ties_breakdown(ties(*REF_TIED, ("tied:01", 2, [1, 1, 0])))  # "01" is prompt 1, as officially


def test_missing_scores_in_ties():
    # a missing incorrect score ranks below the correct ones: still accurate (ci = +inf)
    assert prompt_stats([5, 4, None], 2).accurate
    # a missing correct score makes the prompt inaccurate
    assert not prompt_stats([5, None, 1], 2).accurate
    # a prompt with every score missing contributes 0 everywhere: ref ci and tied margins are NaN
    b = ties_breakdown(ties(("ref:1", 1, [None, None]), ("tied:1", 2, [None, None, None])))
    assert b.score == 0.0
    # tied:1 scored, ref:1 all missing: tied accurate (0.3), preferred (2 > 1: 0.2); hard (NaN > 1) fails and
    # the margin term's NaN ratio counts 0
    b = ties_breakdown(ties(("ref:1", 1, [None, None]), ("tied:1", 2, [8, 7, 5])))
    assert b.score == pytest.approx(0.3 + 0.2)


def test_bad_ties_id_is_an_input_error():
    with pytest.raises(InputError, match="ref:<prompt id>"):
        ties_breakdown(ties(("17", 1, [1, 0])))


# ----------------------------------------------------------------------------- subsets and overall


def test_score_rows_subsets_overall_and_missing_count():
    rows = [r for r in rb2.read_scores(RB2_SCORES)]
    result = score_rows(rows)
    # Math: a -> 1/2 (two-way tie at the top), b -> 0 (missing chosen): 1/4
    # Safety: c -> 1 (missing rejected rank below), d -> 0 (all missing): 1/2
    # Ties: REF_TIED_SCORE; overall over the three present subsets
    assert result.subsets == pytest.approx({"Math": 0.25, "Safety": 0.5, "Ties": REF_TIED_SCORE})
    assert result.overall == pytest.approx((0.25 + 0.5 + 0.649282229511554) / 3)
    assert result.counts == {"Math": 2, "Safety": 2, "Ties": 4}
    assert result.missing_scores == 1 + 2 + 4
    assert not result.complete
    table = rb2_scoring.format_table(result)
    assert "Ties" in table and "64.9" in table and "not all six" in table


def test_overall_is_the_plain_mean_of_six_subsets():
    rows = [ScoredRow(str(i), name, 1, (1.0, 0.0) if i % 2 == 0 else (0.0, 1.0)) for i, name in enumerate(rb2_scoring.SUBSETS[:5])]
    rows += ties(("ref:1", 1, [1, 0]), ("tied:1", 2, [1, 0.9, 0]))  # 1 + 0.01 * tanh(0.9 / 0.1 - 1)
    result = score_rows(rows)
    assert result.complete and list(result.subsets) == list(rb2_scoring.SUBSETS)
    assert result.overall == pytest.approx((1 + 0 + 1 + 0 + 1 + 1 + 0.01 * math.tanh(8)) / 6)


# ----------------------------------------------------------------------------- data


def test_load_jsonl_fixture_and_select():
    rows = rb2.load_rb2(str(RB2_SMALL))
    assert len(rows) == 10 and rows[0].completions[0].startswith("GOOD")
    assert [r.subset for r in rows].count("Ties") == 4
    limited = rb2.load_rb2(str(RB2_SMALL), limit=1)
    # one row per non-Ties subset, and for Ties the first prompt id with both its rows
    assert [r.id for r in limited] == ["f1", "p1", "m1", "s1", "fo1", "ref:1", "tied:1"]
    assert [r.id for r in rb2.load_rb2(str(RB2_SMALL), subsets=["math", "TIES"])] == ["m1", "ref:1", "tied:1", "ref:2", "tied:2"]
    with pytest.raises(InputError, match="unknown RewardBench 2 subset 'Chat'"):
        rb2.load_rb2(str(RB2_SMALL), subsets=["Chat"])


def test_unknown_subsets_are_one_line_input_errors(tmp_path, capsys):
    known = "known: Factuality, Precise IF, Math, Safety, Focus, Ties"
    # --subsets naming a seventh subset
    assert main(["eval", "rb2", "--from-scores", str(RB2_SCORES), "--subsets", "Math,Chat"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown RewardBench 2 subset 'Chat'" in err and known in err and "\n" not in err
    # a known subset without rows is no silent empty result either
    assert main(["eval", "rb2", "--from-scores", str(RB2_SCORES), "--subsets", "Focus"]) == 2
    assert "no rows of subset(s) Focus (present: Math, Safety, Ties)" in capsys.readouterr().err
    # a score file with a row of a seventh subset: an error, not a subset averaged into the overall
    path = tmp_path / "scores.jsonl"
    path.write_text(RB2_SCORES.read_text() + json.dumps({"id": "z", "subset": "Chat", "num_correct": 1, "scores": [1, 0]}) + "\n")
    assert main(["eval", "rb2", "--from-scores", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "row 9 (id 'z')" in err and "unknown RewardBench 2 subset 'Chat'" in err and known in err and "\n" not in err
    # the same in the data, before any model is loaded
    data = tmp_path / "rb2.jsonl"
    data.write_text(json.dumps({"id": "1", "prompt": "p", "chosen": ["a"], "rejected": ["b"], "subset": "Chat"}) + "\n")
    with pytest.raises(InputError, match="row 1 .*unknown RewardBench 2 subset 'Chat'"):
        rb2.load_rb2(str(data))
    with pytest.raises(InputError, match="unknown RewardBench 2 subset 'Chat'"):
        score_rows([ScoredRow("x", "Chat", 1, (1.0, 0.0))])


def test_subset_names_in_any_case_take_the_official_spelling(tmp_path):
    path = tmp_path / "scores.jsonl"
    path.write_text(RB2_SCORES.read_text().replace('"Math"', '"math"').replace('"Ties"', '"TIES"'))
    rows = rb2.read_scores(path)
    assert {r.subset for r in rows} == {"Math", "Safety", "Ties"}
    assert score_rows(rows).subsets == pytest.approx({"Math": 0.25, "Safety": 0.5, "Ties": REF_TIED_SCORE})


def test_load_parquet_and_json_list(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [json.loads(line) for line in RB2_SMALL.read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "test.parquet")
    (tmp_path / "rb2.json").write_text(json.dumps(records))
    expected = rb2.load_rb2(str(RB2_SMALL))
    assert rb2.load_rb2(str(tmp_path / "test.parquet")) == expected
    assert rb2.load_rb2(str(tmp_path / "rb2.json")) == expected
    assert rb2.load_rb2(str(tmp_path)) == expected  # a folder of parquet files (a hub snapshot)


def test_bad_rows_are_input_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "1", "prompt": "p", "chosen": [], "rejected": ["x"], "subset": "Math"}) + "\n")
    with pytest.raises(InputError, match="row 1"):
        rb2.load_rb2(str(bad))
    bad.write_text(json.dumps({"id": "1", "prompt": "p", "chosen": ["a"], "rejected": ["x"], "subset": "Math",
                               "num_correct": 2}) + "\n")
    with pytest.raises(InputError, match="num_correct"):
        rb2.load_rb2(str(bad))
    with pytest.raises(InputError, match="no such file"):
        rb2.load_rb2(str(tmp_path / "missing.parquet"))


def test_only_owner_name_strings_are_taken_for_hub_ids():
    assert rb2._looks_like_hub_id("allenai/reward-bench-2")
    assert not rb2._looks_like_hub_id("data/rb2.parquet")
    assert not rb2._looks_like_hub_id("rb2.jsonl")


# ----------------------------------------------------------------------------- runner (real Judge, fake backend)


class CountingJudge:
    """Delegates to a real Judge and records the size of each ``score`` call."""

    def __init__(self, judge: Judge) -> None:
        self.judge, self.calls = judge, []

    def score(self, items, progress=False):
        self.calls.append(len(items))
        return self.judge.score(items, progress=progress)


TIES_FIXTURE = 0.3 * 1 + 0.3 * 0.5 + 0.2 * 1 + 0.2 * 0.5 + 0.01 * math.tanh(-3)
# ref:1 [1, 1/9, 5/9] ci 4/9 | tied:1 [1, 1, 1/9, 1/9] diff 0, ci 8/9 -> preferred, hard; not in the margin term
# ref:2 [5/9, 1] ci -4/9     | tied:2 [1, 7/9, 1/9] diff 2/9, ci 6/9 -> preferred; hard -4/9 > 2/9 no; tanh(-2 - 1)
WITH_RUBRIC = {"Factuality": 0.75, "Precise IF": 0.0, "Math": 1.0, "Safety": 1 / 3, "Focus": 1.0, "Ties": TIES_FIXTURE}


def test_run_rb2_with_rubrics_batches_and_scores_exactly():
    rows = rb2.load_rb2(str(RB2_SMALL))
    backend = FakeBackend()
    judge = CountingJudge(Judge(backend, mode="prob"))
    scored, stats = rb2.run_rb2(rows, judge, rubric_backend=backend)
    assert backend.generate_calls == [10]  # one batched call, one rubric per prompt
    assert judge.calls == [36]  # every completion of every row in one judge call
    assert stats.to_dict() == {"source": "written", "prompts": 10, "parsed": 10, "unparsed": 0, "valid": 10, "retried": 0}
    assert scored[0].scores == pytest.approx((1.0, 1 / 9, 1 / 9, 1 / 9))
    result = score_rows(scored)
    assert result.subsets == pytest.approx(WITH_RUBRIC)
    assert result.complete and result.overall == pytest.approx(sum(WITH_RUBRIC.values()) / 6)


def test_run_rb2_judge_alone_sees_no_difference():
    scored, stats = rb2.run_rb2(rb2.load_rb2(str(RB2_SMALL)), Judge(FakeBackend(), mode="prob"))
    assert stats.source == "none"
    result = score_rows(scored)
    # every completion 5/9: each non-Ties row a 4-way tie (1/4); Ties all zero (0/0 margins count 0)
    assert result.subsets == pytest.approx({**{s: 0.25 for s in rb2_scoring.SUBSETS[:5]}, "Ties": 0.0})


def test_unparsed_rubrics_leave_the_judge_alone():
    backend = FakeBackend(rubric_text="I cannot write a rubric.")
    scored, stats = rb2.run_rb2(rb2.load_rb2(str(RB2_SMALL)), Judge(backend, mode="prob"), rubric_backend=backend)
    assert (stats.parsed, stats.valid, stats.retried) == (0, 0, 10)
    assert backend.generate_calls == [10, 10, 10]  # the first try, then 0.3 and 0.1
    assert score_rows(scored).subsets["Math"] == 0.25


def test_rubrics_from_a_file_by_id_then_prompt(tmp_path):
    rows = rb2.load_rb2(str(RB2_SMALL))
    lines = [{"prompt": r.prompt, "rubric": RUBRIC} for r in rows]
    lines[0]["rubric"] = json.dumps(RUBRIC)  # a JSON string, as a raw rubric text
    lines.append({"id": "p1", "prompt": "other", "rubric": None})  # id wins over prompt: p1 judged alone
    path = tmp_path / "rubrics.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    table = read_rubric_table(path)
    scored, stats = rb2.run_rb2(rows, Judge(FakeBackend(), mode="prob"), rubric_table=table)
    assert (stats.source, stats.prompts, stats.parsed) == ("file", 10, 9)
    assert score_rows(scored).subsets == pytest.approx({**WITH_RUBRIC, "Precise IF": 0.25})
    with pytest.raises(InputError, match="no rubric for"):
        rb2.run_rb2([*rows, rb2.RB2Row("z", "new prompt", "Math", ("a",), ("b",), 1)], Judge(FakeBackend(), mode="prob"),
                    rubric_table=table)


# ----------------------------------------------------------------------------- CLI


def test_cli_from_scores_writes_the_json_result(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["eval", "rb2", "--from-scores", str(RB2_SCORES), "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["subsets"] == pytest.approx({"Math": 0.25, "Safety": 0.5, "Ties": 0.649282229511554})
    assert result["overall"] == pytest.approx(0.46642740983718467)
    assert result["counts"] == {"Math": 2, "Safety": 2, "Ties": 4} and result["complete"] is False
    assert result["ties"]["n_paired"] == 2 and result["missing_scores"] == 7
    printed = capsys.readouterr().out
    assert "Safety" in printed and "50.0" in printed and "overall" in printed


def test_cli_from_scores_with_subsets_and_json_on_stdout(capsys):
    assert main(["eval", "rb2", "--from-scores", str(RB2_SCORES), "--subsets", "math,Ties", "--output", "-"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)  # stdout holds only the JSON; the table goes to stderr
    assert result["subsets"] == pytest.approx({"Math": 0.25, "Ties": 0.649282229511554})
    assert result["overall"] == pytest.approx((0.25 + 0.649282229511554) / 2)
    assert "Ties" in captured.err


def test_save_scores_then_from_scores_round_trip(tmp_path):
    scored, _ = rb2.run_rb2(rb2.load_rb2(str(RB2_SMALL)), Judge(FakeBackend(), mode="prob"), rubric_backend=FakeBackend())
    rb2.write_scores(tmp_path / "scores.jsonl", scored)
    assert rb2.read_scores(tmp_path / "scores.jsonl") == scored
    out = tmp_path / "r.json"
    assert main(["eval", "rb2", "--from-scores", str(tmp_path / "scores.jsonl"), "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["subsets"] == pytest.approx(WITH_RUBRIC) and result["complete"] is True


def test_cli_broken_scores_line_exits_2_naming_the_line(tmp_path, capsys):
    path = tmp_path / "scores.jsonl"
    path.write_text(RB2_SCORES.read_text().splitlines()[0] + "\n{broken\n")
    assert main(["eval", "rb2", "--from-scores", str(path)]) == 2
    assert f"{path}:2:" in capsys.readouterr().err
    path.write_text(json.dumps({"id": "a", "subset": "Math", "num_correct": 1, "scores": ["high", 0.1]}) + "\n")
    assert main(["eval", "rb2", "--from-scores", str(path)]) == 2
    assert "'scores' must be" in capsys.readouterr().err


def test_cli_needs_data_or_scores(capsys):
    assert main(["eval", "rb2"]) == 2
    assert "--from-scores" in capsys.readouterr().err
    assert main(["eval", "rb2", str(RB2_SMALL), "--no-rubric"]) == 2
    assert "--judge is required" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_end_to_end_with_a_tiny_model(tmp_path, tiny_model_dir):
    out, scores = tmp_path / "r.json", tmp_path / "scores.jsonl"
    argv = ["eval", "rb2", str(RB2_SMALL), "--judge", str(tiny_model_dir), "--rubric-model", str(tiny_model_dir),
            "--device", "cpu", "--max-new-tokens", "8", "--limit", "1", "--output", str(out), "--save-scores", str(scores)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert set(result["subsets"]) == set(rb2_scoring.SUBSETS) and result["counts"]["Ties"] == 2
    assert result["rubrics"]["prompts"] == 7 and result["settings"]["mode"] == "yesno"  # the default
    lines = [json.loads(x) for x in scores.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["f1", "p1", "m1", "s1", "fo1", "ref:1", "tied:1"]
    assert all(0.0 <= s <= 1.0 for x in lines for s in x["scores"])


# ----------------------------------------------------------------------------- the paper's protocol


class _GenerativeJudgeBackend:
    """A generative judge that records the prompts it reads and always replies with a score of 0.5."""

    name = "fake-judge"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def generate(self, conversations, params, *, progress=False):  # noqa: ANN001, ANN201
        self.seen += [c[-1]["content"] for c in conversations]
        return ['{"reasoning": "", "score": 0.5}' for _ in conversations]


def test_paper_protocol_shows_the_judge_the_rubric_as_written():
    written = "<think>two criteria</think>" + json.dumps(RUBRIC)
    judge_backend = _GenerativeJudgeBackend()
    judge = Judge(judge_backend, mode="generative", prompt="reference", defences=False, parse="reference")
    rows = rb2.load_rb2(str(RB2_SMALL))[:2]
    rb2.run_rb2(rows, judge, rubric_backend=FakeBackend(rubric_text=written), rubric_as_written=True)
    assert all(f"Rubric: {json.dumps(RUBRIC)}\n\n" in text for text in judge_backend.seen)
    default = _GenerativeJudgeBackend()
    rb2.run_rb2(rows, Judge(default, mode="generative"), rubric_backend=FakeBackend(rubric_text=written))
    assert all(json.dumps(RUBRIC) not in text and "The answer is marked as good." in text for text in default.seen)


def test_cli_paper_protocol_sets_the_authors_settings(monkeypatch, capsys):
    from evolm.cli import _common
    from evolm.cli.eval import rb2 as rb2_cli

    seen = {}

    def stop(args, need_rubric_model=True):  # noqa: ANN001, ANN202
        seen.update(vars(args))
        raise InputError("stopped before loading")

    monkeypatch.setattr(rb2_cli, "rubric_and_judge", stop)
    assert main(["eval", "rb2", str(RB2_SMALL), "--judge", "j", "--rubric-model", "w", "--protocol", "paper"]) == 2
    assert (seen["mode"], seen["judge_max_new_tokens"], seen["thinking"], seen["max_new_tokens"]) == \
        ("generative", 16384, True, 16384)
    assert (seen["judge_prompt"], seen["judge_defences"], seen["judge_parse"], seen["rubric_as_written"]) == \
        ("reference", False, "rb2", True)
    assert seen["rubric_retry_when"] == "no_criteria_key"  # the authors' evaluation judge's retry rule
    assert "retries at 0.3 and 0.1" in capsys.readouterr().err
    from evolm.eval.rubric_source import RETRY_TEMPERATURES

    assert (seen["temperature"], *RETRY_TEMPERATURES) == (0.6, 0.3, 0.1)
    params = _common.rubric_params(argparse_namespace(seen))
    assert params.chat_template_kwargs == {"enable_thinking": True} and params.max_new_tokens == 16384


def argparse_namespace(d):  # noqa: ANN001, ANN201
    import argparse

    return argparse.Namespace(**d)
