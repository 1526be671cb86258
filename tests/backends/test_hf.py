"""HFBackend on the tiny random model: batching and order, seeding, shared-prefix log-probs, candidates.

The session-wide ``tiny_backend`` is shared with other test files, so tests that need other
settings build their own ``HFBackend`` over its model and tokenizer, and leave the model in eval mode.
"""

from __future__ import annotations

import copy
import math
import os
from typing import Any

import pytest
import torch

from evolm.backends.base import Backend, Conversation, SamplingParams
from evolm.backends.hf import HFBackend
from evolm.backends.prefix import MIN_SHARED_PREFIX, PrefixForward, prefix_groups
from evolm.judge.judge import Judge, JudgeItem
from evolm.judge.parse import DIGITS
from evolm.judge.prompts import prob_messages, yesno_messages
from evolm.rubrics import Criterion, Rubric, parse_rubric, write_rubrics
from evolm.scores import scores_of


def conv(text: str, system: str | None = None) -> Conversation:
    msgs = [{"role": "system", "content": system}] if system else []
    return msgs + [{"role": "user", "content": text}]


def backend_with(tiny_backend: HFBackend, batch_size: int, share_prefix: bool = True) -> HFBackend:
    return HFBackend(tiny_backend.model, tiny_backend.tokenizer, batch_size=batch_size, share_prefix=share_prefix)


@pytest.fixture(scope="module")
def sharp_model(tiny_backend: HFBackend) -> object:
    """A copy of the tiny model with large random weights.

    The tiny model's small initial weights make greedy decoding emit the same newline for every
    prompt; with weights of scale 0.5 each prompt gets its own continuation, so a row mix-up shows.
    """
    model = copy.deepcopy(tiny_backend.model)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model.eval()


# ----------------------------------------------------------------------------- prefix_groups


@pytest.mark.parametrize(
    ("encoded", "min_shared", "expected"),
    [
        ([[1, 2, 3, 4], [1, 2, 3, 5], [9, 9]], 2, [([0, 1], 3), ([2], 0)]),
        ([], 2, []),
        ([[1, 2, 3]], 1, [([0], 0)]),
        # input order does not matter; members come back sorted
        ([[9, 9], [1, 2, 3, 5], [1, 2, 3, 4]], 2, [([1, 2], 3), ([0], 0)]),
        # the group's prefix is the shortest common one
        ([[1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 7, 7]], 2, [([0, 1, 2], 2)]),
        # below the threshold: no group
        ([[1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 7, 7]], 3, [([0, 1], 4), ([2], 0)]),
        # exactly at the threshold: grouped
        ([[1, 2, 3, 8], [1, 2, 3, 9]], 3, [([0, 1], 3)]),
        ([[1, 2, 3, 8], [1, 2, 3, 9]], 4, [([0], 0), ([1], 0)]),
        # duplicates and a sequence that is a prefix of another: each keeps one own token
        ([[5, 6, 7], [5, 6, 7]], 2, [([0, 1], 2)]),
        ([[5, 6, 7, 8, 9], [5, 6, 7]], 2, [([0, 1], 2)]),
        # two groups interleaved in the input
        ([[1, 1, 1, 2], [3, 3, 3, 4], [1, 1, 1, 5], [3, 3, 3, 6], [7]], 3,
         [([0, 2], 3), ([1, 3], 3), ([4], 0)]),
        # answers to two questions after common instructions: grouped per question, not all at the
        # instructions' length (4 x 2 shared tokens would save 6; two groups of 2 x 5 save 10)
        ([[7, 7, 1, 1, 1, 8], [7, 7, 2, 2, 2, 8], [7, 7, 1, 1, 1, 9], [7, 7, 2, 2, 2, 9]], 2,
         [([0, 2], 5), ([1, 3], 5)]),
    ],
)
def test_prefix_groups(encoded: list[list[int]], min_shared: int, expected: list[tuple[list[int], int]]) -> None:
    groups = prefix_groups(encoded, min_shared)
    assert groups == expected
    assert sorted(i for members, _ in groups for i in members) == list(range(len(encoded)))
    for members, shared in groups:
        if shared:
            prefix = encoded[members[0]][:shared]
            assert all(encoded[i][:shared] == prefix and len(encoded[i]) > shared for i in members)


