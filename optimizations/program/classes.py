"""The repository's own modules and classes, across files: what each module binds at its top level (classes,
imports, re-exports), and the classes outside the repository each of its classes derives from.

A recipe repository subclasses TRL's configs in its own package (``class SFTConfig(trl.SFTConfig)`` in
``src/mypkg/configs.py``, re-exported by ``src/mypkg/__init__.py``) and its scripts import them from there
(``from mypkg import SFTConfig``). libcst resolves the script's name to ``mypkg.SFTConfig`` only; this index
follows it into the package (``src/`` layouts, packages, relative imports, ``__init__`` re-exports and star
imports) to the class definition and on through its bases, so that the class is known as a ``trl.SFTConfig``
too. Modules are looked up where Python would find them for a script of the repository: beside the importing
file, at the repository root, and under ``src/``. A module is read (and parsed, through the run's shared
:class:`~optimizations.program.repository.SourceCache`) only when a name leads into it.
"""

from __future__ import annotations

import posixpath
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import cast

import libcst as cst
from libcst.metadata import QualifiedName, QualifiedNameSource

from optimizations.program.repository import (
    SOURCE_ROOTS,
    RepoContext,
    SourceCache,
    TransformError,
    import_roots,
    module_paths,
)

# How many names one resolution may pass through (re-exports of re-exports) before it gives up.
MAX_HOPS = 32


@dataclass(frozen=True)
class ClassDefinition:
    """A class of the repository: its qualified name and its bases, as qualified names."""

    name: str
    bases: tuple[str, ...]


@dataclass
class ModuleNames:
    """What one module binds at its top level: its classes, and the names it imports (name -> qualified)."""

    module: str  # dotted name
    package: str  # the package relative imports start from
    classes: dict[str, ClassDefinition] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    others: set[str] = field(default_factory=set)  # functions and assignments: bound, but not classes
    functions: set[str] = field(default_factory=set)  # the top-level functions among the others


def _dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a name or attribute chain; ``None`` for anything else (a call, a subscript)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def _absolute(package: str, dots: int, module: str | None) -> str | None:
    """The module ``from <dots><module> import`` names in a module of ``package``; ``None`` past the top."""
    if not dots:
        return module
    parts = package.split(".") if package else []
    if dots - 1 > len(parts):
        return None
    return ".".join([*parts[: len(parts) - (dots - 1)], *([module] if module else [])])


