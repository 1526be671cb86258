"""Many processes, for real: `evolm train` under ``torchrun --nproc_per_node 2`` (gloo, CPU) with the tiny model.

Each test launches a whole 2-process job and reads what it left on disk:
- both processes plan the same rows at every step (the adapter gathers a digest of each step's rows and refuses a
  step where they differ: a run that completes planned identical rows everywhere);
- every file evolm writes is written once: one metrics line per step, each step's samples, the replay buffer
  (one answer per question per policy step), held-out items and frozen rubrics;
- a question's group of answers split over the two processes has distinct samples (TRL seeds each process
  differently; evolm's seeded generation runs in a forked RNG and leaves that stream alone);
- SIGKILL of the whole job after a checkpoint, then ``--resume`` under 2 processes: no step lost or repeated;
- coevolve, sequential (its stage 2 is frozen_rubric) and LoRA run.

What is compared with one process: the rewards. The policy answers a 2-process job scored (each process judged
its own share) are scored again here, in one process, by the same frozen judge in float32: the scores agree to
1e-5. Loss and weights are not compared: TRL samples each process's completions from its own RNG stream, so
a 1-process and a 2-process step do not generate the same rows, and holding generation fixed would mean
patching TRL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from evolm.config import load_config
from evolm.runs.jsonl import read_jsonl
from evolm.runs.records import BUFFER_FILE, FROZEN_RUBRICS_FILE, STATE_FILE
from evolm.runs.rundir import complete_checkpoints

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo-cpu.yaml"
P, G = 2, 4  # questions per step, samples per question: 8 rows, 2 per micro-batch, so each group spans both ranks



def overrides(model_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        f"model.name={model_dir}", f"judge.model={model_dir}", "judge.dtype=float32", f"output_dir={out}",
        f"schedule.prompts_per_step={P}", f"schedule.samples_per_prompt={G}", "schedule.samples_logged_per_step=0",
        "schedule.cycles=2", "schedule.steps_per_phase=1", "schedule.save_every=1",
        "grpo.per_device_train_batch_size=2", "grpo.max_completion_length=8", "rubric.max_new_tokens=8",
        "contrast.max_new_tokens=8", "grpo.report_to=[]", "rubric.constrained=false", "contrast.min_age=0",
        "grpo.save_total_limit=null", "contrast.max_age=4", "grpo.gradient_checkpointing=false", "model.lora.r=0",
        *extra,
    ]


def torchrun(*args: str, log: Path) -> subprocess.Popen:
    """``torchrun --standalone --nproc_per_node 2 -m evolm.cli train ARGS`` in its own session (killable as a job)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "evolm.cli", "train", *args]
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def kill_job(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun and every worker it started (torchrun puts each worker in a session of its own)."""
    workers = [int(d) for d in os.listdir("/proc") if d.isdigit() and _parent(int(d)) == proc.pid]
    for pid in [proc.pid, *workers]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    for pid in workers:  # gone before the resume starts
        while Path(f"/proc/{pid}").exists() and _state(pid) != "Z":
            time.sleep(0.05)


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def finish(proc: subprocess.Popen, log: Path, timeout: float = 400) -> str:
    assert proc.wait(timeout=timeout) == 0, log.read_text()[-4000:]
    return log.read_text()


def samples(run_dir: Path) -> list[dict[str, Any]]:
    return [r for p in sorted((run_dir / "samples").glob("*.jsonl")) for r in read_jsonl(p)]


def training_steps(run_dir: Path) -> list[tuple[int, str]]:
    return [(r["step"], r["role"]) for r in read_jsonl(run_dir / "metrics.jsonl") if r["role"] != "eval"]


def assert_one_process_output(log: str) -> None:
    """One start line and one summary table, whatever the number of processes."""
    assert log.count("evolm: ") >= 1
    assert sum(1 for line in log.splitlines() if " run in " in line and line.startswith("evolm: ")) == 1, log[-3000:]
    assert log.count("run directory: ") == 1, log[-3000:]


def assert_groups_distinct(rows: list[dict[str, Any]]) -> None:
    groups: dict[tuple[int, int], list[str]] = defaultdict(list)
    for r in rows:
        groups[(r["step"], r["slot"])].append(r["completion"])
    assert groups and all(len(g) == G for g in groups.values())
    for key, answers in groups.items():  # 8 random tokens from a 400-token vocabulary: a repeat means a shared seed
        assert len(set(answers)) == G, (key, answers)


@pytest.mark.slow
def test_coevolve_two_processes_kill_and_resume(tiny_model_dir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    pairs, questions = tmp_path / "pairs.jsonl", tmp_path / "questions.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?", "chosen": str(2 * i), "rejected": "fish"})
                             + "\n" for i in (2, 3)))
    questions.write_text("".join(json.dumps({"prompt": q}) + "\n" for q in ("Name a colour.", "Say hello.")))
    args = overrides(tiny_model_dir, run_dir, f"eval.pairs={pairs}", f"eval.questions={questions}")
    # steps: 1 policy, 2 rubric, 3 policy, 4 rubric; the job is killed once checkpoint 2 is complete
    proc = torchrun("--config", str(DEMO), *args, log=tmp_path / "first.log")
    marker = run_dir / "checkpoints" / "checkpoint-2" / STATE_FILE
    deadline = time.time() + 400
    while not marker.exists():
        assert proc.poll() is None, (tmp_path / "first.log").read_text()[-4000:]
        assert time.time() < deadline, "the job did not reach step 2"
        time.sleep(0.05)
    kill_job(proc)  # torchrun and both ranks
    last = max(int(p.name.split("-")[1]) for p in complete_checkpoints(run_dir))
    assert last in (2, 3), last

    log = finish(torchrun("--resume", str(run_dir), log=tmp_path / "second.log"), tmp_path / "second.log")
    assert f"resuming after step {last}" in log, log[:2000]
    assert_one_process_output(log)

    assert training_steps(run_dir) == [(1, "policy"), (2, "rubric"), (3, "policy"), (4, "rubric")]
    evals = [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl") if r["role"] == "eval"]
    assert evals == [0, 4]  # before the first step and after the last, once each
    for step in (0, 4):
        items = read_jsonl(run_dir / "heldout" / f"step-{step:06d}.jsonl")
        assert Counter(r["kind"] for r in items) == {"pair": 2, "question": 2}, items
    assert len(read_jsonl(run_dir / "eval_rubrics.jsonl")) == 2

    rows = samples(run_dir)
    assert Counter(r["step"] for r in rows) == {s: P * G for s in (1, 2, 3, 4)}  # every row once, none twice
    assert_groups_distinct([r for r in rows if r["role"] == "policy"])

    state = json.loads((run_dir / "checkpoints" / "checkpoint-4" / STATE_FILE).read_text())
    assert state["step"] == 4 and state["buffer_entries"] == 2 * P
    buffer = read_jsonl(run_dir / "checkpoints" / "checkpoint-4" / BUFFER_FILE)
    assert len(buffer) == 2 * P  # one answer per question per policy step, not one per process

    # the rewards: each process judged its share; one process judging the same rows gives the same scores
    from tiny_run import row_rewards

    from evolm.judge.judge import build_judge

    cfg = load_config(run_dir / "config.yaml")
    judge = build_judge(cfg.judge, seed=cfg.seed, device="cpu", fallback_dtype="float32")
    policy = [r for r in rows if r["role"] == "policy"]
    again = row_rewards([{"role": "policy", "question": r["question"],
                         "rubric": json.dumps(r["rubric"]) if r.get("rubric") else "",
                         "rubric_text": r.get("rubric_text") or "", "a_pos": "", "a_neg": "",
                         "reference": r.get("reference") or ""} for r in policy],
                       [r["completion"] for r in policy], [judge], cfg.rubric.reward, cfg.judge.aggregate,
                       cfg.rubric.invalid)
    assert [s.score for s in again] == pytest.approx([r["score"] for r in policy], abs=1e-5)


@pytest.mark.slow
def test_sequential_with_lora_two_processes(tiny_model_dir: Path, tmp_path: Path) -> None:
    """sequential: stage 1 trains the writer (rubric_only), stage 2 the policy under its frozen rubrics; LoRA."""
    run_dir = tmp_path / "seq"
    args = overrides(tiny_model_dir, run_dir, "schedule.regime=sequential", "schedule.cycles=1", "model.lora.r=4",
                     "model.lora.alpha=8")
    log = finish(torchrun("--config", str(DEMO), *args, log=tmp_path / "seq.log"), tmp_path / "seq.log")
    writer, policy = run_dir / "stage1-writer", run_dir / "stage2-policy"
    assert training_steps(writer) == [(1, "rubric")] and training_steps(policy) == [(1, "policy")]
    assert (policy / "checkpoints" / "checkpoint-1" / "adapter_model.safetensors").is_file()
    frozen = read_jsonl(policy / FROZEN_RUBRICS_FILE)
    assert len(frozen) == len({r["question"] for r in frozen}) >= P  # each question's rubric once
    rows = samples(policy)
    assert Counter(r["step"] for r in rows) == {1: P * G}
    assert_groups_distinct(rows)
    assert log.count("run directory: ") == 1


# ============================================================================= the pieces, without a launch


def test_launch_facts_come_from_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    from evolm import dist

    for name in ("WORLD_SIZE", "RANK", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    assert (dist.world_size(), dist.rank(), dist.is_main(), dist.single_cpu_launch_warning()) == (1, 0, True, None)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert (dist.world_size(), dist.rank(), dist.is_main()) == (2, 1, False)
    # `accelerate launch --cpu --num_processes 2` without mpirun: one process, ACCELERATE_USE_CPU and no WORLD_SIZE
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    warning = dist.single_cpu_launch_warning()
    assert warning is not None and "ONE process" in warning and "torchrun --nproc_per_node" in warning
    assert "\n" not in warning


def test_processes_that_plan_different_rows_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The digest check the step runs as it materialises its rows, with two processes' digests that differ."""
    import accelerate.utils

    from evolm.errors import RunError
    from evolm.training import step

    rows = [{"question": "q", "rubric": "r", "slot": 0}]
    other = [{"question": "q", "rubric": "another rubric", "slot": 0}]
    assert step.plan_digest(rows) == step.plan_digest([dict(rows[0])])
    assert step.plan_digest(rows) != step.plan_digest(other)

    class Two:
        num_processes = 2

    monkeypatch.setattr(accelerate.utils, "gather_object", lambda objs: [*objs, step.plan_digest(other)])
    with pytest.raises(RunError, match="step 3: the processes planned different rows"):
        step._check_same_rows(Two(), 2, rows)
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda objs: [*objs, *objs])
    step._check_same_rows(Two(), 2, rows)  # equal digests: no error


def test_launch_checks_create_no_process_state(tiny_model_dir: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks before any model loads must not set up accelerate's state: transformers' TrainingArguments does,
    with grpo.ddp_timeout (a state made earlier keeps the library's default timeout, and on CPU says 1 process)."""
    from accelerate.state import PartialState

    from evolm.training.run import check_launch

    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it; nothing may try to join a group
    monkeypatch.setenv("RANK", "0")
    PartialState._reset_state()
    cfg = load_config(DEMO, overrides(tiny_model_dir, tmp_path / "r"))
    check_launch(cfg)
    assert PartialState._shared_state == {}


def test_auto_device_is_this_process_gpu_under_a_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model loaded before the trainer exists lands on the process's own GPU, not GPU 0 in every process."""
    import torch

    from evolm.backends.devices import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert resolve_device("auto") == "cuda"
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == "cuda:1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
