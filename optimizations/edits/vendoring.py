"""Run-time helpers perfbot ships, and where a target repository gets its copy: vendored verbatim as
``_perfbot_<name>.py`` where the edited file can import it however it runs."""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources

from optimizations.program.repository import SOURCE_ROOTS, VENDORED_PREFIX, RepoContext, import_roots


@dataclass(frozen=True, order=True)
class RuntimeHelper:
    """A run-time helper perfbot ships: the file ``file`` of the package ``package``, vendored into a target
    repository verbatim as ``_perfbot_<name>.py``. An optimization's own helper is ``helper.py`` in its folder;
    the ones several optimizations share are in :mod:`optimizations.runtime`."""

    name: str
    package: str
    file: str = "helper.py"

    @property
    def module(self) -> str:
        """The module name it is vendored as."""
        return f"{VENDORED_PREFIX}{self.name}"

    @property
    def path(self) -> str:
        """Where it lives in perfbot, for messages that ask a person to use it by hand."""
        return f"{self.package.replace('.', '/')}/{self.file}"

    def source(self) -> str:
        """Its text, as vendored."""
        return resources.files(self.package).joinpath(self.file).read_text(encoding="utf-8")


def vendor(repo: RepoContext, helper: RuntimeHelper, next_to: str, syntax: ast.Module | None) -> str:
    """Copy the run-time ``helper`` where the file ``next_to`` (``syntax``: its text as
    Python parses it) can import it; return the import target.

    * A file that imports a neighbour relatively runs only as part of its package: beside it, imported as
      ``._perfbot_x``.
    * A file that imports a package of this repository absolutely: in that package (its own package first,
      beside it), imported absolutely as ``pkg._perfbot_x``. Whatever makes the file's own imports work
      makes this one work, however the file runs: as a module, as a script, or by path through
      ``runpy.run_path`` (torchtune's ``tune run``), which puts neither a parent package nor the file's
      folder on the path.
    * Otherwise beside it: ``._perfbot_x`` in a package, ``_perfbot_x`` in a script directory.
    """
    module = helper.module
    directory = posixpath.dirname(next_to)
    in_package = bool(directory) and (repo.root / directory / "__init__.py").exists()
    home = _absolute_home(repo, next_to, syntax, in_package)
    folder, package = home or (directory, "" if in_package else None)
    repo.vendored[posixpath.join(folder, f"{module}.py")] = helper.source()
    return module if package is None else f"{package}.{module}"


def _absolute_home(
    repo: RepoContext, path: str, syntax: ast.Module | None, in_package: bool
) -> tuple[str, str] | None:
    """The folder and dotted package of the repository that the file ``path`` imports absolutely whenever it
    runs (its own package first); None where it imports relatively, or nothing of this repository. An import
    inside a function may never run (Lightning-AI/litgpt's thunder ``pretrain.py`` imports its own package
    only for multi-device runs, and is run by path), so only the module's own imports count for it."""
    if syntax is None:
        return None
    if any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(syntax)):
        return None
    imports = list(_module_level_imports(syntax))
    names = [a.name for n in imports if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in imports if isinstance(n, ast.ImportFrom) and n.module]
    top_levels = list(dict.fromkeys(name.partition(".")[0] for name in names))
    directory = posixpath.dirname(path)
    if in_package:
        for root in SOURCE_ROOTS:
            parts = posixpath.relpath(directory, root or ".").split("/")
            if parts[0] in top_levels and not parts[0].startswith("."):
                return directory, ".".join(parts)
    # A package file's absolute imports start at the source roots; a script's at its own folder too.
    roots = SOURCE_ROOTS if in_package else import_roots(path)
    for name in top_levels:
        for root in roots:
            folder = posixpath.join(root, name)
            if (repo.root / folder / "__init__.py").exists():
                return folder, name
    return None


def _module_level_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is loaded (outside its functions' bodies), in source order."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _module_level_imports(child)