class RepositoryClasses:
    """The index over one repository, filled lazily: module files found, their top-level names, and every class
    resolution, each cached by the file's text (a file an earlier edit changed is read again)."""

    def __init__(self, root: Path, sources: SourceCache):
        self.root = Path(root)
        self.sources = sources
        self._names: dict[tuple[str, str], ModuleNames] = {}
        self._files: dict[str, bool] = {}
        self._ancestors: dict[tuple[str, str], frozenset[str]] = {}
        self._named: dict[tuple[str, frozenset[QualifiedName]], frozenset[str]] = {}

    # -- files and modules ------------------------------------------------------------------------------------
    def module_name(self, path: str) -> tuple[str, str]:
        """``(module, package)`` of a repository file: ``src/pkg/configs.py`` is ``pkg.configs`` in ``pkg``."""
        parts = list(PurePosixPath(path).with_suffix("").parts)
        if parts and parts[0] in SOURCE_ROOTS[1:]:
            parts = parts[1:]
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
            return ".".join(parts), ".".join(parts)
        return ".".join(parts), ".".join(parts[:-1])

    def module_file(self, module: str, importer: str) -> str | None:
        """The repository file that defines ``module`` for a file at ``importer``: beside it, at the root or
        under ``src/``; ``None`` when the module is not the repository's (an installed package)."""
        return next(
            (path for path in module_paths(module, import_roots(importer)) if self._exists(path)), None
        )

    def _exists(self, path: str) -> bool:
        if path not in self._files:
            self._files[path] = (self.root / path).is_file()
        return self._files[path]

    def names_of(self, path: str) -> ModuleNames | None:
        """The top-level names of the repository file ``path``; ``None`` when it cannot be read or parsed."""
        try:
            text = (self.root / path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        key = (path, text)
        if key not in self._names:
            try:
                module = self.sources.parse(path, text).module
            except TransformError:
                return None
            self._names[key] = self._bindings(path, module)
        return self._names[key]

    def _bindings(self, path: str, module: cst.Module) -> ModuleNames:
        dotted, package = self.module_name(path)
        names = ModuleNames(dotted, package)
        for statement in self._top_level(module.body):
            if isinstance(statement, cst.ClassDef):
                bases = tuple(b for a in statement.bases if a.keyword is None and (b := _dotted(a.value)))
                names.classes.setdefault(statement.name.value, ClassDefinition(statement.name.value, bases))
            elif isinstance(statement, cst.FunctionDef):
                names.others.add(statement.name.value)
                names.functions.add(statement.name.value)
            elif isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    self._bind_small(small, names)
        # Bases are written in the module's own names: make them qualified.
        for name, cls in names.classes.items():
            names.classes[name] = ClassDefinition(
                f"{dotted}.{name}", tuple(self._qualify(base, names) for base in cls.bases)
            )
        return names

    @staticmethod
    def _top_level(body: Iterable[cst.CSTNode]) -> Iterable[cst.CSTNode]:
        """The module's statements, with those of top-level ``if``/``try`` blocks (guarded imports) inlined."""
        for statement in body:
            if isinstance(statement, cst.If | cst.Try):
                yield from RepositoryClasses._top_level(statement.body.body)
                if isinstance(statement, cst.Try):
                    for handler in statement.handlers:
                        yield from RepositoryClasses._top_level(handler.body.body)
            else:
                yield statement

    def _bind_small(self, small: cst.BaseSmallStatement, names: ModuleNames) -> None:
        if isinstance(small, cst.Import):
            for alias in small.names:
                target = _dotted(alias.name)
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    names.imports.setdefault(alias.asname.name.value, cast(str, target))  # names are dotted
                elif target is not None:
                    top = target.split(".")[0]
                    names.imports.setdefault(top, top)
        elif isinstance(small, cst.ImportFrom):
            source = _absolute(
                names.package,
                len(small.relative),
                _dotted(small.module) if small.module is not None else None,
            )
            if source is None:
                return
            if isinstance(small.names, cst.ImportStar):
                names.star_imports.append(source)
                return
            for alias in small.names:
                bound = alias.asname.name if alias.asname is not None else alias.name
                if isinstance(bound, cst.Name) and isinstance(alias.name, cst.Name):
                    prefix = f"{source}." if source else ""
                    names.imports.setdefault(bound.value, f"{prefix}{alias.name.value}")
        elif isinstance(small, cst.Assign | cst.AnnAssign):
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            value = _dotted(small.value) if small.value is not None else None
            for assigned in targets:
                if isinstance(assigned, cst.Name):
                    if value is not None and len(targets) == 1:
                        names.imports.setdefault(assigned.value, self._qualify(value, names))
                    else:
                        names.others.add(assigned.value)

    def qualify(self, dotted: str, path: str) -> str:
        """A dotted name as written in the repository file ``path``, qualified through its top-level names."""
        names = self.names_of(path)
        return self._qualify(dotted, names) if names is not None else dotted

    @staticmethod
    def _qualify(dotted: str, names: ModuleNames) -> str:
        """A dotted name as written in a module, qualified: through its imports, else one of its own names."""
        head, _, rest = dotted.partition(".")
        if head in names.imports:
            target = names.imports[head]
        elif head in names.classes or head in names.others:
            target = f"{names.module}.{head}"
        else:
            return dotted
        return f"{target}.{rest}" if rest else target

    # -- resolution -------------------------------------------------------------------------------------------
    def definition(self, name: str, importer: str) -> tuple[ClassDefinition, str] | None:
        """The repository class a qualified ``name`` (as seen from the file ``importer``) is, and the file that
        defines it; ``None`` when it is not one of the repository's classes."""
        found = self._resolve(name, importer, functions=False)
        if found is None or not isinstance(found[0], ClassDefinition):
            return None
        return found[0], found[1]

    def function_definition(self, name: str, importer: str) -> tuple[cst.FunctionDef, str] | None:
        """The top-level function of the repository a qualified ``name`` (as seen from the file ``importer``)
        is, and the file that defines it; ``None`` when it is not one of the repository's."""
        found = self._resolve(name, importer, functions=True)
        if not isinstance(found, tuple) or not isinstance(found[0], str):
            return None
        function, path = found
        module = self.sources.parse(path, (self.root / path).read_text(encoding="utf-8")).module
        return next(
            (
                (statement, path)
                for statement in self._top_level(module.body)
                if isinstance(statement, cst.FunctionDef) and statement.name.value == function
            ),
            None,
        )

    def _resolve(self, name: str, importer: str, functions: bool) -> tuple[ClassDefinition | str, str] | None:
        pending, seen = [(name, importer)], set[tuple[str, str]]()
        while pending and len(seen) < MAX_HOPS:
            step = pending.pop(0)
            if step in seen:
                continue
            seen.add(step)
            found = self._step(*step, functions=functions)
            if isinstance(found, tuple):
                return found
            pending.extend(found)
        return None

    def _step(
        self, name: str, importer: str, functions: bool = False
    ) -> tuple[ClassDefinition | str, str] | list[tuple[str, str]]:
        """One hop: the class (or, with ``functions``, the function) ``name`` is, with its file; or the
        ``(name, file)`` pairs it may be re-exported from (an import, or the star imports of the module that
        should bind it)."""
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            path = self.module_file(".".join(parts[:cut]), importer)
            if path is None:
                continue  # ``pkg.configs.SFTConfig`` where ``pkg/configs.py`` is missing: try ``pkg``
            names = self.names_of(path)
            head, rest = parts[cut], parts[cut + 1 :]
            if names is None:
                return []
            if head in names.others:
                return (head, path) if functions and head in names.functions and not rest else []
            if head in names.classes:
                return (names.classes[head], path) if not rest and not functions else []
            if head in names.imports:
                return [(".".join([names.imports[head], *rest]), path)]
            return [(".".join([star, *parts[cut:]]), path) for star in names.star_imports]
        return []

    def ancestors(self, path: str, qualified: Iterable[QualifiedName]) -> frozenset[str]:
        """The qualified names outside the repository (``trl.SFTConfig``) that the repository classes named by
        ``qualified``, as libcst resolved them in the file ``path``, derive from; empty for anything else."""
        key = (path, frozenset(qualified))
        if key not in self._named:
            found: set[str] = set()
            for q in key[1]:
                name = self._from_file(path, q)
                if name is not None:
                    found |= self._external_bases(name, path)
            self._named[key] = frozenset(found)
        return self._named[key]

    def class_of(self, path: str, qualified: Iterable[QualifiedName]) -> tuple[ClassDefinition, str] | None:
        """The repository class (and the file defining it) that ``qualified``, as libcst resolved a name in the
        file ``path`` (a relative import's included), names; ``None`` for anything else."""
        for q in qualified:
            name = self._from_file(path, q)
            found = self.definition(name, path) if name is not None else None
            if found is not None:
                return found
        return None

    def _from_file(self, path: str, q: QualifiedName) -> str | None:
        """A libcst qualified name made absolute: a relative import's against the file's package, a class of
        the file under the file's module; ``None`` when it cannot name a repository class."""
        module, package = self.module_name(path)
        if q.source is QualifiedNameSource.LOCAL:
            return f"{module}.{q.name}" if module and "." not in q.name else None
        if q.source is not QualifiedNameSource.IMPORT:
            return None
        dots = len(q.name) - len(q.name.lstrip("."))
        if dots:
            return _absolute(package, dots, q.name[dots:])
        top = q.name.split(".")[0]
        return q.name if self.module_file(top, path) is not None or self._namespace(top, path) else None

    def _namespace(self, top: str, importer: str) -> bool:
        """Whether ``top`` is a namespace package of the repository for a file at ``importer``: a folder without
        ``__init__.py`` under one of its import roots that holds Python files (PEP 420)."""
        return any(
            (folder := self.root / posixpath.normpath(posixpath.join(root, top))).is_dir()
            and any(folder.glob("*.py"))
            for root in import_roots(importer)
        )

    def _external_bases(self, name: str, importer: str) -> frozenset[str]:
        """The bases outside the repository of the class ``name`` and of its repository bases, transitively."""
        key = (name, importer)
        if key not in self._ancestors:
            self._ancestors[key] = frozenset()  # a cycle of bases ends here
            found: set[str] = set()
            defined = self.definition(name, importer)
            if defined is not None:
                cls, path = defined
                for base in cls.bases:
                    inner = self._external_bases(base, path)
                    found |= inner if inner or self.definition(base, path) else {base}
            self._ancestors[key] = frozenset(found)
        return self._ancestors[key]


_INDEXES: weakref.WeakKeyDictionary[SourceCache, dict[str, RepositoryClasses]] = weakref.WeakKeyDictionary()


def repository_classes(repo: RepoContext) -> RepositoryClasses:
    """The class index of ``repo``, one per run (shared through the run's parses, like the parses themselves)."""
    per_root = _INDEXES.setdefault(repo.sources, {})
    root = str(repo.root)
    if root not in per_root:
        per_root[root] = RepositoryClasses(repo.root, repo.sources)
    return per_root[root]
