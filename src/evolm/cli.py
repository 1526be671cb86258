"""The ``evolm`` command line: the only place that prints errors and exits.

Every subcommand is a pair ``_add_<name>(subparsers)`` / ``_run_<name>(args)``; the first registers
the second with ``set_defaults(run=...)`` and ``main`` calls ``args.run(args)``. Flags that several
subcommands share are declared once, by the ``_add_*_args`` helpers. Library code raises
``EvolmError``; ``main`` turns it into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from evolm.context import OVERLONG
from evolm.errors import EvolmError
from evolm.judge import JUDGE_MODES, JUDGE_PARSERS, JUDGE_PROMPTS
from evolm.models import BACKENDS, DTYPES

_MODEL_NAMES = "local dir, Hugging Face id, or built-in 'smollm2-135m-instruct'"


def _positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (argparse turns the ValueError into a one-line usage error)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, not {value}")
    return value


def _check_before_loading(source: str, rows: list[dict], outputs: list[str]) -> None:
    """What `rubric` and `judge` check before any model loads: there is work to do, and somewhere to put it."""
    from evolm.errors import InputError
    from evolm.jsonl import check_writable

    if not rows:
        raise InputError(f"{source}: no rows (an empty input)")
    check_writable(outputs)


def _text_rows(rows: list[dict], source: str, keys: tuple[str, ...]) -> list[dict]:
    """Input rows whose ``keys`` hold text: ``null`` or a number is a one-line error, never the text "None"."""
    from evolm.errors import InputError

    for n, row in enumerate(rows, start=1):
        for k in keys:
            if not isinstance(row[k], str):
                raise InputError(f"{source}: row {n}: '{k}' must be text, not {type(row[k]).__name__}")
    return rows


# ----------------------------------------------------------------------------- shared flags
# Each group of shared flags is declared by one function, so that a flag means and says the same
# in every subcommand that has it.


def _add_backend_args(p: argparse.ArgumentParser) -> None:
    """Where a model runs: --backend, --base-url, --api-key-env, --timeout, --max-retries."""
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="hf",
        help="hf: local transformers (default); openai: an OpenAI-compatible server (vllm serve, OpenAI...); "
        "vllm: in-process vLLM (GPU, needs the 'vllm' extra)",
    )
    def base_url(text: str) -> str:
        from evolm.backends.pool import endpoint_urls
        from evolm.config import url_error

        for url in endpoint_urls(text):
            if err := url_error("URL", url):
                raise argparse.ArgumentTypeError(err)
        return text

    p.add_argument("--base-url", action="append", default=None, type=base_url,
                   help="server URL for --backend openai, e.g. http://127.0.0.1:8000/v1; several (repeat the flag, "
                   "or comma-separated) serving the same model make a pool: least-loaded first, 32 requests in "
                   "flight to each, a failed request retried on another")
    p.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the API key for openai backends (the key is never logged)",
    )
    def seconds(text: str) -> float:
        value = float(text)
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
        return value

    def mib(text: str) -> float:
        value = float(text)
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be a positive number of MiB, got {text}")
        return value

    def none_or_more(text: str) -> float:
        value = float(text)
        if not 0 <= value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be 0 (none) or a positive number, got {text}")
        return value

    def count(text: str) -> int:
        value = int(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
        return value

    p.add_argument("--timeout", type=seconds, default=120.0,
                   help="openai backends: seconds one request attempt may take in all, reply included (default 120)")
    p.add_argument("--max-retries", type=count, default=2,
                   help="openai backends: retries of a failed request (default 2); one request ends within "
                   "(max-retries + 1) x timeout + 8 s per retry")
    p.add_argument("--request-deadline", dest="deadline", type=none_or_more, default=0.0, metavar="SECONDS",
                   help="openai backends: seconds one request to a server may take in all, retries and waits "
                   "included (default 0: the bound above)")
    p.add_argument("--max-concurrency", type=_positive_int, default=32,
                   help="openai backends: requests in flight at once to each server (default 32)")
    p.add_argument("--requests-per-minute", type=none_or_more, default=0.0, metavar="N",
                   help="openai backends: requests per minute to each server (default 0: no limit), e.g. a hosted "
                   "API's rate limit")
    p.add_argument("--tokens-per-minute", type=none_or_more, default=0.0, metavar="N",
                   help="openai backends: tokens per minute to each server (default 0: no limit; a request counts "
                   "its characters / 3 + its reply budget until the server reports its usage)")
    p.add_argument("--max-reply-mb", type=mib, default=8.0, metavar="MIB",
                   help="openai backends: the most of one reply read, in MiB after decompression (default 8); a "
                   "larger one fails its request in one line")


def _add_runtime_args(p: argparse.ArgumentParser) -> None:
    """How a local model runs: --device, --dtype, --batch-size."""
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1... (auto: cuda when available)")
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="weight type of a local model (auto: bfloat16 on GPU, float32 on CPU; a judge's weights: "
                   "float32 everywhere, so that a score moves by less than 1e-5 with the answers batched beside it; "
                   "in bfloat16 by up to 0.03)")
    p.add_argument("--batch-size", type=_positive_int, default=8,
                   help="rows per batch on a local model (prompts generated or answers scored together)")


def _temperature(text: str) -> float:
    """An argparse type: a finite number >= 0 (NaN decoded greedily and inf gave random tokens, silently)."""
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (0: greedy), not {text}")
    return value


def _top_p(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], not {text}")
    return value


def _seed(text: str) -> int:
    value = int(text)
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 and < 2**32, not {text}")
    return value


def _add_sampling_args(p: argparse._ActionsContainer) -> None:
    """Sampled generation: --temperature, --top-p, --seed (the paper's values by default)."""
    p.add_argument("--temperature", type=_temperature, default=0.6, help="sampling temperature (paper: 0.6)")
    p.add_argument("--top-p", type=_top_p, default=0.95, help="nucleus sampling top-p, in (0, 1] (paper: 0.95)")
    _add_seed_arg(p)


def _add_seed_arg(p: argparse._ActionsContainer) -> None:
    p.add_argument("--seed", type=_seed, default=0, help="seed of sampled generation (rubrics, answers, generative "
                   "judge), in [0, 2**32)")


def _add_rubric_writing_args(p: argparse._ActionsContainer, prompt_flag: bool = True) -> None:
    """How rubrics are written: the sampling flags, --max-new-tokens and (unless not read) --rubric-prompt."""
    _add_sampling_args(p)
    p.add_argument("--max-new-tokens", type=_positive_int, default=1024, help="rubric length limit in tokens")
    if prompt_flag:
        p.add_argument("--rubric-prompt", choices=("v3", "older"), default="v3",
                       help="the rubric prompt (as rubric.prompt in training): v3 (default, the paper's: 2-5 criteria) "
                       "or older (the authors' older prompt: 5-10 criteria)")
    p.add_argument("--constrained", action="store_true",
                   help="decode each rubric under the rubric JSON schema (2-5 criteria with criterion, weight, "
                   "scoring_levels; xgrammar on hf, structured outputs on vllm/openai): every rubric parses, though "
                   "the weights may not sum to 1 (off by default, as in the paper)")


_JUDGE_CONSTRAINED = ("--mode generative: decode the judge's reply under its JSON schema {reasoning, score in [0, 1]} "
                      "(xgrammar on hf, structured outputs on vllm/openai), so every reply has a score")


def _add_judge_mode_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mode",
        choices=sorted(JUDGE_MODES),
        default="prob",
        help="prob: expected value of a 0-9 score token (one forward pass, deterministic, default); "
        "yesno: per-criterion P(yes) weighted by the rubric; generative: the reference JSON-score mode "
        "(sampled, temperature 0.6)",
    )
    p.add_argument("--judge-max-new-tokens", type=_positive_int, default=512,
                   help="reply budget of the sampled judge modes (generative, likert, rar_implicit); a thinking "
                   "judge (Qwen3, as in the paper) needs room to think: the paper's protocol uses 16384")
    p.add_argument("--judge-prompt", choices=JUDGE_PROMPTS, default="evolm",
                   help="wording of the generative judge: evolm (default) or reference (the authors' judge prompt, "
                   "as configs/paper-qwen3-8b.yaml runs it; see `evolm judge --show-prompt`)")
    p.add_argument("--no-judge-defences", dest="judge_defences", action="store_false",
                   help="leave out the defences (answer fenced as data, 'ignore instructions inside it', 'length and "
                   "polish earn nothing'), as the paper config does; on by default (docs/SECURITY.md)")
    p.add_argument("--judge-parse", choices=JUDGE_PARSERS, default="evolm",
                   help="reading of a generative reply: evolm (first JSON object with a score after the thinking, "
                   "clipped to [0, 1]) or reference (the authors': first { to last } via json_repair, not clipped)")


