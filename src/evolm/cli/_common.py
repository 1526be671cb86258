"""What the ``evolm`` commands share: argument types, the flag groups several commands declare, model
loading from flags, and the as-you-go JSONL writer of ``rubric`` and ``judge``.

Each group of shared flags is declared by one function, so that a flag means and says the same in
every command that has it.
"""

from __future__ import annotations

import argparse
import sys

from annotated_types import Ge, Gt, Le

from evolm.cli.flags import Flag, add_flags, field_values, number
from evolm.config import DTYPES, JUDGE_MODES, OVERLONG

MODEL_NAMES = ("local dir, Hugging Face id, or a built-in name: smollm2-135m-instruct, or qwen2.5-coder-1.5b-instruct "
               "and qwen2.5-coder-0.5b-instruct once their extras are installed (docs/USAGE.md, 'Built-in models')")


positive_int = number(int, Ge(1))  # an argparse type: an integer >= 1


def check_before_loading(source: str, rows: list[dict], outputs: list[str]) -> None:
    """What `rubric` and `judge` check before any model loads: there is work to do, and somewhere to put it."""
    from evolm.errors import InputError
    from evolm.runs.files import check_writable

    if not rows:
        raise InputError(f"{source}: no rows (an empty input)")
    check_writable(outputs)


def text_rows(rows: list[dict], source: str, keys: tuple[str, ...]) -> list[dict]:
    """Input rows whose ``keys`` hold text: ``null`` or a number is a one-line error, never the text "None"."""
    from evolm.errors import InputError

    for n, row in enumerate(rows, start=1):
        for k in keys:
            if not isinstance(row[k], str):
                raise InputError(f"{source}: row {n}: '{k}' must be text, not {type(row[k]).__name__}")
    return rows


def base_url(text: str) -> str:
    from evolm.config import endpoint_urls, url_error

    for url in endpoint_urls(text):
        if err := url_error("URL", url):
            raise argparse.ArgumentTypeError(err)
    return text


# Where a model runs (JudgeConfig's fields; the rubric writer of a command runs where its judge does)
BACKEND_FLAGS = (
    Flag("backend"),
    Flag("base_url", type=base_url, action="append", note="Repeat the flag (or comma-separate) for a pool"),
    Flag("api_key_env", note="The key is never logged"),
)
# What a request to a server may take (JudgeConfig's fields, for every model of the command on an openai backend)
REQUEST_FLAGS = (
    Flag("timeout"),
    Flag("max_retries"),
    Flag("deadline", flag="--request-deadline", dest="deadline", metavar="SECONDS"),
    Flag("max_concurrency"),
    Flag("requests_per_minute", metavar="N"),
    Flag("tokens_per_minute", metavar="N"),
    Flag("max_reply_mb", metavar="MIB"),
)


def add_backend_args(p: argparse.ArgumentParser) -> None:
    """Where a model runs: --backend, --base-url, --api-key-env, and the request limits (--timeout, ...)."""
    from evolm.config import JudgeConfig

    add_flags(p, JudgeConfig, (*BACKEND_FLAGS, *REQUEST_FLAGS))


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    """How a local model runs: --device, --dtype, --batch-size."""
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1... (auto: cuda when available)")
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="weight type of a local model (auto: bfloat16 on GPU, float32 on CPU; a judge's weights: "
                   "float32 everywhere, so that a score moves by less than 1e-5 with the answers batched beside it; "
                   "in bfloat16 by up to 0.03)")
    p.add_argument("--batch-size", type=positive_int, default=8,
                   help="rows per batch on a local model (prompts generated or answers scored together)")


def add_sampling_args(p: argparse._ActionsContainer) -> None:
    """Sampled generation: --temperature, --top-p, --seed (the paper's values by default)."""
    p.add_argument("--temperature", type=number(float, Ge(0)), default=0.6, help="sampling temperature (paper: 0.6)")
    p.add_argument("--top-p", type=number(float, Gt(0), Le(1)), default=0.95,
                   help="nucleus sampling top-p, in (0, 1] (paper: 0.95)")
    add_seed_arg(p)


def add_seed_arg(p: argparse._ActionsContainer) -> None:
    from evolm.config import RunConfig

    add_flags(p, RunConfig, [SEED_FLAG])


