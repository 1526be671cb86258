"""``evolm eval pairs``: pairwise accuracy of a rubric writer + judge on preference pairs."""

from __future__ import annotations

import argparse

from evolm.cli._common import judge_context_note, positive_int, print_stderr, rubric_params, write_result
from evolm.cli.eval._rubric_judge import add_rubric_judge_args, rubric_and_judge, rubric_judge_settings, rubric_note


def make_parser(esub: argparse._SubParsersAction) -> None:
    p = esub.add_parser(
        "pairs",
        help="pairwise accuracy of a rubric writer + judge on preference pairs",
        description="Accuracy on preference pairs: each answer is judged separately from one rubric per prompt "
        "(--mode listwise: the two answers of a pair listed together, in a shuffled order and its reverse); "
        "a pair counts 1 when the better answer scores higher, 1/2 on a tie or a missing score, else 0. Files: "
        "LLMBar JSON ({input, output_1, output_2, label}), JSONL {prompt, chosen, rejected}, temporal pairs "
        "{question, a_pos, a_neg} from a training run, HH-RLHF {chosen, rejected} dialogues (.gz ok).",
    )
    p.add_argument("files", nargs="+", help="pair files (JSON list or JSONL)")
    add_rubric_judge_args(p)
    p.add_argument("--limit", type=positive_int, default=None, help="at most this many pairs per file (the first ones)")
    p.add_argument("--output", default=None, help="JSON result to write ('-' for stdout)")
    p.add_argument("--save-scores", default=None, metavar="PATH",
                   help="JSONL, one line per pair: its file, prompt, answers, both scores and its credit (to compare "
                   "two runs pair by pair)")
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> None:
    from evolm.eval import pairs as pairs_eval
    from evolm.runs.files import check_outputs_differ, check_writable
    from evolm.runs.jsonl import write_jsonl

    check_outputs_differ([args.output, args.save_scores], args.files)
    check_writable([args.output, args.save_scores])
    files = {path: pairs_eval.load_pairs(path, limit=args.limit) for path in args.files}
    rubric_backend, judge = rubric_and_judge(args)
    result = pairs_eval.run_pairs(files, judge, rubric_backend=rubric_backend, rubric_params=rubric_params(args),
                                  progress=True, rubric_prompt=args.rubric_prompt)
    out = {**result.to_dict(), "settings": {**rubric_judge_settings(args), "limit": args.limit}}
    write_result(args.output, out, pairs_eval.format_table(result))
    if args.save_scores:
        write_jsonl(args.save_scores, result.items)
    print_stderr(f"pairwise accuracy {100 * result.total.accuracy:.1f} (95% CI "
                 f"{pairs_eval.percent_interval(result.total.interval)}) over {result.total.pairs} pairs"
          + rubric_note(result.rubrics) + judge_context_note(judge)
          + (f"; wrote {args.output}" if args.output and args.output != "-" else ""))