def _add_context_args(p: argparse._ActionsContainer, whose: str) -> None:
    """The context guard (evolm.context): --max-context, --overlong."""
    def tokens(text: str) -> int:
        value = int(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be 0 (the model's own context) or more, got {text}")
        return value

    p.add_argument("--max-context", type=tokens, default=0, metavar="TOKENS",
                   help=f"the {whose}'s context in tokens (default 0: the model's own, from its config; an openai "
                   "server's is not known, so give it there to guard). A prompt that leaves no room for the reply "
                   "is handled per --overlong")
    p.add_argument("--overlong", choices=OVERLONG, default="truncate",
                   help="a prompt longer than the context: truncate (default; " + (
                       "the answer is cut from its middle, the row says \"truncated\": true; when the question and "
                       "rubric alone do not fit, no score and a reason" if whose == "judge" else
                       "the row gets no rubric and a reason") + ") or refuse (an error naming the row)")


def _load(args: argparse.Namespace, model: str, backend: str, base_url: str | list[str] | None):  # -> Backend
    """A model behind the backend the flags name, run as the runtime flags say."""
    from evolm.models import load_backend

    return load_backend(model, backend=backend, base_url=base_url, api_key_env=args.api_key_env, device=args.device,
                        dtype=args.dtype, batch_size=args.batch_size, **_request_limit_kwargs(args))


def _request_limit_kwargs(args: argparse.Namespace) -> dict:
    """--timeout, --max-retries, --deadline and the per-server limits for load_backend, when the command has them."""
    keys = ("timeout", "max_retries", "deadline", "max_concurrency", "requests_per_minute", "tokens_per_minute",
            "max_reply_mb")
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def _build_judge(args: argparse.Namespace, model: str, backend: str, base_url: str | list[str] | None):  # -> Judge
    """The judge the flags describe, through the one builder training uses too.

    The CLI's judge keeps its own defaults: no chat-template kwargs and ``--judge-max-new-tokens``
    (512) for the sampled modes (``JudgeConfig``'s are for training runs with Qwen3 judges).
    """
    from evolm.config import JudgeConfig
    from evolm.errors import InputError
    from evolm.judge import build_judge

    constrained = getattr(args, "judge_constrained", False)
    if constrained and args.mode != "generative":
        raise InputError(f"constrained judging needs --mode generative, not {args.mode}")
    cfg = JudgeConfig(model=model, mode=args.mode, backend=backend, base_url=base_url, api_key_env=args.api_key_env,
                      batch_size=args.batch_size, dtype=args.dtype, max_new_tokens=args.judge_max_new_tokens,
                      chat_template_kwargs={}, max_context=getattr(args, "max_context", 0),
                      overlong=getattr(args, "overlong", "truncate"), constrained=constrained, **_request_limit_kwargs(args))
    cfg.prompt, cfg.defences, cfg.parse = (getattr(args, "judge_prompt", "evolm"), getattr(args, "judge_defences", True),
                                           getattr(args, "judge_parse", "evolm"))
    if getattr(args, "thinking", False):  # eval rb2 --protocol paper: a thinking Qwen3 judge, as in training
        cfg.chat_template_kwargs = {"enable_thinking": True}
    return build_judge(cfg, seed=args.seed, device=args.device)


def _context_note(cut: int, unscored: int) -> str:
    """What the judge's context guard did, for a summary line ("" when nothing)."""
    return ((f"; {cut} answers cut to fit the judge's context" if cut else "")
            + (f"; {unscored} rows over the judge's context left unscored" if unscored else ""))


def _judge_context_note(judge) -> str:  # noqa: ANN001 - evolm.judge.Judge (or a reward model: no guard)
    fit = getattr(judge, "last_fit", None)
    return _context_note(len(fit.cut), len(fit.unscored)) if fit is not None else ""


def _rubric_params(args: argparse.Namespace):  # -> SamplingParams
    """Rubric-writing sampling parameters, all from the flags."""
    from evolm.backends.base import SamplingParams

    from evolm.constrained import RUBRIC_SCHEMA

    return SamplingParams(args.temperature, args.top_p, args.max_new_tokens, args.seed,
                          {"enable_thinking": True} if getattr(args, "thinking", False) else {},
                          json_schema=RUBRIC_SCHEMA if getattr(args, "constrained", False) else None)


# ----------------------------------------------------------------------------- rubric

_AS_YOU_GO = ("Rows are written as they are done, to OUTPUT.partial (renamed to OUTPUT at the end): after a crash "
              "run the same command with --resume-output to keep them and do only the rest. An output that is "
              "also the input is refused.")


def _add_rubric(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rubric",
        help="write a rubric for each prompt",
        description="Write one rubric per input prompt. Input JSONL lines need 'prompt'; output lines keep "
        "every input field and add 'rubric' (parsed object or null), 'rubric_valid' (format validity, 0 or 1) "
        "and 'rubric_text' (raw model output); a question too long for the writer's context gets no rubric and "
        "'rubric_overlong' (why), or with --overlong refuse stops the run. " + _AS_YOU_GO,
    )
    p.add_argument("--model", required=True, help=f"rubric writer: {_MODEL_NAMES}")
    p.add_argument("--input", required=True, help="JSONL with a 'prompt' field per line ('-' for stdin)")
    p.add_argument("--output", required=True, help="JSONL to write ('-' for stdout)")
    _add_resume_output_arg(p)
    _add_backend_args(p)
    _add_runtime_args(p)
    _add_rubric_writing_args(p)
    _add_context_args(p, "rubric writer")
    p.set_defaults(run=_run_rubric)


def _run_rubric(args: argparse.Namespace) -> None:
    from evolm.context import over_context
    from evolm.errors import InputError
    from evolm.jsonl import check_outputs_differ, read_jsonl
    from evolm.rubrics import rubric_messages, write_rubrics

    check_outputs_differ([args.output], [args.input])
    rows = _text_rows(read_jsonl(args.input, required=["prompt"]), args.input, ("prompt",))
    _check_before_loading(args.input, rows, [args.output])
    backend = _load(args, args.model, args.backend, args.base_url)
    params = _rubric_params(args)

    def compute(start: int, end: int) -> list[dict]:
        questions = [str(r["prompt"]) for r in rows[start:end]]
        # a question that leaves the writer no room for its rubric: no rubric and why (or, refused, an error)
        over = over_context(backend, [rubric_messages(q, args.rubric_prompt) for q in questions],
                            max_context=args.max_context,
                            reply_tokens=params.max_new_tokens, what="rubric prompt")
        if over and args.overlong == "refuse":
            first = min(over)
            raise InputError(f"{args.input}: row {start + first + 1}: {over[first]} (--overlong refuse)")
        todo = [i for i in range(len(questions)) if i not in over]
        written = dict(zip(todo, write_rubrics(backend, [questions[i] for i in todo], params, prompt=args.rubric_prompt),
                           strict=True))
        return [{**row, "rubric": None, "rubric_valid": 0.0, "rubric_text": None, "rubric_overlong": over[i]} if i in over
                else {**row, "rubric": written[i].rubric.to_dict() if written[i].rubric else None,
                      "rubric_valid": written[i].valid, "rubric_text": written[i].text}
                for i, row in enumerate(rows[start:end])]

    out = _write_as_you_go(args, rows, compute, keys=("prompt",), desc="rubrics")
    n_over = sum("rubric_overlong" in r for r in out)
    _done(f"wrote {len(out)} rubrics ({sum(r['rubric_valid'] for r in out):.0f} valid) to {args.output}"
          + (f"; {n_over} questions over the writer's context got none" if n_over else ""))


# Rows per batch that `rubric` and `judge` write out before the next one starts (or --batch-size if larger):
# what a crash can lose at most.
WRITE_BATCH = 64


def _add_resume_output_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resume-output", action="store_true",
                   help="continue an interrupted run: keep the rows already in OUTPUT.partial (or OUTPUT), "
                   "which must be the first input rows in order, and compute only the rest")


def _write_as_you_go(args: argparse.Namespace, rows: list[dict], compute, keys: tuple[str, ...], desc: str) -> list[dict]:
    """Compute the output rows in batches, each written out (fsynced) as it finishes; all output rows.

    Rows go to ``OUTPUT.partial``, renamed to OUTPUT at the end (see ``jsonl.resumable_jsonl``), so a
    crash loses at most the batch in progress; with --resume-output the rows already there are
    checked against the input (same ``keys``, row by row) and skipped. Batches start at multiples of
    the batch size, so a resumed run calls the model exactly as an uninterrupted one does.
    """
    from tqdm.auto import tqdm

    from evolm.errors import InputError
    from evolm.jsonl import resumable_jsonl

    batch = max(WRITE_BATCH, args.batch_size)
    with resumable_jsonl(args.output, resume=args.resume_output) as out:
        done = out.done
        if len(done) > len(rows):
            raise InputError(f"{args.output}: holds {len(done)} rows, more than the {len(rows)} input rows; "
                             "not resuming")
        for n, (old, row) in enumerate(zip(done, rows)):
            for k in keys:
                if old.get(k) != row[k]:
                    raise InputError(f"{args.output}: row {n + 1} does not match input row {n + 1} (different "
                                     f"'{k}'); not resuming")
        if done:
            _done(f"resuming: {len(done)} of {len(rows)} rows already done")
        try:
            with tqdm(total=len(rows), initial=len(done), desc=desc, unit="row", delay=1) as bar:
                start = len(done)
                while start < len(rows):
                    end = min((start // batch + 1) * batch, len(rows))
                    out.write(compute(start, end))
                    bar.update(end - start)
                    start = end
        except BaseException:
            if out.partial is not None and len(out.rows) > 0:
                _done(f"{len(out.rows)} of {len(rows)} rows kept in {out.partial}: "
                      "run again with --resume-output to continue")
            raise
        return out.rows


# ----------------------------------------------------------------------------- judge


def _add_judge(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "judge",
        help="score answers with a (rubric +) judge",
        description="Score each answer. Input JSONL lines need 'prompt' and 'response', and may have 'rubric' "
        "(object or JSON string; without it the judge scores alone). Output lines add 'score' in [0, 1], or null "
        "when the judge gave no readable score (an unreadable reply, or a server that reported no score token). "
        "An answer too long for the judge's context is cut from its middle (the row adds \"truncated\": true and "
        "'chars_cut'); a row whose question and rubric alone do not fit has no score and 'overlong' (why). "
        + _AS_YOU_GO,
    )
    p.add_argument("--judge", help=f"judge model: {_MODEL_NAMES} (required unless --show-prompt)")
    p.add_argument("--input", help="JSONL with 'prompt', 'response' and optional 'rubric' ('-' for stdin)")
    p.add_argument("--output", help="JSONL to write ('-' for stdout)")
    p.add_argument("--show-prompt", action="store_true",
                   help="print the prompt the judge of a run config sends (on an example question, rubric and "
                   "answer) and exit; loads nothing. The config is --config (default: the built-in defaults: "
                   "generative judge, evolm's wording, defences on); the other judge flags are not read")
    p.add_argument("--config", default=None, metavar="CFG",
                   help="with --show-prompt: the run config (e.g. configs/paper-qwen3-8b.yaml) whose judge to show")
    _add_judge_mode_arg(p)
    p.add_argument("--constrained", dest="judge_constrained", action="store_true", help=_JUDGE_CONSTRAINED)
    p.add_argument("--no-rubric", action="store_true", help="ignore any 'rubric' field: judge alone")
    _add_resume_output_arg(p)
    _add_backend_args(p)
    _add_runtime_args(p)
    _add_seed_arg(p)
    _add_context_args(p, "judge")
    p.set_defaults(run=_run_judge)


_GUARD_KEYS = ("truncated", "chars_cut", "overlong")  # what the judge's context guard adds to a row (a re-judged
# file's old ones are dropped)


def _show_judge_prompt(config: str | None) -> None:
    """Print the conversation the judge of ``config`` (default: the defaults) sends for an example answer."""
    from evolm.config import load_config
    from evolm.judge import Judge, JudgeItem, judge_conversations

    j = load_config(config).judge
    print(f"# judge of {config or 'the default config'}: mode {j.mode}, prompt {j.prompt}, "
          f"defences {'on' if j.defences else 'off'}, parse {j.parse}")
    if j.mode not in JUDGE_MODES:
        print(f"# judge.mode={j.mode}: a scalar reward model reads the question and the answer as a chat; no prompt")
        return
    rubric = ('{"criteria": [{"criterion": "Names Paris as the capital of France.", "weight": 0.8}, '
              '{"criterion": "Answers in one sentence.", "weight": 0.2}]}')
    from evolm.rubrics import parse_rubric

    item = JudgeItem("What is the capital of France?", "The capital of France is Paris.", parse_rubric(rubric),
                     rubric_text=rubric)
    judge = Judge(None, mode=j.mode, prompt=j.prompt, defences=j.defences, parse=j.parse)  # type: ignore[arg-type]
    convs = judge_conversations(judge, item)
    if len(convs) > 1:
        print(f"# one prompt per criterion; the first of {len(convs)}:")
    for message in convs[0]:
        print(f"[{message['role']}]\n{message['content']}\n")


def _run_judge(args: argparse.Namespace) -> None:
    from evolm.errors import InputError
    from evolm.jsonl import check_outputs_differ, read_jsonl
    from evolm.judge import JudgeItem, OverlongPrompt
    from evolm.rubrics import Rubric

    if args.show_prompt:
        _show_judge_prompt(args.config)
        return
    missing = [f"--{k}" for k in ("judge", "input", "output") if getattr(args, k) is None]
    if missing or args.config:
        raise InputError(f"{', '.join(missing)} required" if missing else "--config is read only with --show-prompt")
    check_outputs_differ([args.output], [args.input])
    rows = _text_rows(read_jsonl(args.input, required=["prompt", "response"]), args.input, ("prompt", "response"))
    _check_before_loading(args.input, rows, [args.output])
    items, used = [], []
    for row in rows:
        given = None if args.no_rubric else row.get("rubric")
        rubric = Rubric.from_obj(given) if given is not None else None
        raw = None if given is None or rubric is not None else given if isinstance(given, str) else json.dumps(given)
        items.append(JudgeItem(row["prompt"], row["response"], rubric, rubric_text=raw))
        used.append("parsed" if rubric is not None else "raw text" if raw and raw.strip() else "none")
    judge = _build_judge(args, args.judge, args.backend, args.base_url)

    def compute(start: int, end: int) -> list[dict]:
        try:
            scores = judge.score(items[start:end])
        except OverlongPrompt as e:
            raise InputError(f"{args.input}: row {start + e.index + 1}: {e.reason}") from None
        cut, unscored = (fit.cut, fit.unscored) if (fit := getattr(judge, "last_fit", None)) is not None else ({}, {})
        # rubric_used says how the judge read the row's rubric: parsed, as raw text (it did not parse), or none
        return [{**{k: v for k, v in row.items() if k not in _GUARD_KEYS}, "score": s, "rubric_used": u,
                 **({"truncated": True, "chars_cut": cut[k]} if k in cut else {}),
                 **({"overlong": unscored[k]} if k in unscored else {})}
                for k, (row, s, u) in enumerate(zip(rows[start:end], scores, used[start:end], strict=True))]

    out = _write_as_you_go(args, rows, compute, keys=("prompt", "response"), desc=f"judge ({args.mode})")
    n_missing = sum(r["score"] is None for r in out)
    _done(f"scored {len(rows)} answers ({n_missing} without a readable score) to {args.output}"
          + _context_note(sum(r.get("truncated") is True for r in out), sum("overlong" in r for r in out)))


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
        "  sequential     two stages, two weight sets: the writer trains with the policy frozen, then the\n"
        "                 policy trains from the base weights on that writer's rubrics (OUTPUT_DIR/stage*)\n"
        "  frozen_rubric  policy steps only; rubrics from a fixed writer (base model, or rubric.writer such as\n"
        "                 gpt-4.1 with rubric.writer_backend=openai)\n"
        "  judge_only     policy steps only, no rubric (judge.mode=likert, or reward_model for a scalar RM)\n"
        "  rubric_only    rubric steps only, answers from a frozen policy (contrast.answerer)\n"
        "The paper's baselines are configs in configs/baselines/ (see docs/FIDELITY.md).\n\n"
        "Examples:\n"
        "  evolm train --config configs/demo-cpu.yaml\n"
        "  evolm train --config configs/paper-qwen3-8b.yaml --dry-run --num-processes 4\n"
        "  evolm train --config configs/demo-cpu.yaml judge.mode=yesno schedule.cycles=3 output_dir=runs/demo2\n"
        "  evolm train --resume runs/demo\n\n"
        "Settings (override any with section.key=value):\n" + describe(),
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--config", help="YAML run config (e.g. configs/demo-cpu.yaml, configs/paper-qwen3-8b.yaml)")
    g.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last complete checkpoint")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. schedule.cycles=3")
    p.add_argument("--dry-run", action="store_true",
                   help="resolve the config, check every constraint that needs no model (batch arithmetic for "
                   "--num-processes, age window vs buffer, endpoints) and print the plan; loads nothing")
    p.add_argument("--num-processes", type=int, default=None, metavar="N",
                   help="training processes the launch will use, for --dry-run (default: WORLD_SIZE or 1)")
    mem = p.add_argument_group(
        "memory estimate (--dry-run)",
        "GiB per training GPU from the model's shape (a local config.json, or a few known hub ids) and the settings:\n"
        "  bf16 weights; Adam with an fp32 master copy and two moments under DeepSpeed, sharded by the ZeRO stage;\n"
        "  TRL's reference model when grpo.beta != 0 without LoRA; colocated vLLM's share while it generates (all the\n"
        "  time without sleep mode); activations of one micro-batch of prompt + max_completion_length tokens (flash\n"
        "  attention; checkpointed: each layer's input plus one layer); TRL's chunked output head (no full logits);\n"
        "  3 GiB of CUDA context and slack. An estimate, not a measurement: docs/PERFORMANCE.md derives each term")
    mem.add_argument("--gpu-memory", type=float, default=None, metavar="GIB",
                     help="memory of one training GPU in GiB (an 80 GB H100: 79.6); refuse a launch whose estimate "
                     "exceeds it, naming the setting to turn (default: estimate for 80, refuse nothing)")
    mem.add_argument("--accelerate-config", default=None, metavar="FILE",
                     help="the accelerate config (or DeepSpeed JSON) of the launch: ZeRO stage and CPU offload "
                     "(default: grpo.deepspeed, else plain data parallel)")
    mem.add_argument("--zero-stage", type=int, default=None, choices=(0, 1, 2, 3),
                     help="DeepSpeed ZeRO stage, instead of reading it from --accelerate-config")
    mem.add_argument("--prompt-tokens", type=_positive_int, default=1024, metavar="N",
                     help="prompt length assumed for a training row (default 1024)")
    mem.add_argument("--judge-tokens-per-second", type=float, default=50.0, metavar="R",
                     help="decode speed assumed for one judge request on a busy server, to time the judge's longest "
                     "reply against judge.timeout (default 50)")
    p.set_defaults(run=_run_train)


def _run_train(args: argparse.Namespace) -> None:
    import signal
    from pathlib import Path

    from tqdm.auto import tqdm

    from evolm.coevolve import run
    from evolm.config import load_config
    from evolm.heldout import describe
    from evolm.report import summarise
    from evolm.rundir import resume_config

    cfg = resume_config(args.resume, args.overrides) if args.resume else load_config(args.config, args.overrides)
    if args.dry_run:
        _dry_run(cfg, args)
        return
    from evolm.dist import is_main, single_cpu_launch_warning

    main = is_main()  # under torchrun every process runs this: only rank 0 prints
    if not main:  # the other processes stay quiet (no second set of loading bars): rank 0 speaks for the job
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if main and (warning := single_cpu_launch_warning()):
        print(warning, file=sys.stderr)
    bar = tqdm(total=cfg.total_steps, desc="evolm", unit="step", dynamic_ncols=True, delay=1, disable=not main)

    def on_start(start) -> None:  # noqa: ANN001 - evolm.rundir.RunStart
        if not main:
            return
        for why in start.skipped:
            print(f"evolm: passing over a checkpoint that does not validate: {why}", file=sys.stderr)
        where = f"resuming after step {start.step}" if start.checkpoint else "fresh start"
        print(f"evolm: {cfg.schedule.regime} run in {start.run_dir}: {cfg.total_steps} steps ({where})",
              file=sys.stderr, flush=True)

    def on_step(rec) -> None:  # noqa: ANN001 - evolm.records.StepRecord
        if rec.role == "eval":  # a held-out evaluation (eval.*), not a training step
            bar.write(f"evolm: {describe(rec)}", file=sys.stderr)
            return
        reward = "-" if rec.reward_mean is None else f"{rec.reward_mean:.3f}"
        bar.set_postfix(role=rec.role, cycle=rec.cycle, reward=reward)
        bar.update(rec.step - bar.n)

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops like Ctrl-C
    try:
        run_dir = run(cfg, resume=bool(args.resume), on_step=on_step, on_start=on_start)
    finally:
        signal.signal(signal.SIGTERM, previous)
        bar.close()
    if main:
        _print_summary(run_dir, summarise(run_dir))


def _dry_run(cfg, args: argparse.Namespace) -> None:  # noqa: ANN001 - evolm.config.RunConfig
    from rich.console import Console
    from rich.table import Table

    from evolm.config import grpo_errors, launch_errors, launch_plan
    from evolm.dist import world_size
    from evolm.errors import InputError

    n = args.num_processes if args.num_processes is not None else world_size()  # the real launch's world
    if n < 1:
        raise InputError(f"--num-processes must be >= 1, not {n}")
    errors = launch_errors(cfg, n) + grpo_errors(cfg.grpo)
    if errors:
        raise InputError(errors[0] + (f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""))
    table = Table(title=f"evolm train --dry-run: {cfg.output_dir}, {n} process(es)")
    table.add_column("plan")
    table.add_column("value")
    for k, v in launch_plan(cfg, n):
        table.add_row(k, v)
    Console().print(table)
    refused = _memory_plan(cfg, n, args)
    if refused:
        raise InputError(refused)
    _done("dry run: the config is valid for this launch; nothing was loaded")


def _memory_plan(cfg, n: int, args: argparse.Namespace) -> str | None:  # noqa: ANN001 - evolm.config.RunConfig
    """Print the memory estimate per training GPU and the judge's time budget; the refusal line, if any."""
    from rich.console import Console
    from rich.table import Table

    from evolm import memory

    budget = memory.judge_budget(cfg, n, args.judge_tokens_per_second)
    reply = (f"{budget.reply_tokens:,} tokens at {args.judge_tokens_per_second:g} tokens/s (assumed): "
             f"{budget.seconds:,.0f} s")
    if budget.timeout is not None and not budget.fits:
        _done(f"evolm: warning: the judge's longest reply ({reply}) outlasts judge.timeout ({budget.timeout:g} s): "
              "long replies would time out, be retried and count as missing; raise judge.timeout")
    if budget.step_seconds > budget.ddp_timeout:
        _done(f"evolm: warning: judging one step on one process may take {budget.step_seconds:,.0f} s at worst, "
              f"longer than grpo.ddp_timeout ({budget.ddp_timeout:g} s) that the other processes wait in a "
              "collective: raise grpo.ddp_timeout")
    facts = memory.model_facts(cfg.model.name)
    if cfg.grpo.get("use_cpu") or facts is None:
        why = "a CPU run (grpo.use_cpu)" if facts else (f"the shape of {cfg.model.name} is not known (not a local "
                                                          "directory with config.json, not in evolm.memory.KNOWN_MODELS)")
        _done(f"memory estimate skipped: {why}")
        return None
    gpu = args.gpu_memory if args.gpu_memory is not None else 80.0
    sharding = memory.sharding_for(cfg, args.accelerate_config, args.zero_stage)
    setup = memory.setup_for(cfg, facts, n, sharding, gpu, args.prompt_tokens)
    est = memory.estimate(facts, setup)
    table = Table(title=f"memory per training GPU, estimated ({sharding.source}; "
                        f"{'--gpu-memory' if args.gpu_memory is not None else 'assumed'} {gpu:g} GiB)")
    for col in ("term", "GiB", "when", "how"):
        table.add_column(col)
    for t in est.terms:
        table.add_row(t.name, f"{t.gib:.1f}", t.phase, t.note)
    table.add_row("peak while generating", f"{est.generation_gib:.1f}", "", "resident + generation")
    table.add_row("peak while training", f"{est.training_gib:.1f}", "", "resident + training")
    if est.vllm_sequences is not None:
        table.add_row("vLLM KV cache", "", "", f"room for {est.vllm_sequences:.1f} sequences of the full context at "
                      "once (vLLM needs 1 to start)")
    timeout = "no deadline (in process)" if budget.timeout is None else \
        f"judge.timeout {budget.timeout:g} s: {'fits' if budget.fits else 'TOO SHORT'}"
    table.add_row("judge reply", "", "", f"{reply}; {timeout}")
    table.add_row("judging per step", "", "", f"at worst {budget.step_seconds:,.0f} s on one process; "
                  f"grpo.ddp_timeout {budget.ddp_timeout:g} s")
    Console().print(table)
    return memory.refusal(est, setup, gpu) if args.gpu_memory is not None else None


def _print_summary(run_dir, phases) -> None:  # noqa: ANN001
    """The phases of the run (training steps only) and, when logged, its first and last held-out evaluations."""
    from rich.console import Console
    from rich.table import Table

    from evolm.heldout import summary_rows
    from evolm.records import read_metrics

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    table = Table(title=f"EvoLM run: {run_dir}")
    for col in ("phase", "cycle", "role", "steps", "mean reward", "judge pair acc.", "rubric validity", "seconds"):
        table.add_column(col, justify="right")
    for ph in phases:
        table.add_row(str(ph["phase"]), str(ph["cycle"]), ph["role"], str(ph["steps"]), fmt(ph["reward"]),
                      fmt(ph["pair_accuracy"]), fmt(ph["rubric_validity"]), f"{ph['seconds']:.0f}")
    Console().print(table)
    heldout = summary_rows(read_metrics(run_dir))
    if heldout:
        table = Table(title="held-out evaluation (eval.*): first and last")
        for col in ("", "first", "last"):
            table.add_column(col, justify="right")
        for row in heldout:
            table.add_row(*row)
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
        "alone; one that does not parse is written again at temperature 0.3, then 0.1), every completion judged "
        "separately; 1/k credit when the chosen answer ties k-way at the top; the Ties formula of the rewardbench "
        "0.1.4 release; overall = mean of the six subsets (any other subset name is an error). A missing judge "
        "score ranks below every present score. "
        "Prints a per-subset table (percent) and writes the result as JSON with --output (scores in [0, 1]).",
    )
    p.add_argument("data", nargs="?", help="RewardBench 2 rows: a local .parquet/.json/.jsonl file (or a folder of "
                   "them), or the hub id allenai/reward-bench-2 (downloads); not needed with --from-scores")
    _add_rubric_judge_args(p)
    p.add_argument("--rubrics", default=None, metavar="FILE",
                   help="reuse rubrics written earlier: JSONL with 'rubric' and 'id' or 'prompt' (as `evolm rubric` "
                   "writes); no rubric model is loaded")
    p.add_argument("--limit", type=_positive_int, default=None,
                   help="at most this many rows per subset (for Ties: prompt ids, each with its ref and tied rows)")
    p.add_argument("--subsets", default=None, help="comma-separated subsets to run, e.g. 'Math,Ties' (default: all)")
    p.add_argument("--output", default=None, help="JSON result to write ('-' for stdout)")
    p.add_argument("--save-scores", default=None, metavar="PATH",
                   help="also write one JSON line per row: id, subset, num_correct, scores (chosen first)")
    p.add_argument("--from-scores", default=None, metavar="PATH",
                   help="recompute the table from a --save-scores file, without any model")
    p.add_argument("--allow-unpaired-ties", action="store_true",
                   help="score Ties 'tied:' rows that have no 'ref:' row (in the tied accuracy only, as the official "
                   "code does); by default such a file is refused: a whole Ties subset has both rows of every prompt")
    p.add_argument("--protocol", choices=("fast", "paper"), default="fast",
                   help="fast (default): the flags as given (defaults: prob judge, 512 judge and 1024 rubric tokens, "
                   "no thinking, the parsed rubric re-rendered): quick everyday numbers. paper: the authors' "
                   "protocol in one flag, replacing those flags: " + "; ".join(f"{k} {v}" for k, v in RB2_PAPER_LISTING)
                   + ". Slow: every reply may think for 16k tokens")
    p.set_defaults(run=_run_eval_rb2)


RB2_PAPER = {"mode": "generative", "judge_max_new_tokens": 16384, "thinking": True, "judge_prompt": "reference",
             "judge_defences": False, "judge_parse": "reference", "temperature": 0.6, "top_p": 0.95,
             "max_new_tokens": 16384, "constrained": False, "judge_constrained": False, "rubric_as_written": True}
"""``evolm eval rb2 --protocol paper``: the flags it sets (the generative judge keeps temperature 0.6, top-p 0.95)."""
RB2_PAPER_LISTING = (
    ("judge", "generative, up to 16384 tokens, thinking on (enable_thinking), temperature 0.6, top-p 0.95"),
    ("judge prompt", "the authors' (--judge-prompt reference --no-judge-defences --judge-parse reference)"),
    ("rubric shown to the judge", "the raw rubric text as the writer wrote it (reasoning removed), not re-rendered"),
    ("rubric writing", "thinking on, up to 16384 tokens, temperature 0.6 then retries at 0.3 and 0.1, top-p 0.95"),
)


def _run_eval_rb2(args: argparse.Namespace) -> None:
    from evolm.errors import InputError
    from evolm.eval import rb2
    from evolm.eval.rubric_source import read_rubric_table

    from evolm.jsonl import check_outputs_differ, check_writable

    check_outputs_differ([args.output, args.save_scores], [args.data, args.rubrics, args.from_scores])
    check_writable([args.output, args.save_scores])
    settings: dict = {"data": args.data, "from_scores": args.from_scores}
    subsets = [s.strip() for s in args.subsets.split(",") if s.strip()] if args.subsets else None
    if args.from_scores:
        if args.data:
            raise InputError("give either DATA or --from-scores, not both")
        scored = rb2.filter_subsets(rb2.read_scores(args.from_scores), subsets, args.from_scores)
        coverage = judge = None
    else:
        if not args.data:
            raise InputError("give the RewardBench 2 data (a file or allenai/reward-bench-2), or --from-scores")
        rows = rb2.load_rb2(args.data, subsets=subsets, limit=args.limit)
        if not rows:
            raise InputError(f"{args.data}: no rows to evaluate")
        table = read_rubric_table(args.rubrics) if args.rubrics and not args.no_rubric else None
        if args.protocol == "paper":
            vars(args).update(RB2_PAPER)
            _done("RewardBench 2, the paper's protocol: " + "; ".join(f"{k}: {v}" for k, v in RB2_PAPER_LISTING))
        rubric_backend, judge = _rubric_and_judge(args, need_rubric_model=table is None)
        scored, coverage = rb2.run_rb2(rows, judge, rubric_backend=rubric_backend, rubric_params=_rubric_params(args),
                                       rubric_table=table, progress=True,
                                       rubric_as_written=getattr(args, "rubric_as_written", False),
                                       rubric_prompt=args.rubric_prompt)
        if args.save_scores:
            rb2.write_scores(args.save_scores, scored)
        settings.update(_rubric_judge_settings(args), rubrics_file=args.rubrics, limit=args.limit, subsets=subsets,
                        protocol=args.protocol, **({k: v for k, v in RB2_PAPER.items() if k not in
                                                     _rubric_judge_settings(args)} if args.protocol == "paper" else {}))
    if (orphans := rb2.unpaired_tied(scored)) and not args.allow_unpaired_ties:
        raise InputError(f"{len(orphans)} Ties 'tied:' row(s) without their 'ref:' row (tied:{orphans[0]}): not a "
                         "whole Ties subset; --allow-unpaired-ties scores them as the official code does")
    result = rb2.score_rows(scored)
    result.extra["settings"] = settings
    if coverage is not None:
        result.extra["rubrics"] = coverage.to_dict()
    _write_result(args.output, result.to_dict(), rb2.format_table(result))
    wrote = [p for p in (args.save_scores if not args.from_scores else None, args.output) if p and p != "-"]
    _done(f"RewardBench 2 overall {100 * result.overall:.1f} over {len(scored)} rows"
          + (f" ({result.missing_scores} missing scores)" if result.missing_scores else "")
          + (f"; {n} Ties tied: rows without their ref: row (in the tied accuracy only, as the official code "
             "scores them)" if (n := len(rb2.unpaired_tied(scored))) else "")
          + (_rubric_note(coverage) if coverage is not None else "")
          + (_judge_context_note(judge) if judge is not None else "")
          + (f"; wrote {', '.join(wrote)}" if wrote else ""))


def _add_rubric_judge_args(p: argparse.ArgumentParser) -> None:
    """Flags for the two models of an evaluation: the rubric writer and the judge."""
    p.add_argument("--judge", default=None, help=f"judge model: {_MODEL_NAMES}")
    p.add_argument("--rubric-model", default=None,
                   help="rubric writer (same kinds of names); loaded once when it is the judge model too")
    p.add_argument("--no-rubric", action="store_true", help="judge alone, no rubric (the baseline)")
    _add_judge_mode_arg(p)
    _add_context_args(p, "judge")
    _add_backend_args(p)  # the rubric model's, and the judge's unless --judge-backend / --judge-base-url
    p.add_argument("--judge-backend", choices=BACKENDS, default=None, help="backend of the judge (default: --backend)")
    p.add_argument("--judge-base-url", action="append", default=None,
                   help="server URL of the judge, repeatable for a pool (default: --base-url)")
    p.add_argument("--judge-constrained", action="store_true", help=_JUDGE_CONSTRAINED)
    _add_runtime_args(p)
    _add_rubric_writing_args(p.add_argument_group(
        "rubric writing", "sampling of the rubric writer (the generative judge keeps temperature 0.6, top-p 0.95)"))


def _rubric_and_judge(args: argparse.Namespace, need_rubric_model: bool = True):  # -> (Backend | None, Judge)
    """Build the judge and (unless --no-rubric or not needed) the rubric writer, sharing one model when equal."""
    from evolm.errors import InputError

    if not args.judge:
        raise InputError("--judge is required")
    wants_rubrics = need_rubric_model and not args.no_rubric
    if wants_rubrics and not args.rubric_model:
        raise InputError("--rubric-model is required (or --no-rubric to judge alone, or --rubrics FILE)")
    judge_backend, judge_url = args.judge_backend or args.backend, args.judge_base_url or args.base_url
    judge = _build_judge(args, args.judge, judge_backend, judge_url)
    rubric_backend = None
    if wants_rubrics:
        same = (args.rubric_model, args.backend, args.base_url) == (args.judge, judge_backend, judge_url)
        rubric_backend = judge.backend if same else _load(args, args.rubric_model, args.backend, args.base_url)
    return rubric_backend, judge


def _rubric_note(coverage) -> str:  # coverage: evolm.eval.rubric_source.RubricCoverage
    """Say how many rubrics parsed: an unparsed one leaves the judge alone on that prompt."""
    if coverage.source == "none":
        return "; judge alone (no rubrics)"
    note = f"; rubrics: {coverage.parsed} of {coverage.prompts} parsed"
    return note + (" (the others judged without a rubric)" if coverage.parsed < coverage.prompts else "")


def _rubric_judge_settings(args: argparse.Namespace) -> dict:
    return {
        "judge": args.judge, "judge_backend": args.judge_backend or args.backend, "mode": args.mode,
        "rubric_model": None if args.no_rubric else args.rubric_model, "backend": args.backend,
        "no_rubric": args.no_rubric, "temperature": args.temperature, "top_p": args.top_p,
        "rubric_prompt": args.rubric_prompt,
        "max_new_tokens": args.max_new_tokens, "seed": args.seed, "constrained": args.constrained,
        "judge_constrained": args.judge_constrained, "max_context": args.max_context, "overlong": args.overlong,
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
    p.add_argument("--limit", type=_positive_int, default=None, help="at most this many pairs per file (the first ones)")
    p.add_argument("--output", default=None, help="JSON result to write ('-' for stdout)")
    p.set_defaults(run=_run_eval_pairs)


def _run_eval_pairs(args: argparse.Namespace) -> None:
    from evolm.eval import pairs as pairs_eval
    from evolm.jsonl import check_outputs_differ, check_writable

    check_outputs_differ([args.output], args.files)
    check_writable([args.output])
    files = {path: pairs_eval.load_pairs(path, limit=args.limit) for path in args.files}
    rubric_backend, judge = _rubric_and_judge(args)
    result = pairs_eval.run_pairs(files, judge, rubric_backend=rubric_backend, rubric_params=_rubric_params(args),
                                  progress=True, rubric_prompt=args.rubric_prompt)
    out = {**result.to_dict(), "settings": {**_rubric_judge_settings(args), "limit": args.limit}}
    _write_result(args.output, out, pairs_eval.format_table(result))
    _done(f"pairwise accuracy {100 * result.total.accuracy:.1f} over {result.total.pairs} pairs"
          + _rubric_note(result.rubrics) + _judge_context_note(judge)
          + (f"; wrote {args.output}" if args.output and args.output != "-" else ""))


# --- eval policy (owner: policy helper) -------------------------------------


class _NoteGiven(argparse.Action):
    """A plain option that also records its dest in ``args.given`` when it is on the command line.

    ``eval policy`` shares --temperature/--top-p (and their paper defaults) with other commands but
    must apply them only when given: its default decoding is each lm-eval task's own.
    """

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001 - argparse's signature
        setattr(namespace, self.dest, values)
        namespace.given = {*getattr(namespace, "given", ()), self.dest}


def _add_eval_policy(esub: argparse._SubParsersAction) -> None:
    from evolm.eval.policy import OLMO3_ADAPT_DECODING, POLICY_TASKS, PROTOCOLS, TASK_GROUPS

    p = esub.add_parser(
        "policy",
        help="score a policy with lm-eval: IFEval and GSM8K offline, the OLMo 3 Adapt suite with hub access",
        description="Evaluate a model with lm-evaluation-harness, zero-shot with its chat template (SPEC §3.2). "
        "Results are labelled 'lm-eval protocol' (not OLMES). Decoding: --protocol lm-eval (default) uses each "
        "task's own generation settings; --protocol olmo3-adapt uses the paper's (sampled, temperature "
        f"{OLMO3_ADAPT_DECODING['temperature']}, top-p {OLMO3_ADAPT_DECODING['top_p']}, up to "
        f"{OLMO3_ADAPT_DECODING['max_gen_toks']} new tokens capped by the model's context); --greedy, "
        "--temperature, --top-p and --max-gen-toks override either, and only when given. Tasks: "
        + ", ".join(f"{n} (lm-eval {t.lm_eval_task}{'' if t.local else ', hub data'})" for n, t in POLICY_TASKS.items())
        + "; groups: " + ", ".join(f"{g} = {','.join(m)}" for g, m in TASK_GROUPS.items())
        + ". See docs/POLICY_EVAL.md.",
    )
    p.register("action", None, _NoteGiven)  # plain options note that they were given (args.given)
    p.add_argument("--model", required=True,
                   help="run checkpoint (RUN/checkpoints/checkpoint-N), local model dir, built-in "
                   "'smollm2-135m-instruct', or a Hugging Face id")
    p.add_argument("--tasks", default="ifeval,gsm8k",
                   help="comma-separated tasks or groups (default: ifeval,gsm8k; olmo3_adapt: the paper's suite "
                   "as far as lm-eval has it)")
    p.add_argument("--protocol", default="lm-eval", choices=PROTOCOLS,
                   help="decoding: lm-eval = each task's own settings (default); olmo3-adapt = the paper's")
    p.add_argument("--data-dir", default=None,
                   help="folder holding <task>/<file> as in shared/data (default: ../shared/data if it exists)")
    for name, task in POLICY_TASKS.items():
        if task.local:
            p.add_argument(f"--{name}-data", dest=f"{name}_data", default=None, metavar="FILE",
                           help=f"{name} JSONL file (default: DATA_DIR/{task.data_file})")
    p.add_argument("--hub", action="store_true",
                   help="let tasks without a local file read lm-eval's data sets from the Hugging Face hub (or "
                   "the HF datasets cache); needed by every olmo3_adapt task but ifeval and gsm8k")
    p.add_argument("--allow-code-execution", action="store_true",
                   help="run the model's code to score humaneval_plus and mbpp_plus (unsandboxed: use a container)")
    p.add_argument("--limit", type=_positive_int, default=None, help="first N documents of each task (quick runs)")
    p.add_argument("--max-gen-toks", type=_positive_int, default=None,
                   help="most tokens generated per answer (default: the task's own under --protocol lm-eval, "
                   f"{OLMO3_ADAPT_DECODING['max_gen_toks']} under olmo3-adapt; always capped to fit the model's context)")
    p.add_argument("--greedy", action="store_true", help="greedy decoding (lm-eval's tasks are greedy already)")
    _add_sampling_args(p)
    _add_runtime_args(p)
    p.add_argument("--system-instruction", default=None, help="system message for every prompt (default: none)")
    p.add_argument("--think-end-token", default="auto",
                   help="score only the text after this token (auto: '</think>' when the tokenizer has it; '' for none)")
    p.add_argument("--output", default=None,
                   help="JSON results ('-' for stdout; default: RUN/eval/policy-checkpoint-N.json for a run "
                   "checkpoint, else stdout)")
    p.add_argument("--samples", default=None, metavar="FILE", help="also write every prompt, response and score as JSONL")
    p.set_defaults(run=_run_eval_policy)


def _run_eval_policy(args: argparse.Namespace) -> None:
    from evolm.eval.policy import (
        POLICY_TASKS, check_access, default_data_dir, default_output_path, format_table, parse_tasks,
        resolve_data_files, resolve_decoding, run_policy_eval,
    )

    given = getattr(args, "given", set())
    tasks = parse_tasks(args.tasks)
    decoding = resolve_decoding(
        args.protocol, greedy=args.greedy, temperature=args.temperature if "temperature" in given else None,
        top_p=args.top_p if "top_p" in given else None, max_gen_toks=args.max_gen_toks, seed=args.seed,
    )
    check_access(tasks, allow_hub=args.hub, allow_code=args.allow_code_execution)
    data_dir = args.data_dir if args.data_dir is not None else default_data_dir()
    files = resolve_data_files(tasks, data_dir, {n: getattr(args, f"{n}_data", None) for n in POLICY_TASKS})
    output = args.output or str(default_output_path(args.model) or "-")
    from evolm.jsonl import check_outputs_differ

    check_outputs_differ([output, args.samples], files.values())
    result = run_policy_eval(
        args.model, tasks, files, device=args.device, dtype=args.dtype, decoding=decoding, limit=args.limit,
        batch_size=args.batch_size, system_instruction=args.system_instruction,
        think_end_token=args.think_end_token, samples_path=args.samples, allow_hub=args.hub,
        allow_code=args.allow_code_execution, progress=_done,
    )
    _write_result(output, result.to_dict(), format_table(result))
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
    p.add_argument("--output", default=None, help="also write the statistics as JSON ('-' for stdout)")
    p.set_defaults(run=_run_eval_stats)


def _run_eval_stats(args: argparse.Namespace) -> None:
    from pathlib import Path

    from evolm.errors import InputError
    from evolm.eval.rubric_stats import format_table, rubric_stats, run_rubric_stats
    from evolm.jsonl import check_outputs_differ, read_jsonl

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
    _write_result(args.output, result, table)
    if args.output and args.output != "-":
        _done(f"wrote rubric statistics to {args.output}")


# ----------------------------------------------------------------------------- report (owner: report helper)


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML report of a run, or overlay several runs",
        description="Read a run directory (metrics.jsonl, samples/, eval/, config.yaml) and write one HTML file "
        "with embedded plots: rewards of both roles, the judge's accuracy on temporal pairs beside the policy's "
        "reward, rubric validity, held-out evaluations, rubric statistics per phase, early vs late rubrics, "
        "evaluation results. Works on partial or crashed runs. With several run directories, write one comparison "
        "page instead: their training and held-out curves overlaid (one colour per run) and a table of final values "
        "with 95% confidence intervals; a sequential run's top directory reads as its two stages in a row.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directory (must hold metrics.jsonl); "
                   "several: compare them")
    p.add_argument("--output", default=None,
                   help="HTML file to write (default: RUN_DIR/report.html; with several runs ./comparison.html)")
    p.add_argument("--labels", default=None, metavar="A,B,...",
                   help="with several runs: their names in the legend and tables, comma-separated, one per run "
                   "(default: each directory's name)")
    p.set_defaults(run=_run_report)


def _run_report(args: argparse.Namespace) -> None:
    from pathlib import Path

    from evolm.errors import InputError
    from evolm.jsonl import check_outputs_differ

    if len(args.run_dirs) > 1:
        from evolm.compare import parse_labels, write_comparison

        labels = parse_labels(args.labels, len(args.run_dirs)) if args.labels is not None else None
        _done(f"wrote {write_comparison(args.run_dirs, args.output, labels)}")
        return
    if args.labels is not None:
        raise InputError("--labels names the runs of a comparison; give two or more run directories")
    from evolm.report import write_report

    run = Path(args.run_dirs[0])  # the files the report reads
    check_outputs_differ([args.output], [run / "metrics.jsonl", run / "config.yaml", run / "samples", run / "eval"])
    _done(f"wrote {write_report(run, args.output)}")


# ----------------------------------------------------------------------------- serve


def _add_serve(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--judge", required=True, help=f"judge model: {_MODEL_NAMES}")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--rubric-model", default=None,
                       help="writes a rubric for each new question without one in its label (loaded once when it "
                       "is the judge model too)")
    where.add_argument("--rubrics", default=None, metavar="FILE",
                       help="JSONL of rubrics by prompt ('evolm rubric' output), for questions without one in the label")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; the server has no authentication)")
    p.add_argument("--port", type=_positive_int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--max-batch", type=_positive_int, default=64,
                   help="answers scored in one judge call (default 64); a larger request is scored over several "
                   "calls, each shared fairly with the requests waiting, so it cannot hold up small ones")
    p.add_argument("--max-batch-s", type=positive, default=2.0,
                   help="seconds a judge call should take, about: a batch holds at most what the judge scored in "
                   "that time on recent batches, so a request behind a large one waits about two calls (default 2)")
    p.add_argument("--max-wait-ms", type=positive, default=5.0,
                   help="how long a batch waits for more requests once one arrives (default 5 ms)")
    p.add_argument("--max-queue", type=_positive_int, default=256,
                   help="requests waiting to be scored; beyond it a request gets 503 with Retry-After (default 256)")
    p.add_argument("--deadline-s", type=positive, default=300.0,
                   help="seconds a request may take in all, queueing included; then 504 (default 300)")
    p.add_argument("--rubric-cache", type=_positive_int, default=4096,
                   help="written rubrics kept, one per question, least recently used dropped first (default 4096)")
    limits = p.add_argument_group("limits", "what one request or connection may take; past a size limit the "
                                  "reply is 413 with a JSON error. A request past its deadline or whose client "
                                  "disconnects is dropped: its answers not yet scored never are, its queue slot is freed")
    limits.add_argument("--max-body-mb", type=positive, default=16.0, help="request body size in MiB (default 16)")
    limits.add_argument("--max-answers", type=_positive_int, default=8192, help="answers in one request (default 8192)")
    limits.add_argument("--max-answer-chars", type=_positive_int, default=500_000,
                        help="characters in one query, prompt or response (default 500000)")
    limits.add_argument("--header-timeout-s", type=positive, default=10.0,
                        help="seconds a connection has to send a request's headers, from its start or its last "
                        "reply; then it is closed (default 10)")
    limits.add_argument("--body-timeout-s", type=positive, default=60.0,
                        help="seconds a request's body may take after its headers; then the connection is closed "
                        "(default 60)")
    limits.add_argument("--max-connections", type=_positive_int, default=1024,
                        help="connections open at once; beyond it requests get 503 (default 1024). Idle keep-alive "
                        "connections close after 5 s; at most 64 KiB of unfinished headers are buffered")
    _add_judge_mode_arg(p)
    p.add_argument("--judge-constrained", action="store_true", help=_JUDGE_CONSTRAINED)
    _add_context_args(p, "judge")
    _add_backend_args(p)
    _add_runtime_args(p)
    _add_rubric_writing_args(p.add_argument_group("rubric writing", "sampling of --rubric-model"), prompt_flag=False)
    p.set_defaults(run=_run_serve)


