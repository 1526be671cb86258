"""The ``evolm`` command line: the only place that prints errors and exits.

Every subcommand is a pair ``_add_<name>(subparsers)`` / ``_run_<name>(args)``. Library code
raises ``EvolmError``; ``main`` turns it into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from evolm.errors import EvolmError

_BACKENDS = ("hf", "openai", "vllm")


def _add_model_args(p: argparse.ArgumentParser, flag: str, help_: str) -> None:
    p.add_argument(flag, required=True, help=help_)
    p.add_argument(
        "--backend",
        choices=_BACKENDS,
        default="hf",
        help="hf: local transformers (default); openai: an OpenAI-compatible server (vllm serve, OpenAI...); "
        "vllm: in-process vLLM (GPU, needs the 'vllm' extra)",
    )
    p.add_argument("--base-url", default=None, help="server URL for --backend openai, e.g. http://127.0.0.1:8000/v1")
    p.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the API key for --backend openai (the key is never logged)",
    )
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1... (auto: cuda when available)")
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    p.add_argument("--batch-size", type=int, default=8, help="rows per batch for local backends")


# ----------------------------------------------------------------------------- rubric


def _add_rubric(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rubric",
        help="write a rubric for each prompt",
        description="Write one rubric per input prompt. Input JSONL lines need 'prompt'; output lines keep "
        "every input field and add 'rubric' (parsed object or null), 'rubric_valid' (format validity, 0 or 1) "
        "and 'rubric_text' (raw model output).",
    )
    _add_model_args(p, "--model", "rubric writer: local dir, Hugging Face id, or built-in 'smollm2-135m-instruct'")
    p.add_argument("--input", required=True, help="JSONL with a 'prompt' field per line ('-' for stdin)")
    p.add_argument("--output", required=True, help="JSONL to write ('-' for stdout)")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (paper: 0.6)")
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)


def _run_rubric(args: argparse.Namespace) -> None:
    from evolm.backends.base import SamplingParams
    from evolm.jsonl import read_jsonl, write_jsonl
    from evolm.models import load_backend
    from evolm.rubrics import write_rubrics

    rows = read_jsonl(args.input, required=["prompt"])
    backend = load_backend(
        args.model, backend=args.backend, device=args.device, dtype=args.dtype, base_url=args.base_url,
        api_key_env=args.api_key_env, batch_size=args.batch_size,
    )
    params = SamplingParams(args.temperature, args.top_p, args.max_new_tokens, args.seed)
    written = write_rubrics(backend, [str(r["prompt"]) for r in rows], params, progress=True)
    out = []
    for row, w in zip(rows, written, strict=True):
        out.append({**row, "rubric": w.rubric.to_dict() if w.rubric else None, "rubric_valid": w.valid,
                    "rubric_text": w.text})
    write_jsonl(args.output, out)
    _done(f"wrote {len(out)} rubrics ({sum(w.valid for w in written):.0f} valid) to {args.output}")


# ----------------------------------------------------------------------------- judge


def _add_judge(sub: argparse._SubParsersAction) -> None:
    from evolm.judge import JUDGE_MODES

    p = sub.add_parser(
        "judge",
        help="score answers with a (rubric +) judge",
        description="Score each answer. Input JSONL lines need 'prompt' and 'response', and may have 'rubric' "
        "(object or JSON string; without it the judge scores alone). Output lines add 'score' in [0, 1], or null "
        "when the judge gave no readable score (generative mode only).",
    )
    _add_model_args(p, "--judge", "judge model: local dir, Hugging Face id, or built-in 'smollm2-135m-instruct'")
    p.add_argument("--input", required=True, help="JSONL with 'prompt', 'response' and optional 'rubric' ('-' for stdin)")
    p.add_argument("--output", required=True, help="JSONL to write ('-' for stdout)")
    p.add_argument(
        "--mode",
        choices=sorted(JUDGE_MODES),
        default="prob",
        help="prob: expected value of a 0-9 score token (one forward pass, deterministic, default); "
        "yesno: per-criterion P(yes) weighted by the rubric; generative: the reference JSON-score mode "
        "(sampled, temperature 0.6)",
    )
    p.add_argument("--no-rubric", action="store_true", help="ignore any 'rubric' field: judge alone")
    p.add_argument("--seed", type=int, default=0)


def _run_judge(args: argparse.Namespace) -> None:
    from evolm.jsonl import read_jsonl, write_jsonl
    from evolm.judge import Judge, JudgeItem
    from evolm.models import load_backend
    from evolm.rubrics import Rubric

    rows = read_jsonl(args.input, required=["prompt", "response"])
    items = []
    for row in rows:
        rubric = None if args.no_rubric or row.get("rubric") is None else Rubric.from_obj(row["rubric"])
        items.append(JudgeItem(str(row["prompt"]), str(row["response"]), rubric))
    backend = load_backend(
        args.judge, backend=args.backend, device=args.device, dtype=args.dtype, base_url=args.base_url,
        api_key_env=args.api_key_env, batch_size=args.batch_size,
    )
    scores = Judge(backend, mode=args.mode, seed=args.seed).score(items, progress=True)
    write_jsonl(args.output, [{**row, "score": s} for row, s in zip(rows, scores, strict=True)])
    n_missing = sum(s is None for s in scores)
    _done(f"scored {len(rows)} answers ({n_missing} without a readable score) to {args.output}")


# ----------------------------------------------------------------------------- train


# ----------------------------------------------------------------------------- eval


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate rubric writers, judges and policies", description="Evaluations (SPEC §3).")
    esub = p.add_subparsers(dest="eval_command", required=True, metavar="EVAL")
    _add_eval_rb2(esub)
    _add_eval_pairs(esub)
    _add_eval_policy(esub)
    _add_eval_stats(esub)


# --- eval rb2 (owner: rb2 helper) -------------------------------------------


def _add_eval_rb2(esub: argparse._SubParsersAction) -> None:
    pass


# --- eval pairs (owner: rb2 helper) -----------------------------------------


def _add_eval_pairs(esub: argparse._SubParsersAction) -> None:
    pass


# --- eval policy (owner: policy helper) -------------------------------------


def _add_eval_policy(esub: argparse._SubParsersAction) -> None:
    pass


# --- eval stats (owner: report helper) --------------------------------------


def _add_eval_stats(esub: argparse._SubParsersAction) -> None:
    p = esub.add_parser(
        "stats",
        help="criterion statistics of rubrics (SPEC §3.3)",
        description="Rubric statistics the paper reports: criteria per rubric, criterion length, shares of "
        "label-only / specific-value / constraint criteria, largest weight. Input: a JSONL file whose lines have "
        "'rubric' (object or JSON string; e.g. the output of 'evolm rubric'), or a run directory (one row per "
        "phase, from its samples/). The classification rules are in evolm.eval.rubric_stats.",
    )
    p.add_argument("path", metavar="FILE_OR_RUN_DIR", help="rubric JSONL file or run directory")
    p.add_argument("--output", default=None, help="also write the statistics as JSON to this file")
    p.set_defaults(run=_run_eval_stats)


def _run_eval_stats(args: argparse.Namespace) -> None:
    import json
    from pathlib import Path

    from evolm.errors import InputError
    from evolm.eval.rubric_stats import format_table, rubric_stats, run_rubric_stats
    from evolm.jsonl import atomic_writer, read_jsonl

    path = Path(args.path)
    if path.is_dir():
        rows = [s.to_json() for s in run_rubric_stats(path)]
        if not rows:
            raise InputError(f"{path}: no rubrics found under samples/ (expected samples/phase-XXX-<role>.jsonl)")
        table, result = format_table(rows, keys=("phase", "cycle", "source")), {"run_dir": str(path), "phases": rows}
    else:
        stats = rubric_stats(row["rubric"] for row in read_jsonl(path, required=["rubric"])).to_json()
        table, result = format_table([stats]), {"file": str(path), **stats}
    print(table)
    if args.output:
        with atomic_writer(args.output) as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        _done(f"wrote rubric statistics to {args.output}")


# ----------------------------------------------------------------------------- report (owner: report helper)


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML report of a run",
        description="Read a run directory (metrics.jsonl, samples/, eval/, config.yaml) and write one HTML file "
        "with embedded plots: rewards of both roles, the judge's accuracy on temporal pairs beside the policy's "
        "reward, rubric validity, rubric statistics per phase, early vs late rubrics, evaluation results. "
        "Works on partial or crashed runs.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory (must hold metrics.jsonl)")
    p.add_argument("--output", default=None, help="HTML file to write (default: RUN_DIR/report.html)")
    p.set_defaults(run=_run_report)


def _run_report(args: argparse.Namespace) -> None:
    from evolm.report import write_report

    _done(f"wrote {write_report(args.run_dir, args.output)}")



def _done(msg: str) -> None:
    print(msg, file=sys.stderr)


_COMMANDS = {
    "rubric": (_add_rubric, _run_rubric),
    "judge": (_add_judge, _run_judge),
    "eval": (_add_eval, None),
    "report": (_add_report, None),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evolm",
        description="EvoLM: a language model that writes rubrics, is judged by them, and improves both roles.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add, _ in _COMMANDS.values():
        add(sub)
    # Subcommands registered with ``p.set_defaults(run=fn)`` (e.g. the eval group) dispatch through ``args.run``.
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = args.run if hasattr(args, "run") else _COMMANDS[args.command][1]
    try:
        run(args)
    except EvolmError as e:
        print(f"evolm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"evolm {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
