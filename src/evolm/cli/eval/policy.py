"""``evolm eval policy``: score a policy with lm-evaluation-harness."""

from __future__ import annotations

import argparse

from evolm.cli._common import add_runtime_args, add_sampling_args, positive_int, print_stderr, write_result


class _NoteGiven(argparse.Action):
    """A plain option that also records its dest in ``args.given`` when it is on the command line.

    ``eval policy`` shares --temperature/--top-p (and their paper defaults) with other commands but
    must apply them only when given: its default decoding is each lm-eval task's own.
    """

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001 - argparse's signature
        setattr(namespace, self.dest, values)
        namespace.given = {*getattr(namespace, "given", ()), self.dest}


def make_parser(esub: argparse._SubParsersAction) -> None:
    from evolm.eval.policy_decoding import OLMO3_ADAPT_DECODING, PROTOCOLS
    from evolm.eval.policy_tasks import POLICY_TASKS, TASK_GROUPS

    p = esub.add_parser(
        "policy",
        help="score a policy with lm-eval: IFEval and GSM8K offline, the OLMo 3 Adapt suite with hub access",
        description="Evaluate a model with lm-evaluation-harness, zero-shot with its chat template "
        "(docs/METHOD.md §3.2). "
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
                   help="folder holding <task>/<file> (ifeval/input_data.jsonl, gsm8k/test.jsonl), as "
                   "scripts/fetch_data.py writes them (default: ./data, else ../shared/data, if it exists)")
    for name, task in POLICY_TASKS.items():
        if task.local:
            p.add_argument(f"--{name}-data", dest=f"{name}_data", default=None, metavar="FILE",
                           help=f"{name} JSONL file (default: DATA_DIR/{task.data_file})")
    p.add_argument("--hub", action="store_true",
                   help="let tasks without a local file read lm-eval's data sets from the Hugging Face hub (or "
                   "the HF datasets cache); needed by every olmo3_adapt task but ifeval and gsm8k")
    p.add_argument("--allow-code-execution", action="store_true",
                   help="run the model's code to score humaneval_plus and mbpp_plus (unsandboxed: use a container)")
    p.add_argument("--limit", type=positive_int, default=None, help="first N documents of each task (quick runs)")
    p.add_argument("--max-gen-toks", type=positive_int, default=None,
                   help="most tokens generated per answer (default: the task's own under --protocol lm-eval, "
                   f"{OLMO3_ADAPT_DECODING['max_gen_toks']} under olmo3-adapt; always capped to fit the model's "
                   "context)")
    p.add_argument("--greedy", action="store_true", help="greedy decoding (lm-eval's tasks are greedy already)")
    add_sampling_args(p)
    add_runtime_args(p)
    p.add_argument("--system-instruction", default=None, help="system message for every prompt (default: none)")
    p.add_argument("--think-end-token", default="auto",
                   help="score only the text after this token (auto: '</think>' when the tokenizer has it; '' for "
                   "none)")
    p.add_argument("--output", default=None,
                   help="JSON results ('-' for stdout; default: RUN/eval/policy-checkpoint-N.json for a run "
                   "checkpoint, else stdout)")
    p.add_argument("--samples", default=None, metavar="FILE",
                   help="also write every prompt, response and score as JSONL")
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> None:
    from evolm.eval.policy import format_table, run_policy_eval
    from evolm.eval.policy_decoding import resolve_decoding
    from evolm.eval.policy_inputs import check_access, default_data_dir, default_output_path, resolve_data_files
    from evolm.eval.policy_tasks import POLICY_TASKS, parse_tasks

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
    from evolm.runs.files import check_outputs_differ

    check_outputs_differ([output, args.samples], files.values())
    result = run_policy_eval(
        args.model, tasks, files, device=args.device, dtype=args.dtype, decoding=decoding, limit=args.limit,
        batch_size=args.batch_size, system_instruction=args.system_instruction,
        think_end_token=args.think_end_token, samples_path=args.samples, allow_hub=args.hub,
        allow_code=args.allow_code_execution, progress=print_stderr,
    )
    write_result(output, result.to_dict(), format_table(result))
    if output != "-":
        print_stderr(f"wrote {output}")
