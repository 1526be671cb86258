"""The two models of ``eval rb2`` and ``eval pairs``: a rubric writer and a judge, from their flags."""

from __future__ import annotations

import argparse

from evolm.cli._common import (
    JUDGE_CONSTRAINED,
    MODEL_NAMES,
    GuardTally,
    add_backend_args,
    add_context_args,
    add_judge_flags,
    add_judge_mode_arg,
    add_rubric_writing_args,
    add_runtime_args,
    judge_from_args,
    load_model,
)
from evolm.config import BACKENDS


def add_rubric_judge_args(p: argparse.ArgumentParser) -> None:
    """Flags for the two models of an evaluation: the rubric writer and the judge."""
    p.add_argument("--judge", default=None, help=f"judge model: {MODEL_NAMES}")
    p.add_argument("--rubric-model", default=None,
                   help="rubric writer (same kinds of names); loaded once when it is the judge model too")
    p.add_argument("--no-rubric", action="store_true", help="judge alone, no rubric (the baseline)")
    add_judge_mode_arg(p)
    add_context_args(p, "judge")
    add_backend_args(p)  # the rubric model's, and the judge's unless --judge-backend / --judge-base-url
    p.add_argument("--judge-backend", choices=BACKENDS, default=None, help="backend of the judge (default: --backend)")
    p.add_argument("--judge-base-url", action="append", default=None,
                   help="server URL of the judge, repeatable for a pool (default: --base-url)")
    add_judge_flags(p, JUDGE_CONSTRAINED)
    add_runtime_args(p)
    add_rubric_writing_args(p.add_argument_group(
        "rubric writing", "sampling of the rubric writer (the generative judge keeps temperature 0.6, top-p 0.95)"))


def rubric_and_judge(args: argparse.Namespace, need_rubric_model: bool = True):  # -> (Backend | None, Judge)
    """Build the judge and (unless --no-rubric or not needed) the rubric writer, sharing one model when equal."""
    from evolm.errors import InputError

    if not args.judge:
        raise InputError("--judge is required")
    wants_rubrics = need_rubric_model and not args.no_rubric
    if wants_rubrics and not args.rubric_model:
        raise InputError("--rubric-model is required (or --no-rubric to judge alone, or --rubrics FILE)")
    judge_backend, judge_url = args.judge_backend or args.backend, args.judge_base_url or args.base_url
    judge = judge_from_args(args, args.judge, judge_backend, judge_url)
    rubric_backend = None
    if wants_rubrics:
        same = (args.rubric_model, args.backend, args.base_url) == (args.judge, judge_backend, judge_url)
        rubric_backend = judge.backend if same else load_model(args, args.rubric_model, args.backend, args.base_url)
    return rubric_backend, GuardTally(judge)  # the summary line says what the context guard did


def rubric_note(coverage) -> str:  # coverage: evolm.eval.rubric_source.RubricCoverage
    """Say how many rubrics parsed: an unparsed one leaves the judge alone on that prompt."""
    if coverage.source == "none":
        return "; judge alone (no rubrics)"
    note = f"; rubrics: {coverage.parsed} of {coverage.prompts} parsed"
    return note + (" (the others judged without a rubric)" if coverage.parsed < coverage.prompts else "")


def rubric_judge_settings(args: argparse.Namespace) -> dict:
    return {
        "judge": args.judge, "judge_backend": args.judge_backend or args.backend, "mode": args.mode,
        "rubric_model": None if args.no_rubric else args.rubric_model, "backend": args.backend,
        "no_rubric": args.no_rubric, "temperature": args.temperature, "top_p": args.top_p,
        "rubric_prompt": args.rubric_prompt,
        "max_new_tokens": args.max_new_tokens, "seed": args.seed, "constrained": args.constrained,
        "judge_constrained": args.judge_constrained, "max_context": args.max_context, "overlong": args.overlong,
    }
