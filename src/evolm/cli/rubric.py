"""``evolm rubric``: write a rubric for each prompt of a JSONL file."""

from __future__ import annotations

import argparse

from evolm.cli._common import (
    AS_YOU_GO,
    MODEL_NAMES,
    add_backend_args,
    add_context_args,
    add_resume_output_arg,
    add_rubric_writing_args,
    add_runtime_args,
    check_before_loading,
    load_model,
    print_stderr,
    rubric_params,
    text_rows,
    write_as_you_go,
)


def make_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rubric",
        help="write a rubric for each prompt",
        description="Write one rubric per input prompt. Input JSONL lines need 'prompt'; output lines keep "
        "every input field and add 'rubric' (parsed object or null), 'rubric_valid' (format validity, 0 or 1) "
        "and 'rubric_text' (raw model output); a question too long for the writer's context gets no rubric and "
        "'rubric_overlong' (why), or with --overlong refuse stops the run. " + AS_YOU_GO,
    )
    p.add_argument("--model", required=True, help=f"rubric writer: {MODEL_NAMES}")
    p.add_argument("--input", required=True, help="JSONL with a 'prompt' field per line ('-' for stdin)")
    p.add_argument("--output", required=True, help="JSONL to write ('-' for stdout)")
    add_resume_output_arg(p)
    add_backend_args(p)
    add_runtime_args(p)
    add_rubric_writing_args(p)
    add_context_args(p, "rubric writer")
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> None:
    from evolm.backends.context import over_context
    from evolm.errors import InputError
    from evolm.rubrics import rubric_messages, write_rubrics
    from evolm.runs.files import check_outputs_differ
    from evolm.runs.jsonl import read_jsonl

    check_outputs_differ([args.output], [args.input])
    rows = text_rows(read_jsonl(args.input, required=["prompt"]), args.input, ("prompt",))
    check_before_loading(args.input, rows, [args.output])
    backend = load_model(args, args.model, args.backend, args.base_url)
    params = rubric_params(args)

    def compute(start: int, end: int, advance) -> list[dict]:  # noqa: ANN001 - advance(rows): the bar, per rubric
        questions = [str(r["prompt"]) for r in rows[start:end]]
        # a question that leaves the writer no room for its rubric: no rubric and why (or, refused, an error)
        over = over_context(backend, [rubric_messages(q, args.rubric_prompt) for q in questions],
                            max_context=args.max_context,
                            reply_tokens=params.max_new_tokens, what="rubric prompt")
        if over and args.overlong == "refuse":
            first = min(over)
            raise InputError(f"{args.input}: row {start + first + 1}: {over[first]} (--overlong refuse)")
        todo = [i for i in range(len(questions)) if i not in over]
        texts = write_rubrics(backend, [questions[i] for i in todo], params, prompt=args.rubric_prompt,
                              on_rows=advance if args.backend == "hf" else None,
                              on_tokens=(lambda n: advance(tokens=n)) if args.backend == "hf" else None)
        written = dict(zip(todo, texts, strict=True))
        return [{**row, "rubric": None, "rubric_valid": 0.0, "rubric_text": None, "rubric_overlong": over[i]}
                if i in over else {**row, **written[i].fields()}
                for i, row in enumerate(rows[start:end])]

    out = write_as_you_go(args, rows, compute, keys=("prompt",), desc="rubrics")
    n_over = sum("rubric_overlong" in r for r in out)
    print_stderr(f"wrote {len(out)} rubrics ({sum(r['rubric_valid'] for r in out):.0f} valid) to {args.output}"
                 + (f"; {n_over} questions over the writer's context got none" if n_over else ""))
