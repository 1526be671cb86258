"""``evolm eval stats``: criterion statistics of rubrics."""

from __future__ import annotations

import argparse

from evolm.cli._common import print_stderr, write_result


def make_parser(esub: argparse._SubParsersAction) -> None:
    p = esub.add_parser(
        "stats",
        help="criterion statistics of rubrics (docs/METHOD.md §3.3)",
        description="Rubric statistics the paper reports: criteria per rubric, criterion length, shares of "
        "label-only / specific-value / constraint criteria, largest weight. Input: a JSONL file whose lines have "
        "'rubric' (object or JSON string; e.g. the output of 'evolm rubric'), or a run directory (one row per "
        "phase, from its samples/; there also flat%: the share of criteria whose judge reading spans less than 0.05 "
        "across the answers they judged, a policy question's group or a rubric row's pair). The classification "
        "rules are in evolm.eval.rubric_stats.",
    )
    p.add_argument("path", metavar="FILE_OR_RUN_DIR", help="rubric JSONL file or run directory")
    p.add_argument("--output", default=None, help="also write the statistics as JSON ('-' for stdout)")
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> None:
    from pathlib import Path

    from evolm.errors import InputError
    from evolm.eval.rubric_stats import format_table, rubric_stats, run_rubric_stats
    from evolm.runs.files import check_outputs_differ
    from evolm.runs.jsonl import read_jsonl

    path = Path(args.path)
    check_outputs_differ([args.output], [path / "samples" if path.is_dir() else path])
    if path.is_dir():
        rows = [s.to_json() for s in run_rubric_stats(path)]
        if not rows:
            raise InputError(f"{path}: no rubrics found under samples/ (expected samples/phase-XXX-<role>.jsonl)")
        table, result = format_table(rows, keys=("phase", "cycle", "source")), {"run_dir": str(path), "phases": rows}
    else:
        stats = rubric_stats(row["rubric"] for row in read_jsonl(path, required=["rubric"])).to_json()
        table, result = format_table([stats]), {"file": str(path), **stats}
    write_result(args.output, result, table)
    if args.output and args.output != "-":
        print_stderr(f"wrote rubric statistics to {args.output}")
