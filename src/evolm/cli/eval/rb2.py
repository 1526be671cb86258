"""``evolm eval rb2``: RewardBench 2 accuracy of a rubric writer + judge."""

from __future__ import annotations

import argparse

from evolm.cli._common import judge_context_note, positive_int, print_stderr, rubric_params, write_result
from evolm.cli.eval._rubric_judge import add_rubric_judge_args, rubric_and_judge, rubric_judge_settings, rubric_note


def make_parser(esub: argparse._SubParsersAction) -> None:
    p = esub.add_parser(
        "rb2",
        help="RewardBench 2 accuracy of a rubric writer + judge",
        description="RewardBench 2 (docs/METHOD.md §3.1) with the official scoring: one rubric per prompt "
        "(from the prompt alone; one that does not parse is written again at temperature 0.3, then 0.1), every "
        "completion judged separately; 1/k credit when the chosen answer ties k-way at the top; the Ties formula of "
        "the rewardbench 0.1.4 release; overall = mean of the six subsets (any other subset name is an error). A "
        "missing judge score ranks below every present score. Prints a per-subset table (percent) and writes the "
        "result as JSON with --output (scores in [0, 1]).",
    )
    p.add_argument("data", nargs="?", help="RewardBench 2 rows: a local .parquet/.json/.jsonl file (or a folder of "
                   "them), or the hub id allenai/reward-bench-2 (downloads); not needed with --from-scores")
    add_rubric_judge_args(p)
    p.add_argument("--rubrics", default=None, metavar="FILE",
                   help="reuse rubrics written earlier: JSONL with 'rubric' and 'id' or 'prompt' (as `evolm rubric` "
                   "writes); no rubric model is loaded")
    p.add_argument("--limit", type=positive_int, default=None,
                   help="at most this many rows per subset (for Ties: prompt ids, each with its ref and tied rows)")
    p.add_argument("--subsets", default=None, help="comma-separated subsets to run, e.g. 'Math,Ties' (default: all)")
    p.add_argument("--output", default=None, help="JSON result to write ('-' for stdout)")
    p.add_argument("--save-scores", default=None, metavar="PATH",
                   help="also write one JSON line per row: id, subset, num_correct, scores (chosen first)")
    p.add_argument("--from-scores", default=None, metavar="PATH",
                   help="recompute the table from a --save-scores file, without any model")
    p.add_argument("--allow-unpaired-ties", action="store_true",
                   help="score Ties 'tied:' rows that have no 'ref:' row (in the tied accuracy only, as the official "
                   "code does); by default such a file is refused: a whole Ties subset has both rows of every prompt")
    p.add_argument("--protocol", choices=("fast", "paper"), default="fast",
                   help=f"fast (default): the flags as given (defaults: {p.get_default('mode')} judge, "
                   f"{p.get_default('judge_max_new_tokens')} judge and {p.get_default('max_new_tokens')} rubric "
                   "tokens, "
                   "no thinking, the parsed rubric re-rendered): quick everyday numbers. paper: the authors' "
                   "protocol in one flag, replacing those flags: " + "; ".join(f"{k} {v}" for k, v in RB2_PAPER_LISTING)
                   + ". Slow: every reply may think for 16k tokens")
    p.set_defaults(run=main)


RB2_PAPER = {"mode": "generative", "judge_max_new_tokens": 16384, "thinking": True, "judge_prompt": "reference",
             "judge_defences": False, "judge_parse": "rb2", "temperature": 0.6, "top_p": 0.95,
             "max_new_tokens": 16384, "constrained": False, "judge_constrained": False, "rubric_as_written": True,
             "rubric_retry_when": "no_criteria_key"}
"""``evolm eval rb2 --protocol paper``: the flags it sets (the generative judge keeps temperature 0.6, top-p 0.95)."""


