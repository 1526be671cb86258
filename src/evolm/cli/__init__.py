"""The ``evolm`` command line: the only place that prints errors and exits.

One module per command (``evolm.cli.rubric``, ``judge``, ``train``, ``eval.*``, ``report``, ``serve``),
each with ``make_parser(subparsers)``, which registers the command and its ``main(args)`` with
``set_defaults(run=main)``; ``main`` here calls ``args.run(args)``. Flags that several commands share
are declared once, in ``evolm.cli._common``. Library code raises ``EvolmError``; ``main`` turns it
into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from evolm.backends.loading import HUB_KERNELS
from evolm.cli import eval as evaluate
from evolm.cli import judge, report, rubric, serve, sft_rubrics, train
from evolm.errors import EvolmError

COMMANDS = (rubric, judge, train, evaluate, report, serve, sft_rubrics)
"""The command modules, in the order ``evolm --help`` lists them."""


def _version() -> str:
    """The installed distribution's version (the package's own ``__version__`` when run from a source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("evolm")
    except PackageNotFoundError:
        from evolm import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    """The ``evolm`` parser; every (sub)subcommand sets ``run``, the function that carries it out."""
    parser = argparse.ArgumentParser(
        prog="evolm",
        description="EvoLM: a language model that writes rubrics, is judged by them, and improves both roles.",
    )
    parser.add_argument("--version", action="version", version=f"evolm {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.make_parser(sub)
    _show_defaults(parser)
    return parser


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Append "(default: X)" to the help of every option of ``parser`` and its subcommands whose default is a
    value (not None, not an on/off flag's) and whose help does not already say its default."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                _show_defaults(subparser)
        elif (action.default not in (None, argparse.SUPPRESS) and action.help != argparse.SUPPRESS
              and not (action.nargs == 0 and isinstance(action.default, bool))
              and "default" not in (action.help or "").lower()):
            shown = f"{action.default:g}" if isinstance(action.default, float) else str(action.default)
            action.help = f"{action.help or ''} (default: {shown.replace('%', '%%')})".lstrip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # evolm's own bars are the only bars: transformers' weight-loading bar would interleave with them
    # (transformers reads this when it is imported; export HF_HUB_DISABLE_PROGRESS_BARS=0 to see it)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # No kernel code downloaded from the hub at load time, also where TRL loads a model itself (the reference model):
    # evolm.backends.loading.HUB_KERNELS says why; export USE_HUB_KERNELS=1 to have them
    os.environ.setdefault(HUB_KERNELS, "NO")
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
