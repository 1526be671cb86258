"""What a policy evaluation reads, checked before any model loads: whether its tasks may read the Hugging Face hub
and run model-written code, where the data sets are (``default_data_dir``), each local task's data file row by row,
and where a run checkpoint's result goes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from evolm.errors import InputError
from evolm.eval.policy_tasks import POLICY_TASKS
from evolm.runs.jsonl import read_jsonl


def check_access(tasks: Sequence[str], *, allow_hub: bool = False, allow_code: bool = False) -> None:
    """Refuse, in one line and before any model is loaded, tasks that need what was not allowed.

    Tasks without a local data file read lm-eval's stock data set from the Hugging Face hub (or its
    cache); HumanEval+ and MBPP+ execute the model's code to score it.
    """
    hub = [n for n in tasks if not POLICY_TASKS[n].local]
    if hub and not allow_hub:
        local = [n for n in tasks if POLICY_TASKS[n].local]
        instead = f", or keep the local ones: --tasks {','.join(local)}" if local else ""
        raise InputError(
            f"{', '.join(hub)}: data not available locally (lm-eval reads them from the Hugging Face hub): "
            f"add --hub on a machine with hub access or a filled HF datasets cache{instead} (docs/POLICY_EVAL.md)"
        )
    code = [n for n in tasks if POLICY_TASKS[n].runs_code]
    if code and not allow_code:
        raise InputError(
            f"{', '.join(code)}: scoring runs the model's code on this machine: add --allow-code-execution "
            "(in a sandbox or container), or leave these tasks out"
        )


def default_data_dir(cwd: str | Path | None = None) -> Path | None:
    """``data/`` in the working directory (where ``scripts/fetch_data.py`` puts the sets) when it exists, else
    ``../shared/data`` next to it (the development layout), else None."""
    for candidate in (Path(cwd or Path.cwd()) / "data", Path(cwd or Path.cwd()) / ".." / "shared" / "data"):
        if candidate.is_dir():
            return candidate.resolve()
    return None


def resolve_data_files(
    tasks: Sequence[str], data_dir: str | Path | None, overrides: Mapping[str, str | Path | None] | None = None
) -> dict[str, Path | None]:
    """The data file of each task (an override, else ``data_dir/<task default>``), checked row by row.

    Tasks whose data come from the hub map to None. Raises ``InputError`` for a missing file or a
    row without the fields the task reads, before any model is loaded, so a typo costs nothing.
    """
    overrides = overrides or {}
    files: dict[str, Path | None] = {}
    for name in tasks:
        task = POLICY_TASKS[name]
        if task.data_file is None:
            files[name] = None
            continue
        given = overrides.get(name)
        if given is not None:
            path = Path(given).expanduser()
        elif data_dir is not None:
            path = Path(data_dir).expanduser() / task.data_file
        else:
            raise InputError(f"{name}: no data file (give --data-dir DIR holding {task.data_file}, "
                             f"or --{name}-data FILE)")
        if not path.is_file():
            raise InputError(f"{name} data file not found: {path} (set --data-dir or --{name}-data)")
        read_jsonl(path, required=task.required_fields)
        files[name] = path.resolve()
    return files


def default_output_path(model: str) -> Path | None:
    """``RUN/eval/policy-checkpoint-N.json`` for ``RUN/checkpoints/checkpoint-N``, where the report looks."""
    p = Path(model).expanduser()
    if re.fullmatch(r"checkpoint-\d+", p.name) and p.parent.name == "checkpoints" and p.is_dir():
        return p.parent.parent / "eval" / f"policy-{p.name}.json"
    return None
