"""What every benchmark prints and needs: the machine, a timer with warm-up and repeats, tables.

Benchmarks are scripts, not tests (STYLE §3): each measures its variants side by side in one
process (ratios, not absolute times, are what carries over to another machine) and prints the
machine first, because a number without its machine means little.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evolm.eval.policy_inputs import default_data_dir
from evolm.runs.machine import load_average, machine

# Load average when the benchmark started, before its own work: above the core count, another job shared the CPU and
# the absolute times (not so much the side-by-side ratios) are inflated.
_LOAD_AT_START = load_average()


def print_header(title: str, sizes: dict[str, Any]) -> dict[str, Any]:
    """Print the title, the machine and the sizes; return the machine as printed (for a result file)."""
    info = machine(_LOAD_AT_START)
    print(f"\n## {title}\n")
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    print("sizes:   " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
    print()
    return info


def timed(fn: Callable[[], Any], repeats: int = 3, warmup: int = 1) -> tuple[float, Any]:
    """Median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` untimed runs, and its last result."""
    result = None
    for _ in range(warmup):
        result = fn()
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def timed_interleaved(
    fns: dict[str, Callable[[], Any]], repeats: int = 3, warmup: int = 1, progress: bool = True
) -> dict[str, tuple[float, Any]]:
    """Median wall time and last result of each variant, timed round-robin (A B C, A B C, ...).

    Interleaving spreads any load another job puts on the machine over all variants alike,
    so their ratios stay fair even when the absolute times do not.
    """
    from tqdm.auto import tqdm

    results: dict[str, Any] = {}
    times: dict[str, list[float]] = {name: [] for name in fns}
    rounds = warmup + max(1, repeats)
    with tqdm(total=rounds * len(fns), desc="timing", unit="run", disable=not progress) as bar:
        for r in range(rounds):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                results[name] = fn()
                if r >= warmup:
                    times[name].append(time.perf_counter() - t0)
                bar.update()
    return {name: (statistics.median(times[name]), results[name]) for name in fns}


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-markdown table (floats at 3 significant digits)."""

    def fmt(x: Any) -> str:
        if isinstance(x, float):
            return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
        return "" if x is None else str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def load_old_module(rev: str, path: str, name: str) -> Any:
    """The module at ``path`` as it was at git revision ``rev``: a 'before' to time beside 'after'.

    Loaded under its own name from ``git show``, so both versions live in one process and are
    timed side by side on the same model, threads and load.
    """
    import importlib.util
    import subprocess
    import sys
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=root, check=True, capture_output=True,
                            text=True).stdout
    tmp = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    tmp.write(source)
    tmp.close()
    spec = importlib.util.spec_from_file_location(name, tmp.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def env_at(rev: str | None) -> dict[str, str]:
    """This process's environment for a subprocess that runs the package as it was at git revision ``rev``
    (its source first on ``PYTHONPATH``; ``None``: the work tree's): the 'before' of a whole-run benchmark, same
    script, config and machine (``load_old_module`` does one module in-process)."""
    env = dict(os.environ)
    if rev:
        env["PYTHONPATH"] = os.pathsep.join([source_at(rev), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def source_at(rev: str) -> str:
    """The package source (``src``) as it was at git revision ``rev``, exported once to a temporary directory."""
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parents[1]
    dest = Path(tempfile.gettempdir()) / f"evolm-src-{rev.replace('/', '_')}"
    if not (dest / "src" / "evolm").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", rev, "src"], cwd=root, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return str(dest / "src")


# The judge benchmarks' data: LLMBar Natural pairs, from the folder EVOLM_DATA names, else data/ in the repository
# (`python scripts/fetch_data.py llmbar`) or ../shared/data beside it (evolm.eval.policy_inputs.default_data_dir).
ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("EVOLM_DATA") or default_data_dir(ROOT) or ROOT / "data")
LLMBAR_NATURAL = DATA / "llmbar" / "Natural.json"

# A generic rubric (three weighted criteria with levels) for when the rubric writer produced no
# valid rubric: SmolLM2-135M rarely writes parseable JSON, and a benchmark must still judge.
GENERIC_RUBRIC = {
    "criteria": [
        {"criterion": "The answer does exactly what the question asks, with every explicit requirement met.",
         "weight": 0.5, "scoring_levels": {"1.0": "all requirements met", "0.5": "some met", "0.0": "none met"}},
        {"criterion": "Every factual statement in the answer is correct.", "weight": 0.3,
         "scoring_levels": {"1.0": "no errors", "0.5": "minor errors", "0.0": "major errors"}},
        {"criterion": "The answer is clear, well organised and free of irrelevant content.", "weight": 0.2,
         "scoring_levels": {"1.0": "clear and focused", "0.5": "somewhat unclear", "0.0": "confusing"}},
    ]
}
