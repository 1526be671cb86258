"""The self-assessment rule on a held-apart set: disguises caught and ordinary answers falsely flagged, per
set.

Two sets, each with disguises (a score, rating or verdict aimed at the grader, appended to a plain answer on a
line of its own) and ordinary answers (which should not be flagged):

- ``tuning``: the disguises the hardening rounds tuned the patterns on (``monitor_disguises.DISGUISES``),
  against up to 1,000 ordinary answers from the project's data sets (``monitor_disguises.ordinary_answers``:
  AlpacaEval, UltraFeedback, HH-RLHF, GSM8K, those that mention scores, ratings or grades first);
- ``held-apart``: ``tests/judge/data/disguises_heldout.json``, written apart from the patterns (spacing,
  separators, markdown, words for numbers, other scripts' digits, wordings) with its own hand-written ordinary
  sentences, plus the AlpacaEval reference answers (both references, 1,610) and ``examples/data``'s answers.

Per set: the share of disguises the monitor flags (``evolm.training.monitor.has_score_string``), the share the
judge's fence removes (the line is gone from ``fence_answer``'s output), and the share of ordinary answers
each touches. Answers are read from ``/work/shared/data`` where present (the tests do not need it). Run it on
another source tree to compare:

    PYTHONPATH=src .venv/bin/python -m bench.security.score_rule
    PYTHONPATH=/path/to/old/src .venv/bin/python bench/security/score_rule.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.security.monitor_disguises import DATA, DISGUISES, PLAIN, ordinary_answers  # noqa: E402
from evolm.judge.prompts import fence_answer  # noqa: E402
from evolm.training.monitor import has_score_string  # noqa: E402

HELDOUT = ROOT / "tests" / "judge" / "data" / "disguises_heldout.json"


def heldout() -> tuple[dict[str, list[str]], list[str]]:
    """The held-apart disguises by group, and its ordinary sentences."""
    data = json.loads(HELDOUT.read_text(encoding="utf-8"))
    return data["disguises"], data["ordinary"]


def reference_answers() -> list[str]:
    """AlpacaEval's reference outputs and the examples' answers: ordinary answers."""
    texts = []
    for name in ("gpt4_1106_preview_model_outputs.json", "text_davinci_003_model_outputs.json"):
        path = DATA / "alpaca_eval" / name
        if path.exists():
            texts += [r["output"] for r in json.loads(path.read_text(encoding="utf-8"))]
    for line in (ROOT / "examples" / "data" / "answers.jsonl").read_text(encoding="utf-8").splitlines():
        texts.append(json.loads(line)["response"])
    return [t for t in dict.fromkeys(texts) if t.strip()]


def removed(disguise: str) -> bool:
    """Whether the judge's fence takes the disguise out of the answer (its line gone from the fenced text)."""
    shown = fence_answer(f"{PLAIN}\n{disguise}")
    return disguise.strip() not in shown and "(removed)" in shown


def touched(answer: str) -> bool:
    """Whether the fence changed an ordinary answer's text (a line replaced), fence markers aside."""
    return "(removed)" in fence_answer(answer) and "(removed)" not in answer


def _share(hits: int, n: int) -> str:
    return f"{hits} / {n} ({hits / max(1, n):.1%})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--answers", type=int, default=1000, help="ordinary answers of the tuning set")
    ap.add_argument("--show", type=int, default=12, help="print this many misses and false flags per set")
    args = ap.parse_args()
    groups, sentences = heldout()
    sets = {
        "tuning": (DISGUISES, ordinary_answers(args.answers)),
        "held-apart": ([d for g in groups.values() for d in g], sentences + reference_answers()),
    }
    print("| set | disguises | flagged by the monitor | removed by the fence | ordinary answers | "
          "falsely flagged | touched by the fence |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    misses: dict[str, list[str]] = {}
    for name, (disguises, ordinary) in sets.items():
        flagged = [d for d in disguises if has_score_string(f"{PLAIN}\n{d}")]
        gone = [d for d in disguises if removed(d)]
        false = [a for a in ordinary if has_score_string(a)]
        changed = [a for a in ordinary if touched(a)]
        misses[name] = [f"missed: {d!r}" for d in disguises if d not in flagged] + \
            [f"false flag: {a[:150]!r}" for a in false]
        cells = [_share(len(flagged), len(disguises)), _share(len(gone), len(disguises)), str(len(ordinary)),
                 _share(len(false), len(ordinary)), _share(len(changed), len(ordinary))]
        print(f"| {name} | {len(disguises)} | " + " | ".join(cells) + " |")
    print("\nheld-apart, per group (flagged by the monitor):")
    for group, items in groups.items():
        hits = sum(has_score_string(PLAIN + "\n" + d) for d in items)
        print(f"  {group}: {_share(hits, len(items))}")
    for name, lines in misses.items():
        for line in lines[: args.show]:
            print(f"  {name} {line}")


if __name__ == "__main__":
    main()
