"""Whether an import resolves for one way a file runs, found in the repository's own tree as Python would.

A way of running (:class:`Mode`) puts tree folders on ``sys.path`` ahead of the installed packages: the
script's folder for ``python path/file.py`` (and no package, so no relative import), the working folder for
``python -m pkg.mod``, nothing for a console script. What no folder on the path holds comes from the
installation: the repository's own packages (:mod:`optimizations.program.installation`) as the tree has them,
or, installed from the registry, without anything added since (a vendored ``_perfbot_`` helper); a package the
file already imports at module level is importable however it runs: as the tree has it, except where a
documented launch runs the file with only folders that lack it on the path and nothing puts the tree there (a
``sys.path`` line, ``PYTHONPATH``, a project file that ships it): then an installed copy from elsewhere is
what runs, and it lacks anything added since; anything else the tree does not hold is a dependency, taken
to be installed.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from optimizations.program.installation import Installation
from optimizations.program.repository import SOURCE_ROOTS, VENDORED_PREFIX, import_roots

SCRIPT, MODULE, IMPORTED, CONSOLE, ASSUMED = "script", "module", "imported", "console script", "assumed"
# What decides how a mode's imports resolve: the tree folders on the path, the package, the registry's copy.
ModeKey = tuple[tuple[str, ...], str | None, bool]


@dataclass(frozen=True)
class Mode:
    """One way a file runs: how (``kind``), the launch that does it (``where``: ``run.sh:3``; ``command``: what
    it runs), the tree folders ahead of the installed packages on ``sys.path``, the package the file runs in
    (``__package__``; None run by path or as a top-level module), and whether the file itself comes from the
    registry's copy of the package rather than from this tree."""

    kind: str
    where: str
    command: str
    path: tuple[str, ...]
    package: str | None
    installed: bool = False
    launched: bool = True  # a launch of the repository's (not one assumed where none is found) leads to it

    @property
    def key(self) -> ModeKey:
        """What decides how its imports resolve (two modes with one key import alike)."""
        return self.path, self.package, self.installed

    def describe(self) -> str:
        """``scripts/run.sh:3 runs it as `python pkg/train.py```, for a refusal's reason."""
        if self.kind == IMPORTED:
            return f"{self.where} imports it, {self.command}"
        if self.kind == CONSOLE:
            return f"{self.where} installs it as the console script `{self.command}`"
        if self.kind == ASSUMED:
            return f"with no launch found, it runs {self.command}"
        return f"{self.where} runs it as `{self.command}`"

    def origin(self, path: str) -> str:
        """How a file imported by ``path`` (which runs in this mode) comes to run, for its own mode."""
        if self.kind == IMPORTED:
            return self.command
        if self.kind == CONSOLE:
            return f"run as the console script `{self.command}` ({self.where})"
        if self.kind == ASSUMED:
            return f"with {path} running {self.command} (no launch found)"
        return f"run from {self.where} as `{self.command}`"


@dataclass(frozen=True)
class Found:
    """Where an import resolved: the file (a package's ``__init__.py``, a module, a namespace folder), and
    whether it is the registry's copy of it."""

    path: str
    installed: bool = False
    namespace: bool = False  # a folder without ``__init__.py``, which an installed package would win over
    copy: str = ""  # where an installed copy comes from, when it is not the registry's copy of the project


EXTERNAL = Found("(an installed dependency)")  # not this repository's: taken to be installed


def package_root(exists: Callable[[str], bool], folder: str) -> tuple[str, str] | None:
    """The folder ``folder``'s package chain starts in and its dotted name (``src`` and ``pkg.sub`` for
    ``src/pkg/sub``); None when ``folder`` is no package (``exists``: whether a file is in the tree)."""
    if not folder or not exists(posixpath.join(folder, "__init__.py")):
        return None
    top = folder
    while posixpath.dirname(top) and exists(posixpath.join(posixpath.dirname(top), "__init__.py")):
        top = posixpath.dirname(top)
    base = posixpath.dirname(top)
    return base, posixpath.relpath(folder, base or ".").replace("/", ".")


