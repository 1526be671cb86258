"""Side-by-side markdown of several writers' rubrics for the same prompts (`evolm rubric` outputs).

    python -m bench.rubrics_md base=five_base.jsonl warm=five_warm.jsonl "warm+EvoLM=five_warm-evolm.jsonl"

Each argument is NAME=FILE, a JSONL that `evolm rubric --output` wrote for the same prompts in the same order;
prints one section per prompt with each writer's criteria (weight, criterion, scoring levels).
"""

from __future__ import annotations

import json
import sys


def main(args: list[str]) -> None:
    if not args or any("=" not in a for a in args):
        raise SystemExit(__doc__)
    writers = [a.split("=", 1) for a in args]
    rows = {name: [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()] for name, path in writers}
    first = rows[writers[0][0]]
    out = []
    for i, row in enumerate(first):
        out += [f"### {row['prompt']}", ""]
        for name, _ in writers:
            r = rows[name][i]
            out += [f"**{name}** (format-valid: {r['rubric_valid']:.0f})", ""]
            rubric = r.get("rubric")
            if not rubric:
                out += ["    (no rubric) " + str(r.get("rubric_text"))[:300]]
            for c in (rubric or {}).get("criteria", []):
                levels = c.get("scoring_levels") or {}
                out.append(f"- ({c['weight']:.2f}) {c['criterion']}  [" +
                           " / ".join(f"{k}: {levels[k]}" for k in ("1.0", "0.5", "0.0") if k in levels) + "]")
            out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
