"""``evolm sft-rubrics``: warm-start a rubric writer by supervised fine-tuning on a seed set of concrete rubrics."""

from __future__ import annotations

import argparse

from evolm.cli._common import MODEL_NAMES, positive_int, print_stderr


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive number")
    return value


def make_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sft-rubrics",
        help="warm-start a rubric writer on a seed set of rubrics (supervised fine-tuning)",
        description="Fine-tune a model on (prompt, rubric) pairs rendered with evolm's own rubric prompt, so that "
        "it writes concrete rubrics when evolm asks for one, and save it as a model directory usable wherever "
        "a model is named (evolm rubric --model DIR, model.name: DIR in evolm train). A departure from the "
        "paper, whose writer needs no warm start (docs/FIDELITY.md); the seed set and its provenance: "
        "docs/SEED_RUBRICS.md.",
    )
    p.add_argument("--model", default="smollm2-135m-instruct", help=f"the model to fine-tune: {MODEL_NAMES}")
    p.add_argument("--output", required=True, help="directory for the fine-tuned writer")
    p.add_argument("--seed-set", action="append", dest="seeds", metavar="SPEC",
                   help="JSONL of {prompt, rubric} rows, or builtin:seed (the shipped hand-written set, the "
                   "default); repeat to use several")
    p.add_argument("--gsm8k", metavar="TRAIN_JSONL",
                   help="GSM8K train file ({question, answer} per line), read in place: reference answers "
                   "become value criteria (final answer, intermediate results)")
    p.add_argument("--gsm8k-limit", type=int, default=200, help="GSM8K questions used (seeded sample; 0: all)")
    p.add_argument("--rubric-prompt", choices=("v3", "older"), default="v3",
                   help="the rubric prompt the examples are rendered with (use the one training will use)")
    p.add_argument("--epochs", type=_positive_float, default=3.0)
    p.add_argument("--learning-rate", type=_positive_float, default=5e-5)
    p.add_argument("--batch-size", type=positive_int, default=8, help="examples per optimizer step")
    p.add_argument("--lora-r", type=int, default=0,
                   help="LoRA rank (0: full fine-tuning); the adapter is merged unless --keep-adapter")
    p.add_argument("--keep-adapter", action="store_true",
                   help="with --lora-r: save the LoRA adapter alone (a few MB; it names its built-in base), for a run "
                   "whose model.name is this folder and whose model.lora.r is the same rank: it trains the adapter on")
    p.add_argument("--max-examples", type=int, default=0, help="a seeded sample of this many seed rows (0: all)")
    p.add_argument("--save-every", type=int, default=0,
                   help="also save the writer every N steps to OUTPUT/partial (a LoRA adapter with --lora-r)")
    p.add_argument("--train-layers", type=int, default=0,
                   help="train only the last N transformer layers (0: all): a cheaper backward pass on a CPU")
    p.add_argument("--detach-prefix", action="store_true",
                   help="run the prompt prefix every example shares without gradients (a forward pass only: cheaper; "
                   "the gradient then leaves out the path through the prefix)")
    p.add_argument("--lora-alpha", type=positive_int, default=16, help="LoRA scaling numerator")
    p.add_argument("--max-length", type=positive_int, default=1024, help="longest example in tokens (cut beyond)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto (a GPU if visible), cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> None:
    from evolm.errors import InputError
    from evolm.training.sft import WarmStartConfig, check_output_dir, seed_rows, warm_start

    if args.keep_adapter and not args.lora_r:
        raise InputError("--keep-adapter keeps a LoRA adapter: give --lora-r too")
    if min(args.lora_r, args.gsm8k_limit, args.max_examples, args.save_every, args.train_layers) < 0:
        raise InputError("--lora-r, --gsm8k-limit, --max-examples, --save-every and --train-layers must be >= 0")
    cfg = WarmStartConfig(model=args.model, output_dir=args.output, seeds=args.seeds or ["builtin:seed"],
                          gsm8k=args.gsm8k, gsm8k_limit=args.gsm8k_limit, rubric_prompt=args.rubric_prompt,
                          epochs=args.epochs, learning_rate=args.learning_rate, batch_size=args.batch_size,
                          lora_r=args.lora_r, lora_alpha=args.lora_alpha, keep_adapter=args.keep_adapter,
                          max_examples=args.max_examples, save_every=args.save_every,
                          train_layers=args.train_layers, detach_prefix=args.detach_prefix,
                          max_length=args.max_length, seed=args.seed, dtype=args.dtype, device=args.device)
    check_output_dir(cfg.output_dir)  # an output that cannot take the writer stops here, before the model loads
    rows = seed_rows(cfg)  # a bad seed file stops here, before the model loads
    print_stderr(f"sft-rubrics: {len(rows)} seed rubrics, {cfg.epochs:g} epochs")
    out = warm_start(cfg)
    print_stderr(f"wrote the warm-started writer to {out} (summary: {out / 'sft_rubrics.json'})")
