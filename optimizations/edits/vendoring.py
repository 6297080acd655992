"""Run-time helpers perfbot ships, and where a target repository gets its one copy of each: vendored verbatim
as ``_perfbot_<name>.py`` where every file that uses it can import it, however each runs
(:mod:`optimizations.program.launch_modes`)."""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass
from importlib import resources

from optimizations.program.import_resolution import evidence, module_level_imports, package_root
from optimizations.program.launch_modes import launch_modes
from optimizations.program.repository import SOURCE_ROOTS, VENDORED_PREFIX, RepoContext, import_roots


class HelperRefused(Exception):
    """No copy of a helper can serve a file every way it runs; the message says which launch would break."""


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
    """Place the one copy of the run-time ``helper`` where the file ``next_to`` (``syntax``: its text as
    Python parses it) can import it every way it runs; return the import target. A copy the repository (or
    this run) has already is the only place tried: a helper is never copied twice. Otherwise, in order:

    * A file that imports a neighbour relatively runs only as part of its package: beside it, imported as
      ``._perfbot_x``.
    * A file that imports a package of this repository absolutely: in that package (its own package first,
      beside it), imported absolutely as ``pkg._perfbot_x``. Whatever makes the file's own imports work
      makes this one work, however the file runs: as a module, as a script, or by path through
      ``runpy.run_path`` (torchtune's ``tune run``), which puts neither a parent package nor the file's
      folder on the path -- unless the package comes from the registry, whose copy has no helper.
    * Otherwise beside it: ``._perfbot_x`` in a package, ``_perfbot_x`` in a script directory; else at the
      repository's root.

    Each place and spelling is checked against every way the file runs (a relative import fails in a file
    launched as ``python pkg/file.py``); :class:`HelperRefused` names the launch that breaks where none fits.
    """
    module = helper.module
    name = f"{module}.py"
    copies = sorted(
        {p for p in repo.vendored if posixpath.basename(p) == name} | set(repo.listed(name, f"*/{name}"))
    )
    modes, known = launch_modes(repo), evidence(syntax)
    broken = ""
    for home in copies or _homes(repo, next_to, syntax, name):
        for target in _spellings(repo, next_to, home, syntax):
            level = len(target) - len(target.lstrip("."))
            why = modes.first_break(next_to, level, target.lstrip("."), known, planned=(home,))
            if why is None:
                repo.vendored[home] = helper.source()
                return target
            broken = broken or (f"as `{target}`: {why}" if copies else f"{home} as `{target}`: {why}")
    where = (
        f"{module}'s one copy, {copies[0]}, cannot be imported every way this file runs"
        if copies
        else f"{module} has no place that every way this file runs can import it from"
    )
    raise HelperRefused(
        f"{where} ({broken}): import {helper.path} by hand where every launch of the file finds it"
    )


def _homes(repo: RepoContext, path: str, syntax: ast.Module | None, name: str) -> list[str]:
    """Where a first copy may go, best first: the package the file imports absolutely, beside the file, the
    repository's root."""
    directory = posixpath.dirname(path)
    in_package = bool(directory) and (repo.root / directory / "__init__.py").exists()
    home = _absolute_home(repo, path, syntax, in_package)
    folders = dict.fromkeys([*([home[0]] if home else []), directory, ""])
    return [posixpath.join(folder, name) for folder in folders]


def _spellings(repo: RepoContext, path: str, home: str, syntax: ast.Module | None) -> list[str]:
    """The imports that can reach ``home`` from the file ``path``, in the file's own style first: relative
    (beside it, in a package), absolute through the package chain, and as a top-level module."""
    folder, module = posixpath.dirname(home), posixpath.basename(home).removesuffix(".py")

    def exists(file: str) -> bool:
        return (repo.root / file).is_file()

    chain = package_root(exists, folder)
    beside = [f".{module}"] if chain is not None and folder == posixpath.dirname(path) else []
    dotted = [f"{chain[1]}.{module}"] if chain is not None else []
    in_package = package_root(exists, posixpath.dirname(path)) is not None
    absolute_style = _absolute_home(repo, path, syntax, in_package) is not None
    return [*(dotted + beside if absolute_style else beside + dotted), module]


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
    imports = list(module_level_imports(syntax))
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
