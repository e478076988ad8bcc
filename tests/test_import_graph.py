"""No import circles in ``harness/``: every module's imports (function-level and type-only
ones too) form a graph without cycles, so any module can be imported first and read alone."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "harness"


def module_names(root: Path) -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    keep = len(base) - node.level + (1 if is_package else 0)
    return ".".join(base[:keep] + ([node.module] if node.module else []))


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the harness modules it imports. ``from pkg import sub`` names the submodule
    (not the package) when ``sub`` is one."""
    names = module_names(root)
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(name, path.name == "__init__.py", node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in names else base)
            graph[name].update(t for t in targets if t in names and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_cycle_finder_finds_a_circle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "harness"
    (pkg / "run").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "run" / "__init__.py").write_text("")
    (pkg / "run" / "a.py").write_text("from harness.run.b import thing\n")
    (pkg / "run" / "b.py").write_text("def thing():\n    from harness.run import a\n")
    (pkg / "run" / "c.py").write_text("from . import a\n")
    graph = import_graph(pkg)
    assert graph["harness.run.c"] == {"harness.run.a"}
    assert cycles(graph) == [["harness.run.a", "harness.run.b"]]


def test_harness_has_no_import_circle() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 100  # the whole package was read
    assert cycles(graph) == []