# How rubrics are written (RubricConfig's fields)
RUBRIC_FLAGS = (
    Flag("temperature"),
    Flag("top_p"),
    Flag("max_new_tokens", default=1024,
         why="a command's writer does not think unless asked; training's budget is for a thinking Qwen3"),
)
RUBRIC_PROMPT_FLAG = Flag("prompt", flag="--rubric-prompt")
RUBRIC_GRAMMAR_FLAGS = (
    Flag("constrained"),
    Flag("max_criteria", metavar="{2..5}"),
)
SEED_FLAG = Flag("seed")


def add_rubric_writing_args(p: argparse._ActionsContainer, prompt_flag: bool = True) -> None:
    """How rubrics are written: --temperature, --top-p, --seed, --max-new-tokens, (unless not read) --rubric-prompt,
    --constrained, --max-criteria."""
    from evolm.config import RubricConfig

    add_flags(p, RubricConfig, RUBRIC_FLAGS[:2])
    add_seed_arg(p)
    add_flags(p, RubricConfig, (RUBRIC_FLAGS[2], *([RUBRIC_PROMPT_FLAG] if prompt_flag else []), *RUBRIC_GRAMMAR_FLAGS))


# The judge (JudgeConfig's fields)
JUDGE_FLAGS = (
    Flag("mode", choices=sorted(JUDGE_MODES), why="reward_model needs the judge_only training regime",
         note="Here every mode but reward_model (it needs the judge_only training regime)"),
    Flag("max_new_tokens", flag="--judge-max-new-tokens", default=512,
         why="a command's judge does not think unless asked (no chat-template kwargs); training's budget is "
         "for a thinking Qwen3 judge, as the paper's protocol uses"),
    Flag("prompt", flag="--judge-prompt"),
    Flag("defences", flag="--no-judge-defences", dest="judge_defences"),
    Flag("parse", flag="--judge-parse"),
)
JUDGE_CONSTRAINED = Flag("constrained", flag="--judge-constrained", dest="judge_constrained")  # judge: --constrained
JUDGE_CACHE = Flag("cache", flag="--judge-cache", metavar="N")
JUDGE_CONTEXT_FLAGS = (
    Flag("max_context", metavar="TOKENS"),
    Flag("overlong"),
)


def add_judge_mode_arg(p: argparse.ArgumentParser) -> None:
    """The judge: --mode, --judge-max-new-tokens, --judge-prompt, --no-judge-defences, --judge-parse."""
    from evolm.config import JudgeConfig

    add_flags(p, JudgeConfig, JUDGE_FLAGS)
    p.add_argument("--judge-failures", choices=("raise", "missing"), default="raise",
                   help="a judge request that still fails after its retries: raise (default: stop with one line) or "
                   "missing (that answer gets no score, the rest go on; counted in the summary), as training does")


def add_judge_flags(p: argparse._ActionsContainer, *flags: Flag) -> None:
    """More of the judge's flags (``JUDGE_CONSTRAINED``, ``JUDGE_CACHE``), made from JudgeConfig's fields."""
    from evolm.config import JudgeConfig

    add_flags(p, JudgeConfig, flags)


def add_context_args(p: argparse._ActionsContainer, whose: str) -> None:
    """The context guard (evolm.backends.context): --max-context, --overlong; the judge's are JudgeConfig's fields,
    a rubric writer's have no setting in training (a training prompt that does not fit is an error there)."""
    if whose == "judge":
        from evolm.config import JudgeConfig

        add_flags(p, JudgeConfig, JUDGE_CONTEXT_FLAGS)
        return
    p.add_argument("--max-context", type=number(int, Ge(0)), default=0, metavar="TOKENS",
                   help=f"the {whose}'s context in tokens (default 0: the model's own, from its config; an openai "
                   "server's is not known, so give it there to guard). A prompt that leaves no room for the reply "
                   "is handled per --overlong")
    p.add_argument("--overlong", choices=OVERLONG, default="truncate",
                   help="a prompt longer than the context: truncate (default; the row gets no rubric and a reason) or "
                   "refuse (an error naming the row)")


def load_model(args: argparse.Namespace, model: str, backend: str, base_url: str | list[str] | None):  # -> Backend
    """A model behind the backend the flags name, run as the runtime flags say."""
    from evolm.backends.loading import load_backend

    return load_backend(model, backend=backend, base_url=base_url, api_key_env=args.api_key_env, device=args.device,
                        dtype=args.dtype, batch_size=args.batch_size, **_request_limit_kwargs(args))