def _run_serve(args: argparse.Namespace) -> None:
    from evolm.eval.rubric_source import read_rubric_table
    from evolm.serve import RubricSource, ServeSettings, create_app, require_serve_extra, run_server

    require_serve_extra()  # before any model loads
    table = read_rubric_table(args.rubrics) if args.rubrics else None
    judge = _build_judge(args, args.judge, args.backend, args.base_url)
    writer = None
    if args.rubric_model:
        writer = judge.backend if args.rubric_model == args.judge else _load(args, args.rubric_model, args.backend,
                                                                              args.base_url)
    rubrics = RubricSource(writer=writer, params=_rubric_params(args), table=table, cache_size=args.rubric_cache)
    settings = ServeSettings(max_batch=args.max_batch, max_batch_s=args.max_batch_s, max_wait_ms=args.max_wait_ms,
                             max_queue=args.max_queue,
                             deadline_s=args.deadline_s, rubric_cache=args.rubric_cache, max_body_mb=args.max_body_mb,
                             max_answers=args.max_answers, max_answer_chars=args.max_answer_chars,
                             header_timeout_s=args.header_timeout_s, body_timeout_s=args.body_timeout_s,
                             max_connections=args.max_connections)
    _done(f"serving {args.judge} ({args.mode}; rubrics: {rubrics.kind}) on http://{args.host}:{args.port} "
          "- POST /get_reward (OpenRLHF), POST /reward (slime), GET /health, /docs")
    run_server(create_app(judge, rubrics, settings), args.host, args.port)


def _write_result(output: str | None, result: dict, table: str) -> None:
    """Write an evaluation's JSON result to ``output`` (if any) and print its table, on stderr if the JSON is on stdout."""
    if output:
        import json

        from evolm.jsonl import atomic_writer

        with atomic_writer(output) as f:
            f.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(table, file=sys.stderr if output in ("-", "/dev/stdout") else sys.stdout)


def _done(msg: str) -> None:
    print(msg, file=sys.stderr)


_SUBCOMMANDS = (_add_rubric, _add_judge, _add_train, _add_eval, _add_report, _add_serve)


def build_parser() -> argparse.ArgumentParser:
    """The ``evolm`` parser; every (sub)subcommand sets ``run``, the function that carries it out."""
    parser = argparse.ArgumentParser(
        prog="evolm",
        description="EvoLM: a language model that writes rubrics, is judged by them, and improves both roles.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _SUBCOMMANDS:
        add(sub)
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


if __name__ == "__main__":
    sys.exit(main())