RB2_PAPER_LISTING = (
    ("judge", "generative, up to 16384 tokens, thinking on (enable_thinking), temperature 0.6, top-p 0.95"),
    ("judge prompt", "the authors' (--judge-prompt reference --no-judge-defences)"),
    ("judge reply", "thinking stripped, the first \"score\": x (--judge-parse rb2: their evaluation judge's regex)"),
    ("rubric shown to the judge", "the raw rubric text as the writer wrote it (reasoning removed), not re-rendered"),
    ("rubric writing", "thinking on, up to 16384 tokens, temperature 0.6 then retries at 0.3 and 0.1, top-p 0.95, "
                       "for a rubric whose text has no {\"criteria\":"),
)


def main(args: argparse.Namespace) -> None:
    from evolm.errors import InputError
    from evolm.eval import rb2, rb2_scoring
    from evolm.eval.rubric_source import read_rubric_table
    from evolm.runs.files import check_outputs_differ, check_writable

    check_outputs_differ([args.output, args.save_scores], [args.data, args.rubrics, args.from_scores])
    check_writable([args.output, args.save_scores])
    settings: dict = {"data": args.data, "from_scores": args.from_scores}
    subsets = [s.strip() for s in args.subsets.split(",") if s.strip()] if args.subsets else None
    if args.from_scores:
        if args.data:
            raise InputError("give either DATA or --from-scores, not both")
        scored = rb2.filter_subsets(rb2.read_scores(args.from_scores), subsets, args.from_scores)
        coverage = judge = None
    else:
        if not args.data:
            raise InputError("give the RewardBench 2 data (a file or allenai/reward-bench-2), or --from-scores")
        rows = rb2.load_rb2(args.data, subsets=subsets, limit=args.limit)
        if not rows:
            raise InputError(f"{args.data}: no rows to evaluate")
        table = read_rubric_table(args.rubrics) if args.rubrics and not args.no_rubric else None
        if args.protocol == "paper":
            vars(args).update(RB2_PAPER)
            print_stderr("RewardBench 2, the paper's protocol: " + "; ".join(f"{k}: {v}" for k, v in RB2_PAPER_LISTING))
        rubric_backend, judge = rubric_and_judge(args, need_rubric_model=table is None)
        scored, coverage = rb2.run_rb2(rows, judge, rubric_backend=rubric_backend, rubric_params=rubric_params(args),
                                       rubric_table=table, progress=True,
                                       rubric_as_written=getattr(args, "rubric_as_written", False),
                                       rubric_prompt=args.rubric_prompt,
                                       rubric_retry_when=getattr(args, "rubric_retry_when", "unparsed"))
        if args.save_scores:
            rb2.write_scores(args.save_scores, scored)
        settings.update(rubric_judge_settings(args), rubrics_file=args.rubrics, limit=args.limit, subsets=subsets,
                        protocol=args.protocol, **({k: v for k, v in RB2_PAPER.items() if k not in
                                                     rubric_judge_settings(args)} if args.protocol == "paper" else {}))
    if (orphans := rb2_scoring.unpaired_tied(scored)) and not args.allow_unpaired_ties:
        raise InputError(f"{len(orphans)} Ties 'tied:' row(s) without their 'ref:' row (tied:{orphans[0]}): not a "
                         "whole Ties subset; --allow-unpaired-ties scores them as the official code does")
    result = rb2_scoring.score_rows(scored)
    result.extra["settings"] = settings
    if coverage is not None:
        result.extra["rubrics"] = coverage.to_dict()
    write_result(args.output, result.to_dict(), rb2_scoring.format_table(result))
    wrote = [p for p in (args.save_scores if not args.from_scores else None, args.output) if p and p != "-"]
    print_stderr(f"RewardBench 2 overall {100 * result.overall:.1f} over {len(scored)} rows"
                 + (f" ({result.missing_scores} missing scores)" if result.missing_scores else "")
                 + (f"; {n} Ties tied: rows without their ref: row (in the tied accuracy only, as the official code "
           "scores them)" if (n := len(rb2_scoring.unpaired_tied(scored))) else "")
                 + (rubric_note(coverage) if coverage is not None else "")
                 + (judge_context_note(judge) if judge is not None else "")
                 + (f"; wrote {', '.join(wrote)}" if wrote else ""))
