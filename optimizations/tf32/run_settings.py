"""TF32 switched on by another file of the same run: at import of a module the training file loads, or in a
repository function it calls (karpathy/nanochat's ``compute_init()`` in ``nanochat/common.py``)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping

import libcst as cst

from optimizations.program.classes import repository_classes
from optimizations.program.queries import FileQuery
from optimizations.program.reachability import program_of


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _setting(node: ast.AST, table: Mapping[str, tuple[object, ...]]) -> bool:
    """Whether ``node`` assigns or calls a setting of ``table`` (spelled from ``torch``) to a value that turns
    it on."""
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, ast.Call) and node.args:
        targets, value = [node.func], node.args[0]
    else:
        return False
    if not isinstance(value, ast.Constant):
        return False
    return any(value.value in table.get(dotted, ()) for dotted in map(_dotted, targets) if dotted)


def _module_level(tree: ast.Module) -> Iterator[ast.AST]:
    """The nodes a module runs at import: outside functions and classes."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        pending.extend(ast.iter_child_nodes(node))


def set_at_import(query: FileQuery, table: Mapping[str, tuple[object, ...]]) -> str | None:
    """``file:line`` of a setting of ``table`` turned on at import of another repository module of every run of
    this file: one it loads, or, for a file no one runs directly, one the entry points that load it load;
    None where none is."""
    program = program_of(query.repo)
    files = set(program.imported_from(query.path))
    starts = [entry for entry in program.entry_points if query.path in program.imported_from(entry)]
    if starts and query.path not in program.entry_points:
        files |= set.intersection(*(set(program.imported_from(entry)) for entry in starts))
    for path in sorted(files - {query.path}):
        tree = program.syntax(path)
        for node in _module_level(tree) if tree is not None else ():
            if _setting(node, table):
                return f"{path}:{getattr(node, 'lineno', 0)}"
    return None


def set_by_called_function(
    query: FileQuery, calls: Iterable[cst.Call], table: Mapping[str, tuple[object, ...]]
) -> tuple[cst.Call, str] | None:
    """The first of ``calls`` to a repository function (of another file) whose body turns a setting of
    ``table`` on, and ``file:line`` of that setting; None where none does."""
    index = repository_classes(query.repo)
    for call in calls:
        for name in sorted(query.names(call.func)):
            found = index.function_definition(name, query.path)
            if found is None or found[1] == query.path:
                continue
            tree = program_of(query.repo).syntax(found[1])
            function = next(
                (
                    node
                    for node in (tree.body if tree is not None else ())
                    if isinstance(node, ast.FunctionDef) and node.name == found[0].name.value
                ),
                None,
            )
            for node in ast.walk(function) if function is not None else ():
                if _setting(node, table):
                    return call, f"{found[1]}:{getattr(node, 'lineno', 0)}"
    return None
