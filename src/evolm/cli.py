"""The ``evolm`` command line: the only place that prints errors and exits.

Every subcommand is a pair ``_add_<name>(subparsers)`` / ``_run_<name>(args)``. Library code
raises ``EvolmError``; ``main`` turns it into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from evolm.errors import EvolmError
from evolm.models import DTYPES

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
    p.add_argument("--dtype", default="auto", choices=DTYPES)
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


def _add_train(sub: argparse._SubParsersAction) -> None:
    from evolm.config import describe

    p = sub.add_parser(
        "train",
        help="run EvoLM training (co-evolving, sequential or frozen-rubric regime)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train one model in two roles (policy and rubric writer) with GRPO against a frozen judge.\n\n"
        "Regimes (schedule.regime):\n"
        "  coevolve       K policy steps then K rubric steps, for each cycle (default, the paper's EvoLM)\n"
        "  sequential     all rubric steps first, then all policy steps with the rubric writer frozen\n"
        "  frozen_rubric  policy steps only; rubrics from a fixed writer (base model, or rubric.writer such as\n"
        "                 gpt-4.1 with rubric.writer_backend=openai): the paper's baselines\n\n"
        "Examples:\n"
        "  evolm train --config configs/demo-cpu.yaml\n"
        "  evolm train --config configs/demo-cpu.yaml judge.mode=yesno schedule.cycles=3 output_dir=runs/demo2\n"
        "  evolm train --resume runs/demo\n\n"
        "Settings (override any with section.key=value):\n" + describe(),
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--config", help="YAML run config (e.g. configs/demo-cpu.yaml, configs/paper-qwen3-8b.yaml)")
    g.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last complete checkpoint")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. schedule.cycles=3")


def _run_train(args: argparse.Namespace) -> None:
    from evolm.coevolve import resume_config, run, summarise
    from evolm.config import load_config

    cfg = resume_config(args.resume, args.overrides) if args.resume else load_config(args.config, args.overrides)
    run_dir = run(cfg, resume=bool(args.resume))
    _print_summary(run_dir, summarise(run_dir))


def _print_summary(run_dir, phases) -> None:  # noqa: ANN001
    from rich.console import Console
    from rich.table import Table

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    table = Table(title=f"EvoLM run: {run_dir}")
    for col in ("phase", "cycle", "role", "steps", "mean reward", "judge pair acc.", "rubric validity", "seconds"):
        table.add_column(col, justify="right")
    for ph in phases:
        table.add_row(str(ph["phase"]), str(ph["cycle"]), ph["role"], str(ph["steps"]), fmt(ph["reward"]),
                      fmt(ph["pair_accuracy"]), fmt(ph["rubric_validity"]), f"{ph['seconds']:.0f}")
    Console().print(table)
    print(f"run directory: {run_dir} (metrics.jsonl, samples/, checkpoints/; `evolm report {run_dir}` for plots)")


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
    p = esub.add_parser(
        "rb2",
        help="RewardBench 2 accuracy of a rubric writer + judge",
        description="RewardBench 2 (SPEC §3.1) with the official scoring: one rubric per prompt (from the prompt "
        "alone), every completion judged separately; 1/k credit when the chosen answer ties k-way at the top; the "
        "Ties formula; overall = mean of the subsets. A missing judge score ranks below every present score. "
        "Prints a per-subset table (percent) and writes the result as JSON with --output (scores in [0, 1]).",
    )
    p.add_argument("data", nargs="?", help="RewardBench 2 rows: a local .parquet/.json/.jsonl file (or a folder of "
                   "them), or the hub id allenai/reward-bench-2 (downloads); not needed with --from-scores")
    _add_rubric_judge_args(p)
    p.add_argument("--rubrics", default=None, metavar="FILE",
                   help="reuse rubrics written earlier: JSONL with 'rubric' and 'id' or 'prompt' (as `evolm rubric` "
                   "writes); no rubric model is loaded")
    p.add_argument("--limit", type=int, default=None,
                   help="at most this many rows per subset (for Ties: prompt ids, each with its ref and tied rows)")
    p.add_argument("--subsets", default=None, help="comma-separated subsets to run, e.g. 'Math,Ties' (default: all)")
    p.add_argument("--output", default=None, help="JSON result to write ('-' for stdout)")
    p.add_argument("--save-scores", default=None, metavar="PATH",
                   help="also write one JSON line per row: id, subset, num_correct, scores (chosen first)")
    p.add_argument("--from-scores", default=None, metavar="PATH",
                   help="recompute the table from a --save-scores file, without any model")
    p.set_defaults(run=_run_eval_rb2)


def _run_eval_rb2(args: argparse.Namespace) -> None:
    from evolm.errors import InputError
    from evolm.eval import rb2
    from evolm.jsonl import atomic_writer

    settings: dict = {"data": args.data, "from_scores": args.from_scores}
    subsets = [s.strip() for s in args.subsets.split(",") if s.strip()] if args.subsets else None
    if args.from_scores:
        if args.data:
            raise InputError("give either DATA or --from-scores, not both")
        scored = rb2.read_scores(args.from_scores)
        if subsets:
            scored = [r for r in scored if r.subset.lower() in {s.lower() for s in subsets}]
        rubric_stats = None
    else:
        if not args.data:
            raise InputError("give the RewardBench 2 data (a file or allenai/reward-bench-2), or --from-scores")
        rows = rb2.load_rb2(args.data, subsets=subsets, limit=args.limit)
        if not rows:
            raise InputError(f"{args.data}: no rows to evaluate")
        table = rb2.read_rubric_table(args.rubrics) if args.rubrics and not args.no_rubric else None
        rubric_backend, judge = _rubric_and_judge(args, need_rubric_model=table is None)
        scored, rubric_stats = rb2.run_rb2(rows, judge, rubric_backend=rubric_backend, rubric_params=_rubric_params(args),
                                           rubric_table=table, progress=True)
        if args.save_scores:
            rb2.write_scores(args.save_scores, scored)
        settings.update(_rubric_judge_settings(args), rubrics_file=args.rubrics, limit=args.limit, subsets=subsets)
    result = rb2.score_rows(scored)
    result.extra["settings"] = settings
    if rubric_stats is not None:
        result.extra["rubrics"] = rubric_stats.to_dict()
    if args.output:
        import json

        with atomic_writer(args.output) as f:
            f.write(json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n")
    print(rb2.format_table(result), file=sys.stderr if args.output == "-" else sys.stdout)
    wrote = [p for p in (args.save_scores if not args.from_scores else None, args.output) if p and p != "-"]
    _done(f"RewardBench 2 overall {100 * result.overall:.1f} over {len(scored)} rows"
          + (f" ({result.missing_scores} missing scores)" if result.missing_scores else "")
          + (_rubric_note(rubric_stats) if rubric_stats is not None else "")
          + (f"; wrote {', '.join(wrote)}" if wrote else ""))


def _add_rubric_judge_args(p: argparse.ArgumentParser) -> None:
    """Flags for the two models of an evaluation: the rubric writer and the judge."""
    from evolm.judge import JUDGE_MODES

    p.add_argument("--judge", default=None, help="judge model: local dir, Hugging Face id, or 'smollm2-135m-instruct'")
    p.add_argument("--rubric-model", default=None,
                   help="rubric writer (same kinds of names); loaded once when it is the judge model too")
    p.add_argument("--no-rubric", action="store_true", help="judge alone, no rubric (the baseline)")
    p.add_argument("--mode", choices=sorted(JUDGE_MODES), default="prob",
                   help="judge mode: prob (expected 0-9 digit, deterministic, default), yesno, generative")
    p.add_argument("--backend", choices=_BACKENDS, default="hf", help="backend of the rubric model (default hf)")
    p.add_argument("--judge-backend", choices=_BACKENDS, default=None, help="backend of the judge (default: --backend)")
    p.add_argument("--base-url", default=None, help="server URL of the rubric model for --backend openai")
    p.add_argument("--judge-base-url", default=None, help="server URL of the judge (default: --base-url)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY",
                   help="environment variable holding the API key for openai backends (never logged)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1... (auto: cuda when available)")
    p.add_argument("--dtype", default="auto", choices=DTYPES)
    p.add_argument("--batch-size", type=int, default=8, help="rows per batch for local backends")
    p.add_argument("--temperature", type=float, default=0.6, help="rubric sampling temperature (paper: 0.6)")
    p.add_argument("--top-p", type=float, default=0.95, help="rubric sampling top-p (paper: 0.95)")
    p.add_argument("--max-new-tokens", type=int, default=1024, help="rubric length limit in tokens")
    p.add_argument("--seed", type=int, default=0, help="seed for rubric sampling and the generative judge")


def _rubric_params(args: argparse.Namespace):  # -> SamplingParams
    from evolm.backends.base import SamplingParams

    return SamplingParams(args.temperature, args.top_p, args.max_new_tokens, args.seed)


def _rubric_and_judge(args: argparse.Namespace, need_rubric_model: bool = True):  # -> (Backend | None, Judge)
    """Load the judge and (unless --no-rubric or not needed) the rubric writer, sharing one model when equal."""
    from evolm.errors import InputError
    from evolm.judge import Judge
    from evolm.models import load_backend

    if not args.judge:
        raise InputError("--judge is required")
    wants_rubrics = need_rubric_model and not args.no_rubric
    if wants_rubrics and not args.rubric_model:
        raise InputError("--rubric-model is required (or --no-rubric to judge alone, or --rubrics FILE)")
    judge_backend_name = args.judge_backend or args.backend
    judge_url = args.judge_base_url or args.base_url
    common = {"device": args.device, "dtype": args.dtype, "api_key_env": args.api_key_env, "batch_size": args.batch_size}
    judge_backend = load_backend(args.judge, backend=judge_backend_name, base_url=judge_url, **common)
    rubric_backend = None
    if wants_rubrics:
        same = (args.rubric_model, args.backend, args.base_url) == (args.judge, judge_backend_name, judge_url)
        rubric_backend = judge_backend if same else load_backend(
            args.rubric_model, backend=args.backend, base_url=args.base_url, **common)
    return rubric_backend, Judge(judge_backend, mode=args.mode, seed=args.seed)


def _rubric_note(stats) -> str:  # stats: evolm.eval.rb2.RubricStats
    """Say how many rubrics parsed: an unparsed one leaves the judge alone on that prompt."""
    if stats.source == "none":
        return "; judge alone (no rubrics)"
    note = f"; rubrics: {stats.parsed} of {stats.prompts} parsed"
    return note + (" (the others judged without a rubric)" if stats.parsed < stats.prompts else "")


def _rubric_judge_settings(args: argparse.Namespace) -> dict:
    return {
        "judge": args.judge, "judge_backend": args.judge_backend or args.backend, "mode": args.mode,
        "rubric_model": None if args.no_rubric else args.rubric_model, "backend": args.backend,
        "no_rubric": args.no_rubric, "temperature": args.temperature, "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens, "seed": args.seed,
    }


# --- eval pairs (owner: rb2 helper) -----------------------------------------


def _add_eval_pairs(esub: argparse._SubParsersAction) -> None:
    p = esub.add_parser(
        "pairs",
        help="pairwise accuracy of a rubric writer + judge on preference pairs",
        description="Accuracy on preference pairs: each answer is judged separately from one rubric per prompt; "
        "a pair counts 1 when the better answer scores higher, 1/2 on a tie or a missing score, else 0. Files: "
        "LLMBar JSON ({input, output_1, output_2, label}), JSONL {prompt, chosen, rejected}, temporal pairs "
        "{question, a_pos, a_neg} from a training run, HH-RLHF {chosen, rejected} dialogues (.gz ok).",
    )
    p.add_argument("files", nargs="+", help="pair files (JSON list or JSONL)")
    _add_rubric_judge_args(p)
    p.add_argument("--limit", type=int, default=None, help="at most this many pairs per file (the first ones)")
    p.add_argument("--output", default=None, help="JSON result to write ('-' for stdout)")
    p.set_defaults(run=_run_eval_pairs)


def _run_eval_pairs(args: argparse.Namespace) -> None:
    from evolm.eval import pairs as pairs_eval
    from evolm.jsonl import atomic_writer

    files = {path: pairs_eval.load_pairs(path, limit=args.limit) for path in args.files}
    rubric_backend, judge = _rubric_and_judge(args)
    result = pairs_eval.run_pairs(files, judge, rubric_backend=rubric_backend, rubric_params=_rubric_params(args),
                                  progress=True)
    if args.output:
        import json

        out = {**result.to_dict(), "settings": {**_rubric_judge_settings(args), "limit": args.limit}}
        with atomic_writer(args.output) as f:
            f.write(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    print(pairs_eval.format_table(result), file=sys.stderr if args.output == "-" else sys.stdout)
    _done(f"pairwise accuracy {100 * result.total.accuracy:.1f} over {result.total.pairs} pairs"
          + _rubric_note(result.rubrics) + (f"; wrote {args.output}" if args.output and args.output != "-" else ""))


# --- eval policy (owner: policy helper) -------------------------------------


def _add_eval_policy(esub: argparse._SubParsersAction) -> None:
    from evolm.eval.policy import POLICY_TASKS

    p = esub.add_parser(
        "policy",
        help="score a policy on IFEval and GSM8K (lm-eval protocol, offline)",
        description="Evaluate a model with lm-evaluation-harness on local data files, zero-shot with its chat "
        "template (SPEC §3.2). Results are labelled 'lm-eval protocol' (not OLMES). Tasks: "
        + ", ".join(f"{n} (lm-eval {t.lm_eval_task})" for n, t in POLICY_TASKS.items()) + ".",
    )
    p.add_argument("--model", required=True,
                   help="run checkpoint (RUN/checkpoints/checkpoint-N), local model dir, built-in "
                   "'smollm2-135m-instruct', or a Hugging Face id")
    p.add_argument("--tasks", default="ifeval,gsm8k", help="comma-separated tasks (default: ifeval,gsm8k)")
    p.add_argument("--data-dir", default=None,
                   help="folder holding <task>/<file> as in shared/data (default: ../shared/data if it exists)")
    for name, task in POLICY_TASKS.items():
        p.add_argument(f"--{name}-data", dest=f"{name}_data", default=None, metavar="FILE",
                       help=f"{name} JSONL file (default: DATA_DIR/{task.data_file})")
    p.add_argument("--limit", type=int, default=None, help="first N documents of each task (quick runs)")
    p.add_argument("--max-gen-toks", type=int, default=16384,
                   help="most tokens generated per answer (paper: 16k; capped to fit the model's context)")
    p.add_argument("--greedy", action="store_true", help="greedy decoding instead of sampling")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (paper: 0.6)")
    p.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling (paper: 0.95)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=8, help="prompts generated together")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1... (auto: cuda when available)")
    p.add_argument("--dtype", default="auto", choices=DTYPES)
    p.add_argument("--system-instruction", default=None, help="system message for every prompt (default: none)")
    p.add_argument("--think-end-token", default="auto",
                   help="score only the text after this token (auto: '</think>' when the tokenizer has it; '' for none)")
    p.add_argument("--output", default=None,
                   help="JSON results ('-' for stdout; default: RUN/eval/policy-checkpoint-N.json for a run "
                   "checkpoint, else stdout)")
    p.add_argument("--samples", default=None, metavar="FILE", help="also write every prompt, response and score as JSONL")
    p.set_defaults(run=_run_eval_policy)


def _run_eval_policy(args: argparse.Namespace) -> None:
    import json

    from evolm.eval.policy import (
        POLICY_TASKS, Decoding, default_data_dir, default_output_path, format_table, parse_tasks,
        resolve_data_files, run_policy_eval,
    )
    from evolm.jsonl import atomic_writer

    tasks = parse_tasks(args.tasks)
    data_dir = args.data_dir if args.data_dir is not None else default_data_dir()
    files = resolve_data_files(tasks, data_dir, {n: getattr(args, f"{n}_data") for n in POLICY_TASKS})
    output = args.output or str(default_output_path(args.model) or "-")
    decoding = Decoding(args.greedy, args.temperature, args.top_p, args.max_gen_toks, args.seed)
    result = run_policy_eval(
        args.model, tasks, files, device=args.device, dtype=args.dtype, decoding=decoding, limit=args.limit,
        batch_size=args.batch_size, system_instruction=args.system_instruction,
        think_end_token=args.think_end_token, samples_path=args.samples,
    )
    with atomic_writer(output) as f:
        f.write(json.dumps(result.to_dict(), indent=2) + "\n")
    # The table goes to stdout unless the JSON does.
    print(format_table(result), file=sys.stderr if output == "-" else sys.stdout)
    if output != "-":
        _done(f"wrote {output}")


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
    "train": (_add_train, _run_train),
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
