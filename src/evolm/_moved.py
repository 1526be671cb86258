"""Old import paths kept for one release: ``import evolm.jsonl`` still works, warns, and gives the module at its
new place (the same module object, so its names are the ones in use). ``evolm.judge``, ``evolm.report`` and
``evolm.serve`` are packages now; their old names are forwarded by the package (``moved_attribute``)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType

MOVED = {
    "evolm.coevolve": "evolm.training.run",
    "evolm.compare": "evolm.report.compare",
    "evolm.constrained": "evolm.backends.constrained",
    "evolm.context": "evolm.backends.context",
    "evolm.contrast": "evolm.training.contrast",
    "evolm.dist": "evolm.training.dist",
    "evolm.heldout": "evolm.training.heldout",
    "evolm.intervals": "evolm.report.intervals",
    "evolm.judge_cache": "evolm.judge.cache",
    "evolm.judge_parse": "evolm.judge.parse",
    "evolm.judge_prompts": "evolm.judge.prompts",
    "evolm.jsonl": "evolm.runs.jsonl",
    "evolm.memory": "evolm.training.memory",
    "evolm.models": "evolm.backends.loading",
    "evolm.monitor": "evolm.training.monitor",
    "evolm.plots": "evolm.report.plots",
    "evolm.prompt_length": "evolm.training.prompt_length",
    "evolm.prompts": "evolm.training.prompts",
    "evolm.records": "evolm.runs.records",
    "evolm.reward_model": "evolm.judge.reward_model",
    "evolm.rewards": "evolm.training.rewards",
    "evolm.rundir": "evolm.runs.rundir",
    "evolm.sft": "evolm.training.sft",
    "evolm.trl_adapter": "evolm.training.trl_adapter",
}


def _warn(old: str, new: str, stacklevel: int = 3) -> None:
    warnings.warn(f"{old} is deprecated; import from {new}", DeprecationWarning, stacklevel=stacklevel)


def moved_attribute(package: str, module: str, name: str) -> object:
    """``evolm.judge.Judge`` (the old module ``evolm.judge``) as ``evolm.judge.judge.Judge``, with a warning; the
    package's ``__getattr__`` calls this for a name it does not hold."""
    target = importlib.import_module(module)
    # a submodule of the package (``from evolm.report import plots``) is no old name: the import system loads it
    if name.startswith("__") or isinstance(getattr(target, name, None), ModuleType | None):
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{package}.{name}", f"{module}.{name}", stacklevel=4)  # the caller of the package's __getattr__
    return getattr(target, name)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self._specs: dict[str, ModuleSpec] = {}

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        _warn(spec.name, new)
        module = importlib.import_module(new)
        self._specs[new] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module was executed at its new place; give it back its own spec (the import system set ours)."""
        module.__spec__ = self._specs[module.__name__]
        module.__loader__ = module.__spec__.loader


def install() -> None:
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
