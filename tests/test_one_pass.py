"""One generation pass per policy step (``rubric.with_answers``, ``trl_adapter`` contract item 8).

The step's rubrics ride along in TRL's own ``generate`` call. What a user relies on: TRL gets exactly what a call
of its own would have returned, the rubrics are what a call of their own would have written (same temperature,
budget and grammar), and a run makes one generation call per policy step instead of two.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch

from evolm import trl_adapter
from evolm.backends.base import SamplingParams
from evolm.backends.hf import HFBackend
from evolm.constrained import RUBRIC_SCHEMA
from evolm.contrast import policy_messages
from evolm.rubrics import parse_rubric, rubric_messages

QUESTIONS = ["What is 2 + 2?", "Write a haiku about autumn.", "Name three colours."]


def _load(model_dir: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)


def _trl_inputs(tok: Any, questions: list[str]) -> dict[str, torch.Tensor]:
    """TRL's call (GRPOTrainer._generate_single_turn): policy prompts' ids, left-padded, with their mask."""
    prompts = [tok.apply_chat_template(policy_messages(q, "You are a helpful assistant."), add_generation_prompt=True, return_dict=False)
               for q in questions]
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), tok.pad_token_id)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
    return {"input_ids": ids, "attention_mask": mask}


def _job(model: Any, tok: Any, params: SamplingParams, questions: list[str]) -> trl_adapter.RideAlong:
    backend = HFBackend(model, tok)
    ids, opened, starts = backend.prompts([rubric_messages(q) for q in questions], params)
    return trl_adapter.RideAlong(backend, ids, opened, starts, params)


def test_greedy_joint_call_returns_what_separate_calls_return(tiny_model_dir: Path) -> None:
    """Greedy decoding makes both sides deterministic: TRL's rows and the riding rows equal their own calls."""
    from transformers import GenerationConfig

    model, tok = _load(tiny_model_dir)
    config = GenerationConfig(do_sample=False, max_new_tokens=12, eos_token_id=[tok.eos_token_id],
                              pad_token_id=tok.pad_token_id)
    inputs = _trl_inputs(tok, QUESTIONS)
    alone = model.generate(**inputs, generation_config=config)
    params = SamplingParams(1.0, 1.0, 12, None)  # TRL's temperature: no scale on the riding rows
    job = _job(model, tok, params, QUESTIONS[:2])
    joint = trl_adapter._joint_generate(model, model.generate, tok, job)(**inputs, generation_config=config)
    assert torch.equal(joint, alone)  # same width: cut after TRL's last row ended, as its own call stops
    separate = HFBackend(model, tok).generate([rubric_messages(q) for q in QUESTIONS[:2]],
                                              SamplingParams(0.0, 1.0, 12, None))
    assert job.result() == separate
    assert trl_adapter._joint_generate(model, model.generate, tok, job)(**inputs, generation_config=config).shape \
        == alone.shape  # the job is done: a later call goes through untouched


def test_riding_rows_get_their_own_budget_and_trl_rows_are_cut_where_they_end(tiny_model_dir: Path) -> None:
    from transformers import GenerationConfig

    model, tok = _load(tiny_model_dir)
    config = GenerationConfig(do_sample=True, temperature=1.0, top_p=0.95, top_k=0, max_new_tokens=16,
                              eos_token_id=[tok.eos_token_id], pad_token_id=tok.pad_token_id)
    inputs = _trl_inputs(tok, QUESTIONS)
    n, width = inputs["input_ids"].shape
    job = _job(model, tok, SamplingParams(0.6, 0.95, 4, None), QUESTIONS[:2])
    full = max(width, *(len(x) for x in job.ids))
    seen: dict[str, torch.Tensor] = {}

    def recording(**kw: Any) -> torch.Tensor:
        seen["out"] = out = model.generate(**kw)
        seen["processors"] = kw["logits_processor"]
        return out

    torch.manual_seed(0)
    joint = trl_adapter._joint_generate(model, recording, tok, job)(**inputs, generation_config=config)
    out, ends = seen["out"], {tok.eos_token_id, tok.pad_token_id}
    assert {type(p).__name__ for p in seen["processors"]} == {"RowScale", "RowBudget"}
    riding = out[n:, full:]
    assert all(int(t) in ends for t in riding[:, 4:].flatten())  # at most 4 tokens, then EOS / padding
    assert len(job.result()) == 2
    assert torch.equal(joint[:, :width], inputs["input_ids"])  # TRL's prompt columns, as TRL slices them
    used = joint.shape[1] - width
    assert torch.equal(joint[:, width:], out[:n, full:full + used])
    assert all(int(t) in ends for t in out[:n, full + used:].flatten())  # nothing of TRL's rows was cut off


def test_row_processors_touch_their_rows_only() -> None:
    scores = torch.zeros(3, 5) + torch.arange(5.0)
    ids = torch.zeros(3, 7, dtype=torch.long)
    scaled = trl_adapter.RowScale([2], 2.0)(ids, scores.clone())
    assert torch.equal(scaled[:2], scores[:2]) and torch.equal(scaled[2], 2 * scores[2])
    assert torch.equal(trl_adapter.RowBudget([1], 8, 4)(ids, scores.clone()), scores)  # 7 tokens: under the budget
    forced = trl_adapter.RowBudget([1], 7, 4)(ids, scores.clone())
    assert torch.equal(forced[[0, 2]], scores[[0, 2]]) and forced[1].argmax() == 4 and forced[1, :4].max() == float("-inf")
    calls = []
    only = trl_adapter.RowsOnly([0, 2], lambda i, s: calls.append(i.shape) or s + 1)(ids, scores.clone())
    assert calls == [(2, 7)] and torch.equal(only[1], scores[1]) and torch.equal(only[[0, 2]], scores[[0, 2]] + 1)



