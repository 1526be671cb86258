"""What lm-evaluation-harness needs to run without the network, and nothing more.

- The Hugging Face hub in offline mode for a block (``hub_offline``): ``HFLM.get_model_info``
  otherwise asks the hub for the model's commit hash, and a local task would look for its data set there.
- IFEval's checkers need NLTK's ``punkt_tab`` sentence model, which lm-eval would download on
  import (``ensure_punkt_tab``). We point ``nltk.data.path`` at the copy that the PyPI package ``llama-index-core``
  (MIT licence; the data are NLTK's Punkt models by Kiss & Strunk, from the NLTK data
  collection) ships in ``llama_index/core/_static/nltk_cache``. The package is located, not
  imported. An existing NLTK data install is used first when it already has ``punkt_tab``.
- Model-written code runs only when the caller allowed it (``code_eval_allowed``: HF ``code_eval``
  refuses to run code without ``HF_ALLOW_CODE_EVAL=1``).
- lm-eval records the working directory's commit with ``git describe``, whose "fatal: not a git
  repository" reached the terminal outside a checkout: ``quiet_git_hash`` runs it with git's stderr
  discarded (same result).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evolm.errors import BackendError


def _punkt_tab_dirs() -> list[str]:
    """NLTK data folders holding ``tokenizers/punkt_tab`` from an installed package (none if absent)."""
    spec = importlib.util.find_spec("llama_index.core")  # located, not imported (its import is heavy)
    if spec is None or not spec.submodule_search_locations:
        return []
    cache = Path(list(spec.submodule_search_locations)[0]) / "_static" / "nltk_cache"
    return [str(cache)] if (cache / "tokenizers" / "punkt_tab" / "english").is_dir() else []


def ensure_punkt_tab() -> str:
    """Make NLTK find ``punkt_tab`` without downloading; returns the folder it is found in.

    Must run before lm-eval's IFEval module is imported: that import downloads the data when
    NLTK cannot find it. Raises ``BackendError`` when no offline copy is installed.
    """
    import nltk

    for extra in _punkt_tab_dirs():
        if extra not in nltk.data.path:
            nltk.data.path.append(extra)  # after the user's own NLTK folders, which win
    try:
        return str(nltk.data.find("tokenizers/punkt_tab/english/"))
    except LookupError:
        raise BackendError(
            "IFEval needs NLTK's punkt_tab data and none is installed: pip install 'evolm[eval]' "
            "(it ships in llama-index-core)"
        ) from None


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """Hugging Face hub and datasets in offline mode for the block, restored afterwards.

    The environment variables are read at import time, so the already-imported modules' flags
    are switched too.
    """
    keys = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    saved_env = {k: os.environ.get(k) for k in keys}
    flags: list[tuple[Any, str, Any]] = []
    for module_name, attr in (("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE"),
                              ("datasets.config", "HF_DATASETS_OFFLINE")):
        module = importlib.import_module(module_name)
        if hasattr(module, attr):
            flags.append((module, attr, getattr(module, attr)))
    try:
        for k in keys:
            os.environ[k] = "1"
        for module, attr, _ in flags:
            setattr(module, attr, True)
        yield
    finally:
        for module, attr, old in flags:
            setattr(module, attr, old)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def quiet_git_hash() -> Iterator[None]:
    """lm-eval's ``get_git_commit_hash`` for the block, with git's stderr discarded (its value unchanged)."""
    import subprocess

    import lm_eval.evaluator as evaluator
    from lm_eval.loggers.utils import get_commit_from_path

    def quiet() -> str | None:
        try:
            return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL).strip().decode()
        except (subprocess.CalledProcessError, FileNotFoundError):  # as lm-eval's: not a checkout, or no git
            return get_commit_from_path(os.getcwd())

    saved = evaluator.get_git_commit_hash
    evaluator.get_git_commit_hash = quiet
    try:
        yield
    finally:
        evaluator.get_git_commit_hash = saved


@contextlib.contextmanager
def code_eval_allowed(on: bool) -> Iterator[None]:
    """``HF_ALLOW_CODE_EVAL=1`` for the block when ``on`` (HF ``code_eval`` refuses to run code otherwise)."""
    saved = os.environ.get("HF_ALLOW_CODE_EVAL")
    if on:
        os.environ["HF_ALLOW_CODE_EVAL"] = "1"
    try:
        yield
    finally:
        if on:
            if saved is None:
                os.environ.pop("HF_ALLOW_CODE_EVAL", None)
            else:
                os.environ["HF_ALLOW_CODE_EVAL"] = saved
