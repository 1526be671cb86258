"""The ``evolm`` command line: the only place that prints errors and exits.

One module per command (``evolm.cli.rubric``, ``judge``, ``train``, ``eval.*``, ``report``, ``serve``),
each with ``make_parser(subparsers)``, which registers the command and its ``main(args)`` with
``set_defaults(run=main)``; ``main`` here calls ``args.run(args)``. Flags that several commands share
are declared once, in ``evolm.cli._common``. Library code raises ``EvolmError``; ``main`` turns it
into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from evolm.cli import eval as evaluate
from evolm.cli import judge, report, rubric, serve, train
from evolm.errors import EvolmError

COMMANDS = (rubric, judge, train, evaluate, report, serve)
"""The command modules, in the order ``evolm --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The ``evolm`` parser; every (sub)subcommand sets ``run``, the function that carries it out."""
    parser = argparse.ArgumentParser(
        prog="evolm",
        description="EvoLM: a language model that writes rubrics, is judged by them, and improves both roles.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.make_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except EvolmError as e:
        print(f"evolm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the system refused something (a file, the disk, a pipe): say what, in one line
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"evolm {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"evolm {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0
