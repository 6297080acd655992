"""The repository a transform runs over, and what transforms report about it.

:class:`RepoContext` knows which files are in scope and shares their parses (:class:`SourceCache`, one
:class:`ParsedFile` per file text, its libcst metadata resolved once for every optimization that reads it);
:class:`Site` is one place an optimization looked at (changed, refused, already done, kept on purpose, or
proposed to a person), :class:`FileResult` and :class:`Change` what it did to a file and to the repository.
"""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

if TYPE_CHECKING:
    import libcst as cst

    from optimizations.program.tree import Walk

T = TypeVar("T")
N = TypeVar("N", bound="cst.CSTNode")
M = TypeVar("M", bound="cst.CSTNode")

VENDORED_PREFIX = "_perfbot_"
DOCS = "docs/*"
DEFAULT_EXCLUDES = ("tests/*", "test_*.py", "*/tests/*", "*/test_*.py", DOCS, "examples/*/.venv/*")


class TransformError(Exception):
    """A transform could not run on a file (it does not parse, or the edit would not compile)."""


@dataclass(frozen=True)
class Site:
    """One place in a repository an optimization looked at: changed, refused with a reason, already done, kept
    as the program chose it on purpose, or proposed to a person (a restructuring, never committed)."""

    path: str
    line: int
    optimization: str
    message: str
    applicable: bool = True
    reason: str = ""
    already: bool = False  # the program already does it here: ``message`` says what, nothing to change
    # The program chose otherwise on purpose here: ``reason`` cites the evidence (a comment, a custom mask).
    kept: bool = False
    # The change needs restructuring (a monkeypatch of library internals, a precompute pass the loop lacks):
    # written into the plan for a person, never committed; ``reason`` says why.
    proposal: bool = False

    def __post_init__(self) -> None:
        if sum((self.applicable, self.already, self.kept, self.proposal)) > 1:
            raise ValueError(f"{self.where}: a site is one of changed, already, kept or proposed")

    @property
    def where(self) -> str:
        """``path:line``."""
        return f"{self.path}:{self.line}"

    @property
    def refused(self) -> bool:
        """Left alone for a reason a human must act on (not a change, not done, not kept, not a proposal)."""
        return not (self.applicable or self.already or self.kept or self.proposal)

    @property
    def kind(self) -> str:
        """``change``, ``already``, ``kept``, ``proposal`` or ``refused``."""
        kinds = (
            ("change", self.applicable),
            ("already", self.already),
            ("kept", self.kept),
            ("proposal", self.proposal),
        )
        return next((name for name, holds in kinds if holds), "refused")

    @property
    def kept_note(self) -> str:
        """``kept: chosen on purpose (path:line)``, as the plan, the terminal and the progress comment say it."""
        return f"kept: chosen on purpose ({self.where})"

    def describe(self) -> str:
        """``path:line  message`` plus the refusal reason, or that it is already done, kept or proposed, for
        terminal output."""
        text = f"{self.where}  {self.message}"
        if self.already:
            return f"{text}  [already]"
        if self.kept:
            return f"{text}  [{self.kept_note}: {self.reason}]"
        if self.proposal:
            return f"{text}  [proposal for a person: {self.reason}]"
        return text if self.applicable else f"{text}  [refused: {self.reason}]"


@dataclass
class FileResult:
    """What a transform did to one file: the new source and every site it looked at."""

    source: str
    sites: list[Site] = field(default_factory=list)


class SiteKinds:
    """An optimization's ``sites`` by kind: to change, refused, already done, kept, proposed."""

    sites: list[Site]

    @property
    def applied(self) -> list[Site]:
        return [s for s in self.sites if s.applicable]

    @property
    def refused(self) -> list[Site]:
        return [s for s in self.sites if s.refused]

    @property
    def already(self) -> list[Site]:
        """Where the program already does what the optimization would change."""
        return [s for s in self.sites if s.already]

    @property
    def kept(self) -> list[Site]:
        """Where the program chose otherwise on purpose: not overridden."""
        return [s for s in self.sites if s.kept]

    @property
    def proposals(self) -> list[Site]:
        """Restructurings written into the plan for a person, never committed."""
        return [s for s in self.sites if s.proposal]


@dataclass
class Change(SiteKinds):
    """An applied optimization: new file contents keyed by repository-relative path, and the sites."""

    optimization: str
    files: dict[str, str]
    sites: list[Site]

    def write(self, root: Path) -> None:
        """Write the edited files into the repository at ``root``."""
        for path, text in self.files.items():
            (Path(root) / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(root) / path).write_text(text, encoding="utf-8")


