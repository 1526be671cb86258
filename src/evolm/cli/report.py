"""``evolm report``: a self-contained HTML report of a run, or a comparison of several."""

from __future__ import annotations

import argparse

from evolm.cli._common import print_stderr
from evolm.training.monitor import LENGTH_FACTOR


def make_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML report of a run, or overlay several runs",
        description="Read a run directory (metrics.jsonl, samples/, eval/, config.yaml) and write one HTML file "
        "with embedded plots: rewards of both roles, the judge's accuracy on temporal pairs beside the policy's "
        "reward, rubric validity, held-out evaluations, rubric statistics per phase, early vs late rubrics, "
        "evaluation results, the reward-hacking monitor (flagged steps), judge cost per step. Works on partial or "
        "crashed runs. With several run directories, write one comparison "
        "page instead: their training and held-out curves overlaid (one colour per run) and a table of final values "
        "with 95% confidence intervals; a sequential run's top directory reads as its two stages in a row.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directory (must hold metrics.jsonl); "
                   "several: compare them")
    p.add_argument("--output", default=None,
                   help="HTML file to write (default: RUN_DIR/report.html; with several runs ./comparison.html)")
    p.add_argument("--labels", default=None, metavar="A,B,...",
                   help="with several runs: their names in the legend and tables, comma-separated, one per run "
                   "(default: each directory's name)")
    p.add_argument("--length-factor", type=float, default=LENGTH_FACTOR, metavar="X",
                   help="reward-hacking monitor: flag policy steps whose mean answer length exceeds X times the first "
                   "policy steps' (default %(default)s; docs/SECURITY.md)")
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> None:
    from pathlib import Path

    from evolm.errors import InputError
    from evolm.runs.files import check_outputs_differ

    if len(args.run_dirs) > 1:
        from evolm.report.compare import parse_labels, write_comparison

        labels = parse_labels(args.labels, len(args.run_dirs)) if args.labels is not None else None
        print_stderr(f"wrote {write_comparison(args.run_dirs, args.output, labels)}")
        return
    if args.labels is not None:
        raise InputError("--labels names the runs of a comparison; give two or more run directories")
    from evolm.report.report import write_report

    run = Path(args.run_dirs[0])  # the files the report reads
    check_outputs_differ([args.output], [run / "metrics.jsonl", run / "config.yaml", run / "samples", run / "eval"])
    if not args.length_factor > 0:
        raise InputError(f"--length-factor must be a positive number, not {args.length_factor}")
    print_stderr(f"wrote {write_report(run, args.output, args.length_factor)}")
