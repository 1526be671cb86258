"""Shared-prefix judging: G answers to one question under one rubric, prob mode, three ways.

In GRPO the judge scores a group of G answers to the same question under the same rubric. In the
probability modes everything before the answer (instructions, question, rubric) is identical, so
``HFBackend`` runs that prefix once and only the answers on top of its cache. This script times

- ``shared``:       HFBackend(share_prefix=True, batch_size=G)   (the default path), called once
                    per question, and once for all questions (as the reward function does)
- ``batched``:      HFBackend(share_prefix=False, batch_size=G)  (one padded batch, prefix recomputed)
- ``one by one``:   HFBackend(share_prefix=False, batch_size=1)  (G separate forward passes)

on the same model, items and threads, and checks that the scores agree (max abs diff). With
``--compare-rev REV`` it also times ``src/evolm/backends/hf.py`` as it was at git revision REV
(e.g. the commit before the speed-ups), side by side in the same process.

The answers are a real GRPO group: G samples of SmolLM2 at temperature 1.0 to LLMBar questions.

    .venv/bin/python -m bench.shared_prefix                      # 3 questions x 8 answers
    .venv/bin/python -m bench.shared_prefix --compare-rev 7c43463
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tqdm.auto import tqdm  # noqa: E402

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
    ap.add_argument("--model", default="smollm2-135m-instruct", help="judge (and answer) model")
    ap.add_argument("--data", default=str(LLMBAR_NATURAL), help="LLMBar JSON file; its inputs are the questions")
    ap.add_argument("--questions", type=int, default=3, help="questions; each gets its own group of answers")
    ap.add_argument("--answers", type=int, default=8, help="answers per question (the GRPO group size G)")
    ap.add_argument("--answer-tokens", type=int, default=128, help="max new tokens of each sampled answer")
    ap.add_argument("--mode", default="prob", choices=["prob", "yesno"], help="judge mode")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds, variants interleaved (median reported)")
    ap.add_argument("--compare-rev", default=None, help="also time hf.py at this git revision (before/after)")
    args = ap.parse_args()

    import torch

    from evolm.backends.base import SamplingParams
    from evolm.backends.hf import HFBackend
    from evolm.backends.loading import load_model
    from evolm.judge.judge import Judge, JudgeItem
    from evolm.rubrics import Rubric
    from evolm.training.contrast import policy_messages

    torch.manual_seed(0)
    model, tok = load_model(args.model, device="cpu", dtype="float32")
    rows = json.loads(Path(args.data).read_text())
    questions = [r["input"] for r in rows[: args.questions]]
    rubric = Rubric.from_obj(GENERIC_RUBRIC)  # fixed, so every run times the same prefix length
    assert rubric is not None

    gen = HFBackend(model, tok, batch_size=args.answers)
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=args.answer_tokens, seed=0)
    groups = []
    for q in tqdm(questions, desc="sampling answers", unit="question"):
        answers = gen.generate([policy_messages(q, "You are a helpful assistant.")] * args.answers, params)
        groups.append([JudgeItem(q, a, rubric) for a in answers])

    # (backend, one call for all questions?) per variant; the reward function makes one call per step
    variants = {
        "shared prefix, a call per question": (HFBackend(model, tok, batch_size=args.answers), False),
        "shared prefix, one call for all questions": (HFBackend(model, tok, batch_size=args.answers), True),
        "batched, no sharing (batch G)": (HFBackend(model, tok, batch_size=args.answers, share_prefix=False), False),
        "one by one (batch 1)": (HFBackend(model, tok, batch_size=1, share_prefix=False), False),
    }
    if args.compare_rev:
        old = load_old_module(args.compare_rev, "src/evolm/backends/hf.py", "_hf_before")
        rev = args.compare_rev
        variants |= {
            f"[{rev}] shared prefix, a call per question": (old.HFBackend(model, tok, batch_size=args.answers), False),
            f"[{rev}] shared prefix, one call for all questions": (old.HFBackend(model, tok, batch_size=args.answers),
                                                                   True),
            f"[{rev}] one by one": (old.HFBackend(model, tok, batch_size=1, share_prefix=False), False),
        }

    enc = variants["one by one (batch 1)"][0]._encode
    from evolm.judge.prompts import prob_messages

    lengths = [len(x) for g in groups for x in enc([prob_messages(it) for it in g], {})]
    answer_lens = [len(tok.encode(it.answer)) for g in groups for it in g]

    def run(backend: HFBackend, together: bool) -> list[float | None]:
        judge = Judge(backend, mode=args.mode)
        if together:
            return [j.score for j in judge.score([it for g in groups for it in g])]
        return [j.score for g in groups for j in judge.score(g)]

    timed = timed_interleaved({name: (lambda v=v: run(*v)) for name, v in variants.items()}, repeats=args.repeats)
    times = {name: t for name, (t, _) in timed.items()}
    scores: dict[str, list[float | None]] = {name: s for name, (_, s) in timed.items()}

    ref = scores["one by one (batch 1)"]
    base = times["one by one (batch 1)"]
    n = len(ref)
    out = []
    for name, t in times.items():
        diff = max(abs(a - b) for a, b in zip(scores[name], ref, strict=True))  # type: ignore[operator]
        out.append([name, t, n / t, t / base, diff])

    print_header("Shared-prefix judging", {
        "model": args.model, "mode": args.mode, "questions": len(groups), "answers_per_question": args.answers,
        "judge_prompt_tokens": f"{min(lengths)}-{max(lengths)} (mean {sum(lengths) / len(lengths):.0f})",
        "answer_tokens": f"{min(answer_lens)}-{max(answer_lens)} (mean {sum(answer_lens) / len(answer_lens):.0f})",
        "repeats": args.repeats,
    })
    print(table(["variant", "seconds (all groups, median)", "answers/s", "time / one-by-one",
                 "max |score diff| vs one-by-one"], out))
    for name in ("shared prefix, a call per question", "shared prefix, one call for all questions"):
        r = times[name] / base
        print(f"target: {name} <= 0.5x one by one: {r:.2f}x -> {'MET' if r <= 0.5 else 'NOT MET'}")


if __name__ == "__main__":
    main()
