"""The launch-import check: does every import a commit added resolve where the program really runs?

Each changed file is loaded the way each `[[launch]]` that runs it loads it: `python path/file.py` puts the
file's folder first on `sys.path` and runs it as `__main__` (no relative import); `python -m pkg.mod` puts the
working directory (the repository root, or a leading `cd DIR &&`) first and runs the module in its package.
A file no launch runs is taken as a module of its package layout: the chain of folders with `__init__.py`
above it, imported from the folder above that chain (a file outside any package is a top-level module: no
relative import there either).

An absolute import resolves in the first folder on `sys.path` that has its top-level package or module; else,
for a package in `installed_from_registry`, in the *pinned* tree only (the installed copy has no new module);
else in the tree wherever the package lives (at the root, under `src/`, or any folder that is not a package itself:
installed from the checkout); else it is third-party and taken as resolving."""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from benchmarks.corpus.commits import Import
from benchmarks.corpus.manifest import Launch


@dataclass(frozen=True)
class Context:
    """How one launch loads a file: `roots` are the repository folders first on `sys.path` ("" is the root);
    `package` is the file's package, dotted from `roots[0]` ("" for a top-level module, None for a file run
    as a script, whose relative imports all fail)."""

    label: str
    roots: tuple[str, ...]
    package: str | None
    on_path: bool = True  # the roots are really first on sys.path (not so for a package layout's import root)


class Tree:
    """The file paths of one commit, with the folders that hold Python files below them."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.files = frozenset(paths)

    @cached_property
    def python_folders(self) -> frozenset[str]:
        """Every folder with a `.py` file somewhere below it."""
        folders = set()
        for path in self.files:
            if path.endswith(".py"):
                parent = posixpath.dirname(path)
                while parent and parent not in folders:
                    folders.add(parent)
                    parent = posixpath.dirname(parent)
        return frozenset(folders)

    def has(self, root: str, dotted: str) -> bool:
        """Whether the module `dotted` exists under the folder `root`: a `.py` file, a package, or (below the
        top level, or a folder of Python files) a namespace package."""
        base = posixpath.join(root, *dotted.split("."))
        return (
            f"{base}.py" in self.files or f"{base}/__init__.py" in self.files or base in self.python_folders
        )

    def home(self, top: str) -> str | None:
        """The folder a checkout-installed top-level package `top` lives in, or None (not in the repository)."""
        for root in ("", "src"):
            if self.has(root, top):
                return root
        for path in sorted(self.files):
            if path.endswith(f"/{top}/__init__.py"):
                root = path[: -len(f"/{top}/__init__.py")]
                if f"{root}/__init__.py" not in self.files:
                    return root
        return None


def layout_context(path: str, tree: Tree, label: str = "as a module of its package layout") -> Context:
    """`path` imported as its package chain says (`__init__.py` in each folder up to the import root)."""
    folder, parts = posixpath.dirname(path), list[str]()
    while folder and f"{folder}/__init__.py" in tree.files:
        parts.insert(0, posixpath.basename(folder))
        folder = posixpath.dirname(folder)
    return Context(label, (folder,), ".".join(parts), on_path=False)


def launch_context(launch: Launch, tree: Tree) -> Context:
    """How `launch` loads the file it runs: a script, a module (`-m`), else as its package layout."""
    try:
        tokens = shlex.split(launch.command, comments=True)
    except ValueError:
        tokens = launch.command.split()
    cwd = ""
    if len(tokens) >= 3 and tokens[0] == "cd" and tokens[2] in ("&&", ";"):
        cwd = posixpath.normpath(tokens[1]).strip("/").removeprefix(".")
    if "-m" in tokens[:-1]:
        module = tokens[tokens.index("-m") + 1]
        return Context(f"python -m {module}", (cwd,), module.rpartition(".")[0])
    script = posixpath.basename(launch.runs)
    if any(t.endswith(".py") and posixpath.basename(t) == script for t in tokens):
        return Context(f"python {launch.runs}", (posixpath.dirname(launch.runs),), None)
    return layout_context(launch.runs, tree, f"`{launch.command.split()[0]}` (as its package layout)")


def contexts(path: str, launches: Iterable[Launch], tree: Tree) -> list[Context]:
    """How `path` is loaded: once per launch that runs it, else as its package layout."""
    running = [launch for launch in launches if launch.runs == path]
    return [launch_context(launch, tree) for launch in running] or [layout_context(path, tree)]


@dataclass(frozen=True)
class Resolver:
    """Resolves imports in the tree `now` (the commit's) against the pinned tree `base`."""

    now: Tree
    base: Tree
    installed: tuple[str, ...]

    def absolute(self, dotted: str, context: Context) -> str:
        """Why `import dotted` fails under `context` ("" when it resolves)."""
        top = dotted.split(".")[0]
        shadowed = context.on_path and any(self.now.has(root, top) for root in context.roots)
        if top in self.installed and not shadowed:
            home = self.base.home(top)
            if home is None or self.base.has(home, dotted):
                return ""
            return f"{dotted} is new, but {top} is installed from the registry (installed_from_registry)"
        for root in context.roots:
            if self.now.has(root, top):
                where = root or "the repository root"
                return "" if self.now.has(root, dotted) else f"no module {dotted} in {where}/"
        home = self.now.home(top)
        if home is None or self.now.has(home, dotted):
            return ""
        return f"no module {dotted} in the repository's {top}"

    def check(self, item: Import, context: Context) -> str:
        """Why the import `item` fails in a file loaded as `context` ("" when it resolves)."""
        if item.guarded:
            return ""
        if not item.level:
            modules = [item.module] + self._submodules(item.module, item.names, context)
            return next((why for why in (self.absolute(m, context) for m in modules) if why), "")
        if context.package is None:
            return "relative import in a file run as a script (`python path/file.py`: no parent package)"
        parts = context.package.split(".") if context.package else []
        if item.level > len(parts):
            return (
                "relative import beyond the top-level package"
                if parts
                else "relative import in a top-level module"
            )
        anchor = ".".join(parts[: len(parts) - item.level + 1] + ([item.module] if item.module else []))
        root = context.roots[0]
        for dotted in (anchor, *self._submodules(anchor, item.names, context)):
            if not self.now.has(root, dotted):
                return f"no module {dotted} in {root or 'the repository root'}/"
            if dotted.split(".")[0] in self.installed and not self.base.has(root, dotted):
                return f"{dotted} is new, but {dotted.split('.')[0]} is installed from the registry"
        return ""

    def _submodules(self, module: str, names: tuple[str, ...], context: Context) -> list[str]:
        """The names of `from module import names` that are modules of the repository (the rest are attributes)."""
        roots = [*context.roots, self.now.home(module.split(".")[0]) or ""]
        return [
            f"{module}.{n}"
            for n in names
            if n != "*" and any(self.now.has(r, f"{module}.{n}") for r in roots)
        ]


@dataclass(frozen=True)
class ImportFailure:
    """An import a commit added that does not resolve under one launch, or a file that does not compile."""

    commit: str
    optimization: str
    path: str
    line: int
    statement: str
    context: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} `{self.statement}` {self.context}: {self.why}"