def test_constrained_riding_rows_parse_and_trl_rows_stay_free(short_model_dir: Path) -> None:
    from transformers import GenerationConfig

    model, tok = _load(short_model_dir)
    config = GenerationConfig(do_sample=True, temperature=1.0, top_p=0.95, top_k=0, max_new_tokens=512,
                              eos_token_id=[tok.eos_token_id], pad_token_id=tok.pad_token_id)
    inputs = _trl_inputs(tok, QUESTIONS[:2])
    job = _job(model, tok, SamplingParams(0.6, 0.95, 512, None, json_schema=RUBRIC_SCHEMA), QUESTIONS[1:])
    torch.manual_seed(0)
    joint = trl_adapter._joint_generate(model, model.generate, tok, job)(**inputs, generation_config=config)
    assert all(parse_rubric(t) is not None for t in job.result()), job.result()
    answers = tok.batch_decode(joint[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert all(parse_rubric(a) is None for a in answers)


def _trainer(**changes: Any) -> Any:
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=True, temperature=1.0, top_p=0.95, top_k=0, max_new_tokens=64)
    args = types.SimpleNamespace(use_vllm=False, use_transformers_continuous_batching=False, generation_kwargs=None)
    trainer = types.SimpleNamespace(evolm_with_answers=True, args=args, generation_config=config,
                                    accelerator=types.SimpleNamespace(num_processes=1))
    for key, value in changes.items():
        owner = trainer.args if hasattr(trainer.args, key) else trainer.generation_config \
            if hasattr(trainer.generation_config, key) else trainer.accelerator if key == "num_processes" else trainer
        setattr(owner, key, value)
    return trainer


@pytest.mark.parametrize(("changes", "params", "why"), [
    ({}, SamplingParams(0.6, 0.95, 64, None), None),
    ({}, SamplingParams(0.6, 0.95, 32, None), None),  # a smaller budget: EOS forced after it
    ({}, SamplingParams(0.6, 0.95, 64, None, json_schema=RUBRIC_SCHEMA), None),
    ({"evolm_with_answers": False}, SamplingParams(0.6, 0.95, 64, None), "with_answers is off"),
    ({"num_processes": 2}, SamplingParams(0.6, 0.95, 64, None), "several processes"),
    ({"use_vllm": True}, SamplingParams(0.6, 0.95, 64, None), "vLLM"),
    ({"use_transformers_continuous_batching": True}, SamplingParams(0.6, 0.95, 64, None), "continuous batching"),
    ({"top_p": 1.0}, SamplingParams(0.6, 0.95, 64, None), "top_p differs"),
    ({"repetition_penalty": 1.1}, SamplingParams(0.6, 0.95, 64, None), "repetition_penalty"),
    ({"min_p": 0.1}, SamplingParams(0.6, 0.95, 64, None), "min_p"),
    ({}, SamplingParams(0.6, 0.95, 128, None), "exceeds"),
    ({}, SamplingParams(0.6, 0.95, 32, None, json_schema=RUBRIC_SCHEMA), "grammar cannot be cut short"),
    ({}, SamplingParams(0.0, 0.95, 64, None), "greedy"),
])
def test_what_one_call_cannot_carry_is_refused(changes: dict, params: SamplingParams, why: str | None) -> None:
    got = trl_adapter.one_pass_refusal(_trainer(**changes), params)
    assert (got is None) if why is None else (got is not None and why in got), got


def test_a_run_makes_one_generation_call_per_policy_step(tiny_model_dir: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """coevolve, 2 policy steps then 2 rubric steps: with_answers saves exactly one generate() per policy step,
    and the policy rows still carry the step's rubric (in the samples and in what the judge read)."""
    from test_coevolve import metrics, samples, tiny_config
    from transformers.generation.utils import GenerationMixin

    from evolm.coevolve import run

    original, calls = GenerationMixin.generate, []

    def counting(self: Any, *a: Any, **kw: Any) -> Any:
        calls.append(1)
        return original(self, *a, **kw)

    monkeypatch.setattr(GenerationMixin, "generate", counting)
    counts, runs = {}, {}
    for on in (True, False):
        calls.clear()
        out = tmp_path / f"with-answers-{on}"
        run(tiny_config(tiny_model_dir, out, "schedule.cycles=1", "schedule.steps_per_phase=2",
                        "schedule.save_every=100", f"rubric.with_answers={str(on).lower()}"))
        counts[on], runs[on] = len(calls), out
    assert counts[False] - counts[True] == 2, counts
    for on in (True, False):
        policy = samples(runs[on])["phase-000-policy.jsonl"]
        assert len(policy) == 2 * 2 * 2 and all(r["rubric_text"] for r in policy)  # what the judge read
        shared = {}
        for r in policy:  # one rubric per question, shared by its answers
            assert shared.setdefault((r["step"], r["slot"]), r["rubric_text"]) == r["rubric_text"]
        assert [m["role"] for m in metrics(runs[on])] == ["policy", "policy", "rubric", "rubric"]
