"""Judge throughput: answers scored per second by the generative mode vs the probability modes.

Same judge model, same rubrics, same answers: the two answers of each of the first N LLMBar
Natural pairs. Rubrics are written once per question by the same model (``write_rubrics``);
where it writes none that parses (SmolLM2-135M rarely writes valid JSON), a generic three-criterion
rubric stands in, and the output says how many of each. Besides speed, the pairwise accuracy
of each mode on these pairs (1 when the better answer scores higher, 1/2 on a tie or a missing
score, 0 otherwise), so that a speed-up bought with accuracy shows.

The probability modes are timed as the median of ``--repeats`` runs after one warm-up; the
generative mode (sampling, temperature 0.6, top-p 0.95 as the reference) runs once after a
short warm-up generation, as it takes minutes.

    .venv/bin/python -m bench.judge_throughput                       # 12 pairs, 128 new tokens
    .venv/bin/python -m bench.judge_throughput --pairs 100 --max-new-tokens 256
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.common import (
    GENERIC_RUBRIC,
    LLMBAR_NATURAL,
    load_old_module,
    print_header,
    table,
    timed_interleaved,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="judge (and rubric writer) model")
    ap.add_argument("--data", default=str(LLMBAR_NATURAL), help="LLMBar JSON file (input, output_1, output_2, label)")
    ap.add_argument("--pairs", type=int, default=12, help="first N pairs (2N answers); generative time grows with N")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="generation budget of the generative judge")
    ap.add_argument("--rubric-tokens", type=int, default=256, help="generation budget of the rubric writer")
    ap.add_argument("--batch-size", type=int, default=16, help="judge batch size (demo config: 16)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed rounds of the probability modes, interleaved (median)")
    ap.add_argument("--modes", default="generative,prob,yesno", help="comma-separated judge modes")
    ap.add_argument("--prob-batch-sizes", default="1,4",
                    help="extra prob-mode rows at these judge batch sizes (empty: none)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                    help="weights of the judge in every mode (bfloat16: fast on CPUs with AMX / avx512_bf16)")
    ap.add_argument("--bf16", action="store_true",
                    help="extra prob-mode row with a bfloat16 copy of the judge (with --dtype float32)")
    ap.add_argument("--compare-rev", default=None, help="also time the probability modes with hf.py at this git rev")
    args = ap.parse_args()

    import torch

    from evolm.backends.base import SamplingParams
    from evolm.backends.loading import load_backend
    from evolm.eval.pairs import pair_credit
    from evolm.judge.judge import Judge, JudgeItem
    from evolm.rubrics import Rubric, write_rubrics
    from evolm.scores import scores_of

    torch.manual_seed(0)
    backend = load_backend(args.model, device="cpu", dtype=args.dtype, batch_size=args.batch_size)
    rows = json.loads(Path(args.data).read_text())[: args.pairs]

    written = write_rubrics(backend, [r["input"] for r in rows],
                            SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=args.rubric_tokens, seed=0),
                            progress=True)
    generic = Rubric.from_obj(GENERIC_RUBRIC)
    rubrics = [w.rubric or generic for w in written]
    n_written = sum(w.rubric is not None for w in written)

    items: list[JudgeItem] = []  # per pair: better answer, then worse answer
    for r, rubric in zip(rows, rubrics, strict=True):
        better, worse = (r["output_1"], r["output_2"]) if int(r["label"]) == 1 else (r["output_2"], r["output_1"])
        items += [JudgeItem(r["input"], better, rubric), JudgeItem(r["input"], worse, rubric)]

    judges: dict[str, Judge] = {}
    for mode in args.modes.split(","):
        judges[mode] = Judge(backend, mode=mode, max_new_tokens=args.max_new_tokens, seed=0)
    from evolm.backends.hf import HFBackend

    for b in (int(x) for x in args.prob_batch_sizes.split(",") if x.strip()):
        if b != args.batch_size and "prob" in judges:
            judges[f"prob, batch {b}"] = Judge(HFBackend(backend.model, backend.tokenizer, batch_size=b), mode="prob")
    if args.bf16 and "prob" in judges and args.dtype != "bfloat16":
        import copy

        bf16 = copy.deepcopy(backend.model).to(torch.bfloat16)
        judges["prob, bfloat16 weights"] = Judge(HFBackend(bf16, backend.tokenizer, batch_size=args.batch_size),
                                                 mode="prob")
    if args.compare_rev:
        old = load_old_module(args.compare_rev, "src/evolm/backends/hf.py", "_hf_before")
        old_backend = old.HFBackend(backend.model, backend.tokenizer, batch_size=args.batch_size)
        for mode in ("prob", "yesno"):
            if mode in judges:
                judges[f"{mode} [{args.compare_rev}]"] = Judge(old_backend, mode=mode)

    replies: list[str] = []  # the generative judge's raw replies, to report their length
    generate = backend.generate

    def recording_generate(conversations, params, *, progress=False):  # noqa: ANN001, ANN202
        texts = generate(conversations, params, progress=progress)
        replies.extend(texts)
        return texts

    results: dict[str, tuple[float, list[float | None]]] = {}
    if "generative" in judges:
        judges["generative"].score(items[:1])  # warm-up: one short generation
        backend.generate = recording_generate  # type: ignore[method-assign]
        t0 = time.perf_counter()
        scores = [j.score for j in judges["generative"].score(items, progress=True)]
        results["generative"] = (time.perf_counter() - t0, scores)
        backend.generate = generate  # type: ignore[method-assign]
    results |= timed_interleaved({name: (lambda j=judge: scores_of(j.score(items))) for name, judge in judges.items()
                                  if judge.mode != "generative"}, repeats=args.repeats)

    answer_tokens = [len(backend.tokenizer.encode(it.answer)) for it in items]
    print_header("Judge throughput: generative vs probability modes", {
        "model": args.model, "dtype": args.dtype, "data": Path(args.data).name, "pairs": len(rows),
        "answers": len(items),
        "answer_tokens_mean": round(sum(answer_tokens) / len(answer_tokens)),
        "rubrics": f"{n_written} written by the model, {len(rows) - n_written} generic fallback",
        "generative_max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size,
        "generative_reply_tokens_mean": round(sum(len(backend.tokenizer.encode(t)) for t in replies)
                                              / max(1, len(replies)), 1),
        "repeats_prob_modes": args.repeats,
    })
    gen_rate = len(items) / results["generative"][0] if "generative" in results else None
    out = []
    for name, (seconds, scores) in results.items():
        acc = sum(pair_credit(scores[2 * k], scores[2 * k + 1]) for k in range(len(rows))) / len(rows)
        missing = sum(s is None for s in scores)
        rate = len(items) / seconds
        out.append([name, seconds, rate, rate / gen_rate if gen_rate else None, acc, missing])
    print(table(["mode", "seconds", "answers/s", "x generative", "pairwise accuracy", "missing scores"], out))
    if gen_rate and "prob" in results:
        speed = len(items) / results["prob"][0] / gen_rate
        acc = {r[0]: r[4] for r in out}
        print(f"\ntarget: prob >= 10x generative answers/s: {speed:.1f}x -> {'MET' if speed >= 10 else 'NOT MET'}")
        print(f"target: prob accuracy >= generative: {acc['prob']:.3f} vs {acc['generative']:.3f} -> "
              f"{'MET' if acc['prob'] >= acc['generative'] else 'NOT MET'} (n={len(rows)} pairs)")


if __name__ == "__main__":
    main()
