"""Prompts (and optional rubrics) -> verl's training parquet, for rewards from ``evolm serve``.

    python scripts/verl_data.py --prompts prompts.jsonl [--rubrics rubrics.jsonl] --output data/train.parquet

``prompts.jsonl`` has one ``{"prompt": ...}`` per line (an ``"id"`` is optional); ``rubrics.jsonl`` is
``evolm rubric`` output, matched by id, then by prompt text. Each row has the fields verl's
``RLHFDataset`` and reward managers read, laid out as verl's ``examples/data_preprocess/gsm8k.py``
lays them out (volcengine/verl@b178a3cd):

    data_source   --data-source (default "evolm"); verl's reward managers pass it on, we ignore it
    prompt        [{"role": "user", "content": question}] (the chat verl renders for the policy)
    ability       --ability (default "general")
    reward_model  {"style": "model", "ground_truth": rubric JSON, or "" for none}
    extra_info    {"split", "index", "question"}: the question is what evolm.integrations.verl sends

A row without a rubric gets one from the server's --rubric-model or --rubrics, or is judged alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def verl_rows(prompts: list[dict], rubrics: object | None, data_source: str, ability: str,
              split: str) -> list[dict]:
    """verl rows for ``prompts`` (JSONL objects with "prompt", optional "id"); ``rubrics`` a RubricTable or None."""
    from evolm.integrations.verl import QUESTION_KEY, rubric_label

    rows = []
    for index, obj in enumerate(prompts):
        question = obj["prompt"]
        rubric = None
        if rubrics is not None:
            key = None if obj.get("id") is None else str(obj["id"])
            rubric = rubrics.by_id.get(key) if key in rubrics.by_id else rubrics.by_prompt.get(question)
        rows.append({
            "data_source": data_source,
            "prompt": [{"role": "user", "content": question}],
            "ability": ability,
            "reward_model": {"style": "model", "ground_truth": rubric_label(rubric.to_dict() if rubric else None)},
            "extra_info": {"split": split, "index": index, QUESTION_KEY: question},
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", required=True, help="JSONL with 'prompt' (and optional 'id') per line")
    ap.add_argument("--rubrics", default=None, help="'evolm rubric' output for these prompts (optional)")
    ap.add_argument("--output", required=True, help="parquet file to write (e.g. data/train.parquet)")
    ap.add_argument("--data-source", default="evolm", help="each row's data_source (default evolm)")
    ap.add_argument("--ability", default="general", help="each row's ability (default general)")
    ap.add_argument("--split", default="train", help="extra_info.split (default train)")
    args = ap.parse_args(argv)

    import pyarrow as pa
    import pyarrow.parquet as pq

    from evolm.errors import EvolmError, InputError
    from evolm.eval.rubric_source import read_rubric_table
    from evolm.runs.jsonl import read_jsonl

    try:
        prompts = read_jsonl(args.prompts, required=["prompt"])
        for n, obj in enumerate(prompts, start=1):
            if not isinstance(obj["prompt"], str):
                raise InputError(f"{args.prompts}: row {n}: 'prompt' must be text")
        if not prompts:
            raise InputError(f"{args.prompts}: no rows")
        table = read_rubric_table(args.rubrics) if args.rubrics else None
        rows = verl_rows(prompts, table, args.data_source, args.ability, args.split)
    except EvolmError as e:
        print(f"verl_data: error: {e}", file=sys.stderr)
        return 2
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), args.output)
    with_rubric = sum(bool(r["reward_model"]["ground_truth"]) for r in rows)
    print(f"wrote {len(rows)} rows ({with_rubric} with a rubric) to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
