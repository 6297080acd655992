"""The import graph: ``bot`` → ``benchmarks`` → ``optimizations``, nothing pointing back up, and no cycle
among the modules of ``bot/`` (function-local imports included, and imports through ``importlib`` whose name
is written out: ``import_module("pkg.mod")``, ``__import__("pkg.mod")``, ``import_module(f"pkg.{name}")``)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("bot", "benchmarks", "optimizations")  # each may import only the ones after it
# Names a dynamic import's f-string may start with, resolved for the importing module.
MODULE_NAME, PACKAGE_NAME = "__name__", "__package__"


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module a file imports (absolute names; ``from X import y`` counts ``X.y`` when that is a
    module of the project, else ``X``). A dynamic import counts when its name is written out: a string
    literal (relative ones resolved against ``package=``), or an f-string whose literal start names a package:
    then that package and every module under the start count."""
    name = _module_name(path, root)
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
                found.add(candidate if _is_module(candidate, root) else base)
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
            found.update(_dynamically_imported(node, name, package, root))
    return found


def _is_dynamic_import(func: ast.expr) -> bool:
    """``importlib.import_module``, a bare ``import_module`` or ``__import__``."""
    if isinstance(func, ast.Attribute):
        return (
            func.attr == "import_module" and isinstance(func.value, ast.Name) and func.value.id == "importlib"
        )
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def _dynamically_imported(call: ast.Call, module: str, package: str, root: Path) -> set[str]:
    """The modules a dynamic import ``call`` in ``module`` may load; empty when its name is not written out."""
    names = {MODULE_NAME: module, PACKAGE_NAME: package}
    written, complete = _literal_start(call.args[0], names)
    if not written:
        return set()
    if written.startswith("."):
        anchor = next((_literal_start(k.value, names)[0] for k in call.keywords if k.arg == "package"), "")
        if not anchor:
            return set()
        dots = len(written) - len(written.lstrip("."))
        rest = written[dots:]
        resolved = importlib.util.resolve_name("." * dots, anchor)
        written = f"{resolved}.{rest}" if rest or not complete else resolved
    if complete:
        return {written}
    return _modules_starting_with(written, root)


def _literal_start(node: ast.expr, names: dict[str, str]) -> tuple[str, bool]:
    """The text a string expression starts with as written (``__name__`` and ``__package__`` filled in), and
    whether that is all of it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id], True
    if not isinstance(node, ast.JoinedStr):
        return "", False
    start = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            start.append(value.value)
        elif (
            isinstance(value, ast.FormattedValue)
            and isinstance(value.value, ast.Name)
            and value.value.id in names
        ):
            start.append(names[value.value.id])
        else:
            return "".join(start), False
    return "".join(start), True


def _modules_starting_with(prefix: str, root: Path) -> set[str]:
    """The package a dynamic name's literal start lies in, and every module under it whose name starts so."""
    package = prefix.rpartition(".")[0]
    if not package or not _is_module(package, root):
        return set()
    directory = root.joinpath(*package.split("."))
    under = {_module_name(path, root) for path in directory.rglob("*.py")}
    return {package} | {name for name in under if name.startswith(prefix)}


def _is_module(name: str, root: Path = ROOT) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    files = sorted((root / package).rglob("*.py"))
    modules = {_module_name(f, root): f for f in files}
    return {name: {i for i in _imports(f, root) if i in modules and i != name} for name, f in modules.items()}


def _edges_between(graph: dict[str, set[str]], source: str, target: str) -> list[tuple[str, str]]:
    """The imports from modules of package ``source`` to modules of package ``target``."""

    def within(name: str, package: str) -> bool:
        return name == package or name.startswith(f"{package}.")

    return sorted(
        (name, imported)
        for name, imports in graph.items()
        if within(name, source)
        for imported in imports
        if within(imported, target)
    )


def _facts_importing_edits(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from the program model (the facts, ``optimizations.program``) of the edits
    (``optimizations.edits``): the facts are read by edits, never the other way round."""
    return _edges_between(graph, "optimizations.program", "optimizations.edits")


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


def test_the_graph_follows_the_command_loader():
    """``bot.commands`` loads its command modules with ``import_module(f"{__name__}.{module}")``."""
    graph = _graph("bot")
    assert {"bot.commands.serve", "bot.commands.apply"} <= graph["bot.commands"]


DYNAMIC_IMPORTS = {
    "import_module": "import importlib\n\ndef load():\n    return importlib.import_module('pkg.b')\n",
    "relative": "import importlib\n\ndef load():\n    return importlib.import_module('.b', package='pkg')\n",
    "relative to __package__": "from importlib import import_module\n\nimport_module('.b', __package__)\n"
    "import_module('.b', package=__package__)\n",
    "__import__": "def load():\n    return __import__('pkg.b')\n",
    "f-string": "import importlib\n\ndef load(name):\n    return importlib.import_module(f'pkg.{name}')\n",
}


def _plant(root: Path, a_source: str) -> dict[str, set[str]]:
    """``pkg.a`` (``a_source``) and ``pkg.b``, which imports ``pkg.a``: the graph of ``pkg``."""
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "a.py").write_text(a_source)
    (root / "pkg" / "b.py").write_text("from pkg import a\n")
    return _graph("pkg", root)


def test_the_cycle_check_follows_importlib(tmp_path):
    for kind, source in DYNAMIC_IMPORTS.items():
        root = tmp_path / kind.replace(" ", "_")
        root.mkdir()
        graph = _plant(root, source)
        assert _cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"], (kind, graph)


def test_the_cycle_check_follows_a_package_loading_its_modules(tmp_path):
    """The shape of a command table: the package loads ``f"{__name__}.{name}"``, a module imports from it."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(
        "import importlib\n\nTABLE = {}\n\ndef load(name):\n    return importlib.import_module(f'{__name__}.{name}')\n"
    )
    (tmp_path / "pkg" / "a.py").write_text("from pkg import TABLE\n")
    graph = _graph("pkg", tmp_path)
    assert graph["pkg"] == {"pkg.a"}
    assert _cycle(graph) == ["pkg", "pkg.a", "pkg"]


def test_a_dynamic_import_whose_name_is_not_written_out_counts_nothing(tmp_path):
    graph = _plant(
        tmp_path, "import importlib\n\ndef load(name):\n    return importlib.import_module(name)\n"
    )
    assert graph["pkg.a"] == set() and _cycle(graph) is None


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


def test_the_facts_never_import_the_edits():
    """Nothing under ``optimizations/program/`` imports ``optimizations/edits/``."""
    assert _facts_importing_edits(_graph("optimizations")) == []


def test_the_facts_check_finds_an_import_of_the_edits():
    graph = {
        "optimizations.program.values": {"optimizations.edits.calls", "optimizations.program.tree"},
        "optimizations.program": {"optimizations.edits"},
        "optimizations.edits.calls": {"optimizations.program.values"},
        "optimizations.programs_elsewhere": {"optimizations.edits.calls"},
    }
    assert _facts_importing_edits(graph) == [
        ("optimizations.program", "optimizations.edits"),
        ("optimizations.program.values", "optimizations.edits.calls"),
    ]


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
