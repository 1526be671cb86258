"""``evolm serve``: rubric + judge rewards over HTTP."""

from __future__ import annotations

import argparse

from evolm.cli._common import (
    JUDGE_CONSTRAINED,
    MODEL_NAMES,
    add_backend_args,
    add_context_args,
    add_judge_mode_arg,
    add_rubric_writing_args,
    add_runtime_args,
    judge_from_args,
    load_model,
    positive_int,
    rubric_params,
    say,
)
from evolm.judge.cache import CACHE_ENTRIES


def make_parser(sub: argparse._SubParsersAction) -> None:
    def positive(text: str) -> float:
        value = float(text)
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
        return value

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
    p.add_argument("--max-batch", type=positive_int, default=64,
                   help="answers scored in one judge call (default 64); a larger request is scored over several "
                   "calls, each shared fairly with the requests waiting, so it cannot hold up small ones")
    p.add_argument("--max-batch-s", type=positive, default=2.0,
                   help="seconds a judge call should take, about: a batch holds at most what the judge scored in "
                   "that time on recent batches, so a request behind a large one waits about two calls (default 2)")
    p.add_argument("--max-wait-ms", type=positive, default=5.0,
                   help="how long a batch waits for more requests once one arrives (default 5 ms)")
    p.add_argument("--max-queue", type=positive_int, default=256,
                   help="requests waiting to be scored; beyond it a request gets 503 with Retry-After (default 256)")
    p.add_argument("--deadline-s", type=positive, default=300.0,
                   help="seconds a request may take in all, queueing included; then 504 (default 300)")
    p.add_argument("--rubric-cache", type=positive_int, default=4096,
                   help="written rubrics kept, one per question, least recently used dropped first (default 4096)")
    limits = p.add_argument_group("limits", "what one request or connection may take; past a size limit the "
                                  "reply is 413 with a JSON error. A request past its deadline or whose client "
                                  "disconnects is dropped: its answers not yet scored never are, its queue slot is "
                                  "freed")
    limits.add_argument("--max-body-mb", type=positive, default=16.0, help="request body size in MiB (default 16)")
    limits.add_argument("--max-answers", type=positive_int, default=8192, help="answers in one request (default 8192)")
    limits.add_argument("--max-answer-chars", type=positive_int, default=500_000,
                        help="characters in one query, prompt or response (default 500000)")
    limits.add_argument("--header-timeout-s", type=positive, default=10.0,
                        help="seconds a connection has to send a request's headers, from its start or its last "
                        "reply; then it is closed (default 10)")
    limits.add_argument("--body-timeout-s", type=positive, default=60.0,
                        help="seconds a request's body may take after its headers; then the connection is closed "
                        "(default 60)")
    limits.add_argument("--max-connections", type=positive_int, default=1024,
                        help="connections open at once; beyond it requests get 503 (default 1024). Idle keep-alive "
                        "connections close after 5 s; at most 64 KiB of unfinished headers are buffered")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="CPU threads of a local judge (default: torch's, one per core); on a CPU shared with other "
                   "work, 1 keeps a judge call from stalling behind the others (a 1-answer call: 7-11 s with 2 "
                   "threads on a loaded 2-core machine, 2 s with 1)")
    add_judge_mode_arg(p)
    p.add_argument("--judge-constrained", action="store_true", help=JUDGE_CONSTRAINED)
    p.add_argument("--judge-cache", type=int, default=CACHE_ENTRIES, metavar="N",
                   help=f"judge results kept (default {CACHE_ENTRIES:,}; 0: off): an answer judged before under the "
                   "same question, rubric and judge settings is not judged again (extra_logs.judge_cached says so; "
                   "/health gives the hit rate)")
    add_context_args(p, "judge")
    add_backend_args(p)
    add_runtime_args(p)
    add_rubric_writing_args(p.add_argument_group("rubric writing", "sampling of --rubric-model"), prompt_flag=False)
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> None:
    from evolm.eval.rubric_source import read_rubric_table
    from evolm.judge.cache import cached_judge
    from evolm.serve.app import RubricSource, ServeSettings, create_app, require_serve_extra, run_server

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
    settings = ServeSettings(max_batch=args.max_batch, max_batch_s=args.max_batch_s, max_wait_ms=args.max_wait_ms,
                             max_queue=args.max_queue,
                             deadline_s=args.deadline_s, rubric_cache=args.rubric_cache, max_body_mb=args.max_body_mb,
                             max_answers=args.max_answers, max_answer_chars=args.max_answer_chars,
                             header_timeout_s=args.header_timeout_s, body_timeout_s=args.body_timeout_s,
                             max_connections=args.max_connections, threads=args.threads or 0)
    say(f"serving {args.judge} ({args.mode}; rubrics: {rubrics.kind}) on http://{args.host}:{args.port} "
        "- POST /get_reward (OpenRLHF), POST /reward (slime), GET /health, /docs")
    run_server(create_app(cached_judge(judge, args.judge_cache), rubrics, settings), args.host, args.port)
