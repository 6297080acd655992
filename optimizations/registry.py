"""The optimization registry.

Modelled on lint-rule registries (ruff, flake8 plugins): every optimization is one small class with an ``id``,
a default tier, the win it is expected to bring, the phrases that identify it in a plan, and before/after
``examples`` that the test-suite runs. Optimizations are discovered through the entry-point group
``bot.optimizations``, so third parties can ship their own.

A subclass implements :meth:`Optimization.transform_source`, a libcst codemod over one file; the base class
turns it into ``find`` (what would change, where) and ``apply`` (the edited files, ready to commit).
"""

from __future__ import annotations

import fnmatch
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata, resources
from pathlib import Path
from typing import ClassVar

import libcst as cst

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


class Optimization(ABC):
    """Base class of a registered optimization. Subclasses set the class attributes and ``transform_source``."""

    id: ClassVar[str]
    title: ClassVar[str]
    tier: ClassVar[int]
    expected: ClassVar[str]
    summary: ClassVar[str]
    scope: ClassVar[str] = "train"
    # Lower-cased phrases that identify this optimization in a plan row's text.
    keywords: ClassVar[tuple[str, ...]] = ()
    examples: ClassVar[tuple[Example, ...]] = ()

    @abstractmethod
    def transform_source(self, source: str, path: str, ctx: RepoContext) -> FileResult:
        """Rewrite one file; report every site looked at. Must be idempotent."""

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


@cache
def registry() -> dict[str, Optimization]:
    """All registered optimizations, by id, discovered through the ``bot.optimizations`` entry points."""
    found: dict[str, Optimization] = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        cls = entry.load()
        if cls.id in found:
            raise RuntimeError(f"two optimizations register the id {cls.id!r}")
        found[cls.id] = cls()
    return dict(sorted(found.items(), key=lambda kv: (kv[1].tier, kv[0])))


def get(optimization_id: str) -> Optimization:
    """The registered optimization with this id; ``KeyError`` lists the known ids."""
    known = registry()
    if optimization_id not in known:
        raise KeyError(f"no optimization {optimization_id!r}; registered: {', '.join(known)}")
    return known[optimization_id]
