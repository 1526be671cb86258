"""``evolm judge``: score the answers of a JSONL file with a (rubric +) judge."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from evolm.cli._common import (
    AS_YOU_GO,
    JUDGE_CACHE,
    JUDGE_CONSTRAINED,
    MODEL_NAMES,
    add_backend_args,
    add_context_args,
    add_judge_flags,
    add_judge_mode_arg,
    add_resume_output_arg,
    add_runtime_args,
    add_seed_arg,
    check_before_loading,
    context_note,
    judge_from_args,
    print_stderr,
    text_rows,
    write_as_you_go,
)
from evolm.config import JUDGE_MODES
from evolm.judge.cache import cached_judge


def make_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "judge",
        help="score answers with a (rubric +) judge",
        description="Score each answer. Input JSONL lines need 'prompt' and 'response', and may have 'rubric' "
        "(object or JSON string; without it the judge scores alone). Output lines add 'score' in [0, 1], or null "
        "when the judge gave no readable score (an unreadable reply, or a server that reported no score token), and "
        "'rubric_used': how the rubric was read ('parsed' as written; 'repaired', with 'rubric_repairs' saying what "
        "was changed, e.g. a weight that is not a number given the others' mean; 'raw text' when it did not parse; "
        "'none'). "
        "An answer too long for the judge's context is cut from its middle (the row adds \"truncated\": true and "
        "'chars_cut'); a row whose question and rubric alone do not fit has no score and 'overlong' (why). "
        "--mode listwise judges the rows with the same prompt and rubric together, wherever they stand in the file "
        "(all their responses in one prompt, scored in a shuffled order and its reverse); a row alone in its group is "
        "judged listwise as a list of one answer. " + AS_YOU_GO,
    )
    p.add_argument("--judge", help=f"judge model: {MODEL_NAMES} (required unless --show-prompt)")
    p.add_argument("--input", help="JSONL with 'prompt', 'response' and optional 'rubric' ('-' for stdin)")
    p.add_argument("--output", help="JSONL to write ('-' for stdout)")
    p.add_argument("--show-prompt", action="store_true",
                   help="print the prompt the judge of a run config sends (on an example question, rubric and "
                   "answer) and exit; loads nothing. The config is --config (default: the built-in defaults: "
                   "yesno judge, evolm's wording, defences on); the other judge flags are not read")
    p.add_argument("--config", default=None, metavar="CFG",
                   help="with --show-prompt: the run config (e.g. configs/paper-qwen3-8b.yaml) whose judge to show")
    add_judge_mode_arg(p)
    add_judge_flags(p, replace(JUDGE_CONSTRAINED, flag="--constrained"))
    p.add_argument("--no-rubric", action="store_true", help="ignore any 'rubric' field: judge alone")
    p.add_argument("--details", action="store_true",
                   help="add what each score is made of: 'criteria', a list of {text, weight, value} (yesno and "
                   "rar_explicit: P(Yes) per criterion, weight its share of the rubric; yesno's score is the sum of "
                   "weight x value; generative: the rating its reasoning gives each criterion, when it gives one per "
                   "criterion) and 'reasoning' (the generative modes' reply reasoning); null where the mode has none")
    add_judge_flags(p, replace(JUDGE_CACHE, note="Identical rows are judged once"))
    add_resume_output_arg(p)
    add_backend_args(p)
    add_runtime_args(p)
    add_seed_arg(p)
    add_context_args(p, "judge")
    p.set_defaults(run=main)


_GUARD_KEYS = ("truncated", "chars_cut", "overlong", "failed")  # what the context guard and a failed request add to
# a row (a re-judged file's old ones are dropped)
_DETAIL_KEYS = ("criteria", "reasoning")  # what --details adds (replaced when a file is re-judged with --details)


def _show_judge_prompt(config: str | None) -> None:
    """Print the conversation the judge of ``config`` (default: the defaults) sends for an example answer."""
    from evolm.config import load_config
    from evolm.judge.judge import Judge, JudgeItem, judge_conversations

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


def main(args: argparse.Namespace) -> None:
    from evolm.errors import InputError
    from evolm.judge.context_guard import OverlongPrompt
    from evolm.judge.judge import JudgeItem
    from evolm.rubrics import Rubric, rubric_repairs
    from evolm.runs.files import check_outputs_differ
    from evolm.runs.jsonl import read_jsonl

    if args.show_prompt:
        _show_judge_prompt(args.config)
        return
    missing = [f"--{k}" for k in ("judge", "input", "output") if getattr(args, k) is None]
    if missing or args.config:
        raise InputError(f"{', '.join(missing)} required" if missing else "--config is read only with --show-prompt")
    check_outputs_differ([args.output], [args.input])
    rows = text_rows(read_jsonl(args.input, required=["prompt", "response"]), args.input, ("prompt", "response"))
    check_before_loading(args.input, rows, [args.output])
    items, used, repairs = [], [], []
    for row in rows:
        given = None if args.no_rubric else row.get("rubric")
        rubric = Rubric.from_obj(given) if given is not None else None
        raw = None if given is None or rubric is not None else given if isinstance(given, str) else json.dumps(given)
        items.append(JudgeItem(row["prompt"], row["response"], rubric, rubric_text=raw))
        repairs.append(rubric_repairs(given) if rubric is not None else [])
        used.append(("repaired" if repairs[-1] else "parsed") if rubric is not None
                    else "raw text" if raw and raw.strip() else "none")
    judge = cached_judge(judge_from_args(args, args.judge, args.backend, args.base_url), args.judge_cache)

    dropped = _GUARD_KEYS + (_DETAIL_KEYS if args.details else ())

    groups: dict = {}  # listwise: group -> row indices, so that a batch's rows are judged with their whole group
    if args.mode == "listwise":
        from evolm.judge.listwise import listwise_group

        for i, it in enumerate(items):
            groups.setdefault(listwise_group(it), []).append(i)

    listed: dict = {}  # listwise: row index -> its judgment, for the rows of the groups judged so far

    def judged_rows(start: int, end: int) -> list:
        """The judgments of rows start..end; listwise: each group judged once, whole, the first time a batch holds
        one of its rows, and its judgments kept for its rows in later batches (dropped once written)."""
        if not groups:
            return judge.score(items[start:end])
        wanted = sorted({i for k in range(start, end) if k not in listed for i in groups[listwise_group(items[k])]})
        try:
            listed.update(zip(wanted, judge.score([items[i] for i in wanted]), strict=True) if wanted else ())
        except OverlongPrompt as e:  # its index in this file, relative to the batch as the caller reads it
            raise OverlongPrompt(wanted[e.index] - start, e.reason) from None
        return [listed.pop(k) for k in range(start, end)]

    def compute(start: int, end: int, _advance) -> list[dict]:  # noqa: ANN001 - the bar moves per batch
        try:
            judged = judged_rows(start, end)
        except OverlongPrompt as e:
            raise InputError(f"{args.input}: row {start + e.index + 1}: {e.reason}") from None
        # rubric_used says how the judge read the row's rubric: parsed as written, repaired (rubric_repairs: what
        # was changed), as raw text (it did not parse), or none
        return [{**{k: v for k, v in row.items() if k not in dropped}, "score": j.score, "rubric_used": u,
                 **({"rubric_repairs": fixes} if fixes else {}),
                 **({"truncated": True, "chars_cut": j.cut} if j.cut else {}),
                 **({"overlong": j.unscored} if j.unscored else {}),
                 **({"failed": j.failed} if getattr(j, "failed", None) else {}),
                 **({"criteria": j.to_dict().get("criteria"), "reasoning": j.reasoning} if args.details else {})}
                for row, j, u, fixes in zip(rows[start:end], judged, used[start:end], repairs[start:end], strict=True)]

    out = write_as_you_go(args, rows, compute, keys=("prompt", "response"), desc=f"judge ({args.mode})")
    n_missing = sum(r["score"] is None for r in out)
    stats = getattr(getattr(judge, "cache", None), "stats", None)
    spared = f"; {stats.lookups - stats.sent} judged once for identical rows" if stats and stats.lookups > stats.sent \
        else ""
    n_failed = sum("failed" in r for r in out)
    failed_note = f", {n_failed} of them because the judge request failed" if n_failed else ""
    print_stderr(f"scored {len(rows)} answers ({n_missing} without a readable score{failed_note}) to {args.output}"
                 + _rubric_note(used)
                 + context_note(sum(r.get("truncated") is True for r in out), sum("overlong" in r for r in out))
                 + spared)


def _rubric_note(used: list[str]) -> str:
    """The summary's words for rubrics not used as written ("" when every rubric parsed as written, or none had one).

    >>> _rubric_note(["parsed", "raw text", "repaired", "raw text", "none"])
    '; 2 rubrics not parsed, judged as raw text; 1 rubric repaired (see rubric_repairs)'
    """
    raw, fixed = used.count("raw text"), used.count("repaired")
    return ((f"; {raw} rubric{'s' * (raw != 1)} not parsed, judged as raw text" if raw else "")
            + (f"; {fixed} rubric{'s' * (fixed != 1)} repaired (see rubric_repairs)" if fixed else ""))