# ----------------------------------------------------------------------------- generate


def test_is_a_backend(tiny_backend: HFBackend) -> None:
    assert isinstance(tiny_backend, Backend)
    assert tiny_backend.generate([], SamplingParams()) == []
    assert tiny_backend.next_token_logprobs([], ["Yes"]) == []


PROMPTS = [
    conv("Hi"),
    conv("Explain gravity to a child in a few short sentences, please.", system="You are a helpful assistant."),
    conv("What is 2 + 2?"),
    conv("Write a short poem about the sea. " * 4),
    conv("No"),
]


@pytest.mark.slow
def test_generate_keeps_input_order(tiny_backend: HFBackend, sharp_model: object) -> None:
    """Rows are batched by length (batch_size 2 < 5 rows of different lengths) and come back in input order."""
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    batched = HFBackend(sharp_model, tiny_backend.tokenizer, batch_size=2).generate(PROMPTS, params)
    alone = [HFBackend(sharp_model, tiny_backend.tokenizer, batch_size=1).generate([p], params)[0] for p in PROMPTS]
    assert len(batched) == len(PROMPTS)
    assert all(isinstance(t, str) for t in batched)
    assert len(set(alone)) == len(PROMPTS)  # every row has its own text, so a shuffle would show
    assert batched == alone


@pytest.mark.slow
def test_greedy_is_deterministic(tiny_backend: HFBackend, sharp_model: object) -> None:
    backend = HFBackend(sharp_model, tiny_backend.tokenizer, batch_size=3)
    a = backend.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=6, seed=1))
    b = backend.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=6, seed=2))
    c = backend.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=6, seed=None))
    assert a == b == c
    assert any(a)


@pytest.mark.slow
def test_seeded_sampling_is_reproducible(tiny_backend: HFBackend) -> None:
    backend = backend_with(tiny_backend, batch_size=2)
    prompts = PROMPTS[:3]
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=6, seed=11)
    first = backend.generate(prompts, params)
    torch.manual_seed(999)  # the global RNG state must not matter
    assert backend.generate(prompts, params) == first
    other = backend.generate(prompts, SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=6, seed=12))
    assert other != first


@pytest.mark.slow
def test_training_flag_restored(tiny_backend: HFBackend) -> None:
    model = tiny_backend.model
    seen: list[bool] = []
    handle = model.register_forward_pre_hook(lambda module, args: seen.append(module.training))
    try:
        backend = backend_with(tiny_backend, batch_size=2)
        long_prompts = [prob_messages(JudgeItem("What is 2 + 2? " * 10, a)) for a in ("4", "5", "four")]
        for training in (True, False):
            model.train(training)
            backend.generate(PROMPTS[:2], SamplingParams(temperature=0.0, max_new_tokens=2))
            assert model.training is training
            backend.next_token_logprobs(long_prompts + PROMPTS[:1], ["Yes", "No"])  # shared-prefix and single paths
            assert model.training is training
    finally:
        handle.remove()
        model.eval()
    assert seen and not any(seen)  # every forward ran in eval mode


def test_training_flag_restored_after_error(tiny_backend: HFBackend) -> None:
    model = tiny_backend.model

    def boom(module: object, args: object) -> None:
        raise RuntimeError("boom")

    handle = model.register_forward_pre_hook(boom)
    model.train()
    try:
        with pytest.raises(RuntimeError, match="boom"):
            tiny_backend.last_token_logits([[1, 2, 3]])
        assert model.training
    finally:
        handle.remove()
        model.eval()


# ----------------------------------------------------------------------------- next-token log-probs


