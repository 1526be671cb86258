"""``evolm eval``: evaluations of rubric writers, judges and policies, one module per evaluation."""

from __future__ import annotations

import argparse

from evolm.cli.eval import pairs, policy, rb2, stats


def make_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate rubric writers, judges and policies",
                       description="Evaluations (docs/METHOD.md §3).")
    esub = p.add_subparsers(dest="eval_command", required=True, metavar="EVAL")
    for command in (rb2, pairs, policy, stats):
        command.make_parser(esub)
