"""The package's import graph: no circle, and settings that know no concept module.

Read statically with ``ast`` from every module under src/evolm (a new module is picked up as it
lands), counting every import: at module level, under ``if TYPE_CHECKING:`` (a circle that only type
checkers follow is still a circle in the design) and inside functions (lazy imports).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "evolm"

# The evolm modules config.py may import, all on the ground floor: errors (the exception types a bad setting
# raises) and the reward maths (its choice lists are the rewards it computes; it reads scores' missing-value rule).
# Each may import only others of this set (asserted below).
CONFIG_MAY_IMPORT = {"evolm.errors", "evolm.rewards", "evolm.scores"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(path: Path, name: str, modules: dict[str, Path], lazy: bool) -> set[str]:
    """The evolm modules ``path`` (module ``name``) imports: at module level (``if``/``try`` blocks and
    ``if TYPE_CHECKING:`` included), and inside functions and classes too when ``lazy``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if lazy or isinstance(node, ast.ClassDef):
                    visit(node.body)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)  # ``from evolm import judge``
            else:  # if (TYPE_CHECKING included), try, with, for, while, match: their blocks run at import
                for block in ("body", "orelse", "finalbody"):
                    visit(getattr(node, block, []))
                for inner in (*getattr(node, "handlers", []), *getattr(node, "cases", [])):
                    visit(inner.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {m for m in found if m in modules and m != name}


def _graph(lazy: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(path, name, modules, lazy) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search, white/grey/black)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := dfs(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := dfs(node)):
            return found
    return None


def test_the_graph_reader_sees_type_checking_and_relative_imports(tmp_path: Path) -> None:
    src = tmp_path / "evolm"
    src.mkdir()
    (src / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from evolm.b import X\n")
    (src / "b.py").write_text("from . import c\n\ndef f():\n    from evolm import a\n")
    (src / "c.py").write_text("try:\n    import evolm.a\nexcept ImportError:\n    pass\n")
    modules = {f"evolm.{n}": src / f"{n}.py" for n in "abc"}
    graph = {name: _imported(path, name, modules, lazy=False) for name, path in modules.items()}
    assert graph == {"evolm.a": {"evolm.b"}, "evolm.b": {"evolm.c"}, "evolm.c": {"evolm.a"}}
    assert _cycle(graph) == ["evolm.a", "evolm.b", "evolm.c", "evolm.a"]
    assert _imported(src / "b.py", "evolm.b", modules, lazy=True) == {"evolm.a", "evolm.c"}


def test_no_import_circle_type_checking_and_lazy_imports_included() -> None:
    graph = _graph(lazy=True)
    assert {"evolm.config", "evolm.judge.judge", "evolm.training.run"} <= set(graph)  # the walk found the package
    cycle = _cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_config_imports_no_concept_module() -> None:
    graph = _graph(lazy=True)
    config = {m for m in graph if m == "evolm.config" or m.startswith("evolm.config.")}
    assert len(config) >= 4
    for name in sorted(config):
        outside = graph[name] - config
        assert outside <= CONFIG_MAY_IMPORT, \
            f"{name} imports {sorted(outside - CONFIG_MAY_IMPORT)}: settings know no concept module"
    for helper in CONFIG_MAY_IMPORT:
        assert graph[helper] <= CONFIG_MAY_IMPORT, f"{helper} (imported by config) imports {sorted(graph[helper])}"


def test_the_judge_dispatches_exactly_the_modes_config_accepts() -> None:
    from evolm.config import JUDGE_MODES
    from evolm.judge.judge import SCORERS

    assert tuple(SCORERS) == JUDGE_MODES



def test_code_and_docs_cite_the_method_document_not_the_private_spec() -> None:
    """Users have docs/METHOD.md (numbered as the spec it rewrites), not the spec: every citation names it."""
    root = SRC.parent
    files = [root / "README.md", *(p for d in ("src", "docs", "configs", "bench", "examples", "scripts")
                                   for p in sorted((root / d).rglob("*")) if p.suffix in (".py", ".md", ".yaml", ".sh"))]
    pattern = re.compile(r"\bSPEC( §|'s\b| section\b)")
    hits = [f"{p.relative_to(root)}:{i}" for p in files if p.is_file()
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert len(files) > 50 and hits == [], f"cite docs/METHOD.md §N instead: {', '.join(hits[:10])}"
    assert (root / "docs" / "METHOD.md").is_file()


def test_user_docs_run_nothing_from_the_development_data_folder() -> None:
    """A clone has no ../shared/data: the commands users are told to run read data/ (scripts/fetch_data.py)."""
    root = SRC.parent
    hits = [f"{name}:{i}" for name in ("README.md", "docs/USAGE.md", "docs/SEED_RUBRICS.md")
            for i, line in enumerate((root / name).read_text(encoding="utf-8").splitlines(), 1) if "shared/data" in line]
    assert hits == [], f"point at data/ (python scripts/fetch_data.py) instead: {', '.join(hits)}"


def test_old_import_paths_are_gone() -> None:
    """evolm was never released under its old flat layout: ``evolm.jsonl`` and ``evolm.judge.Judge`` do not import
    (no import hook, no package ``__getattr__``)."""
    import importlib

    import pytest

    for old in ("evolm.jsonl", "evolm.models", "evolm.judge_cache", "evolm.coevolve"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    with pytest.raises(ImportError):
        from evolm.judge import Judge  # noqa: F401
    with pytest.raises(ImportError):
        from evolm.report import render_page  # noqa: F401


def test_the_top_of_the_package_holds_at_most_ten_modules_and_none_is_long() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 10, top
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 650}
    assert not long, f"split by concept: {long}"


@pytest.mark.slow
def test_imports_run_down_the_floors() -> None:
    """No import from a lower floor (ground, config, runs, backends, ...) to a higher one (scripts/import_graph.py),
    and docs/ARCHITECTURE.md prints the script's graph as it is now (floors, and imports counted per floor)."""
    import subprocess
    import sys

    script = SRC.parent / "scripts" / "import_graph.py"
    check = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    graph = subprocess.run([sys.executable, script], capture_output=True, text=True, check=True).stdout
    doc = (SRC.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert [line for line in graph.splitlines() if line not in doc] == []  # `python scripts/import_graph.py`


def test_tests_mirror_the_package_tree() -> None:
    """tests/<package>/test_<behaviour>.py: a folder of test files names a package of src/evolm (or examples/,
    scripts/, studies/, which the repository also holds)."""
    root = SRC.parent / "tests"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.parent.name for p in root.rglob("test_*.py") if p.parent != root}
    assert folders <= packages | {"examples", "scripts", "studies"}, sorted(folders - packages)


def test_bench_and_studies_import_evolm_not_each_other() -> None:
    """bench/ (benchmarks) and studies/ (experiments) both stand on the package: what both need lives in evolm, so
    neither imports the other, lazily or not (a benchmark that reads a study's kept data reads its files)."""
    root = SRC.parent
    hits = []
    for folder, other in (("bench", "studies"), ("studies", "bench")):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                hits += [f"{path.relative_to(root)}:{node.lineno} imports {n}" for n in names
                         if n == other or n.startswith(other + ".")]
    assert hits == [], "move what both need into evolm: " + "; ".join(hits)
