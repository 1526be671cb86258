"""bfloat16 against float32 weights on this CPU: one forward pass, timed side by side (the evidence behind the
warning ``backends.devices.resolve_dtype`` gives for bfloat16 on a CPU without AVX512-BF16 or AMX).

Same model, same random token batch, both weights loaded in one process and timed round-robin (after a warm-up), so
the ratio holds even on a busy machine. CPU seconds are this process's; torch's CPUID checks are printed beside.

    .venv/bin/python -m bench.cpu_bfloat16                                  # SmolLM2-135M, 4 x 300 tokens
    .venv/bin/python -m bench.cpu_bfloat16 --model qwen2.5-coder-1.5b-instruct --batch 1
"""

from __future__ import annotations

import argparse
import time

from bench.common import print_header, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a built-in name or a local model directory")
    ap.add_argument("--batch", type=int, default=4, help="rows in the batch (default 4)")
    ap.add_argument("--tokens", type=int, default=300, help="tokens per row (default 300, a judge prompt's size)")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes per weight type (default 3)")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from evolm.backends.devices import cpu_computes_bfloat16
    from evolm.backends.loading import resolve_model_path

    path = resolve_model_path(args.model)
    print_header("bfloat16 against float32 weights on this CPU: one forward pass",
                 {"model": args.model, "batch": args.batch, "tokens": args.tokens, "repeats": args.repeats,
                  "avx512_bf16": torch.cpu._is_avx512_bf16_supported(), "amx": torch.cpu._is_amx_tile_supported(),
                  "native_bfloat16": cpu_computes_bfloat16()})
    ids = torch.randint(100, 4000, (args.batch, args.tokens), generator=torch.Generator().manual_seed(0))
    models = {dt: AutoModelForCausalLM.from_pretrained(path, dtype=dt).eval() for dt in (torch.float32, torch.bfloat16)}
    cpu: dict[torch.dtype, list[float]] = {dt: [] for dt in models}
    logits = {}
    with torch.no_grad():
        for r in range(1 + args.repeats):
            for dt, m in models.items():
                t0 = time.process_time()
                logits[dt] = m(ids).logits.float()
                if r:
                    cpu[dt].append(time.process_time() - t0)
    base = min(cpu[torch.float32])
    agree = (logits[torch.float32].argmax(-1) == logits[torch.bfloat16].argmax(-1)).float().mean().item()
    rows = [(str(dt).removeprefix("torch."), min(c), min(c) / base) for dt, c in cpu.items()]
    print(table(["weights", "CPU s per pass (best of repeats)", "time / float32"], rows))
    print(f"\nnext-token argmax agreement, bfloat16 vs float32: {agree:.3f}")


if __name__ == "__main__":
    main()
