"""Training prompts: questions only, never labels (docs/METHOD.md §2.5), and optional reference answers.

A prompts file is JSONL with a ``prompt`` field per line (``builtin:demo`` names the shipped set);
a line may also carry a ``reference`` answer, which only reference-aware judges read (the
Direct-Likert baseline).
"""

from __future__ import annotations

from pathlib import Path

from evolm.errors import InputError
from evolm.runs.jsonl import read_jsonl

BUILTIN_PROMPTS = {"builtin:demo": Path(__file__).parents[1] / "data" / "demo_prompts.jsonl"}


def load_prompt_set(spec: str, limit: int = 0) -> tuple[list[str], dict[str, str]]:
    """Training questions (deduplicated, blanks dropped, order kept) and their reference answers, one read."""
    if spec.startswith("builtin:") and spec not in BUILTIN_PROMPTS:
        raise InputError(f"{spec}: no such built-in prompt set (known: {', '.join(BUILTIN_PROMPTS)})")
    rows = read_jsonl(BUILTIN_PROMPTS.get(spec, Path(spec)), required=["prompt"])
    questions = list(dict.fromkeys(str(r["prompt"]) for r in rows if str(r["prompt"]).strip()))
    questions = questions[:limit] if limit else questions
    if not questions:
        raise InputError(f"{spec}: no prompts")
    references = {str(r["prompt"]): str(r["reference"]) for r in rows if isinstance(r.get("reference"), str)}
    return questions, references


def load_prompts(spec: str, limit: int = 0) -> list[str]:
    """Training questions from a JSONL file with a ``prompt`` field (or a built-in set), deduplicated."""
    return load_prompt_set(spec, limit)[0]

