"""LoRA (``model.lora`` through PEFT) on one tiny co-evolving run (``lora_run``, tests/training/conftest.py):
checkpoints hold the adapter alone and name a usable base; the frozen base is the KL reference; the checkpoint loads
for evaluation (``load_model``, ``evolm rubric --model``); resuming loads the adapter.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from evolm.errors import RunError
from evolm.runs.jsonl import read_jsonl
from evolm.runs.rundir import complete_checkpoints, open_run, resume_config
from evolm.training.run import run

pytest.importorskip("peft")

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


@pytest.mark.slow
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


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.lora.r=8", "grpo.sync_ref_model=true"], "grpo.sync_ref_model has no reference model to sync"),
    (["model.lora.r=8"], "model.lora needs peft: pip install 'evolm[lora]'"),
])
def test_lora_launch_problems_are_refused_before_any_model_loads(
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


@pytest.mark.slow
def test_a_warm_start_adapter_is_trained_on_not_replaced(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`evolm sft-rubrics --lora-r R --keep-adapter` saves the adapter alone; a run whose model.name is that folder
    (model.lora.r = R) trains the same adapter on, against a frozen copy of it (TRL's "ref" adapter), and its
    checkpoints name the base."""
    from tiny_run import tiny_config

    from evolm.cli import main
    from evolm.config import load_config
    from evolm.errors import InputError
    from evolm.training.sft import load_seed

    seed = tmp_path / "seed.jsonl"
    seed.write_text("".join(json.dumps({"prompt": r["prompt"], "rubric": r["rubric"]}) + "\n"
                            for r in load_seed("builtin:seed")[:4]))
    warm = tmp_path / "warm"
    assert main(["sft-rubrics", "--model", str(tiny_model_dir), "--output", str(warm), "--seed-set", str(seed),
                 "--epochs", "1", "--batch-size", "2", "--max-length", "4096", "--lora-r", "4", "--lora-alpha", "8",
                 "--keep-adapter", "--learning-rate", "1e-2", "--device", "cpu", "--dtype", "float32"]) == 0
    files = {p.name for p in warm.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= files and "model.safetensors" not in files
    assert json.loads((warm / "adapter_config.json").read_text())["base_model_name_or_path"] == \
        str(tiny_model_dir.absolute())
    start = load_file(warm / "adapter_model.safetensors")

    with pytest.raises(InputError, match="is a LoRA adapter of rank 4, which the run trains on; model.lora.r says 8"):
        run(load_config(None, [f"output_dir={tmp_path / 'no'}", f"model.name={warm}", "model.lora.r=8"]))
    cfg = tiny_config(tiny_model_dir, tmp_path / "run", "schedule.cycles=1", "schedule.steps_per_phase=1",
                      "schedule.save_every=100", "grpo.learning_rate=1e-4", f"model.name={warm}", "model.lora.r=4",
                      "model.lora.alpha=8", "grpo.report_to=[]")
    assert run(cfg) == tmp_path / "run"
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert rows[0]["kl"] == 0 and rows[1]["kl"] > 0  # the reference is the warm start itself, not the bare base
    ckpt = _ckpt(tmp_path / "run", 2)
    end = load_file(ckpt / "adapter_model.safetensors")
    assert set(end) == set(start)  # the same adapter, trained on: two steps at lr 1e-4 moved it a little
    assert any(not torch.equal(end[k], start[k]) for k in start)
    b = [k for k in start if "lora_B" in k]
    assert max(float(start[k].abs().max()) for k in b) > 1e-2  # the warm start's B is far from a fresh adapter's 0
    assert max(float((end[k] - start[k]).abs().max()) for k in b) < 1e-3
    assert json.loads((ckpt / "adapter_config.json").read_text())["base_model_name_or_path"] == \
        str(tiny_model_dir.absolute())  # the base, not the warm start's folder: the checkpoint loads alone
