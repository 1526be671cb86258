"""LoRA (``model.lora`` through PEFT), W&B (``grpo.report_to: wandb``, offline) and mixed rewards in one tiny run.

One co-evolving run of a tiny random model (1 policy + 1 rubric step, 2 questions x 2 samples, 8 new tokens)
with a rank-4 adapter, TRL's soft overlong punishment added to the policy reward, and an offline W&B run.
What is checked: checkpoints hold the adapter alone and name a usable base; the frozen base is the KL
reference; the checkpoint loads for evaluation (``load_model``, ``evolm rubric --model``); resuming loads
the adapter; the W&B run directory holds evolm's metrics, its config and the samples table.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from test_coevolve import G, P, tiny_config  # noqa: I001  (tests/ is on sys.path under pytest)

from evolm.errors import RunError
from evolm.runs.jsonl import read_jsonl
from evolm.runs.rundir import complete_checkpoints, open_run, resume_config
from evolm.training.run import run

pytest.importorskip("peft")
pytest.importorskip("wandb")

SOFT = ("rewards.extra=[{name: trl.rewards.get_soft_overlong_punishment, "
        "kwargs: {max_completion_len: 8, soft_punish_cache: 4}, weight: 0.5}]")


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    top = tmp_path_factory.mktemp("lora")
    env = pytest.MonkeyPatch()
    for key, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(top), "WANDB_CONSOLE": "off", "WANDB_SILENT": "true",
                       "WANDB_PROJECT": "evolm-test"}.items():
        env.setenv(key, value)
    try:
        cfg = tiny_config(tiny_model_dir, top / "run", "schedule.cycles=1", "schedule.steps_per_phase=1",
                          "schedule.save_every=100", "grpo.learning_rate=1e-2", "model.lora.r=4", "model.lora.alpha=8",
                          "grpo.report_to=[wandb]", "grpo.log_completions=true", "grpo.num_completions_to_print=1",
                          SOFT)
        assert run(cfg) == top / "run"
    finally:
        env.undo()
    return top / "run"


def _ckpt(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"checkpoint-{step}"


def test_lora_checkpoints_hold_the_adapter_alone(lora_run: Path, tiny_model_dir: Path) -> None:
    assert [p.name for p in complete_checkpoints(lora_run)] == ["checkpoint-1", "checkpoint-2"]
    for step in (1, 2):
        files = {p.name for p in _ckpt(lora_run, step).iterdir()}
        assert {"adapter_model.safetensors", "adapter_config.json", "trainer_state.json"} <= files
        assert not files & {"model.safetensors", "pytorch_model.bin", "model.safetensors.index.json"}, files
        config = json.loads((_ckpt(lora_run, step) / "adapter_config.json").read_text())
        assert (config["r"], config["lora_alpha"]) == (4, 8)
        assert config["base_model_name_or_path"] == str(tiny_model_dir.absolute())  # absolute, loadable from anywhere
    adapter = load_file(_ckpt(lora_run, 1) / "adapter_model.safetensors")
    assert adapter and all("lora_" in k for k in adapter)  # the adapter's tensors only, no base weights
    assert any(k.endswith("lora_B.weight") and adapter[k].abs().sum() > 0 for k in adapter), "the adapter did not train"
    assert open_run(resume_config(lora_run), resume=True).checkpoint == _ckpt(lora_run, 2)  # validates for resume


def test_the_frozen_base_is_the_kl_reference(lora_run: Path) -> None:
    rows = read_jsonl(lora_run / "metrics.jsonl")
    assert [(r["step"], r["role"]) for r in rows] == [(1, "policy"), (2, "rubric")]
    assert abs(rows[0]["kl"]) < 1e-6  # step 1: the fresh adapter is zero, the policy is its base
    assert rows[1]["kl"] > 0  # step 2: the trained adapter moved the policy away from the base (adapter off)


def test_extra_rewards_are_summed_and_logged_per_step(lora_run: Path) -> None:
    policy, rubric = read_jsonl(lora_run / "metrics.jsonl")
    parts = policy["reward_components"]
    assert set(parts) == {"judge", "soft_overlong_punishment_reward"}
    assert -1.0 <= parts["soft_overlong_punishment_reward"] <= 0.0
    assert policy["reward_mean"] == pytest.approx(parts["judge"] + 0.5 * parts["soft_overlong_punishment_reward"])
    samples = read_jsonl(lora_run / "samples" / "phase-000-policy.jsonl")
    assert len(samples) == P * G and parts["judge"] == pytest.approx(sum(s["reward"] for s in samples) / len(samples))
    assert rubric["reward_components"] is None  # rubric steps are untouched
    for r in (policy, rubric):  # the yesno judge's per-criterion readings, both roles
        assert 0.0 <= r["judge_p_yes"] <= 1.0 and 0.0 <= r["judge_pass_rate"] <= 1.0


def test_the_adapter_checkpoint_loads_for_evaluation(lora_run: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    from evolm.backends.loading import load_model
    from evolm.cli import main

    ckpt = _ckpt(lora_run, 2)
    model, tokenizer = load_model(str(ckpt), device="cpu", dtype="float32")  # base + adapter, merged
    base, _ = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    assert type(model) is type(base) and tokenizer.padding_side == "left"
    merged, plain = model.state_dict(), base.state_dict()
    assert set(merged) == set(plain)
    assert any(not torch.equal(merged[k], plain[k]) for k in plain), "the adapter was not merged in"

    (tmp_path / "q.jsonl").write_text(json.dumps({"prompt": "What is 2 + 2?"}) + "\n")
    assert main(["rubric", "--model", str(ckpt), "--input", str(tmp_path / "q.jsonl"), "--output",
                 str(tmp_path / "r.jsonl"), "--max-new-tokens", "8", "--device", "cpu"]) == 0
    assert [set(r) >= {"prompt", "rubric", "rubric_text"} for r in read_jsonl(tmp_path / "r.jsonl")] == [True]


def test_resume_loads_the_adapter(lora_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(lora_run, copy)
    shutil.rmtree(_ckpt(copy, 2))  # as if killed during step 2: resume from checkpoint 1
    with pytest.raises(RunError, match="model.lora of a run cannot change on resume"):
        resume_config(copy, ["model.lora.r=0"])
    cfg = resume_config(copy, ["grpo.report_to=[]"])
    assert run(cfg, resume=True) == copy
    rows = read_jsonl(copy / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["kl"] > 0  # step 2 started from the trained adapter (a fresh one would be the base: kl 0)
    files = {p.name for p in _ckpt(copy, 2).iterdir()}
    assert "adapter_model.safetensors" in files and "model.safetensors" not in files


def _offline_run(lora_run: Path) -> Path:
    runs = sorted((lora_run.parent / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs  # one W&B run for one evolm run, ended with it
    return runs[0]


def test_wandb_offline_run_holds_evolm_metrics_config_and_samples(lora_run: Path) -> None:
    offline = _offline_run(lora_run)
    data = next(offline.glob("run-*.wandb")).read_bytes()  # the run's records, as wandb sync would upload them
    for key in (b"train/evolm/judge_p_yes", b"train/evolm/judge_pass_rate", b"train/evolm/reward/judge",
                b"train/evolm/reward/soft_overlong_punishment_reward", b"train/evolm/tied_groups"):
        assert key in data, key
    assert b'"samples_per_prompt":2' in data and b'"lora":{"r":4' in data  # evolm's config in the run's config
    tables = sorted((offline / "files" / "media" / "table").glob("completions_*.table.json"))
    assert tables
    table: dict[str, Any] = json.loads(tables[-1].read_text())
    columns = {"prompt", "completion", "role", "rubric", "a_pos", "a_neg", "score", "s_pos", "s_neg"}
    assert columns <= set(table["columns"])
    assert {row[table["columns"].index("role")] for t in tables for row in json.loads(t.read_text())["data"]} == \
        {"policy", "rubric"}


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.lora.r=8", "grpo.sync_ref_model=true"], "grpo.sync_ref_model has no reference model to sync"),
    (["model.lora.r=8"], "model.lora needs peft: pip install 'evolm[lora]'"),
    (["grpo.report_to=wandb"], "grpo.report_to=wandb needs wandb: pip install 'evolm[wandb]'"),
])
def test_lora_and_wandb_launch_problems_are_refused_before_any_model_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overrides: list[str], message: str) -> None:
    import importlib.util

    from evolm.config import load_config
    from evolm.errors import InputError

    if "needs" in message:  # the package missing
        missing = message.split(" needs ")[1].split(":")[0]
        find_spec = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name == missing else find_spec(name, *a))
    cfg = load_config(None, [f"output_dir={tmp_path / 'r'}", "model.name=/nonexistent/model", *overrides])
    with pytest.raises(InputError, match=re.escape(message)):
        run(cfg)
    assert not (tmp_path / "r").exists()


def test_lora_settings_reach_peft() -> None:
    from evolm.config import load_config
    from evolm.training import trl_adapter

    assert trl_adapter._peft_config(load_config(None)) is None  # r=0: off, every weight trains
    lora = trl_adapter._peft_config(load_config(None, ["model.lora.r=8", "model.lora.alpha=32",
                                                       "model.lora.dropout=0.1"]))
    assert (lora.r, lora.lora_alpha, lora.lora_dropout, lora.target_modules) == (8, 32, 0.1, "all-linear")
    assert lora.task_type == "CAUSAL_LM"
    named = trl_adapter._peft_config(load_config(None, ["model.lora.r=2",
                                                        "model.lora.target_modules=[q_proj, v_proj]"]))
    assert set(named.target_modules) == {"q_proj", "v_proj"}
