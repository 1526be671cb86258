"""TRL's vLLM server mode: evolm's extra text (rubrics, fresh answers) goes through TRL's own code path.

``grpo.vllm_mode: server`` (``trl vllm-serve`` / ``vllm serve`` on other GPUs) cannot run here, so
this test runs TRL's real ``VLLMGeneration.generate`` (server branch) and its real ``VLLMClient``
against a small local HTTP server that speaks the three routes the client uses (``/health``,
``/v1/models``, ``/v1/completions`` with token-id prompts). Only vLLM's presence is faked
(``is_vllm_available``: the client refuses to start without the package). What is checked is what a
server-mode run relies on: evolm's sampling settings and the rubric grammar reach the server in the
completions body, completions come back in order, and TRL's own settings are restored afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi import Request  # noqa: E402  (module level: FastAPI resolves the handlers' annotations here)
from openai_server import run_app  # noqa: E402

from evolm.backends.base import SamplingParams  # noqa: E402
from evolm.training.trl_generation import TrainerGenerate  # noqa: E402


@contextmanager
def _completions_server(tokenizer: Any) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A vLLM-like server on a free port: completion ``i`` of a request is the tokens of ``"reply i"``."""
    from fastapi import FastAPI

    bodies: list[dict[str, Any]] = []
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "policy", "object": "model"}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict[str, Any]:
        body = await request.json()
        bodies.append(body)
        choices = []
        for i, prompt in enumerate(body["prompt"]):
            for _ in range(body.get("n", 1)):
                ids = tokenizer.encode(f"reply {i}", add_special_tokens=False)
                choices.append({"index": len(choices), "text": f"reply {i}", "prompt_token_ids": prompt,
                                "token_ids": ids, "logprobs": None, "finish_reason": "stop"})
        return {"id": "cmpl-0", "object": "text_completion", "model": body["model"], "choices": choices}

    with run_app(app) as port:
        yield f"http://127.0.0.1:{port}", bodies


def _server_mode_generation(url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """TRL's ``VLLMGeneration`` in server mode with its real ``VLLMClient``, built as ``_init_vllm`` builds it
    (minus the NCCL weight-sync communicator, which needs GPUs: weights are not synced in this test)."""
    import trl.generation.vllm_client as vllm_client
    from trl.generation.vllm_generation import VLLMGeneration

    monkeypatch.setattr(vllm_client, "is_vllm_available", lambda: True)
    vg = object.__new__(VLLMGeneration)  # __init__ would start the communicator
    vg.mode, vg.enable_sleep_mode = "server", False
    vg.accelerator = SimpleNamespace(is_main_process=True, process_index=0, num_processes=1)
    vg.temperature, vg.top_p, vg.top_k, vg.min_p, vg.repetition_penalty = 1.0, 0.95, 0, None, 1.0
    vg.max_completion_length, vg.logprobs, vg.structured_outputs_regex = 16384, 0, None
    vg.generation_kwargs = {"seed": 7}
    vg.vllm_client = vllm_client.VLLMClient(base_url=url, connection_timeout=5)
    return vg


def test_rubrics_are_generated_through_trl_server_mode(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoTokenizer

    from evolm.backends.constrained import RUBRIC_EBNF, RUBRIC_SCHEMA

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    with _completions_server(tok) as (url, bodies):
        vg = _server_mode_generation(url, monkeypatch)
        trainer = SimpleNamespace(
            args=SimpleNamespace(use_vllm=True, chat_template_kwargs=None), vllm_generation=vg,
            processing_class=tok, state=SimpleNamespace(global_step=3), _last_loaded_step=3,
            accelerator=SimpleNamespace(num_processes=1, process_index=0))
        generate = TrainerGenerate(trainer)
        convs = [[{"role": "user", "content": f"Write a rubric for question {i}."}] for i in range(3)]

        out = generate(convs, SamplingParams(0.6, 0.9, 480, json_schema=RUBRIC_SCHEMA))

        assert out == ["reply 0", "reply 1", "reply 2"]
        (body,) = bodies
        assert body["prompt"] == [tok.apply_chat_template(c, tokenize=True, add_generation_prompt=True,
                                                          return_dict=False) for c in convs]
        assert (body["n"], body["temperature"], body["top_p"], body["max_tokens"]) == (1, 0.6, 0.9, 480)
        assert body["seed"] == 7  # TRL's own generation_kwargs still travel
        grammar = body["structured_outputs"]["grammar"]  # vLLM's structured outputs: the rubric grammar
        assert RUBRIC_EBNF.splitlines()[0] in grammar
        # TRL's settings are back for its own (policy) generation
        assert (vg.temperature, vg.top_p, vg.max_completion_length) == (1.0, 0.95, 16384)
        assert vg.generation_kwargs == {"seed": 7}

        generate(convs[:1], SamplingParams(1.0, 1.0, 64))  # a fresh answer: never constrained
        assert "structured_outputs" not in bodies[1] and bodies[1]["max_tokens"] == 64