def _mixed_batch() -> list[Conversation]:
    """Three groups of five prompts sharing long prefixes, interleaved with singletons and a duplicate."""
    convs: list[Conversation] = []
    rubric_text = "1. (weight 0.80) The final answer is 4.\n2. (weight 0.20) Shows the steps."
    questions = ["What is 2 + 2? Show your work step by step.", "Write a short poem about the sea.",
                 "Explain gravity to a child."]
    answers = ["4", "It is four, because 2 + 2 = 4.", "5", "The quick brown fox", "yes no yes no 0 1 2 3"]
    for k, answer in enumerate(answers):
        for q in questions:
            if q.startswith("Write"):
                convs.append(yesno_messages(q, "The poem is about the sea.", answer))
            else:
                convs.append([{"role": "system", "content": "You grade."},
                              {"role": "user", "content": f"Question:\n{q}\n\nRubric:\n{rubric_text}\n\nAnswer:\n{answer}"}])
        if k == 1:
            convs.append(conv("Hi"))
        if k == 3:
            convs.append(conv("A lone prompt that shares nothing long with the others."))
    convs.append(list(convs[0]))  # a duplicate of a group member
    return convs


def _reference_logits(backend: HFBackend, encoded: list[list[int]]) -> torch.Tensor:
    """Each sequence alone, unpadded: the ground truth."""
    with torch.no_grad():
        return torch.stack([
            backend.model(input_ids=torch.tensor([e]), use_cache=False).logits[0, -1] for e in encoded
        ])


