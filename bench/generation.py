"""What a training step's generation costs on CPU, and what makes it cheaper.

A CPU training step of the learning study spends ~90% of its time in ``transformers.generate`` (TRL's
rollouts and the step's rubrics; py-spy on ``configs/learning/judge-1b5/evolm.yaml``): SmolLM2-135M with a LoRA
adapter, 16 rows, prompts of ~600 tokens (the rubric conversation). This measures one such ``generate`` call,
side by side in one process, with the same prompts, seed and number of new tokens (``min_new_tokens`` =
``max_new_tokens``, so every variant decodes exactly as many tokens):

- ``dynamic``: transformers' default ``DynamicCache`` (what TRL uses unless ``cache_implementation`` is set):
  every decoded token concatenates onto each layer's K and V, copying the whole cache;
- ``static``: ``cache_implementation="static"`` (a cache allocated once at full length, written in place);
- ``+ merged``: the LoRA adapter merged into the base weights for the call (``merge_adapter`` / ``unmerge_adapter``),
  so a token costs the base model's matmuls only;
- ``bfloat16 copy`` (``--bf16``): a bfloat16 copy of the merged model generates (half the weight and cache traffic;
  AMX/AVX512-BF16 matmuls where the CPU has them), as a vLLM engine in bfloat16 would for an fp32 trainer.

Each variant is timed ``--repeats`` times: a call that decodes 1 token (the prefill) and one that decodes
``--new-tokens``; the difference over the extra tokens is the cost of one decoded token step (all rows at once), and
its ratio to ``dynamic``'s is the speed-up. Each variant's greedy text (2 short rows) is checked against
``dynamic``'s: a faster path must not change what is generated.

    .venv/bin/python -m bench.generation                       # 16 rows x 600 prompt tokens, 64 new tokens
    .venv/bin/python -m bench.generation --rows 16 --prompt-tokens 600 --new-tokens 128 --repeats 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common import print_header, table


def _prompts(tokenizer: Any, rows: int, tokens: int) -> list[str]:
    """``rows`` chat prompts of about ``tokens`` tokens each, lengths varied by up to 10% (left padding)."""
    words = ("the rubric names one checkable property of a good answer and the judge reads it carefully "
             "before it decides whether the answer meets it ").split()
    prompts = []
    for r in range(rows):
        n = int(tokens * (0.9 + 0.1 * r / max(1, rows - 1)))
        body = " ".join(words[(r + i) % len(words)] for i in range(n))
        ids = tokenizer(body, add_special_tokens=False)["input_ids"][:n]
        text = tokenizer.decode(ids)
        prompts.append(tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                     add_generation_prompt=True))
    return prompts


def _generate(model: Any, batch: dict[str, Any], new: int, cache: str | None, sample: bool) -> Any:
    import torch

    torch.manual_seed(0)
    kwargs: dict[str, Any] = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": sample,
                              "pad_token_id": batch["pad"]}
    if sample:
        kwargs.update(temperature=1.0, top_p=0.95)
    if cache:
        kwargs["cache_implementation"] = cache
    with torch.no_grad():
        return model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="built-in name or local model dir")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=600)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--lora-rank", type=int, default=16, help="0: no adapter")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--bf16", action="store_true", help="also: a bfloat16 copy of the merged model generates")
    parser.add_argument("--only", nargs="*", help="these variants only (and dynamic, the baseline)")
    args = parser.parse_args()
    if args.new_tokens < 2 or args.rows < 1 or args.prompt_tokens < 1 or args.repeats < 1:
        parser.error("--new-tokens must be at least 2 (a decode step is timed over the tokens after the first), "
                     "--rows, --prompt-tokens and --repeats at least 1")

    import torch
    from peft import LoraConfig, get_peft_model

    from evolm.backends.loading import load_model

    model, tok = load_model(args.model, device="cpu", dtype="float32")
    if args.lora_rank:
        model = get_peft_model(model, LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank,
                                                 target_modules="all-linear", init_lora_weights=False))
    model.eval()
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    enc = tok(_prompts(tok, args.rows, args.prompt_tokens), return_tensors="pt", padding=True,
              add_special_tokens=False)
    batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "pad": tok.pad_token_id}

    variants: list[tuple[str, str | None, bool]] = [("dynamic", None, False), ("static", "static", False)]
    if args.lora_rank:
        variants += [("dynamic + merged", None, True), ("static + merged", "static", True)]
    if args.bf16:
        variants += [("static + merged, bfloat16 copy", "static", True)]
    if args.only:
        variants = [v for v in variants if v[0] == "dynamic" or v[0] in args.only]
    small = {"input_ids": batch["input_ids"][:2, -64:], "attention_mask": batch["attention_mask"][:2, -64:],
             "pad": batch["pad"]}  # the greedy check and the warm-up: 2 rows of the prompts' last 64 tokens
    greedy_ref = _generate(model, small, 16, None, sample=False)
    rows, base = [], None
    for name, cache, merged in variants:
        if merged:
            model.merge_adapter()
        gen_model = model
        if "bfloat16" in name:
            import copy

            gen_model = copy.deepcopy(model.get_base_model()).to(torch.bfloat16)
        try:
            same = torch.equal(_generate(gen_model, small, 16, cache, sample=False), greedy_ref)
            prefill, decode = [], []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                _generate(gen_model, batch, 1, cache, sample=True)
                t1 = time.perf_counter()
                out = _generate(gen_model, batch, args.new_tokens, cache, sample=True)
                t2 = time.perf_counter()
                prefill.append(t1 - t0)
                decode.append((t2 - t1) - (t1 - t0))
            assert out.shape[1] - batch["input_ids"].shape[1] == args.new_tokens
        finally:
            if merged:
                model.unmerge_adapter()
        step = statistics.median(decode) / (args.new_tokens - 1)
        base = base or step
        rows.append([name, f"{statistics.median(prefill):.1f}", f"{1000 * step:.0f}", f"{base / step:.2f}x",
                     "yes" if same else "NO"])
    print_header(f"generate: {args.model}, LoRA r={args.lora_rank}",
                 {"rows": args.rows, "prompt_tokens": batch["input_ids"].shape[1], "new_tokens": args.new_tokens,
                  "repeats": args.repeats})
    print(table(["variant", "prefill s", "ms per decoded token step", "decode speed-up", "greedy text as dynamic"],
                rows))


if __name__ == "__main__":
    main()
