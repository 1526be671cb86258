"""`evolm train --smoke` (training/smoke.py): every role, a checkpoint and a resume from it, in a directory of its own,
and the one-screen verdict; driven on the demo config with the tiny random model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evolm.cli import main
from evolm.config import load_config
from evolm.errors import InputError
from evolm.runs.rundir import checkpoint_state, complete_checkpoints
from evolm.training import smoke

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo-cpu.yaml"
PAPER = REPO / "configs" / "paper-qwen3-8b.yaml"


def tiny(model_dir: Path, out: Path) -> list[str]:
    return [f"model.name={model_dir}", f"judge.model={model_dir}", f"output_dir={out}",
            "schedule.prompts_per_step=2", "schedule.samples_per_prompt=2", "grpo.per_device_train_batch_size=4",
            "grpo.max_completion_length=8", "rubric.max_new_tokens=8", "contrast.max_new_tokens=8",
            "grpo.report_to=[]", "rubric.constrained=false", "model.lora.r=0"]


@pytest.mark.slow
def test_smoke_runs_each_role_checkpoints_resumes_and_prints_a_verdict(tiny_model_dir: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["train", "--config", str(DEMO), "--smoke", *tiny(tiny_model_dir, out)]) == 0
    assert not out.exists()  # never the real run's directory
    run_dir = tmp_path / "run-smoke"
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["role"]) for r in rows] == [(1, "policy"), (2, "rubric"), (3, "policy")]
    assert all(r["reward_mean"] is not None for r in rows)
    assert rows[1]["pairs"] and rows[1]["pair_judgements"]  # temporal pairs from the policy step's answers
    assert [checkpoint_state(c).step for c in complete_checkpoints(run_dir)] == [2, 3]  # 2 written, 3 after resume
    saved = load_config(run_dir / "config.yaml")
    assert saved.contrast.min_age == 0 and saved.schedule.steps_per_phase == 1
    screen = capsys.readouterr().out
    assert ": PASS" in screen
    for line in ("step 1: policy", "step 2: rubric", "step 3: policy (after the resume)", "resumed from checkpoint 2",
                 "judge failures", "0 of ", "peak GPU memory", "vLLM", "a full rubric step, extrapolated",
                 "the whole run, extrapolated"):
        assert line in screen, line
    # a second smoke run replaces the first (one process: nothing else can be using it)
    assert main(["train", "--config", str(DEMO), "--smoke", *tiny(tiny_model_dir, out)]) == 0
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 3


def test_smoke_shrinks_the_paper_schedule_and_keeps_its_models() -> None:
    cfg = load_config(PAPER)
    overrides = smoke.smoke_overrides(cfg, 4)
    s = load_config(PAPER, overrides)
    assert s.output_dir == "runs/paper-qwen3-8b-smoke"
    assert (s.schedule.prompts_per_step, s.schedule.samples_per_prompt) == (1, 8)  # 8 rows over 4 x 1 micro-batches
    assert s.contrast.min_age == 0 and s.contrast.pairs == "temporal"
    assert (s.model, s.judge, s.grpo, s.contrast.max_new_tokens) == (cfg.model, cfg.judge, cfg.grpo,
                                                                       cfg.contrast.max_new_tokens)
    assert smoke.smoke_questions(cfg, 16) == 2  # 16 rows for 16 processes
    with pytest.raises(InputError, match="sequential"):
        smoke.smoke_overrides(load_config(PAPER, ["schedule.regime=sequential"]), 4)


def test_smoke_reads_vllms_room_from_its_start_line() -> None:
    room = smoke.VLLMRoom()
    room.read("INFO 12-06 [kv_cache_utils.py:1087] GPU KV cache size: 93,472 tokens, Maximum concurrency for "
              "40,960 tokens per request: 2.28x")
    assert room.found == (40960, 2.28)


LAUNCHER = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "CUDA_VISIBLE_DEVICES": "0,1",
            "ACCELERATE_USE_DEEPSPEED": "true"}
# what torchrun's agent adds for its own rendezvous (torch/distributed/elastic/agent/server/)
ELASTIC = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "none",
           "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
           "TORCHELASTIC_ERROR_FILE": "/tmp/error.json", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
           "ROLE_RANK": "1", "ROLE_NAME": "default", "ROLE_WORLD_SIZE": "2"}


def test_a_leg_leaves_the_launchers_rendezvous_behind_and_gets_its_own_port() -> None:
    env = smoke.leg_environment(41234, {**LAUNCHER, **ELASTIC})
    assert env == {**LAUNCHER, "MASTER_PORT": "41234"}  # ranks, MASTER_ADDR, CUDA and accelerate's kept


def test_one_process_picks_a_fresh_free_port_per_leg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    fresh = smoke.LegRendezvous(10)
    assert fresh.store is None and all(1024 <= fresh.port(leg) < 65536 for leg in smoke.LEGS)


def test_on_a_gpu_each_leg_process_starts_with_a_rendezvous_of_its_own(
        tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_smoke`'s GPU path (a process per leg), its leg processes caught: each gets this process's
    environment without torchrun's elastic variables, on a port of its own."""
    for k, v in {**ELASTIC, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    started: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(smoke, "run_leg_process",
                        lambda command, seen, env: started.append((command, env)) or 0)
    args = [*tiny(tiny_model_dir, tmp_path / "run"), "grpo.use_cpu=false"]
    assert main(["train", "--config", str(DEMO), "--smoke", *args]) != 0  # the legs caught, no step ran: FAIL
    assert [c[c.index("--smoke-leg") + 1] for c, _ in started] == ["1", "2"]
    for _, env in started:
        assert not set(env) & set(ELASTIC) and env["MASTER_ADDR"] == "127.0.0.1"
    ports = {env["MASTER_PORT"] for _, env in started}
    assert len(ports) == 2 and "29500" not in ports


PARENT = """
    import os, sys
    from evolm.training import smoke
    store, port = os.environ.get("TORCHELASTIC_USE_AGENT_STORE"), os.environ["MASTER_PORT"]
    print(f"parent {os.environ['RANK']}: launcher store {store} at port {port}", flush=True)
    fresh = smoke.LegRendezvous(60)
    for leg in smoke.LEGS:  # as cli/train.py's _smoke spawns them
        rc = smoke.run_leg_process([sys.executable, sys.argv[1], str(leg.number)], lambda line: None,
                                   fresh.environment(leg))
        if rc:
            sys.exit(rc)
"""
LEG = """
    import datetime, os, sys
    import torch, torch.distributed as dist
    assert not any(k.startswith("TORCHELASTIC_") for k in os.environ)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    total = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(total)
    port = os.environ["MASTER_PORT"]
    print(f"leg {sys.argv[1]} rank {dist.get_rank()} sum {total.item():g} port {port}", flush=True)
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_each_leg_of_a_two_process_launch_meets_in_a_rendezvous_of_its_own(tmp_path: Path) -> None:
    """A 2-process torchrun (gloo) whose processes start the two legs as ``--smoke`` does, each leg a 2-rank
    gloo all_reduce. Inheriting torchrun's agent store (and its port), the second leg's ranks may read the
    first leg's stale gloo addresses (in some runs "Gloo connectFullMesh failed ... Connection refused", in
    others the second leg passes on the first leg's port): the ports are checked too. Each leg in its own
    rendezvous, both legs pass."""
    (tmp_path / "parent.py").write_text(textwrap.dedent(PARENT), encoding="utf-8")
    (tmp_path / "leg.py").write_text(textwrap.dedent(LEG), encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run([*launch, str(tmp_path / "parent.py"), str(tmp_path / "leg.py")],
                          capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    launcher = set(re.findall(r"launcher store True at port (\d+)", out))
    assert len(launcher) == 1, out[-3000:]  # both parents under torchrun's agent store: the trap is set
    found = re.findall(r"leg (\d) rank (\d) sum 3 port (\d+)", out)
    legs = {(int(leg), int(r)): port for leg, r, port in found}
    assert set(legs) == {(1, 0), (1, 1), (2, 0), (2, 1)}, out[-3000:]  # each leg's ranks summed 1 + 2
    assert legs[1, 0] == legs[1, 1] != legs[2, 0] == legs[2, 1]  # one port per leg, agreed by every rank
    assert not launcher & {str(p) for p in legs.values()}  # never the launcher's
