"""The import graph: ``bot`` → ``benchmarks`` → ``optimizations``, nothing pointing back up, and no cycle
among the modules of ``bot/`` (function-local imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("bot", "benchmarks", "optimizations")  # each may import only the ones after it


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module a file imports (absolute names; ``from X import y`` counts ``X.y`` when that is a
    module of the project, else ``X``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if _is_module(candidate) else base)
    return found


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _graph(package: str) -> dict[str, set[str]]:
    files = sorted((ROOT / package).rglob("*.py"))
    modules = {_module_name(f): f for f in files}
    return {name: {i for i in _imports(f) if i in modules and i != name} for name, f in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_bot_has_no_import_cycle():
    graph = _graph("bot")
    assert len(graph) > 20  # the walk found the package
    assert _cycle(graph) is None, " → ".join(_cycle(graph) or [])


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_layers_point_one_way():
    for index, layer in enumerate(LAYERS):
        above = LAYERS[:index]
        for path in sorted((ROOT / layer).rglob("*.py")):
            upward = {i for i in _imports(path) if i.split(".")[0] in above}
            assert not upward, f"{path.relative_to(ROOT)} imports {sorted(upward)} from a layer above it"


def test_optimizations_have_no_import_cycle():
    """The program model (``optimizations/program/``) sits below the registry and the optimizations: the
    codemod base and the repository objects import neither, so nothing circles back through the registry."""
    graph = _graph("optimizations")
    assert "optimizations.edits.codemod" in graph and "optimizations.registry" in graph
    assert _cycle(graph) is None, " → ".join(_cycle(graph) or [])
    program = {name: deps for name, deps in graph.items() if name.startswith("optimizations.program")}
    upward = {
        name: sorted(d for d in deps if not d.startswith("optimizations.program"))
        for name, deps in program.items()
    }
    assert not any(upward.values()), upward


def test_each_optimization_is_one_folder_the_registry_finds():
    """``optimizations/<id>/rule.py`` defines the optimization ``<id>``, and every registered built-in one lives so."""
    from optimizations.registry import registry

    folders = {p.parent.name for p in (ROOT / "optimizations").glob("*/rule.py")}
    defining = {
        type(o).__module__.split(".")[1]: o.id
        for o in registry().values()
        if type(o).__module__.startswith("optimizations.")
    }
    assert folders == set(defining), folders ^ set(defining)
    assert all(folder == optimization_id for folder, optimization_id in defining.items()), defining


def test_no_optimization_imports_another():
    """What two optimizations share belongs to the framework (``program``, ``runtime``, the registry)."""
    folders = {p.parent.name for p in (ROOT / "optimizations").glob("*/rule.py")}
    graph = _graph("optimizations")
    crossing = {
        name: sorted(d for d in deps if d.split(".")[1] in folders and d.split(".")[1] != name.split(".")[1])
        for name, deps in graph.items()
        if name.count(".") >= 1
    }
    assert not any(crossing.values()), {k: v for k, v in crossing.items() if v}


def test_facts_never_import_edits():
    """The program model (``optimizations/program/``: what the program is) never imports the edit machinery
    (``optimizations/edits/``), not even for type checking; and neither imports an optimization folder."""
    folders = {p.parent.name for p in (ROOT / "optimizations").glob("*/rule.py")}
    graph = _graph("optimizations")
    assert "optimizations.program.queries" in graph and "optimizations.edits.codemod" in graph
    for name, deps in graph.items():
        if name.startswith("optimizations.program."):
            edits = sorted(d for d in deps if d.startswith("optimizations.edits"))
            assert not edits, f"{name} imports {edits} from the edit machinery"
        if name.startswith(("optimizations.program.", "optimizations.edits.")):
            rules = sorted(d for d in deps if d.split(".")[1] in folders)
            assert not rules, f"{name} imports the optimization folders {rules}"
