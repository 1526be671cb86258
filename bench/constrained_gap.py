"""Constrained rubrics and GRPO: how far the sampling distribution is from the one GRPO trains.

With ``rubric.constrained`` a rubric is sampled from q, the model's distribution p restricted to the
tokens the rubric grammar allows at each step and renormalised: q(t) = p(t) / p(A), A the allowed
set. TRL computes the log-probabilities of those tokens under p itself (temperature-scaled logits,
no mask), so the policy gradient and the KL term treat a constrained sample as if p had drawn it.
Per token the two differ by exactly ``log q(t) - log p(t) = -log p(A)``, the log of the mass the
mask removed; its gradient, ``grad log p(A)``, is the term GRPO leaves out.

This script samples constrained rubrics as ``evolm rubric --constrained`` does (the same xgrammar
processor), then replays each one: one teacher-forced forward pass gives log p of every sampled
token (as TRL computes it), and an xgrammar matcher walked along the tokens gives the allowed set
at every step. It prints, per prompt and overall: tokens, mean log p and log q per token, the mean
gap ``-log p(A)`` per token and per sample, and the share of tokens where the mask removed more
than 1% or more than half of p's mass.

    nice -n 10 .venv/bin/python -m bench.constrained_gap              # SmolLM2-135M, 5 prompts x 2 samples
    .venv/bin/python -m bench.constrained_gap --model Qwen/Qwen3-1.7B --samples 4 --device cuda
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from bench.common import print_header, table

PROMPTS = [
    "Write a haiku about autumn.",
    "How do I boil an egg?",
    "Give me three tips for a job interview.",
    "Explain what a VPN is in two sentences.",
    "Convert 3.5 kilometres to miles.",
]


def sample(backend, question: str, n: int, args) -> list[list[int]]:  # noqa: ANN001 - HFBackend
    """``n`` constrained rubric samples for ``question``: completion token ids, EOS included, as TRL keeps them."""
    import torch

    from evolm.backends.constrained import RUBRIC_SCHEMA, logits_processor, reply_start
    from evolm.backends.hf import model_vocab_size
    from evolm.backends.stopping import generation_stop_ids
    from evolm.rubrics import rubric_messages

    text = backend._render([rubric_messages(question)], {})[0]
    prompt = backend._tokenize([text])[0]
    ids = torch.tensor([prompt] * n, device=backend.device)  # [n, P]
    stops = generation_stop_ids(backend.model, backend.tokenizer)
    grammar = logits_processor(backend.tokenizer, model_vocab_size(backend.model), RUBRIC_SCHEMA,
                               [reply_start(text, backend.thinking)] * n, stops)
    torch.manual_seed(args.seed)
    with torch.no_grad():
        out = backend.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                     temperature=args.temperature, top_p=args.top_p, top_k=0,
                                     max_new_tokens=args.max_new_tokens, logits_processor=[grammar],
                                     pad_token_id=backend.tokenizer.pad_token_id)
    rows = []
    for row in out[:, ids.shape[1]:].tolist():
        end = next((k for k, t in enumerate(row) if t in stops), None)
        rows.append((prompt, row if end is None else row[: end + 1]))
    return rows


def replay(backend, prompt: list[int], completion: list[int], temperature: float) -> list[tuple[float, float]]:  # noqa: ANN001
    """Per completion token: (log p(token), log p(allowed set)) under the unconstrained model at ``temperature``."""
    import torch
    import xgrammar as xgr

    from evolm.backends.constrained import RUBRIC_SCHEMA, compiled_grammar, reply_start
    from evolm.backends.hf import model_vocab_size
    from evolm.backends.stopping import generation_stop_ids

    vocab = model_vocab_size(backend.model)
    text = backend.tokenizer.decode(prompt)
    grammar = compiled_grammar(backend.tokenizer, vocab, RUBRIC_SCHEMA, reply_start(text, backend.thinking),
                               generation_stop_ids(backend.model, backend.tokenizer))
    ids = torch.tensor([prompt + completion], device=backend.device)  # [1, P + C]
    with torch.no_grad():
        logits = backend.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # [C, V]: predicts each token
    logp = torch.log_softmax(logits / temperature, dim=-1)  # what GRPO's log-probs are (TRL scales by temperature)
    matcher = xgr.GrammarMatcher(grammar)
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    out = []
    for k, token in enumerate(completion):
        matcher.fill_next_token_bitmask(bitmask)
        row = logp[k : k + 1].clone().cpu()
        xgr.apply_token_bitmask_inplace(row, bitmask)  # disallowed tokens -> -inf
        allowed = torch.logsumexp(row[0], dim=0).item()
        out.append((logp[k, token].item(), allowed))
        if not matcher.accept_token(token):
            raise RuntimeError(f"token {token} at step {k} is outside the grammar: not a constrained sample")
    return out


def summarise(name: str, samples: list[list[tuple[float, float]]], valid: list[float], parsed: list[bool]) -> list:
    steps = [s for rows in samples for s in rows]
    gaps = [-a for _, a in steps]  # log q - log p per token, >= 0
    return [
        name, len(samples), f"{sum(parsed)}/{len(parsed)}", f"{int(sum(valid))}/{len(valid)}", len(steps),
        statistics.fmean(lp for lp, _ in steps), statistics.fmean(lp - a for lp, a in steps),
        statistics.fmean(gaps), statistics.median(gaps), max(gaps),
        statistics.fmean(-sum(a for _, a in rows) for rows in samples),
        sum(g > -math.log(0.99) for g in gaps) / len(gaps), sum(g > math.log(2) for g in gaps) / len(gaps),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--samples", type=int, default=2, help="constrained rubrics per prompt")
    p.add_argument("--temperature", type=float, default=0.6, help="rubric sampling temperature (paper: 0.6)")
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--max-new-tokens", type=int, default=384)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()

    from evolm.backends.loading import load_backend
    from evolm.rubrics import format_validity, parse_rubric

    backend = load_backend(args.model, device=args.device, dtype="float32")
    print_header("Constrained rubrics: log q (sampled) vs log p (what GRPO computes)",
                 {"model": args.model, "prompts": len(PROMPTS), "samples_per_prompt": args.samples,
                  "temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens,
                  "seed": args.seed})
    rows, everything, all_valid, all_parsed = [], [], [], []
    start = time.perf_counter()
    for question in PROMPTS:
        replays, valid, parsed = [], [], []
        for prompt, completion in sample(backend, question, args.samples, args):
            replays.append(replay(backend, prompt, completion, args.temperature))
            text = backend.tokenizer.decode(completion, skip_special_tokens=True)
            valid.append(format_validity(text))
            parsed.append(parse_rubric(text) is not None)
        rows.append(summarise(question[:32], replays, valid, parsed))
        everything += replays
        all_valid += valid
        all_parsed += parsed
    rows.append(summarise("all", everything, all_valid, all_parsed))
    print(table(["prompt", "samples", "parsed", "valid", "tokens", "mean log p", "mean log q", "gap/token",
                 "median gap", "max gap", "gap/sample", "tokens masked >1%", "tokens masked >50%"], rows))
    print(f"\ngap = log q(token) - log p(token) = -log p(allowed), in nats; {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
