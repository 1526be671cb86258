"""The sequential baseline on a GPU (training/run.py): stage 1's trainer and colocated vLLM cannot be torn down in
the process that built them, so stage 2 is refused there, in one line saying how to start it; a resume (a fresh
process) runs it. The GPU is faked (``_on_gpu``): the rest is the real two-stage run of the tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_run import tiny_config

from evolm.errors import RunError
from evolm.runs.jsonl import read_jsonl
from evolm.runs.rundir import resume_config
from evolm.training import run as run_module


def metrics(run_dir: Path) -> list[dict]:
    return read_jsonl(run_dir / "metrics.jsonl")


@pytest.mark.slow
def test_stage_two_starts_in_a_fresh_process_on_a_gpu(tiny_model_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "seq"
    cfg = tiny_config(tiny_model_dir, out, "schedule.regime=sequential", "schedule.cycles=1",
                      "schedule.steps_per_phase=1", "schedule.save_every=100")
    monkeypatch.setattr(run_module, "_on_gpu", lambda cfg: True)
    with pytest.raises(RunError, match=r"stage 1 \(the writer\) is done .*must start in a fresh process.*"
                                       rf"evolm train --resume {out}"):
        run_module.run(cfg)
    assert [r["role"] for r in metrics(out / "stage1-writer")] == ["rubric"]
    assert not (out / "stage2-policy").exists()  # nothing of stage 2 was built in this process
    # the resume (a fresh process on a GPU) finds stage 1 done and trains stage 2
    run_module.run(resume_config(out), resume=True)
    assert [r["role"] for r in metrics(out / "stage2-policy")] == ["policy"]
