"""Pairwise judge accuracy: credit rule, the accepted formats, the runner, and the CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from rb2_fakes import FakeBackend

from evolm.cli import main
from evolm.errors import InputError
from evolm.eval import pairs
from evolm.eval.pairs import PreferencePair, load_pairs, pair_credit, summarize
from evolm.judge.judge import Judge

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LLMBAR, PROMPT, TEMPORAL = (FIXTURES / n for n in ("pairs_llmbar.json", "pairs_prompt.jsonl", "pairs_temporal.jsonl"))
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def test_pair_credit_ties_and_missing_scores_count_one_half():
    assert pair_credit(0.8, 0.2) == 1.0
    assert pair_credit(0.2, 0.8) == 0.0
    assert pair_credit(0.5, 0.5) == 0.5
    assert pair_credit(None, 0.5) == pair_credit(0.5, None) == pair_credit(None, None) == 0.5
    assert pair_credit(float("nan"), 0.1) == 0.5


def test_summarize_counts():
    r = summarize([(0.9, 0.1), (0.2, 0.4), (0.5, 0.5), (None, 0.3), (0.7, 0.6)])
    # credits 1, 0, 1/2, 1/2, 1 -> 3/5
    assert (r.pairs, r.accuracy, r.wins, r.ties, r.losses, r.missing) == (5, 0.6, 2, 2, 1, 1)
    assert summarize([]).accuracy == 0.0


def test_load_every_format():
    assert load_pairs(LLMBAR) == [
        PreferencePair("Give a synonym of 'happy'.", "GOOD: joyful", "BAD: sad"),  # label 1
        PreferencePair("Give a synonym of 'happy'.", "GOOD: cheerful", "BAD: angry"),  # label 2: output_2 is better
        PreferencePair("Name the capital of France.", "plain: it is Paris", "GOOD: Paris"),
    ]
    assert load_pairs(PROMPT)[0] == PreferencePair("Translate 'cat' to French.", "GOOD: chat", "BAD: chien")
    assert load_pairs(TEMPORAL) == [PreferencePair("What is 2 + 2?", "OK: 4", "BAD: 5")]
    assert len(load_pairs(LLMBAR, limit=2)) == 2


def test_hh_dialogues_chat_messages_and_gzip(tmp_path):
    path = tmp_path / "hh.jsonl.gz"
    records = [
        {"chosen": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: help me?\n\nAssistant: Sure.",
         "rejected": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: help me?\n\nAssistant: No."},
        {"prompt": "Q?", "chosen": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A1"}],
         "rejected": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A2"}]},
    ]
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    assert load_pairs(path) == [
        PreferencePair("Human: hi\n\nAssistant: hello\n\nHuman: help me?", "Sure.", "No."),
        PreferencePair("Q?", "A1", "A2"),
    ]


def test_bad_records_are_input_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"input": "q", "output_1": "a", "output_2": "b", "label": 3}]))
    with pytest.raises(InputError, match="record 1.*label"):
        load_pairs(bad)
    bad.write_text(json.dumps([{"input": "q", "output_1": "a", "output_2": "b", "label": "2"}, {"text": "x"}]))
    with pytest.raises(InputError, match="record 2: unknown pair format"):
        load_pairs(bad)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "q", "chosen": "a", "rejected": "b"}\n{oops\n')
    with pytest.raises(InputError, match=r"broken.jsonl:2: malformed JSON"):
        load_pairs(broken)
    with pytest.raises(InputError, match="no such file"):
        load_pairs(tmp_path / "nothing.json")


class CountingJudge:
    def __init__(self, judge: Judge) -> None:
        self.judge, self.calls = judge, []

    def score(self, items, progress=False):
        self.calls.append(len(items))
        return self.judge.score(items, progress=progress)


FILES = {str(p): load_pairs(p) for p in (LLMBAR, PROMPT, TEMPORAL)}


def test_run_pairs_with_rubrics():
    backend = FakeBackend()
    judge = CountingJudge(Judge(backend, mode="prob"))
    result = pairs.run_pairs(FILES, judge, rubric_backend=backend)
    assert backend.generate_calls == [5]  # 6 pairs, 5 distinct prompts, one batched call
    assert judge.calls == [12]  # both answers of every pair in one call
    acc = {Path(k).name: v.accuracy for k, v in result.files.items()}
    # LLMBar: win, win, loss (GOOD beats the labelled-better plain answer) -> 2/3
    # prompt file: win, tie (plain vs plain) -> 3/4; temporal: OK 7/9 > BAD 1/9 -> 1
    assert acc == pytest.approx({"pairs_llmbar.json": 2 / 3, "pairs_prompt.jsonl": 0.75, "pairs_temporal.jsonl": 1.0})
    # total over all 6 pairs: 4 wins + 1 tie -> 4.5 / 6
    assert (result.total.pairs, result.total.wins, result.total.ties, result.total.losses) == (6, 4, 1, 1)
    assert result.total.accuracy == pytest.approx(0.75)
    assert result.mean_of_files == pytest.approx((2 / 3 + 0.75 + 1) / 3)
    table = pairs.format_table(result)
    assert "pairs_llmbar.json" in table and "66.7" in table and "75.0" in table
    lo, hi = result.total.interval  # Wilson 95% over the 6 pairs, a tie counting 1/2
    assert lo < 0.75 < hi and (round(lo, 3), round(hi, 3)) == (0.365, 0.94)
    assert pairs.percent_interval(result.total.interval) in table.splitlines()[-1]
    assert result.to_dict()["total"]["ci95"] == [lo, hi]
    # per pair, in input order: the credits add up to the total and name their file (--save-scores writes these)
    assert [Path(r["file"]).name for r in result.items] == ["pairs_llmbar.json"] * 3 + ["pairs_prompt.jsonl"] * 2 + [
        "pairs_temporal.jsonl"]
    assert [r["credit"] for r in result.items] == [1.0, 1.0, 0.0, 1.0, 0.5, 1.0]
    assert all(r["prompt"] == p.prompt and r["chosen"] == p.better for r, p in
               zip(result.items, [p for ps in FILES.values() for p in ps], strict=True))


def test_run_pairs_judge_alone_is_at_chance():
    result = pairs.run_pairs(FILES, Judge(FakeBackend(), mode="prob"))
    assert result.total.accuracy == 0.5 and result.total.ties == 6 and result.rubrics.source == "none"


def test_cli_pairs_with_a_tiny_model(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "pairs.json"
    argv = ["eval", "pairs", str(LLMBAR), str(PROMPT), "--judge", str(tiny_model_dir), "--no-rubric",
            "--device", "cpu", "--limit", "2", "--output", str(out), "--save-scores", str(tmp_path / "s.jsonl")]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    saved = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert len(saved) == 4 and sum(r["credit"] for r in saved) / 4 == pytest.approx(result["total"]["accuracy"])
    assert [f["pairs"] for f in result["files"].values()] == [2, 2] and result["total"]["pairs"] == 4
    assert 0.0 <= result["total"]["accuracy"] <= 1.0 and result["settings"]["no_rubric"] is True
    assert "total" in capsys.readouterr().out


def test_cli_pairs_needs_a_rubric_model_unless_no_rubric(capsys):
    assert main(["eval", "pairs", str(LLMBAR), "--judge", "x"]) == 2
    assert "--rubric-model is required" in capsys.readouterr().err


@pytest.mark.skipif(not (SHARED_DATA / "llmbar").is_dir(), reason="shared data (../shared/data/llmbar) not present")
def test_real_llmbar_files_load():
    counts = {p.name: len(load_pairs(p)) for p in sorted((SHARED_DATA / "llmbar").glob("*.json"))}
    assert counts == {"Adversarial_GPTInst.json": 92, "Adversarial_GPTOut.json": 47, "Adversarial_Manual.json": 46,
                      "Adversarial_Neighbor.json": 134, "Natural.json": 100}


@pytest.mark.skipif(not (SHARED_DATA / "hh_rlhf").is_dir(), reason="shared data (../shared/data/hh_rlhf) not present")
def test_real_hh_rlhf_loads():
    got = load_pairs(SHARED_DATA / "hh_rlhf" / "harmless-base_test.jsonl.gz")
    assert len(got) == 2312 and all(p.prompt.startswith("Human:") for p in got[:50])


@pytest.mark.slow
def test_smollm2_judge_alone_on_llmbar_fixture(tmp_path):
    out = tmp_path / "pairs.json"
    argv = ["eval", "pairs", str(LLMBAR), "--judge", "smollm2-135m-instruct", "--no-rubric", "--device", "cpu",
            "--output", str(out)]
    assert main(argv) == 0
    assert json.loads(out.read_text())["total"]["pairs"] == 3


def test_an_empty_pair_file_is_refused(tmp_path) -> None:  # noqa: ANN001
    from evolm.errors import InputError
    from evolm.eval.pairs import load_pairs

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="no pairs"):
        load_pairs(empty)
