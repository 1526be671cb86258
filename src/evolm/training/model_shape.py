"""The shape of a dense Llama/Qwen3-style decoder, from its ``config.json`` or a few known hub ids: what the memory
estimate (``memory``), the GPU plan (``gpu_plan``) and the checkpoint sizes are computed from. Nothing is loaded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelFacts:
    """The shape of a dense Llama/Qwen3-style decoder, as its ``config.json`` states it."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    max_positions: int = 0  # the context vLLM allocates for when grpo.vllm_max_model_length is unset
    qk_norm: bool = False  # Qwen3 normalises queries and keys per head (two head_dim weights per layer)
    score_head: bool = False  # a sequence-classification reward model: one output (hidden x 1) instead of the LM head

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def layer_parameters(self) -> int:
        """One decoder layer: attention projections, the gated MLP, two norm weights."""
        h = self.hidden
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + 3 * h * self.intermediate + norms

    def parameters(self) -> int:
        """Every weight: embeddings, layers, final norm, and the output head unless tied to the embeddings.

        >>> KNOWN_MODELS["Qwen/Qwen3-8B"].parameters()
        8190735360
        """
        head = self.hidden if self.score_head else 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.vocab * self.hidden + self.layers * self.layer_parameters() + self.hidden + head

    def lora_parameters(self, rank: int, targets: list[str]) -> int:
        """Adapter weights of rank ``rank`` on the decoder's linear layers named in ``targets`` (``all-linear``:
        all seven; PEFT leaves the output head out). A name matches a module whose name ends with it."""
        h, q, kv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        shapes = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, i),
                  "up_proj": (h, i), "down_proj": (i, h)}
        chosen = LINEAR_MODULES if "all-linear" in targets else [m for m in LINEAR_MODULES
                                                                 if any(m.endswith(t) for t in targets)]
        return self.layers * sum(rank * (shapes[m][0] + shapes[m][1]) for m in chosen)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache of one token over every layer."""
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def activation_bytes_per_token_layer(self) -> int:
        """What autograd keeps per token in one bfloat16 decoder layer (flash/SDPA attention, fp32 RMSNorm inputs):
        the two RMSNorms 6 h each, the shared q/k/v input 2 h and MLP input 2 h; q: its norm 6 q, RoPE 4 q, attention
        input and output 4 q, o_proj input 2 q; k: norm 6 kv, RoPE 4 kv, attention input 2 kv; v: 2 kv; the MLP's
        gate, SiLU output, up and product 8 I."""
        return 16 * self.hidden + 16 * self.q_dim + 14 * self.kv_dim + 8 * self.intermediate


def _qwen3(layers: int, hidden: int, intermediate: int, heads: int, tied: bool) -> ModelFacts:
    return ModelFacts(layers, hidden, intermediate, heads, 8, 128, 151936, tied, 40960, qk_norm=True)


KNOWN_MODELS: dict[str, ModelFacts] = {  # read from each model's config.json on the Hugging Face Hub
    "Qwen/Qwen3-0.6B": _qwen3(28, 1024, 3072, 16, True),
    "Qwen/Qwen3-1.7B": _qwen3(28, 2048, 6144, 16, True),
    "Qwen/Qwen3-4B": _qwen3(36, 2560, 9728, 32, True),
    "Qwen/Qwen3-8B": _qwen3(36, 4096, 12288, 32, False),
    "Qwen/Qwen3-14B": _qwen3(40, 5120, 17408, 40, False),
    "HuggingFaceTB/SmolLM2-135M-Instruct": ModelFacts(30, 576, 1536, 9, 3, 64, 49152, True, 8192),
}
KNOWN_MODELS["smollm2-135m-instruct"] = KNOWN_MODELS["HuggingFaceTB/SmolLM2-135M-Instruct"]  # the built-in models
# Qwen2.5-Coder-Instruct as evolm converts its GGUF (config.json of the converted model: both GGUFs hold an untied head)
KNOWN_MODELS["qwen2.5-coder-1.5b-instruct"] = ModelFacts(28, 1536, 8960, 12, 2, 128, 151936, False, 32768)
KNOWN_MODELS["qwen2.5-coder-0.5b-instruct"] = ModelFacts(24, 896, 4864, 14, 2, 64, 151936, False, 32768)
# The Skywork reward-model baseline (configs/baselines/skywork-rm.yaml): Llama-3.1-8B with a one-output score head,
# vocabulary 128,257 (a pad token added), as Skywork-Reward-Llama-3.1-8B's config.json states
KNOWN_MODELS["Skywork/Skywork-Reward-V2-Llama-3.1-8B-40M"] = ModelFacts(32, 4096, 14336, 32, 8, 128, 128257, False,
                                                                         131072, score_head=True)
KNOWN_MODELS["Skywork/Skywork-Reward-V2-Llama-3.1-8B"] = KNOWN_MODELS["Skywork/Skywork-Reward-V2-Llama-3.1-8B-40M"]


def model_facts(name: str) -> ModelFacts | None:
    """The shape of ``name``: its ``config.json`` if it is a local directory, its base model's if it is a LoRA
    adapter's (a warm start), else ``KNOWN_MODELS``; None if none of them."""
    adapter = Path(name) / "adapter_config.json"
    if adapter.is_file() and not (Path(name) / "config.json").is_file():
        base = json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path")
        return model_facts(str(base)) if base and str(base) != name else None
    config = Path(name) / "config.json"
    if config.is_file():
        c = json.loads(config.read_text(encoding="utf-8"))
        c = c.get("text_config", c)
        try:
            heads = int(c["num_attention_heads"])
            return ModelFacts(
                layers=int(c["num_hidden_layers"]), hidden=int(c["hidden_size"]),
                intermediate=int(c["intermediate_size"]), heads=heads,
                kv_heads=int(c.get("num_key_value_heads") or heads),
                head_dim=int(c.get("head_dim") or c["hidden_size"] // heads), vocab=int(c["vocab_size"]),
                tied_embeddings=bool(c.get("tie_word_embeddings", False)),
                max_positions=int(c.get("max_position_embeddings") or 0),
                qk_norm=str(c.get("model_type", "")).startswith("qwen3"),
                score_head=any(str(a).endswith("ForSequenceClassification") for a in c.get("architectures") or []))
        except (KeyError, TypeError, ValueError):
            return None  # not a dense decoder config this estimate knows
    return KNOWN_MODELS.get(name)
