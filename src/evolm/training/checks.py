"""Launch checks: what a run's settings ask of the files and servers around it, checked by reading only (no model,
nothing written), for the dry run and before a run directory is made."""

from __future__ import annotations

from pathlib import Path

from evolm.config.schema import RunConfig, endpoint_urls
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
    """Every constraint between settings and the machine that can be checked without a model (the batch arithmetic
    for a number of processes is ``training.grpo_config.batch_error``)."""
    from urllib.parse import urlparse

    errors = path_errors(cfg)
    s, c = cfg.schedule, cfg.contrast
    if s.regime in ("coevolve",) and c.pairs in ("temporal", "combined") \
            and c.buffer_size < s.prompts_per_step * (c.min_age + 1):
        errors.append(f"contrast.buffer_size ({c.buffer_size}) cannot hold answers {c.min_age} policy steps old "
                      f"({s.prompts_per_step} questions per step x {c.min_age + 1} steps): raise it or lower "
                      "contrast.min_age")
    for name, backend, url in (*[("judge", cfg.judge.backend, u) for u in endpoint_urls(cfg.judge.base_url) if u],
                               ("rubric.writer", cfg.rubric.writer_backend, cfg.rubric.writer_base_url)):
        if url is not None:
            u = urlparse(url)
            if u.scheme not in ("http", "https") or not u.netloc:
                errors.append(f"{name} base_url '{url}' is not an http(s)://host[:port]/path URL")
            if backend != "openai" and (e := f"{name} base_url is set but its backend is '{backend}' (a URL needs "
                                               "backend openai)") not in errors:  # once for a pool of URLs
                errors.append(e)
    if cfg.contrast.answerer_base_url is not None and cfg.contrast.answerer_backend != "openai":
        errors.append("contrast.answerer_base_url is set but contrast.answerer_backend is not openai")
    if cfg.rubric.writer is not None and s.regime == "coevolve":
        errors.append("rubric.writer is a fixed writer for the sequential and frozen_rubric regimes; the coevolve "
                      "regime writes rubrics with the model being trained")
    for name, path in (("data.pairs", cfg.data.pairs if c.pairs == "labelled" else None),
                       ("eval.pairs", cfg.eval.pairs), ("eval.questions", cfg.eval.questions)):
        if path and not Path(path).is_file():
            errors.append(f"{name}: no such file {path} (a relative path is read from the directory evolm runs in)")
    return errors