def _request_limit_kwargs(args: argparse.Namespace) -> dict:
    """--timeout, --max-retries, --request-deadline and the per-server limits, for load_backend."""
    from evolm.config import JudgeConfig

    return field_values(args, JudgeConfig, REQUEST_FLAGS)


def judge_from_args(args: argparse.Namespace, model: str, backend: str, base_url: str | list[str] | None):  # -> Judge
    """The judge the flags describe, through the one builder training uses too.

    Every JudgeConfig field with a flag of this command comes from it; the CLI's judge keeps its own defaults
    where ``Flag.why`` says (``--judge-max-new-tokens`` 512) and reads no chat-template kwargs.
    """
    from evolm.config import JudgeConfig
    from evolm.errors import InputError
    from evolm.judge.judge import build_judge

    judge_flags = (*JUDGE_FLAGS, *REQUEST_FLAGS, BACKEND_FLAGS[2], JUDGE_CONSTRAINED, *JUDGE_CONTEXT_FLAGS)
    values = field_values(args, JudgeConfig, judge_flags)
    if getattr(args, "judge_constrained", False) and args.mode != "generative":
        raise InputError(f"constrained judging needs --mode generative, not {args.mode}")
    cfg = JudgeConfig.checked({**values, "model": model, "backend": backend, "base_url": base_url,
                               "batch_size": args.batch_size, "dtype": args.dtype, "chat_template_kwargs": {}})
    if getattr(args, "thinking", False):  # eval rb2 --protocol paper: a thinking Qwen3 judge, as in training
        cfg.chat_template_kwargs = {"enable_thinking": True}
    return build_judge(cfg, seed=args.seed, device=args.device, failures=getattr(args, "judge_failures", "raise"))


def context_note(cut: int, unscored: int) -> str:
    """What the judge's context guard did, for a summary line ("" when nothing)."""
    return ((f"; {cut} answers cut to fit the judge's context" if cut else "")
            + (f"; {unscored} rows over the judge's context left unscored" if unscored else ""))


class GuardTally:
    """A judge whose calls are counted for the summary line: answers its context guard cut (``Judgment.cut``), rows
    it left unscored (``Judgment.unscored``) and requests that failed (``--judge-failures missing``,
    ``Judgment.failed``). Reads as the judge it wraps for everything else."""

    def __init__(self, judge) -> None:  # noqa: ANN001 - evolm.judge.judge.Judge, a reward model, a cached judge
        self.judge, self.cut, self.unscored, self.failed = judge, 0, 0, 0

    def __getattr__(self, name: str):  # noqa: ANN204
        if name.startswith("__") or name == "judge":
            raise AttributeError(name)
        return getattr(self.judge, name)

    def score(self, items, progress: bool = False) -> list:  # noqa: ANN001
        out = self.judge.score(items, progress)
        self.cut += sum(1 for j in out if j.cut)
        self.unscored += sum(1 for j in out if j.unscored)
        self.failed += sum(1 for j in out if getattr(j, "failed", None))
        return out


def judge_context_note(judge) -> str:  # noqa: ANN001 - a GuardTally (else nothing is known)
    if not isinstance(judge, GuardTally):
        return ""
    failed = f"; {judge.failed} answers without a score: their judge request failed" if judge.failed else ""
    return context_note(judge.cut, judge.unscored) + failed


def rubric_params(args: argparse.Namespace):  # -> SamplingParams
    """Rubric-writing sampling parameters, all from the flags."""
    from evolm.backends.base import SamplingParams
    from evolm.backends.constrained import rubric_schema

    schema = rubric_schema(getattr(args, "max_criteria", 5)) if getattr(args, "constrained", False) else None
    return SamplingParams(args.temperature, args.top_p, args.max_new_tokens, args.seed,
                          {"enable_thinking": True} if getattr(args, "thinking", False) else {}, json_schema=schema)


AS_YOU_GO = ("Rows are written as they are done, to OUTPUT.partial (renamed to OUTPUT at the end): after a crash "
             "run the same command with --resume-output to keep them and do only the rest. An output that is "
             "also the input is refused.")


