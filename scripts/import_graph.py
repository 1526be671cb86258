"""Draw src/evolm's import graph between its floors, lowest first, and list every import that runs up a floor.

    python scripts/import_graph.py            # the graph as text (docs/ARCHITECTURE.md holds its output)
    python scripts/import_graph.py --check    # exit 1 if an import runs from a lower floor to a higher one

Every import counts: at module level, under ``if TYPE_CHECKING:`` and inside functions (lazy ones), read with
``ast`` so nothing is imported. A floor is a package (``judge``, ``training``...) or, for the ground floor, the
modules at the top of ``evolm`` that everyone uses. ``evolm/__init__.py`` re-exports the public API and ``cli/``
is the top: both may import anything.
"""

from __future__ import annotations

import ast
import signal
import sys
from collections import Counter
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
FLOORS = ["ground", "config", "runs", "backends", "rubrics", "judge", "eval", "serve", "training", "report",
          "integrations", "cli"]
"""Lowest first: a module may import its own floor and the floors below it."""
GROUND = {"errors", "scores", "rewards", "stats", "dist"}  # evolm/<name>.py; rubrics.py is its own floor


def floor(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return "api"
    if parts[0] in GROUND:
        return "ground"
    return parts[0].removesuffix(".py")


def imports(path: Path, package: str) -> set[str]:
    """The evolm modules that ``path`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("evolm"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            if base.startswith("evolm"):
                found.add(base)
    return found


def edges() -> Counter[tuple[str, str]]:
    """(importing floor, imported floor) -> how many imports."""
    count: Counter[tuple[str, str]] = Counter()
    for path in sorted((SRC / "evolm").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in imports(path, package):
            a, b = floor(name), floor(target)
            if a != b:
                count[a, b] += 1
    return count


def upward(count: Counter[tuple[str, str]]) -> list[tuple[str, str]]:
    rank = {f: i for i, f in enumerate(FLOORS)}
    return [(a, b) for a, b in count if a in rank and b in rank and rank[a] < rank[b]]


def main() -> int:
    count = edges()
    up = upward(count)
    if "--check" in sys.argv:
        for a, b in up:
            print(f"{a} -> {b}: an import from a lower floor to a higher one", file=sys.stderr)
        return 1 if up else 0
    print("floors, lowest first: " + " < ".join(FLOORS) + " (api: evolm/__init__.py, the public names)")
    for a in ["api", *reversed(FLOORS)]:
        targets = sorted((b for (x, b) in count if x == a), key=lambda b: FLOORS.index(b) if b in FLOORS else -1)
        if targets:
            print(f"{a:>12} -> " + ", ".join(f"{b} ({count[a, b]})" for b in reversed(targets)))
    print(f"upward imports: {len(up)}" + "".join(f"\n  {a} -> {b}" for a, b in up))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly, not with a traceback
    sys.exit(main())
