"""Hostile answers against every regular expression that reads them: seconds per call, shape by shape.

Answers, rubrics and judge replies are the policy's text, and the policy is optimised against the judge: a
pattern that backtracks quadratically on some shape (a run of newlines after a score word, ``<`` and a run of
spaces, nested fence markers) lets one answer stall the reward. This prints, for each shape (the ones the
hardening issue found and generated ones: repeated separators, brackets, newlines, ``<``, score words), its
length and the seconds taken by

- ``fence``: ``evolm.judge.prompts.fence_answer``, and ``prompt``: a whole ``yesno`` prompt around it
  (``yesno_messages``: the chat markup of the whole prompt written as words too);
- ``monitor``: the monitor's per-answer check (``evolm.training.monitor.flagged``: score string and rubric
  copy);
- ``parsers``: every judge-reply reader of ``evolm.judge.parse`` on the shape as a reply, summed
  (``copied_score`` with the shape as the answer too);
- ``rubric``: ``parse_rubric``, ``format_validity``, ``rubric_repairs`` and ``remove_reasoning``, summed.

Each cell runs in a forked child, stopped after ``--timeout`` seconds (shown as ``>T``): a regular expression
does not check for signals while it backtracks. The child starts with the parent's imports (warmed up on a
short text) and no remembered fold. ``tests/judge/test_linear_time.py`` bounds every cell at 0.2 s. Run it on
another source tree to compare (the table before a change):

    PYTHONPATH=src .venv/bin/python -m bench.security.fuzz_table
    PYTHONPATH=/path/to/old/src .venv/bin/python -m bench.security.fuzz_table --timeout 5
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import random
import time
from collections.abc import Callable

from evolm.backends.replies import remove_reasoning
from evolm.judge import parse
from evolm.judge.prompts import fence_answer, yesno_messages
from evolm.rubrics import format_validity, parse_rubric, rubric_repairs
from evolm.training.monitor import flagged

CHARS = 200_000
RUBRIC = ('{"criteria": [{"criterion": "Names carbon dioxide as the gas taken in.", "weight": 0.6}, '
          '{"criterion": "Names oxygen as the gas given off.", "weight": 0.4}]}')


def _fill(head: str, unit: str, tail: str = "x", chars: int = CHARS) -> str:
    """``head``, ``unit`` repeated and ``tail``: ``chars`` characters or a few fewer. The tail is not blank,
    so that the run of ``unit`` is still there once the answer is stripped."""
    n = max(1, (chars - len(head) - len(tail)) // len(unit))
    return head + unit * n + tail


def shapes(chars: int = CHARS) -> dict[str, str]:
    """The hostile texts, each about ``chars`` characters long."""
    half = chars // 16  # "[ANSWER " and "END]" repeated: 8 + 4 characters per level, 16 rounded up
    rng = random.Random(0)
    pieces = ["score", "Score", "rating", " ", "\n", ":", "-", "=", "(", ")", "[", "]", "<", ">", "|", "9",
              "10", "/", "yes", "is", "answer", "criterion", ".", "*", "_", "rate", "of", "<|", "|>",
              "\u200b", "\uff1c"]
    return {
        "accurate + newlines": _fill("The result is accurate.", "\n", chars=chars),
        "my score is + newlines": _fill("my score is", "\n", chars=chars),
        "< + spaces": _fill("<", " ", chars=chars),
        "nested [ANSWER END]": "[ANSWER " * half + "END]" * half,
        "newlines": _fill("x", "\n", chars=chars),
        "spaces + score": _fill("", " ", "score: 9", chars=chars),
        "score + spaces": _fill("Score", " ", chars=chars),
        "score + tabs and newlines": _fill("score", " \t\n", chars=chars),
        "separators ' - '": _fill("Score", " - ", chars=chars),
        "separators ': '": _fill("Rating", ": ", chars=chars),
        "sentence ends": _fill("", ". ", chars=chars),
        "open brackets": "[" * chars,
        "open parentheses": _fill("Score ", "(", chars=chars),
        "scale openings (0-": _fill("", "(0-", chars=chars),
        "<": "<" * chars,
        "<a + spaces": _fill("", "<a  ", chars=chars),
        "<| markup starts": _fill("", "<|", chars=chars),
        "<|name markup": _fill("", "<|im_end", chars=chars),
        "fullwidth <|": _fill("", "\uff1c|", chars=chars),
        "score words": _fill("", "score ", chars=chars),
        "score is": _fill("", "score is ", chars=chars),
        "final overall score of the answer": _fill("", "final overall score of the answer ", chars=chars),
        "rate this answer": _fill("", "rate this answer ", chars=chars),
        "criterion + spaces": _fill("Criterion 1", " ", chars=chars),
        "notes to the grader": _fill("", "note to the ", chars=chars),
        "answer 1 of": _fill("", "Answer 1 of ", chars=chars),
        "digits and slashes": _fill("", "9/", chars=chars),
        "zero-width inside words": _fill("", "s\u200b", chars=chars),
        "braces": "{" * chars,
        "score field + spaces": _fill('"score":', " ", chars=chars),
        "products x": _fill("", "1.0 x ", chars=chars),
        "random pieces": "".join(rng.choice(pieces) for _ in range(chars))[:chars],
    }


def _row() -> dict[str, str]:
    return {"rubric_text": RUBRIC, "rubric": RUBRIC}


def read_replies(text: str) -> None:
    """Every judge-reply parser on ``text`` (and ``copied_score`` against it)."""
    for read in (parse.parse_judge_score, parse.parse_scale_score, parse.parse_judge_score_reference,
                 parse.parse_judge_score_rb2, parse.parse_rating_reference, parse.parse_judge_reasoning):
        read(text)
    parse.parse_criterion_ratings(text, 3)
    parse.copied_score(text, text)


def _rubric(text: str) -> None:
    parse_rubric(text)
    format_validity(text)
    rubric_repairs(text)
    remove_reasoning(text)


COLUMNS: dict[str, Callable[[str], object]] = {
    "fence": fence_answer,
    "prompt": lambda t: yesno_messages("What gas do plants take in?", "Names carbon dioxide.", t),
    "monitor": lambda t: flagged(_row(), t),
    "parsers": read_replies,
    "rubric": _rubric,
}


def _child(conn, fn: Callable[[str], object], text: str) -> None:
    start = time.perf_counter()
    fn(text)
    conn.send(time.perf_counter() - start)


def timed(fn: Callable[[str], object], text: str, timeout: float) -> float | None:
    """Seconds ``fn(text)`` takes in a forked child; ``None`` past ``timeout``."""
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(there, fn, text))
    proc.start()
    got = here.recv() if here.poll(timeout) else None
    proc.kill()
    proc.join()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chars", type=int, default=CHARS, help="length of each shape")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds before a cell is stopped")
    ap.add_argument("--only", nargs="*", help="shapes whose name contains one of these words")
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load:.2f}; "
          f"python {platform.python_version()}; evolm from {os.path.dirname(parse.__file__)}")
    print(f"seconds per call (forked child; >{args.timeout:g}: stopped)\n")
    cols = list(COLUMNS)
    for fn in COLUMNS.values():  # lazy imports (the confusables table) done once, as in a running trainer
        fn("Warm-up \uff33core: 9 <|im_end|> [ANSWER END]")
    print("| shape | chars | " + " | ".join(cols) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in cols) + " |")
    worst = 0.0
    for name, text in shapes(args.chars).items():
        if args.only and not any(w in name for w in args.only):
            continue
        cells = []
        for col in cols:
            t = timed(COLUMNS[col], text, args.timeout)
            worst = max(worst, args.timeout if t is None else t)
            cells.append(f">{args.timeout:g}" if t is None else f"{t:.3f}")
        print(f"| {name} | {len(text):,} | " + " | ".join(cells) + " |", flush=True)
    print(f"\nworst cell: {worst:.3f} s")


if __name__ == "__main__":
    main()
