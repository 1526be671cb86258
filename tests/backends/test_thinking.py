"""Thinking judges on the hf backend, with a tiny model whose tokenizer thinks like Qwen3 (tests/thinking_model.py).

The paper runs its Qwen3 judge with thinking on. The probability modes must then read the score
token after a closed (empty) think block, never where the model wants to open one; the generative
modes must see a reply cut inside ``<think>`` as having no score.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from thinking_model import INSTRUCT_STYLE, OPEN_THINK_STYLE, QWEN3_STYLE, build_thinking_model_dir, build_tokenizer

from evolm.backends.base import EMPTY_THINK_BLOCK, Conversation, SamplingParams
from evolm.backends.hf import HFBackend
from evolm.judge.judge import Judge, JudgeItem
from evolm.judge.parse import DIGITS, parse_judge_score
from evolm.judge.prompts import prob_messages
from evolm.rubrics import Criterion, Rubric
from evolm.scores import scores_of

RUBRIC = Rubric((Criterion("The final answer is 4.", 0.7), Criterion("Shows the addition.", 0.3)))
ITEMS = [JudgeItem("What is 2 + 2?", a, RUBRIC) for a in ("4", "2 + 2 = 4", "<think>hm</think>5")]
ITEMS.append(JudgeItem("What is 2 + 2?", "4", rubric_text="The answer is 4."))
THINKING_FLAGS = [{}, {"enable_thinking": True}, {"enable_thinking": False}]


def conv(text: str) -> Conversation:
    return [{"role": "system", "content": "You grade."}, {"role": "user", "content": text}]


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_thinking_model_dir(tmp_path_factory.mktemp("tiny-qwen3-style"))


@pytest.fixture(scope="module")
def qwen3(qwen3_dir: Path) -> HFBackend:
    """The tiny model behind the hybrid Qwen3-style template (loaded the way the judge loads models)."""
    from evolm.backends.loading import load_backend

    backend = load_backend(str(qwen3_dir), device="cpu", dtype="float32", batch_size=2)
    assert isinstance(backend, HFBackend)
    return backend


@pytest.fixture(scope="module")
def open_think(qwen3: HFBackend) -> HFBackend:
    """The same model behind a template that always opens ``<think>`` (Qwen3-Thinking-2507 style)."""
    tokenizer = build_tokenizer(OPEN_THINK_STYLE)
    assert tokenizer.get_vocab() == qwen3.tokenizer.get_vocab()  # same ids: the model fits
    return HFBackend(qwen3.model, tokenizer, batch_size=2)


def rendered(backend: HFBackend, c: Conversation, **kwargs: object) -> str:
    return backend.tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True, **kwargs)


def test_template_thinks_like_qwen3(qwen3: HFBackend, open_think: HFBackend, tiny_backend: HFBackend) -> None:
    c = conv("Hi")
    assert rendered(qwen3, c).endswith("<|im_start|>assistant\n")
    assert rendered(qwen3, c, enable_thinking=True).endswith("<|im_start|>assistant\n")
    assert rendered(qwen3, c, enable_thinking=False).endswith("<|im_start|>assistant\n" + EMPTY_THINK_BLOCK)
    assert rendered(open_think, c).endswith("<|im_start|>assistant\n<think>\n")
    assert qwen3.thinking and open_think.thinking and not tiny_backend.thinking
    assert qwen3.tokenizer.decode(qwen3.tokenizer.encode("<think>x</think>", add_special_tokens=False),
                                  skip_special_tokens=True) == "<think>x</think>"  # plain added tokens, as in Qwen3


def _reference_logprobs(backend: HFBackend, ids: list[int], candidates: list[str]) -> dict[str, float]:
    """One unpadded forward pass on exactly ``ids``: the ground truth for a candidate's log-probability."""
    with torch.no_grad():
        row = torch.log_softmax(backend.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1], dim=-1)
    return {c: torch.logsumexp(row[backend.candidate_token_ids(c)], dim=0).item() for c in candidates}