@pytest.mark.slow
@pytest.mark.parametrize("which", ["tiny", "sharp"])
def test_shared_prefix_matches_plain_forward(
    which: str, tiny_backend: HFBackend, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Reusing a group's prefix cache gives the log-probs of a plain forward pass (batch_size 2 < group size 5).

    The sharp model makes the check sensitive: there, restarting the suffix positions at 0 moves
    log-probs by about 17, one prefix token too many by several units.
    """
    model = tiny_backend.model if which == "tiny" else request.getfixturevalue("sharp_model")
    convs = _mixed_batch()
    shared = HFBackend(model, tiny_backend.tokenizer, batch_size=2, share_prefix=True)
    plain = HFBackend(model, tiny_backend.tokenizer, batch_size=2, share_prefix=False)
    encoded = shared._encode(convs, {})

    groups = prefix_groups(encoded, MIN_SHARED_PREFIX)
    multi = [g for g in groups if len(g[0]) > 1]
    assert len(multi) == 3 and sorted(len(g[0]) for g in multi) == [5, 5, 6]  # the duplicate joins its group
    assert all(s >= MIN_SHARED_PREFIX for _, s in multi)
    assert sum(len(g[0]) == 1 for g in groups) == 2

    calls: list[list[list[int]]] = []  # the groups of each batched prefix pass
    original = PrefixForward.group_caches

    def spy(self: PrefixForward, enc: list[list[int]], chunk: list[tuple[list[int], int]], base: Any, common: int
            ) -> Any:
        calls.append([members for members, shared in chunk if shared > common])
        return original(self, enc, chunk, base, common)

    monkeypatch.setattr(PrefixForward, "group_caches", spy)
    got = shared.last_token_logits(encoded)
    assert sorted(g for c in calls for g in c) == sorted(g[0] for g in multi)  # the shared path ran, each group once
    assert max(len(c) for c in calls) == 2  # groups side by side, batch_size at a time
    calls.clear()
    want = plain.last_token_logits(encoded)
    assert calls == []
    ref = _reference_logits(shared, encoded)

    assert got.shape == want.shape == (len(convs), model.config.vocab_size)
    lp_got, lp_want, lp_ref = (torch.log_softmax(x, dim=-1) for x in (got, want, ref))
    torch.testing.assert_close(lp_got, lp_ref, atol=1e-4, rtol=0)
    torch.testing.assert_close(lp_want, lp_ref, atol=1e-4, rtol=0)
    # the rows differ from each other, so a row mix-up would be caught
    assert (lp_ref[0] - lp_ref[1]).abs().max() > 1e-3
    torch.testing.assert_close(lp_got[0], lp_got[-1], atol=1e-5, rtol=0)  # duplicate rows agree

    cands = list(DIGITS) + ["Yes", "No"]
    a = shared.next_token_logprobs(convs, cands)
    b = plain.next_token_logprobs(convs, cands)
    assert len(a) == len(b) == len(convs)
    for row_a, row_b in zip(a, b, strict=True):
        assert row_a.keys() == row_b.keys() == set(cands)
        for c in cands:
            assert row_a[c] == pytest.approx(row_b[c], abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["tiny", "sharp"])
def test_the_prefix_every_question_shares_runs_once(
    which: str, tiny_backend: HFBackend, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """A judge batch over several answers, each asked several criteria (the yesno judge's batch): the instructions
    every prompt starts with run once, each answer's prefix (question and answer) continues from a copy, each
    criterion from a copy of its answer's; logits as a plain forward pass."""
    model = tiny_backend.model if which == "tiny" else request.getfixturevalue("sharp_model")
    pairs = [("What is 2 + 2?", "It is four, because two plus two makes four, as anyone who counts on their fingers "
                                "from two, adding one and then one more, will find for themselves."),
             ("Write a poem about the sea.", "The sea is grey at dawn and blue at noon; it breaks on the rocks and "
                                             "pulls the shingle back, and the gulls cry over it all day long."),
             ("Name a colour.", "Red is a colour: the colour of ripe tomatoes, of post boxes in Britain, of stop "
                                "signs on most roads of the world, and of the sky at some sunsets.")]
    criteria = ["The answer is correct and complete.", "The answer is short.", "The answer is polite."]
    convs = [yesno_messages(q, c, a) for q, a in pairs for c in criteria]
    convs.append(yesno_messages("A lone question", "Another criterion entirely, alone.", "x"))  # a group of one
    shared = HFBackend(model, tiny_backend.tokenizer, batch_size=2, share_prefix=True)
    encoded = shared._encode(convs, {})
    prefixes: list[int] = []  # tokens of every common-prefix pass
    chunks: list[list[tuple[list[int], int]]] = []  # the groups of every batched group-prefix pass
    original_prefix, original_groups = PrefixForward.prefix_cache, PrefixForward.group_caches

    def spy_prefix(self: PrefixForward, tokens: list[int]) -> Any:
        prefixes.append(len(tokens))
        return original_prefix(self, tokens)

    def spy_groups(self: PrefixForward, enc: list[list[int]], chunk: list[tuple[list[int], int]], base: Any,
                   common: int) -> Any:
        chunks.append(chunk)
        return original_groups(self, enc, chunk, base, common)

    monkeypatch.setattr(PrefixForward, "prefix_cache", spy_prefix)
    monkeypatch.setattr(PrefixForward, "group_caches", spy_groups)
    got = shared.last_token_logits(encoded)
    common = min(len(os.path.commonprefix([encoded[0], e])) for e in encoded)
    assert common >= MIN_SHARED_PREFIX
    assert prefixes == [common]  # the instructions: once
    answers = sorted(members for c in chunks for members, n in c if n > common)
    assert answers == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]  # each answer's prefix once, its criteria from it
    assert [len(c) for c in chunks] == [2, 2]  # 3 answers + the lone prompt, side by side, batch_size at a time
    ref = _reference_logits(shared, encoded)
    torch.testing.assert_close(torch.log_softmax(got, -1), torch.log_softmax(ref, -1), atol=1e-4, rtol=0)


def test_candidate_token_ids_find_spellings(tiny_backend: HFBackend) -> None:
    tok = tiny_backend.tokenizer
    ids = tiny_backend.candidate_token_ids("Yes")
    for spelling in ("Yes", " Yes"):
        enc = tok.encode(spelling, add_special_tokens=False)
        assert len(enc) == 1 and enc[0] in ids
    assert all(tok.decode([i]).strip().lower() == "yes" for i in ids)
    assert tiny_backend.candidate_token_ids(" yes") == ids  # one key per word
    assert not set(ids) & set(tiny_backend.candidate_token_ids("No"))
    assert tiny_backend.candidate_token_ids("Supercalifragilistic") == []


def test_next_token_logprobs_values(tiny_backend: HFBackend) -> None:
    """Each candidate's value is the log-sum-exp of its spellings' log-probs; unknown words get -inf."""
    convs = [conv("Is 2 + 2 = 4? Answer Yes or No."), conv("Score (0-9):")]
    out = tiny_backend.next_token_logprobs(convs, ["Yes", "No", "7", "Supercalifragilistic"])
    encoded = tiny_backend._encode(convs, {})
    ref = torch.log_softmax(_reference_logits(tiny_backend, encoded), dim=-1)
    for row, r in zip(out, ref, strict=True):
        for c in ("Yes", "No", "7"):
            ids = tiny_backend.candidate_token_ids(c)
            assert ids
            assert row[c] == pytest.approx(math.log(sum(math.exp(r[i].item()) for i in ids)), abs=1e-5)
            assert row[c] < 0
        assert row["Supercalifragilistic"] == -math.inf
        assert sum(math.exp(row[c]) for c in ("Yes", "No", "7")) < 1


@pytest.mark.slow
def test_judge_modes_on_tiny_model(tiny_backend: HFBackend) -> None:
    """The probability modes run end to end and give the same scores with or without prefix sharing."""
    rubric = Rubric((Criterion("The final answer is 4.", 0.8), Criterion("Shows the steps.", 0.2)))
    items = [JudgeItem("What is 2 + 2? Show your work.", a, rubric) for a in ("4", "2 + 2 = 4", "5")]
    items.append(JudgeItem("What is 2 + 2?", "4", None))
    for mode in ("prob", "yesno"):
        a = scores_of(Judge(backend_with(tiny_backend, 2, True), mode=mode).score(items))
        b = scores_of(Judge(backend_with(tiny_backend, 2, False), mode=mode).score(items))
        assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in a)
        assert a == pytest.approx(b, abs=1e-4)


