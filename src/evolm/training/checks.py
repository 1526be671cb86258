"""Launch checks: what a run's settings ask of the files and servers around it, checked by reading only (no model,
nothing written), for the dry run and before a run directory is made."""

from __future__ import annotations

from pathlib import Path

from evolm.config.schema import RunConfig
from evolm.errors import InputError

TULU3_PROMPTS = "tulu3_prompts.jsonl"  # the paper config's data.prompts, written by scripts/fetch_data.py tulu3


def path_errors(cfg: RunConfig) -> list[str]:
    """The run's prompts and output directory, checked by reading only (no model, nothing written)."""
    import os

    from evolm.training.prompts import load_prompt_set

    errors = []
    out = Path(cfg.output_dir).absolute()
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        errors.append(f"output_dir {cfg.output_dir}: {existing} is a file, not a directory")
    elif not os.access(existing, os.W_OK | os.X_OK):
        errors.append(f"output_dir {cfg.output_dir}: {existing} is not writable")
    try:
        load_prompt_set(cfg.data.prompts, cfg.data.limit)
    except InputError as e:
        hint = ("; `python scripts/fetch_data.py tulu3` writes the paper's (docs/GPU.md, 'The prompts')"
                if Path(cfg.data.prompts).name == TULU3_PROMPTS and not Path(cfg.data.prompts).exists() else "")
        errors.append(f"data.prompts: {e}{hint}")
    return errors


def launch_errors(cfg: RunConfig) -> list[str]:
    """What a run's settings ask of the machine, checked without a model: its files (the prompts, the output
    directory, the pairs and held-out sets). What spans settings alone is refused when the config loads
    (``RunConfig``'s validators), so a real run and the dry run refuse the same; the batch arithmetic for a number of
    processes is ``training.grpo_config.batch_error``."""
    errors = path_errors(cfg)
    c = cfg.contrast
    for name, path in (("data.pairs", cfg.data.pairs if c.pairs == "labelled" else None),
                       ("eval.pairs", cfg.eval.pairs), ("eval.questions", cfg.eval.questions)):
        if path and not Path(path).is_file():
            errors.append(f"{name}: no such file {path} (a relative path is read from the directory evolm runs in)")
    return errors