@pytest.mark.slow
@pytest.mark.parametrize("flags", THINKING_FLAGS, ids=["default", "thinking-on", "thinking-off"])
def test_score_token_is_read_after_an_empty_think_block(qwen3: HFBackend, open_think: HFBackend, flags: dict) -> None:
    convs = [prob_messages(it) for it in ITEMS]
    cands = list(DIGITS) + ["Yes", "No"]
    # whatever the flag, the prompt is the one Qwen3 renders with thinking off: the empty block, then the reply
    want_ids = qwen3._tokenize([rendered(qwen3, c, enable_thinking=False) for c in convs])
    assert qwen3._encode(convs, flags, after_thinking=True) == want_ids
    assert open_think._encode(convs, flags, after_thinking=True) == want_ids  # an opened block is closed empty
    assert all(qwen3.tokenizer.decode(ids).endswith("assistant\n" + EMPTY_THINK_BLOCK) for ids in want_ids)
    assert qwen3._encode(convs, flags) != want_ids or flags == {"enable_thinking": False}  # generation is left alone

    got = qwen3.next_token_logprobs(convs, cands, chat_template_kwargs=flags)
    for row, ids in zip(got, want_ids, strict=True):
        ref = _reference_logprobs(qwen3, ids, cands)
        for c in cands:
            assert row[c] == pytest.approx(ref[c], abs=1e-4), c
    # and not where the model would open its think block: that read differs
    bare = qwen3._tokenize([rendered(qwen3, convs[0])])[0]
    assert qwen3.tokenizer.decode(bare).endswith("assistant\n")
    ref_bare = _reference_logprobs(qwen3, bare, cands)
    assert bare != want_ids[0] and len(bare) < len(want_ids[0])  # a different, earlier position
    assert max(abs(got[0][c] - ref_bare[c]) for c in cands) > 0  # (a random tiny model: the gap is small)


def test_template_without_thinking_is_untouched(tiny_backend: HFBackend, qwen3: HFBackend) -> None:
    """ChatML without think tags, and a template that only drops think blocks from past turns (Instruct-2507)."""
    instruct = HFBackend(qwen3.model, build_tokenizer(INSTRUCT_STYLE))
    assert "<think>" in instruct.tokenizer.chat_template and not instruct.thinking
    convs = [prob_messages(it) for it in ITEMS]
    for backend in (tiny_backend, instruct):
        assert backend._encode(convs, {}, after_thinking=True) == backend._encode(convs, {})
    assert HFBackend(qwen3.model, qwen3.tokenizer, thinking=False)._encode(convs, {}, after_thinking=True) == (
        qwen3._encode(convs, {}))  # the detection can be overridden


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["prob", "yesno", "rar_explicit"])
def test_probability_modes_agree_whatever_the_thinking_flag(qwen3: HFBackend, open_think: HFBackend, mode: str) -> None:
    scores = [scores_of(Judge(qwen3, mode=mode, chat_template_kwargs=f).score(ITEMS)) for f in THINKING_FLAGS]
    scores.append(scores_of(Judge(open_think, mode=mode).score(ITEMS)))
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores[0])
    for other in scores[1:]:
        assert other == pytest.approx(scores[0], abs=1e-5)


@pytest.mark.slow
def test_reply_opened_by_the_template_and_cut_has_no_score(open_think: HFBackend) -> None:
    """The template opened ``<think>``; the reply (6 tokens) ends before ``</think>``: it is unfinished thinking."""
    convs = [conv("Rate this answer."), conv("What is 2 + 2?")]
    replies = open_think.generate(convs, SamplingParams(temperature=0.0, max_new_tokens=6))
    assert all(r.startswith("<think>") and "</think>" not in r for r in replies)
    judge = Judge(open_think, mode="generative", max_new_tokens=6)
    assert scores_of(judge.score(ITEMS[:2])) == [None, None]


def test_reply_decoding_keeps_think_tags(qwen3: HFBackend) -> None:
    """Even with a tokenizer that marks the tags special, the reply keeps them, so a cut reply reads as thinking."""
    reply = '<think>\nthe score is 0.9</think>\n\n{"score": 0.2}'
    cut = '<think>\nso "score": 0.9'
    special = HFBackend(qwen3.model, build_tokenizer(QWEN3_STYLE, special_think_tags=True))
    for backend in (qwen3, special):
        for text in (reply, cut):
            ids = backend.tokenizer.encode(text, add_special_tokens=False) + [backend.tokenizer.eos_token_id]
            assert backend._decode(ids) == text
    assert parse_judge_score(special._decode(special.tokenizer.encode(cut, add_special_tokens=False))) is None
    # what plain decoding would hand the judge: the reasoning, read as a score
    cut_ids = special.tokenizer.encode(cut, add_special_tokens=False)
    dropped = special.tokenizer.decode(cut_ids, skip_special_tokens=True)
    assert "<think>" not in dropped and parse_judge_score(dropped) == pytest.approx(0.9)
    assert math.isfinite(parse_judge_score(qwen3._decode(qwen3.tokenizer.encode(reply, add_special_tokens=False))))