class ParsedFile:
    """One version of a file, parsed once, with a metadata wrapper that keeps every provider it resolves."""

    def __init__(self, path: str, source: str, cache: SourceCache | None = None):
        import libcst as cst

        self.path = path
        self.source = source
        self._cache = cache
        self.module = parse_module(source, path)
        # A fresh parse shares no nodes, so the wrapper need not copy it: metadata is keyed by these nodes.
        self.wrapper = cst.MetadataWrapper(self.module, unsafe_skip_copy=True)
        self._walked: Walk | None = None
        self._derived: dict[Callable[[ParsedFile], object], object] = {}

    def derived(self, analysis: Callable[[ParsedFile], T]) -> T:
        """``analysis(self)``, computed once per parse (the module's names, say) for every codemod that asks."""
        if analysis not in self._derived:
            self._derived[analysis] = analysis(self)
        return cast(T, self._derived[analysis])

    def syntax(self) -> ast.Module | None:
        """The file as Python's own parser reads it (None where it does not), shared with the run's other
        readers of the same text."""
        return (self._cache or SourceCache()).syntax(self.path, self.source)

    @overload
    def nodes(self, node_type: type[N], /) -> list[N]: ...
    @overload
    def nodes(self, first: type[N], second: type[M], /) -> list[N | M]: ...
    @overload
    def nodes(self, *types: type[cst.CSTNode]) -> list[cst.CSTNode]: ...
    def nodes(self, *types: type[Any]) -> list[Any]:
        """The module's nodes of these types in source order, as ``m.findall(module, ...)`` lists them; the
        module is walked once for every codemod that asks."""
        walk = self.walk()
        return [walk.nodes[i] for i in walk.positions(*types)]

    def parents(self) -> dict[cst.CSTNode, cst.CSTNode]:
        """Each node's parent, as libcst's ``ParentNodeProvider`` gives it, from the same one walk."""
        return self.walk().parents

    def walk(self) -> Walk:
        """The module's nodes in source order, walked once: where each subtree ends, the nodes of each type."""
        from optimizations.program.tree import Walk

        if self._walked is None:
            self._walked = Walk(self.module)
        return self._walked


class SourceCache:
    """The files one run has parsed, by path and text: every optimization that reads a text shares its parse
    and metadata, and a file an earlier optimization edited is parsed again in its new text. The two texts of
    each path used last are kept (the file, and a first codemod's edit that a follow-up codemod reads)."""

    KEEP = 2

    def __init__(self) -> None:
        self._parsed: dict[str, list[ParsedFile]] = {}
        self._syntax: dict[str, tuple[str, ast.Module | None]] = {}
        # The repository's file listings by root and glob patterns: listed once per run, not per optimization.
        self.listings: dict[tuple[Path, tuple[str, ...]], list[str]] = {}
        # Facts about the whole repository computed once per run (its launch commands, say), by root and name.
        self.facts: dict[tuple[Path, str], Any] = {}

    def parse(self, path: str, source: str) -> ParsedFile:
        """``source``, the text of ``path``, parsed; :class:`TransformError` when it does not parse."""
        versions = self._parsed.setdefault(path, [])
        found = next((parsed for parsed in versions if parsed.source == source), None)
        if found is None:
            found = ParsedFile(path, source, self)
        else:
            versions.remove(found)
        versions[:] = [*versions[1 - self.KEEP :], found]
        return found

    def syntax(self, path: str, source: str) -> ast.Module | None:
        """``source``, the text of ``path``, as Python's own parser reads it (None where it does not); the
        last text of each path is kept."""
        kept = self._syntax.get(path)
        if kept is None or kept[0] != source:
            try:
                tree = ast.parse(source, path)
            except (SyntaxError, ValueError):
                tree = None
            kept = self._syntax[path] = (source, tree)
        return kept[1]


