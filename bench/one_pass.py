"""One generation pass per policy step: a step's rubrics riding along in TRL's call vs a call of their own.

The engine-level effect of ``rubric.with_answers`` (``trl_adapter`` contract item 8), with the lengths fixed so
that sampling luck cancels: the demo's policy step (SmolLM2-135M, 2 questions x 4 answers, 2 rubrics) where every
answer is exactly ``L_a`` tokens and every rubric exactly ``L_r`` (EOS suppressed before, forced at the length).
``separate``: the rubrics in one ``generate`` call (T=0.6), then the answers in another (TRL's settings, T=1.0).
``joint``: one call, through the adapter's ``_joint_generate`` exactly as a training step runs it. One warm-up
call, then each timed once per setting, interleaved.

    .venv/bin/python bench/one_pass.py                      # (L_a, L_r) = (64, 480), (160, 480), (480, 480)
    .venv/bin/python bench/one_pass.py --lengths 160:480
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import print_header, table  # noqa: E402


class Length:
    """Rows ``rows`` end exactly at ``length`` sequence tokens: EOS forbidden before, forced then (``force``)."""

    def __init__(self, rows: list[int], length: int | None, eos: int) -> None:
        self.rows, self.length, self.eos = rows, length, eos

    def __call__(self, input_ids, scores):  # noqa: ANN001, ANN204
        if self.length is not None and input_ids.shape[1] >= self.length:
            scores[self.rows] = float("-inf")
            scores[self.rows, self.eos] = 0.0
        else:
            scores[self.rows, self.eos] = float("-inf")
        return scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--lengths", default="64:480,160:480,480:480", help="L_a:L_r pairs, comma-separated")
    args = ap.parse_args()

    import torch
    from transformers import GenerationConfig

    from evolm import trl_adapter
    from evolm.backends.base import SamplingParams
    from evolm.backends.hf import HFBackend
    from evolm.contrast import policy_messages
    from evolm.models import load_model
    from evolm.prompts import load_prompts
    from evolm.rubrics import rubric_messages

    model, tok = load_model(args.model, device="cpu", dtype="float32")
    questions = load_prompts("builtin:demo")[:2]
    eos = tok.eos_token_id
    answer_ids = [tok.apply_chat_template(policy_messages(q, "You are a helpful assistant."), add_generation_prompt=True,
                                          return_dict=False) for q in questions for _ in range(4)]
    width = max(map(len, answer_ids))
    ids = torch.full((len(answer_ids), width), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, x in enumerate(answer_ids):
        ids[i, width - len(x):], mask[i, width - len(x):] = torch.tensor(x), 1
    backend = HFBackend(model, tok)
    print_header("A policy step's generation: rubrics in their own call vs riding along", {
        "model": args.model, "answers": len(answer_ids), "rubrics": len(questions), "answer_prompt_tokens": width,
        "lengths (L_a:L_r)": args.lengths, "sampling": "answers T=1.0, rubrics T=0.6 (unconstrained), top-p 0.95"})

    def separate(la: int, lr: int) -> float:
        t0 = time.perf_counter()
        rubric_ids, _, _ = backend.prompts([rubric_messages(q) for q in questions], SamplingParams(0.6, 0.95, lr, None))
        rw = max(map(len, rubric_ids))
        r_ids = torch.full((len(rubric_ids), rw), tok.pad_token_id)
        r_mask = torch.zeros_like(r_ids)
        for i, x in enumerate(rubric_ids):
            r_ids[i, rw - len(x):], r_mask[i, rw - len(x):] = torch.tensor(x), 1
        with torch.no_grad():
            model.generate(input_ids=r_ids, attention_mask=r_mask, do_sample=True, temperature=0.6, top_p=0.95, top_k=0,
                           max_new_tokens=lr, pad_token_id=tok.pad_token_id,
                           logits_processor=[Length(list(range(len(rubric_ids))), rw + lr, eos)])
            model.generate(input_ids=ids, attention_mask=mask, generation_config=config(la),
                           logits_processor=[Length(list(range(len(answer_ids))), width + la, eos)])
        return time.perf_counter() - t0

    def config(n: int) -> GenerationConfig:
        return GenerationConfig(do_sample=True, temperature=1.0, top_p=0.95, top_k=0, max_new_tokens=n,
                                eos_token_id=[eos], pad_token_id=tok.pad_token_id)

    def joint(la: int, lr: int) -> float:
        t0 = time.perf_counter()
        params = SamplingParams(0.6, 0.95, lr, None)
        rubric_ids, opened, _ = backend.prompts([rubric_messages(q) for q in questions], params)
        job = trl_adapter.RideAlong(backend, rubric_ids, opened, None, params)
        full = max(width, *map(len, rubric_ids))
        rows = list(range(len(answer_ids), len(answer_ids) + len(questions)))
        with torch.no_grad():
            trl_adapter._joint_generate(model, model.generate, tok, job)(
                input_ids=ids, attention_mask=mask, generation_config=config(max(la, lr)),
                logits_processor=[Length(list(range(len(answer_ids))), full + la, eos), Length(rows, None, eos)])
        return time.perf_counter() - t0

    separate(8, 8), joint(8, 8)  # warm-up
    out = []
    for spec in args.lengths.split(","):
        la, lr = map(int, spec.split(":"))
        torch.manual_seed(0)
        s = separate(la, lr)
        torch.manual_seed(0)
        j = joint(la, lr)
        out.append([la, lr, s, j, s / j])
        print(f"[one_pass] L_a={la} L_r={lr}: separate {s:.1f} s, joint {j:.1f} s", file=sys.stderr, flush=True)
    print(table(["answer tokens L_a", "rubric tokens L_r", "separate calls s", "one joint call s", "speed-up"], out))


if __name__ == "__main__":
    main()