# ----------------------------------------------------------------------------- the real model


@pytest.mark.slow
def test_smollm2_writes_rubric_and_judges(smollm2_backend: HFBackend) -> None:
    question = "What is the capital of France? Answer in one word."
    params = SamplingParams(temperature=0.0, max_new_tokens=200, seed=0)
    written = write_rubrics(smollm2_backend, [question], params)
    assert len(written) == 1 and isinstance(written[0].text, str) and written[0].text
    assert written[0].valid in (0.0, 1.0)
    assert written[0].rubric == parse_rubric(written[0].text)
    assert written[0].valid == 0.0 or written[0].rubric is not None
    # A 135M model often answers the question instead of writing JSON; the judging half then uses a
    # fixed two-criterion rubric, so the real model still judges with a rubric in both modes.
    rubric = written[0].rubric or Rubric((Criterion("The answer names Paris.", 0.8), Criterion("The answer is one word.", 0.2)))
    items = [JudgeItem(question, "Paris", rubric), JudgeItem(question, "Bananas are yellow and rich in potassium.", rubric)]
    for mode in ("prob", "yesno"):
        scores = scores_of(Judge(smollm2_backend, mode=mode).score(items))
        assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores), (mode, scores)
        assert scores[0] != pytest.approx(scores[1], abs=1e-6), (mode, scores)


def test_generate_tells_tokens_at_each_step_and_its_bar_shows_them(tiny_backend: HFBackend,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Inside a batch of long replies the progress moves per token: on_tokens is told after every decoding step
    (the rows still generating), and progress=True shows a bar of rows with the tokens so far."""
    convs = [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(5)]
    told: list[int] = []
    before = tiny_backend.usage.completion_tokens
    tiny_backend.generate(convs, SamplingParams(0.0, 1.0, 6, 0), on_tokens=told.append, progress=True)
    assert len(told) >= 2 * 1 and all(1 <= n <= 4 for n in told)  # a step at a time, at most a batch of 4 rows
    assert sum(told) == tiny_backend.usage.completion_tokens - before  # every token told, once
    err = capsys.readouterr().err
    assert "generate" in err and "5/5" in err and f"{sum(told)} tokens" in err

