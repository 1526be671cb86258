"""The run directory's records: JSON round trips and the one lenient reader every consumer uses."""

from __future__ import annotations

import json
from pathlib import Path

from evolm.runs.records import (
    CheckpointState,
    SampleRecord,
    StepRecord,
    append_record,
    read_lenient,
    read_metrics,
)


def test_step_record_round_trip() -> None:
    rec = StepRecord(step=3, role="rubric", cycle=0, phase=1, reward_mean=0.25, pair_accuracy=0.5, kl=None)
    assert StepRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec


def test_sample_record_round_trip_keeps_meaningful_nulls() -> None:
    rec = SampleRecord(step=1, role="policy", question="q", completion="a", reward=None, score=None)
    out = rec.to_json()
    assert out["reward"] is None and out["score"] is None and "a_pos" not in out  # None reward = missing, kept
    assert SampleRecord.from_json(out) == rec


def test_checkpoint_state_round_trip() -> None:
    st = CheckpointState(step=4, phase=1, cycle=0, role="rubric", buffer_entries=7)
    assert CheckpointState.from_json(st.to_json()) == st


def test_wrong_types_read_as_missing_not_as_errors() -> None:
    rec = StepRecord.from_json({"step": "x", "role": 3, "reward_mean": "nan", "kl": True, "loss": float("inf"),
                                "pair_accuracy": 0.5, "unknown": 1})
    assert (rec.step, rec.role, rec.reward_mean, rec.kl, rec.loss, rec.pair_accuracy) == (0, "unknown", None, None,
                                                                                           None, 0.5)
    assert SampleRecord.from_json({"rubric": "not an object"}).rubric is None


def test_lenient_reader_skips_a_torn_last_line(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n[1, 2]\n\n{"step": 2}\n{"step": 3, "rew')
    read = read_lenient(p)
    assert [r["step"] for r in read.rows] == [1, 2]
    assert read.skipped == 2 and read.torn_last
    assert read_lenient(tmp_path / "absent.jsonl").rows == []


def test_metrics_written_and_read_back_in_step_order(tmp_path: Path) -> None:
    path = tmp_path / "run" / "metrics.jsonl"
    for step in (2, 1):
        append_record(path, StepRecord(step=step, role="policy", reward_mean=step / 10))
    with open(path, "a") as f:
        f.write('{"step": 3, "role"')  # a crash mid-line
    assert [(r.step, r.reward_mean) for r in read_metrics(tmp_path / "run")] == [(1, 0.1), (2, 0.2)]

