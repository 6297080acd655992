"""Which functions of the repository a script calls when it runs, followed through the modules it imports.

A launched script often holds no training code itself: ``scripts/train.py`` of a Hydra project calls ``main()``,
which imports ``run_single`` of the package inside its body and calls it, which imports and calls
``run_staged_training``, which builds the ``SFTTrainer``. :func:`runs_training` follows those calls, from the
statements the script runs (its top level and its ``if __name__ == "__main__":`` block) into the functions they
call, of the script or of any module of the repository they import (at the top of a file or inside the calling
function), a few calls deep. A script that imports only helpers of a training module (stanford_alpaca's
``weight_diff.py``) calls no function that trains, and is not one.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterable, Iterator

from optimizations.program.repository import RepoContext, import_roots, module_paths

MAX_DEPTH = 6  # calls followed from the script's own statements


def runs_training(repo: RepoContext, entry: str, markers: Iterable[str], depth: int = MAX_DEPTH) -> bool:
    """Whether running the script ``entry`` reaches, within ``depth`` calls, a function of the repository whose
    source holds one of ``markers`` (``Trainer(``, ``.backward(``...)."""
    markers = tuple(markers)
    tree = _tree(repo, entry)
    if tree is None:
        return False
    frontier = list(_calls(repo, entry, tree, run_statements(tree), _imports(repo, entry, tree.body)))
    seen: set[tuple[str, str]] = set()
    for _ in range(depth):
        following: list[tuple[str, str]] = []
        for path, name in frontier:
            if (path, name) in seen:
                continue
            seen.add((path, name))
            module = _tree(repo, path)
            function = _function(module, name) if module is not None else None
            if module is None or function is None:
                continue
            if any(marker in ast.unparse(function) for marker in markers):
                return True
            imported = {**_imports(repo, path, module.body), **_imports(repo, path, function.body)}
            following += _calls(repo, path, module, function.body, imported)
        frontier = following
    return False


def called_name(call: ast.Call) -> str | None:
    """The name a call calls: ``f`` of ``f(...)``, ``attr`` of ``x.attr(...)``; ``None`` for anything else."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _tree(repo: RepoContext, path: str) -> ast.Module | None:
    try:
        return ast.parse(repo.read(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def run_statements(tree: ast.Module) -> list[ast.stmt]:
    """The statements a script runs: its top level (definitions aside) and its ``__main__`` block."""
    run: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            run += node.body
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If)):
            run.append(node)
    return run


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    return next(
        (
            node
            for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
        ),
        None,
    )


def _imports(repo: RepoContext, importer: str, body: list[ast.stmt]) -> dict[str, tuple[str, str]]:
    """Names bound by ``from module import name`` anywhere in ``body`` to a module of the repository: each name
    -> (the module's file, the name there)."""
    bound: dict[str, tuple[str, str]] = {}
    for statement in body:
        for node in ast.walk(statement):
            if not isinstance(node, ast.ImportFrom):
                continue
            path = _module_file(repo, importer, node.module or "", node.level)
            if path is None:
                continue
            for alias in node.names:
                bound[alias.asname or alias.name] = (path, alias.name)
    return bound


def _module_file(repo: RepoContext, importer: str, module: str, level: int) -> str | None:
    if level:
        folder = posixpath.dirname(importer)
        for _ in range(level - 1):
            folder = posixpath.dirname(folder)
        roots: tuple[str, ...] = (folder,)
    else:
        roots = import_roots(importer)
    return next((path for path in module_paths(module, roots) if (repo.root / path).is_file()), None)


def _calls(
    repo: RepoContext,
    path: str,
    module: ast.Module,
    body: list[ast.stmt],
    imported: dict[str, tuple[str, str]],
) -> Iterator[tuple[str, str]]:
    """The repository functions ``body`` calls by name, the module's own or ones it imported, and those it hands
    to a call that runs them (``fire.Fire(main)``, ``mp.spawn(worker, ...)``)."""
    for statement in body:
        for node in ast.walk(statement):
            if not isinstance(node, ast.Call):
                continue
            named = [node.func] if isinstance(node.func, ast.Name) else []
            named += [arg for arg in node.args if isinstance(arg, ast.Name)]
            for name in (n.id for n in named):
                if name in imported:
                    yield imported[name]
                elif _function(module, name) is not None:
                    yield path, name
