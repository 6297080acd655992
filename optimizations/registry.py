"""The optimization registry, and the objects optimizations and the bot exchange.

Shaped like a lint-rule registry (Fixit's ``LintRule``): an optimization is one :class:`Optimization` subclass
in its own module, carrying an ``id``, a default tier, the win it is expected to bring, the phrases that name
it in a plan, the before/after ``examples`` the test-suite runs, and the libcst ``codemods`` that carry it out.
The base class turns the codemods into ``transform_source`` (one file), ``find`` (what would change, where) and
``apply`` (the edited files, ready to commit).

Built-in optimizations are found by importing every module of this package; third-party packages register
theirs under the entry-point group ``bot.optimizations``.
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata, resources
from itertools import chain
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar

import libcst as cst
from libcst.codemod import CodemodContext

if TYPE_CHECKING:
    from optimizations.codemod import OptimizationCodemod

ENTRY_POINT_GROUP = "bot.optimizations"
VENDORED_PREFIX = "_perfbot_"
DEFAULT_EXCLUDES = ("tests/*", "test_*.py", "*/tests/*", "*/test_*.py", "docs/*", "examples/*/.venv/*")


class TransformError(Exception):
    """A transform could not run on a file (it does not parse, or the edit would not compile)."""


@dataclass(frozen=True)
class Site:
    """One place in a repository an optimization looked at: changed, or refused with a reason."""

    path: str
    line: int
    optimization: str
    message: str
    applicable: bool = True
    reason: str = ""

    def describe(self) -> str:
        """``path:line  message`` plus the refusal reason, for terminal output."""
        text = f"{self.path}:{self.line}  {self.message}"
        return text if self.applicable else f"{text}  [refused: {self.reason}]"


@dataclass(frozen=True)
class Example:
    """A before/after pair the test-suite runs: ``after=None`` means the transform must change nothing.

    ``refusal`` is a fragment of the reason the transform must report for a refused site. ``files`` are other
    files of the example repository (a config the transform reads, say).
    """

    name: str
    before: str
    after: str | None = None
    refusal: str | None = None
    path: str = "train.py"
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class FileResult:
    """What a transform did to one file: the new source and every site it looked at."""

    source: str
    sites: list[Site] = field(default_factory=list)


@dataclass
class Change:
    """An applied optimization: new file contents keyed by repository-relative path, and the sites."""

    optimization: str
    files: dict[str, str]
    sites: list[Site]

    @property
    def applied(self) -> list[Site]:
        return [s for s in self.sites if s.applicable]

    @property
    def refused(self) -> list[Site]:
        return [s for s in self.sites if not s.applicable]


class RepoContext:
    """The repository a transform runs over: which files are in scope, and vendoring of runtime modules."""

    def __init__(self, root: Path, exclude: tuple[str, ...] = (), focus: tuple[str, ...] = ()):
        self.root = Path(root)
        self.exclude = DEFAULT_EXCLUDES + tuple(exclude)
        self.focus = tuple(focus)
        self.vendored: dict[str, str] = {}
        # Non-Python files a transform rewrote (a YAML config, say), by path: committed with the Python edits.
        self.edits: dict[str, str] = {}

    def python_files(self) -> list[str]:
        """Tracked (or, outside git, present) Python files, minus excluded and vendored ones."""
        return self.files("*.py")

    def files(self, *patterns: str) -> list[str]:
        """Tracked (or, outside git, present) files matching the glob ``patterns``, minus excluded ones.

        ``focus`` narrows Python files only: a config file is reached through the focused code that reads it.
        """
        try:
            listed = subprocess.run(
                ["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns],
                cwd=self.root,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
        except (subprocess.CalledProcessError, FileNotFoundError):
            listed = [
                p.relative_to(self.root).as_posix() for pattern in patterns for p in self.root.rglob(pattern)
            ]
        scope = self if all(p.endswith(".py") for p in patterns) else RepoContext(self.root, self.exclude)
        return sorted(p for p in set(listed) if scope.in_scope(p))

    def in_scope(self, path: str) -> bool:
        """Not excluded, not vendored, not hidden; and one of the ``focus`` files when a plan names them."""
        if self.focus and not any(path == f or path.endswith("/" + f) for f in self.focus):
            return False
        name = Path(path).name
        if name.startswith(VENDORED_PREFIX):
            return False
        if any(part.startswith(".") for part in Path(path).parts):
            return False
        return not any(fnmatch.fnmatch(path, pattern) for pattern in self.exclude)

    def read(self, path: str) -> str:
        """A file's text, as a transform left it earlier in this run when it edited it."""
        if path in self.edits:
            return self.edits[path]
        return (self.root / path).read_text(encoding="utf-8")

    def edit(self, path: str, text: str) -> None:
        """Record new contents for a non-Python file (Python files are edited through ``transform_source``)."""
        self.edits[path] = text

    def vendor(self, runtime_module: str, next_to: str) -> str:
        """Copy ``optimizations/runtime/<runtime_module>.py`` beside ``next_to``; return the import target.

        The result is what the edited file imports from: ``._perfbot_x`` inside a package, ``_perfbot_x`` for
        a script directory.
        """
        directory = Path(next_to).parent
        target = (directory / f"{VENDORED_PREFIX}{runtime_module}.py").as_posix()
        self.vendored[target] = runtime_source(runtime_module)
        in_package = (self.root / directory / "__init__.py").exists()
        return f".{VENDORED_PREFIX}{runtime_module}" if in_package else f"{VENDORED_PREFIX}{runtime_module}"


