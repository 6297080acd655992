"""The check before an optimization's commit: every changed Python file byte-compiles, and every module the change
newly imports resolves for every way the file runs (a script by path, ``python -m``, a console script, imported
by another file), found in the target's own tree with that launch's ``sys.path``
(:mod:`optimizations.program.launch_modes`). A change that fails is dropped whole, never committed."""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from optimizations.program.import_resolution import evidence
from optimizations.program.launch_modes import LaunchModes
from optimizations.program.repository import VENDORED_PREFIX, RepoContext, SourceCache


def import_problems(
    root: Path,
    paths: Iterable[str],
    committed: Callable[[str], str | None],
    exclude: tuple[str, ...] = (),
    sources: SourceCache | None = None,
) -> list[str]:
    """Why the change to ``paths`` (written under ``root``; ``committed``: a file's text at HEAD, None for a new
    file) must not be committed: ``path:line`` and what fails, for each file that does not compile and each
    added import that some launch of its file would not resolve. Empty when the change may be committed."""
    paths = sorted(paths)
    modes = LaunchModes(
        RepoContext(root, exclude, sources=sources), new=[p for p in paths if committed(p) is None]
    )
    problems = []
    for path in paths:
        if not path.endswith(".py"):
            continue
        text = (root / path).read_text(encoding="utf-8")
        try:
            compile(text, path, "exec", dont_inherit=True)  # byte-compiled as every launch does
            tree = ast.parse(text, path)
        except (SyntaxError, ValueError) as exc:
            problems.append(f"{path}:{getattr(exc, 'lineno', 0) or 0} does not compile: {exc}")
            continue
        if posixpath.basename(path).startswith(VENDORED_PREFIX):
            continue  # perfbot's own helper: it imports only installed libraries
        before = _parsed(committed(path))
        earlier = {target for node in _imports(before) for target in _modules(node)}
        known = evidence(before)
        for node in _imports(tree):
            for level, module in _modules(node):
                if (level, module) in earlier:
                    continue
                why = modes.first_break(path, level, module, known)
                if why is not None:
                    problems.append(f"{path}:{node.lineno} `{ast.unparse(node)}` would not import: {why}")
                    break
    return problems


def _parsed(text: str | None) -> ast.Module | None:
    try:
        return ast.parse(text) if text is not None else None
    except (SyntaxError, ValueError):
        return None


def _imports(tree: ast.Module | None) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def _modules(node: ast.Import | ast.ImportFrom) -> list[tuple[int, str]]:
    """``(level, module)`` of each module an import statement loads by name (``from x import y`` checks ``x``:
    ``y`` may be a name defined in it)."""
    if isinstance(node, ast.Import):
        return [(0, alias.name) for alias in node.names]
    return [(node.level, node.module or "")]
