"""The dry run's plan (training/dry_run.py): the rows and tables `evolm train --dry-run` prints, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolm.config import load_config
from evolm.errors import InputError
from evolm.training import dry_run
from evolm.training.dry_run import launch_plan, vllm_plan

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PAPER = CONFIGS / "paper-qwen3-8b.yaml"
DEMO = ["data.prompts=builtin:demo"]


def test_importance_sampling_rule_in_the_plan() -> None:
    plan = dict(launch_plan(load_config(PAPER), 4))
    assert plan["importance sampling"].startswith("per token, ratio exp(trainer - vLLM log-prob) truncated at 2.0, on "
                                                  "the policy-gradient term only (the reference's rule)")


def test_the_dry_run_plan_counts_vllm_calls_and_weight_syncs_per_step() -> None:
    rows = dict(launch_plan(load_config(PAPER, DEMO), 4))
    assert "policy steps 1 (its rubrics); rubric steps 1 (fresh answers), 2 while the buffer is empty" \
        in rows["vLLM per step"]
    assert "weight syncs: 1 per step" in rows["vLLM per step"]
    assert "vLLM per step" not in dict(launch_plan(load_config(None, ["grpo.use_vllm=false"]), 1))


@pytest.mark.parametrize(("config", "overrides", "calls"), [
    ("baselines/base-rubrics.yaml", [], "policy steps 1 on the first (the frozen rubrics), 0 after; weight"),
    ("baselines/gpt41-rubrics.yaml", [], "policy steps 0 (a fixed writer); weight"),
    ("baselines/sequential.yaml", [], "policy steps 0 (the writer stage's checkpoint); rubric steps 1 (rubrics to "
     "condition on); weight"),
    ("paper-qwen3-8b.yaml", ["contrast.pairs=inferred_question"], "rubric steps 3 (answers, questions guessed from "
     "them, answers to the guessed questions); weight"),
    ("paper-qwen3-8b.yaml", ["contrast.pairs=inferred_question", "contrast.answerer=Qwen/Qwen3-0.6B"],
     "rubric steps 0 (answers from contrast.answerer); weight"),
    ("paper-qwen3-8b.yaml", ["contrast.pairs=combined"], "rubric steps up to 6; weight"),
    ("paper-qwen3-8b.yaml", ["contrast.pairs=combined", "contrast.answerer=Qwen/Qwen3-0.6B"], "rubric steps up to 1;"),
    ("paper-qwen3-8b.yaml", ["contrast.pairs=combined", "contrast.combined_weights={temporal: 1, rubric_conditioned: 1}"],
     "rubric steps up to 3;"),
    ("paper-qwen3-8b.yaml", ["schedule.regime=judge_only", "judge.mode=likert"], "policy steps 0; weight"),
])
def test_the_vllm_row_counts_the_steps_own_calls(config: str, overrides: list[str], calls: str) -> None:
    assert calls in vllm_plan(load_config(CONFIGS / config, [*DEMO, *overrides]))


def test_the_plan_yields_tables_and_lines_in_order_and_refuses_at_the_memory_table() -> None:
    cfg = load_config(PAPER, DEMO)
    items = list(dry_run.plan(cfg, dry_run.Options(4, accelerate_config=str(CONFIGS / "accelerate-zero3.yaml"),
                                                   prompt_tokens=1024)))
    titles = [i.title.split(":")[0].split(" (")[0] for i in items if isinstance(i, dry_run.Table)]
    assert titles == ["evolm train --dry-run", "memory per training GPU, estimated", "GPU plan",
                      "layouts of 8 GPUs"]
    assert "assumed 80 GiB" in items[[isinstance(i, dry_run.Table) for i in items].index(True, 1)].title
    assert items[-1] == "dry run: the config is valid for this launch; nothing was loaded"
    shown = []
    with pytest.raises(InputError, match="exceeds --gpu-memory 40"):
        for item in dry_run.plan(cfg, dry_run.Options(4, gpu_memory=40, prompt_tokens=1024)):
            shown.append(item)
    assert isinstance(shown[-1], dry_run.Table) and shown[-1].title.startswith("memory per training GPU")


def test_a_hub_model_is_counted_with_the_built_in_tokenizer_standing_in() -> None:
    tokenizer, stand_in = dry_run.counting_tokenizer(load_config(PAPER, DEMO))
    assert tokenizer is not None and stand_in
    tokenizer, stand_in = dry_run.counting_tokenizer(load_config(PAPER, [*DEMO, "model.name=/no/such/model/dir"]))
    assert stand_in  # a path that is not there reads as a hub id