def runtime_source(module: str) -> str:
    """The source of a runtime helper shipped in ``optimizations/runtime``."""
    return resources.files("optimizations.runtime").joinpath(f"{module}.py").read_text(encoding="utf-8")


class Optimization:
    """One registered optimization: what it is (the class attributes) and the codemods that carry it out.

    ``codemods`` are :class:`optimizations.codemod.OptimizationCodemod` subclasses, constructed as
    ``codemod(context, optimization, repo)``. :meth:`transform_source` runs them over one file in order, each
    over the previous one's output; the ones after the first are follow-ups that run only where an earlier
    one changed something. An optimization that is not a codemod overrides :meth:`transform_source` instead.
    """

    id: ClassVar[str]
    title: ClassVar[str]
    tier: ClassVar[int]
    expected: ClassVar[str]
    summary: ClassVar[str]
    scope: ClassVar[str] = "train"
    # Lower-cased phrases that identify this optimization in a plan row's text.
    keywords: ClassVar[tuple[str, ...]] = ()
    examples: ClassVar[tuple[Example, ...]] = ()
    codemods: ClassVar[tuple[type[OptimizationCodemod], ...]] = ()

    def transform_source(self, source: str, path: str, ctx: RepoContext) -> FileResult:
        """Rewrite one file; report every site looked at. Must be idempotent."""
        result = FileResult(source)
        for position, codemod in enumerate(self.codemods):
            if position and not any(site.applicable for site in result.sites):
                break
            command = codemod(CodemodContext(filename=path), self, ctx)
            edited = command.transform_module(parse_module(result.source, path))
            result = FileResult(edited.code, result.sites + command.sites)
        return result

    def _run(
        self, root: Path, exclude: tuple[str, ...] = (), focus: tuple[str, ...] = ()
    ) -> tuple[dict[str, str], list[Site]]:
        ctx = RepoContext(root, exclude, focus)
        files: dict[str, str] = {}
        sites: list[Site] = []
        for path in ctx.python_files():
            source = ctx.read(path)
            result = self.transform_source(source, path, ctx)
            sites.extend(result.sites)
            if result.source != source:
                check_compiles(result.source, path)
                files[path] = result.source
        for path, text in ctx.edits.items():
            if text != (root / path).read_text(encoding="utf-8"):
                files[path] = text
        if files:
            for target, text in ctx.vendored.items():
                if not (root / target).exists() or (root / target).read_text(encoding="utf-8") != text:
                    files[target] = text
        return files, sites

    def find(self, root: Path, exclude: tuple[str, ...] = (), focus: tuple[str, ...] = ()) -> list[Site]:
        """Every site this optimization would change or refuses, without touching the repository.

        ``focus``: only these files (paths or path suffixes, as a plan's File:Line hints give them).
        """
        return self._run(Path(root), exclude, focus)[1]

    def apply(self, root: Path, exclude: tuple[str, ...] = (), focus: tuple[str, ...] = ()) -> Change | None:
        """Write the edited files into the repository; ``None`` when there is nothing to change."""
        files, sites = self._run(Path(root), exclude, focus)
        if not files:
            return None
        for path, text in files.items():
            (Path(root) / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(root) / path).write_text(text, encoding="utf-8")
        return Change(self.id, files, sites)

    def matches(self, text: str) -> bool:
        """True when a plan row's text names this optimization."""
        lowered = text.lower()
        return f"opt:{self.id}" in lowered or any(k in lowered for k in self.keywords)