class RepoContext:
    """The repository a transform runs over: which files are in scope, their parses (``sources``, shared with
    the rest of the run when given), and what the run wrote: edited non-Python files and vendored helpers."""

    def __init__(
        self,
        root: Path,
        exclude: tuple[str, ...] = (),
        focus: tuple[str, ...] = (),
        sources: SourceCache | None = None,
    ):
        self.root = Path(root)
        self.exclude = DEFAULT_EXCLUDES + tuple(exclude)
        self.focus = tuple(focus)
        self.sources = SourceCache() if sources is None else sources
        self.vendored: dict[str, str] = {}
        # Non-Python files a transform rewrote (a YAML config, say), by path: committed with the Python edits.
        self.edits: dict[str, str] = {}

    def whole(self) -> RepoContext:
        """The same repository with no focus, sharing this run's parses: the program and how it is run are read
        over every file in scope, whatever files a plan focuses on."""
        if not self.focus:
            return self
        return RepoContext(self.root, self.exclude[len(DEFAULT_EXCLUDES) :], (), self.sources)

    def python_files(self) -> list[str]:
        """Tracked (or, outside git, present) Python files, minus excluded and vendored ones."""
        return self.files("*.py")

    def files(self, *patterns: str) -> list[str]:
        """Tracked (or, outside git, present) files matching the glob ``patterns``, minus excluded ones.

        ``focus`` narrows Python files only: a config file is reached through the focused code that reads it.
        The repository is listed once per run (``sources`` keeps the listing): transforms add no files but
        vendored ones, which are out of scope.
        """
        scope = self if all(p.endswith(".py") for p in patterns) else RepoContext(self.root, self.exclude)
        return [p for p in self._listing(patterns) if scope.in_scope(p)]

    def documents(self, *patterns: str) -> list[str]:
        """Like :meth:`files`, ``docs/`` included: documents are read for the commands they show, never edited,
        and ``docs/*`` is excluded by default only as code (its examples)."""
        scope = RepoContext(self.root, self.exclude)
        scope.exclude = tuple(pattern for pattern in scope.exclude if pattern != DOCS)
        return [p for p in self._listing(patterns) if scope.in_scope(p)]

    def listed(self, *patterns: str) -> list[str]:
        """Every file matching ``patterns`` as the tree holds it now, in scope or not: unlike :meth:`files`,
        listed afresh (a helper an earlier commit of the run vendored is there)."""
        return self._list(patterns)

    def _listing(self, patterns: tuple[str, ...]) -> list[str]:
        """:meth:`_list`, once per run (``sources`` keeps it)."""
        key = (self.root, patterns)
        if key not in self.sources.listings:
            self.sources.listings[key] = self._list(patterns)
        return self.sources.listings[key]

    def _list(self, patterns: tuple[str, ...]) -> list[str]:
        """Tracked and untracked-but-not-ignored files matching ``patterns`` (outside git: present ones)."""
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
        return sorted(set(listed))

    def in_scope(self, path: str) -> bool:
        """Not excluded, not vendored, not hidden; and one of the ``focus`` files when a plan names them."""
        if self.focus and not any(same_file(path, f) for f in self.focus):
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

    def text(self, path: str) -> str:
        """:meth:`read`, or an empty text where the file cannot be read (missing, a folder, not UTF-8)."""
        try:
            return self.read(path)
        except (OSError, UnicodeDecodeError):
            return ""

    def edit(self, path: str, text: str) -> None:
        """Record new contents for a non-Python file (Python files are edited through ``transform_source``)."""
        self.edits[path] = text


# Where the modules a repository's code imports live, besides the importing file's own folder (a script's).
SOURCE_ROOTS = ("", "src")


def import_roots(importer: str) -> tuple[str, ...]:
    """The folders an absolute import in the file ``importer`` is looked up in: the file's own folder, the
    repository root, ``src/``."""
    return tuple(dict.fromkeys((posixpath.dirname(importer), *SOURCE_ROOTS)))


def module_paths(dotted: str, roots: Iterable[str]) -> list[str]:
    """The repository paths that may define the module ``dotted`` under each of ``roots``, in the order Python
    looks: the package's ``__init__.py``, then ``<module>.py`` (``dotted`` empty: the root's own package)."""
    relative = dotted.replace(".", "/")
    candidates = (f"{relative}/__init__.py", f"{relative}.py") if relative else ("__init__.py",)
    return [posixpath.normpath(posixpath.join(root, candidate)) for root in roots for candidate in candidates]


def same_file(path: str, hint: str) -> bool:
    """``path`` (repository-relative) is the file a plan's hint names: the same path, or one of the two ends
    the other (``trainer.py`` for ``src/pkg/train/trainer.py``; ``trl/scripts/sft.py`` for a repository
    rooted at ``trl/``)."""
    ours, theirs = Path(path).parts, Path(hint).parts
    shorter = min(len(ours), len(theirs))
    return shorter > 0 and ours[-shorter:] == theirs[-shorter:]


def check_compiles(source: str, path: str) -> None:
    """Raise :class:`TransformError` when the edited source would not compile."""
    try:
        compile(source, path, "exec")
    except SyntaxError as exc:
        raise TransformError(f"{path}:{exc.lineno}: the edited file does not compile: {exc.msg}") from exc


def parse_module(source: str, path: str) -> cst.Module:
    """Parse with libcst; a file that does not parse raises :class:`TransformError` naming the file and line,
    with Python's own message where Python rejects it too (compiled only then: a parse is check enough, and an
    edit is compiled before it is written)."""
    import libcst as cst

    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        check_parses(source, path)
        raise TransformError(
            f"{path}:{exc.raw_line}: cannot parse this file ({exc.message}); {PARSE_ADVICE}"
        ) from exc


PARSE_ADVICE = "fix the syntax error or exclude the file with [tool.bot] exclude"


def check_parses(source: str, path: str) -> None:
    """Raise :class:`TransformError` naming the line when ``source`` is not valid Python (compiled, not
    parsed: the check a file no transform reads gets)."""
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise TransformError(
            f"{path}:{exc.lineno}: cannot parse this file ({exc.msg}); {PARSE_ADVICE}"
        ) from exc
