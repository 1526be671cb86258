"""``evolm serve``: rubric + judge rewards over HTTP."""

from __future__ import annotations

import argparse
from dataclasses import replace

from evolm.cli._common import (
    JUDGE_CACHE,
    JUDGE_CONSTRAINED,
    MODEL_NAMES,
    add_backend_args,
    add_context_args,
    add_judge_flags,
    add_judge_mode_arg,
    add_rubric_writing_args,
    add_runtime_args,
    judge_from_args,
    load_model,
    positive_int,
    print_stderr,
    rubric_params,
)
from evolm.cli.flags import Flag, add_flags, field_values
from evolm.serve.settings import ServeSettings

# ServeSettings' fields with a flag (keep_alive_s and max_header_kb have none: uvicorn's and h11's limits as set)
BATCH_FLAGS = tuple(map(Flag, ("max_batch", "max_batch_s", "max_wait_ms", "max_queue", "max_client_queue", "cost_chars",
                               "deadline_s", "rubric_cache")))
LIMIT_FLAGS = tuple(map(Flag, ("max_body_mb", "max_answers", "max_label_criteria", "max_list", "max_answer_chars",
                               "header_timeout_s", "body_timeout_s", "max_connections")))
THREAD_FLAGS = (Flag("threads", metavar="N", default=None,
                     why="torch's own thread count (the cores)"),)


def _default(name: str) -> object:
    return ServeSettings.model_fields[name].default


def make_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve rubric + judge rewards over HTTP (OpenRLHF, slime, verl)",
        description="Serve the judge's reward over HTTP until interrupted: POST /get_reward (OpenRLHF's remote "
        "reward protocol), POST /reward (slime's remote_rm), GET /health, and the OpenAPI page at /docs. Rubrics "
        "come from each request's label when it parses as one, else from --rubric-model (written once per "
        "question, cached) or --rubrics FILE, else the judge scores alone; extra_logs says which. Concurrent "
        "requests are scored together in one judge call. Needs the 'serve' extra: pip install 'evolm[serve]'.",
    )
    p.add_argument("--judge", required=True, help=f"judge model: {MODEL_NAMES}")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--rubric-model", default=None,
                       help="writes a rubric for each new question without one in its label (loaded once when it "
                       "is the judge model too)")
    where.add_argument("--rubrics", default=None, metavar="FILE",
                       help="JSONL of rubrics by prompt ('evolm rubric' output), for questions without one in the "
                       "label")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; the server has no authentication)")
    p.add_argument("--port", type=positive_int, default=8000, help="port to listen on (default 8000)")
    add_flags(p, ServeSettings, BATCH_FLAGS)
    limits = p.add_argument_group("limits", "what one request or connection may take; past a size limit the "
                                  "reply is 413 with a JSON error. A request past its deadline or whose client "
                                  "disconnects is dropped: its answers not yet scored never are, its queue slot is "
                                  f"freed. Idle keep-alive connections close after {_default('keep_alive_s')} s; at "
                                  f"most {_default('max_header_kb')} KiB of unfinished headers are buffered")
    add_flags(limits, ServeSettings, LIMIT_FLAGS)
    add_flags(p, ServeSettings, THREAD_FLAGS)
    add_judge_mode_arg(p)
    add_judge_flags(p, JUDGE_CONSTRAINED, replace(
        JUDGE_CACHE, default=0, why="one cache for every client tells a client whether another sent the same answer "
        "(extra_logs.judge_cached, and the reply's time): turn it on only when every client is trusted, e.g. one "
        "training run", note="extra_logs.judge_cached says so per answer; /health gives the hit rate"))
    add_context_args(p, "judge")
    add_backend_args(p)
    add_runtime_args(p)
    add_rubric_writing_args(p.add_argument_group("rubric writing", "sampling of --rubric-model"), prompt_flag=False)
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> None:
    from evolm.eval.rubric_source import read_rubric_table
    from evolm.judge.cache import cached_judge
    from evolm.serve.app import create_app, require_serve_extra
    from evolm.serve.batcher import RubricSource
    from evolm.serve.http import run_server

    require_serve_extra()  # before any model loads
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    table = read_rubric_table(args.rubrics) if args.rubrics else None
    judge = judge_from_args(args, args.judge, args.backend, args.base_url)
    writer = None
    if args.rubric_model:
        writer = judge.backend if args.rubric_model == args.judge else load_model(args, args.rubric_model, args.backend,
                                                                              args.base_url)
    rubrics = RubricSource(writer=writer, params=rubric_params(args), table=table, cache_size=args.rubric_cache)
    settings = ServeSettings.checked({**field_values(args, ServeSettings, (*BATCH_FLAGS, *LIMIT_FLAGS)),
                                      "threads": args.threads or 0})
    print_stderr(f"serving {args.judge} ({args.mode}; rubrics: {rubrics.kind}) on http://{args.host}:{args.port} "
                 "- POST /get_reward (OpenRLHF), POST /reward (slime), GET /health, /docs")
    run_server(create_app(cached_judge(judge, args.judge_cache), rubrics, settings), args.host, args.port)
