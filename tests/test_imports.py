"""The import graph of the fedgmh package, read from the source with ast: no circle, no private names
imported from another module."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted((SRC / "fedgmh").rglob("*.py"))}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(module, imported name or None) for every import of a fedgmh module anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name in modules]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((full, None) if full in modules else (base, alias.name))
    return [(module, item) for module, item in found if module in modules and module != name]


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {module for module, _ in _imports(name, path, modules)} for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt, path)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [])):
            return cycle
    return None


def test_find_cycle_finds_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert {"fedgmh.report.summary", "fedgmh.report.runs"} <= graph["fedgmh.report.tables"]  # the graph is read
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_attributes(path: Path, modules: dict[str, Path]) -> list[str]:
    """`module._name` where `module` is a fedgmh module imported by this file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fedgmh"):
            bound |= {alias.asname or alias.name for alias in node.names if f"{node.module}.{alias.name}" in modules}
        elif isinstance(node, ast.Import):
            bound |= {alias.asname for alias in node.names if alias.asname and alias.name in modules}
    return [f"{node.value.id}.{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound and _private(node.attr)]


def test_no_private_name_is_used_from_another_module() -> None:
    modules = _modules()
    private = [f"{name} imports {item} from {module}" for name, path in modules.items()
               for module, item in _imports(name, path, modules) if item and _private(item)]
    private += [f"{name} uses {use}" for name, path in modules.items() for use in _private_attributes(path, modules)]
    assert not private, "; ".join(private)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


#: the bottom layer that the algorithm cards may import besides their own package
CARD_FOUNDATION = {"fedgmh.config", "fedgmh.declarations", "fedgmh.errors"}
#: modules that import torch (directly or through the model)
TORCH_SIDE = ("fedgmh.algorithms", "fedgmh.engine", "fedgmh.train", "fedgmh.train_resolve", "fedgmh.train_record",
              "fedgmh.model", "fedgmh.data", "fedgmh.costs", "fedgmh.priors")


def test_the_cards_are_at_the_bottom() -> None:
    graph = import_graph()
    cards = {name for name in graph if name == "fedgmh.cards" or name.startswith("fedgmh.cards.")}
    assert len(cards) > 5
    assert {name: sorted(graph[name] - cards - CARD_FOUNDATION) for name in cards} == {name: [] for name in cards}
    assert all(graph[name] <= {"fedgmh.errors"} for name in CARD_FOUNDATION)


def test_the_cards_the_reports_and_the_store_never_reach_the_torch_side() -> None:
    """Statically, through imports anywhere in a file (the plan and the CLI parser are checked at run
    time, with torch blocked: tests/test_cards.py)."""
    graph = import_graph()
    light = [name for name in graph if name in ("fedgmh.cli_report", "fedgmh.store")
             or name.startswith(("fedgmh.cards", "fedgmh.report"))]
    torch_side = [m for m in graph if m in TORCH_SIDE or m.startswith(tuple(f"{side}." for side in TORCH_SIDE))]
    reached = {name: sorted(_reachable(graph, name) & set(torch_side)) for name in light}
    assert reached == {name: [] for name in light}
