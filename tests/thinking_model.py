"""A tiny random causal LM whose tokenizer thinks like Qwen3, built here (nothing is downloaded).

The tokenizer is a small byte-level BPE trained on a few sentences, with ChatML special tokens and
``<think>``/``</think>`` as plain added tokens (as in Qwen3, where they are not "special", so
decoding with ``skip_special_tokens`` keeps them). Two chat templates, written after Qwen3's:

- ``QWEN3_STYLE`` (the hybrid Qwen3 models): after the assistant header it writes the empty block
  ``<think>\\n\\n</think>\\n\\n`` only when ``enable_thinking`` is false; otherwise the model opens
  ``<think>`` itself. Like Qwen3's, it drops the thinking of assistant turns in the history.
- ``OPEN_THINK_STYLE`` (Qwen3-Thinking-2507, R1 distills): the prompt always ends with ``<think>\\n``,
  so the reply holds only the end of the thinking and ``</think>``.
- ``INSTRUCT_STYLE`` (Qwen3-Instruct-2507): mentions think blocks only to drop them from past
  turns; the model never thinks, so nothing may be added to its prompts.
"""

from __future__ import annotations

from pathlib import Path

from conftest import build_tiny_tokenizer, save_tiny_model

_MESSAGES = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- set content = message['content'] %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
)
QWEN3_STYLE = _MESSAGES + (
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
OPEN_THINK_STYLE = _MESSAGES + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
INSTRUCT_STYLE = "{#- past turns lose their <think> blocks; the reply never thinks -#}" + _MESSAGES + (
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 Yes No yes no",
    '{"criteria": [{"criterion": "The final answer is 42.", "weight": 0.8, '
    '"scoring_levels": {"1.0": "a", "0.0": "b"}}]}',
    "Question: What is 2 + 2? Answer: 4. Rubric criterion weight score reasoning.",
    "Let me think step by step. Okay, the user asks for a rating.",
]


def build_tokenizer(template: str = QWEN3_STYLE, special_think_tags: bool = False):
    """The tiny tokenizer with think tags (``special_think_tags``: marked special, unlike Qwen3)."""
    from tokenizers import AddedToken

    fast = build_tiny_tokenizer(CORPUS, template)
    tags = [AddedToken(t, special=special_think_tags, normalized=False) for t in ("<think>", "</think>")]
    if special_think_tags:
        fast.add_special_tokens({"additional_special_tokens": tags})
    else:
        fast.add_tokens(tags)
    return fast


def build_thinking_model_dir(path: Path, template: str = QWEN3_STYLE, seed: int = 0, hidden: int = 32) -> Path:
    """Write a tiny random LlamaForCausalLM with the thinking tokenizer to ``path`` and return it."""
    return save_tiny_model(path, build_tokenizer(template), seed, hidden)