def module_level_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is loaded (outside its functions' bodies), in source order."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from module_level_imports(child)


def evidence(syntax: ast.Module | None) -> frozenset[str]:
    """The top-level names a file imports absolutely at module level: packages it can import however it runs
    (or it would not run at all)."""
    names: set[str] = set()
    for node in module_level_imports(syntax) if syntax is not None else ():
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif node.module and not node.level:
            names.add(node.module.partition(".")[0])
    return frozenset(names)


class Resolver:
    """Finds modules in the tree at ``root`` for a :class:`Mode`; ``planned``: files about to be written
    (a helper being placed), ``new``: files the registry's copy lacks besides every ``_perfbot_`` module."""

    def __init__(
        self,
        root: Path,
        installation: Installation,
        planned: Collection[str] = (),
        new: Collection[str] = (),
        pythonpath: bool = False,
    ):
        self.root = root
        self.installation = installation
        self.planned = frozenset(planned)
        self.new = frozenset(new)
        self.pythonpath = pythonpath  # some launch sets PYTHONPATH
        self._files: dict[str, bool] = {}
        self._folders: dict[str, bool] = {}
        self._path_lines: dict[str, bool] = {}

    def with_planned(self, planned: Collection[str]) -> Resolver:
        """The same tree with ``planned`` files about to be written."""
        other = Resolver(self.root, self.installation, planned, self.new, self.pythonpath)
        other._files, other._folders, other._path_lines = self._files, self._folders, self._path_lines
        return other

    def exists(self, path: str) -> bool:
        if path in self.planned:
            return True
        if path not in self._files:
            self._files[path] = (self.root / path).is_file()
        return self._files[path]

    def _folder(self, path: str) -> bool:
        if path not in self._folders:
            self._folders[path] = (self.root / path).is_dir()
        return self._folders[path]

    def absolute(self, mode: Mode, dotted: str, importer: str, known: frozenset[str]) -> Found | str:
        """Where ``import <dotted>`` in file ``importer`` (which imports ``known`` at module level) finds its
        module in ``mode``: a :class:`Found`, :data:`EXTERNAL`, or why it does not resolve."""
        parts = dotted.split(".")
        top = self._top(mode, parts[0], importer, known)
        if isinstance(top, str) or top is EXTERNAL:
            return top
        found = self._walk(top.path, parts, top.installed, top.copy)
        # A folder that merely shares an installed package's name (``data/`` beside a script) is not it.
        return EXTERNAL if isinstance(found, str) and top.namespace else found

    def relative(self, mode: Mode, importer: str, level: int, module: str) -> Found | str:
        """Where ``from <level dots><module> import ...`` in file ``importer`` finds its module in ``mode``."""
        if mode.package is None:
            return "a relative import has no parent package in a file run as a script or top-level module"
        depth = len(mode.package.split(".")) if mode.package else 0
        if level - 1 >= depth:
            return f"the relative import goes beyond the top-level package `{mode.package}`"
        folder = posixpath.dirname(importer)
        for _ in range(level - 1):
            folder = posixpath.dirname(folder)
        if not module:
            init = posixpath.join(folder, "__init__.py")
            return Found(init if self.exists(init) else folder, mode.installed)
        return self._walk(
            folder,
            module.split("."),
            mode.installed,
            "" if self.installation.registry else "an installed copy of its package runs",
        )

    def _top(self, mode: Mode, top: str, importer: str, known: frozenset[str]) -> Found | str:
        """The folder that holds top-level module ``top`` (as a :class:`Found` of it), :data:`EXTERNAL`, or why
        it is not found."""
        portion = None
        for entry in mode.path:
            if self._module_in(entry, top):
                return Found(entry)
            if portion is None and self._folder(posixpath.join(entry, top)):
                portion = entry
        if portion is not None:
            return Found(portion, namespace=True)
        installation = self.installation
        if top in installation.packages:
            return Found(installation.packages[top], bool(installation.registry))
        if top in known:
            in_package = package_root(self.exists, posixpath.dirname(importer)) is not None
            for root in SOURCE_ROOTS if in_package else import_roots(importer):
                if self._module_in(root, top):
                    if not mode.launched or self.pythonpath or self._sets_path(importer):
                        return Found(root)
                    return Found(root, installed=True, copy=self._elsewhere(top, root, importer))
        if top.startswith(VENDORED_PREFIX) or any(self._module_in(r, top) for r in import_roots(importer)):
            where = ", ".join(f"{p or '.'}/" for p in mode.path) or "no folder of the repository"
            return f"`{top}` is not on its path ({where})"
        return EXTERNAL

    def _sets_path(self, importer: str) -> bool:
        """Whether file ``importer`` changes ``sys.path`` itself (``sys.path.insert(0, ...)``)."""
        if importer not in self._path_lines:
            try:
                syntax = ast.parse((self.root / importer).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
                syntax = ast.Module(body=[], type_ignores=[])
            self._path_lines[importer] = any(
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and (node.value.id, node.attr) in (("sys", "path"), ("site", "addsitedir"))
                for node in ast.walk(syntax)
            )
        return self._path_lines[importer]

    @staticmethod
    def _elsewhere(top: str, root: str, importer: str) -> str:
        return (
            f"nothing puts {root or '.'}/ on the path of {importer} (no `sys.path` line, no launch sets "
            f"PYTHONPATH, no project file installs `{top}` from this tree), so its `{top}` is an installed copy"
        )

    def _module_in(self, folder: str, name: str) -> bool:
        base = posixpath.join(folder, name)
        return self.exists(f"{base}.py") or self.exists(posixpath.join(base, "__init__.py"))

    def _walk(self, folder: str, parts: list[str], installed: bool, copy: str = "") -> Found | str:
        """``parts`` looked up from ``folder`` down, as a path entry's finder does: a package (its
        ``__init__.py``), then a module (the last part only), then a namespace folder."""
        found = folder
        for position, part in enumerate(parts):
            if found.endswith(".py") and not found.endswith("__init__.py"):
                return f"`{'.'.join(parts[:position])}` is a module, not a package"
            here = posixpath.join(folder, part)
            init, single = posixpath.join(here, "__init__.py"), f"{here}.py"
            if self.exists(init):
                found = init
            elif self.exists(single):
                found = single
            elif self._folder(here):
                found = here
            else:
                return f"there is no {here}.py or {here}/ for `{'.'.join(parts[: position + 1])}`"
            if installed and (posixpath.basename(found).startswith(VENDORED_PREFIX) or found in self.new):
                return f"{copy or self.installation.registry}, and that copy has no {found}"
            folder = here
        return Found(found, installed, copy=copy)