# Rows that `rubric` and `judge` send together to a server or vLLM (or --batch-size if larger), which take many
# at once, and write out before the next ones start: what a crash can lose at most.
WRITE_BATCH = 64


def write_chunk(args: argparse.Namespace) -> int:
    """Rows computed and written out together: one generation batch (--batch-size) on a local hf model, so that
    the progress bar moves after each batch; ``WRITE_BATCH`` requests in flight on the other backends."""
    return args.batch_size if args.backend == "hf" else max(WRITE_BATCH, args.batch_size)


def add_resume_output_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resume-output", action="store_true",
                   help="continue an interrupted run: keep the rows already in OUTPUT.partial (or OUTPUT), "
                   "which must be the first input rows in order, and compute only the rest")


def write_as_you_go(args: argparse.Namespace, rows: list[dict], compute, keys: tuple[str, ...], desc: str
                    ) -> list[dict]:
    """Compute the output rows in batches, each written out (fsynced) as it finishes; all output rows.

    Rows go to ``OUTPUT.partial``, renamed to OUTPUT at the end (see ``runs.resumable.resumable_jsonl``), so a
    crash loses at most the batch in progress; with --resume-output the rows already there are
    checked against the input (same ``keys``, row by row) and skipped. Batches (``write_chunk`` rows)
    start at multiples of their size, so a resumed run calls the model exactly as an uninterrupted one
    does. The progress bar moves after each batch, and within one as ``compute(start, end, advance)``
    calls ``advance(n)`` for rows finished and ``advance(tokens=n)`` for tokens generated (shown beside it).
    """
    import time

    from tqdm.auto import tqdm

    from evolm.backends.base import BAR_REFRESH_S
    from evolm.errors import InputError
    from evolm.runs.resumable import resumable_jsonl

    batch = write_chunk(args)
    with resumable_jsonl(args.output, resume=args.resume_output) as out:
        done = out.done
        if len(done) > len(rows):
            raise InputError(f"{args.output}: holds {len(done)} rows, more than the {len(rows)} input rows; "
                             "not resuming")
        for n, (old, row) in enumerate(zip(done, rows)):  # noqa: B905 - the rows done: a prefix of the input
            for k in keys:
                if old.get(k) != row[k]:
                    raise InputError(f"{args.output}: row {n + 1} does not match input row {n + 1} (different "
                                     f"'{k}'); not resuming")
        if done:
            print_stderr(f"resuming: {len(done)} of {len(rows)} rows already done")
        try:
            with tqdm(total=len(rows), initial=len(done), desc=desc, unit="row", delay=1) as bar:
                start, generated = len(done), [0, 0.0]  # tokens so far, when the bar was last drawn
                while start < len(rows):
                    end = min((start // batch + 1) * batch, len(rows))

                    def advance(n: int = 0, end: int = end, tokens: int = 0) -> None:  # rows finished in this
                        bar.update(max(0, min(n, end - bar.n)))  # batch (never past it), tokens generated
                        if tokens:
                            generated[0] += tokens
                            bar.set_postfix_str(f"{generated[0]} tokens", refresh=False)
                            if (now := time.monotonic()) - generated[1] >= BAR_REFRESH_S \
                                    and time.time() - bar.start_t >= bar.delay:  # the bar's delay holds
                                generated[1] = now
                                bar.refresh()

                    out.write(compute(start, end, advance))
                    bar.update(end - bar.n)
                    start = end
        except BaseException:
            if out.partial is not None and len(out.rows) > 0:
                print_stderr(f"{len(out.rows)} of {len(rows)} rows kept in {out.partial}: "
                             "run again with --resume-output to continue")
            raise
        return out.rows


def write_result(output: str | None, result: dict, table: str) -> None:
    """Write an evaluation's JSON result to ``output`` (if any) and print its table, on stderr if the JSON is on
    stdout."""
    if output:
        from evolm.runs.files import atomic_writer
        from evolm.runs.jsonl import dumps

        with atomic_writer(output) as f:
            f.write(dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(table, file=sys.stderr if output in ("-", "/dev/stdout") else sys.stdout)


def print_stderr(msg: str) -> None:
    """A line for the user on stderr: stdout stays for results (JSON, tables) a caller may pipe."""
    print(msg, file=sys.stderr)