def check_compiles(source: str, path: str) -> None:
    """Raise :class:`TransformError` when the edited source would not compile."""
    try:
        compile(source, path, "exec")
    except SyntaxError as exc:
        raise TransformError(f"{path}:{exc.lineno}: the edited file does not compile: {exc.msg}") from exc


def parse_module(source: str, path: str) -> cst.Module:
    """Parse with libcst; a file that does not parse raises :class:`TransformError` naming the file and line."""
    advice = "fix the syntax error or exclude the file with [tool.bot] exclude"
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise TransformError(f"{path}:{exc.lineno}: cannot parse this file ({exc.msg}); {advice}") from exc
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise TransformError(
            f"{path}:{exc.raw_line}: cannot parse this file ({exc.message}); {advice}"
        ) from exc


class RegistryError(Exception):
    """The registered optimizations cannot be listed: none found, two with one id, or one that is malformed."""


REQUIRED = ("id", "title", "tier", "expected", "summary")


def _where(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _defined_in(module: ModuleType) -> list[type[Optimization]]:
    """The optimizations a module defines (not the ones it imports): ``Optimization`` subclasses with an ``id``."""
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, Optimization)
        and value.__module__ == module.__name__
        and getattr(value, "id", None)
    ]


def _package_optimizations(package: str) -> Iterator[type[Optimization]]:
    """The optimizations defined in the modules of ``package`` (sub-packages, such as ``runtime``, skipped)."""
    root = importlib.import_module(package)
    for info in pkgutil.iter_modules(root.__path__, prefix=f"{package}."):
        if info.ispkg:
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception as exc:
            raise RegistryError(
                f"{info.name} does not import ({exc!r}); fix it to list the optimizations"
            ) from exc
        yield from _defined_in(module)


def _plugin_optimizations(group: str) -> Iterator[type[Optimization]]:
    """The optimizations third-party packages register under the entry-point ``group``."""
    for entry in metadata.entry_points(group=group):
        try:
            cls = entry.load()
        except Exception as exc:
            raise RegistryError(
                f"the {group} entry point {entry.name} = {entry.value} does not load ({exc!r}); "
                f"fix or uninstall the package that declares it"
            ) from exc
        if not (isinstance(cls, type) and issubclass(cls, Optimization)):
            raise RegistryError(
                f"the {group} entry point {entry.name} = {entry.value} is not an Optimization subclass"
            )
        yield cls


def _checked(cls: type[Optimization]) -> type[Optimization]:
    missing = [name for name in REQUIRED if not hasattr(cls, name)]
    if missing:
        raise RegistryError(f"{_where(cls)} does not set {', '.join(missing)}")
    if not cls.codemods and cls.transform_source is Optimization.transform_source:
        raise RegistryError(
            f"{_where(cls)} has nothing to run: set `codemods = (...)` or override transform_source"
        )
    return cls


def discover(package: str = __package__, group: str = ENTRY_POINT_GROUP) -> dict[str, Optimization]:
    """Every optimization defined in a module of ``package``, and every one registered under the entry-point
    ``group``, by id, in tier then id order.

    A new module in the package is found without reinstalling, and from a source checkout on ``PYTHONPATH``;
    entry points are for optimizations shipped in other packages.
    """
    found: dict[str, type[Optimization]] = {}
    for cls in chain(_package_optimizations(package), _plugin_optimizations(group)):
        known = found.setdefault(cls.id, _checked(cls))
        if known is not cls:
            raise RegistryError(
                f"two optimizations register the id {cls.id!r}: {_where(known)} and {_where(cls)}; rename one"
            )
    if not found:
        raise RegistryError(
            f"no optimizations found in the {package} package or under the {group} entry points: run from a "
            f"perfbot checkout (its root on PYTHONPATH) or `pip install perfbot`"
        )
    return {cls.id: cls() for cls in sorted(found.values(), key=lambda cls: (cls.tier, cls.id))}


@cache
def registry() -> dict[str, Optimization]:
    """All registered optimizations, by id: the built-in ones and the third-party plugins (:func:`discover`)."""
    return discover()


def get(optimization_id: str) -> Optimization:
    """The registered optimization with this id; ``KeyError`` lists the known ids."""
    known = registry()
    if optimization_id not in known:
        raise KeyError(f"no optimization {optimization_id!r}; registered: {', '.join(known)}")
    return known[optimization_id]
