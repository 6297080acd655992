"""The optimization registry, and the objects optimizations and the bot exchange.

Shaped like a lint-rule registry (Fixit's ``LintRule``): an optimization is one :class:`Optimization` subclass
in its own module, carrying an ``id``, a default tier, the win it is expected to bring, the phrases that name
it in a plan, the before/after ``examples`` the test-suite runs, and the libcst ``codemods`` that carry it out.
The base class turns the codemods into ``transform_source`` (one file), ``find`` (what would change, where),
``dry_run`` (that and the edited files) and ``apply`` (the edited files written, ready to commit).

Built-in optimizations are found by importing every module of this package; third-party packages register
theirs under the entry-point group ``bot.optimizations``. :func:`listings` reads what ``bot list`` shows from
the modules' source instead, so listing them loads no libcst (this module imports it only where it parses).

One run (a scan, an apply) shares a :class:`SourceCache`: each file text is parsed, and its libcst metadata
resolved, once for every optimization that reads it; an optimization's ``needs`` skip files it cannot change.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import pkgutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from itertools import chain
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import libcst as cst

    from optimizations.codemod import OptimizationCodemod

ENTRY_POINT_GROUP = "bot.optimizations"
VENDORED_PREFIX = "_perfbot_"
DEFAULT_EXCLUDES = ("tests/*", "test_*.py", "*/tests/*", "*/test_*.py", "docs/*", "examples/*/.venv/*")

# A progress callback: ``on_step(done, total, label)`` after each step, ``label`` naming the step just done.
OnStep = Callable[[int, int, str], None]


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

    def write(self, root: Path) -> None:
        """Write the edited files into the repository at ``root``."""
        for path, text in self.files.items():
            (Path(root) / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(root) / path).write_text(text, encoding="utf-8")


class ParsedFile:
    """One version of a file, parsed once, with a metadata wrapper that keeps every provider it resolves."""

    def __init__(self, path: str, source: str):
        import libcst as cst

        self.path = path
        self.source = source
        self.module = parse_module(source, path)
        # A fresh parse shares no nodes, so the wrapper need not copy it: metadata is keyed by these nodes.
        self.wrapper = cst.MetadataWrapper(self.module, unsafe_skip_copy=True)
        self._walked: list[cst.CSTNode] | None = None

    def nodes(self, *types: type[cst.CSTNode]) -> list[cst.CSTNode]:
        """The module's nodes of these types in source order, as ``m.findall(module, ...)`` lists them; the
        module is walked once for every codemod that asks."""
        if self._walked is None:
            self._walked, stack = [], [self.module]
            while stack:
                node = stack.pop()
                self._walked.append(node)
                stack.extend(reversed(node.children))
        return [node for node in self._walked if isinstance(node, types)]


class SourceCache:
    """The files one run has parsed, by path and text: every optimization that reads a text shares its parse
    and metadata, and a file an earlier optimization edited is parsed again in its new text. The two texts of
    each path used last are kept (the file, and a first codemod's edit that a follow-up codemod reads)."""

    KEEP = 2

    def __init__(self) -> None:
        self._parsed: dict[str, list[ParsedFile]] = {}

    def parse(self, path: str, source: str) -> ParsedFile:
        """``source``, the text of ``path``, parsed; :class:`TransformError` when it does not parse."""
        versions = self._parsed.setdefault(path, [])
        found = next((parsed for parsed in versions if parsed.source == source), None)
        if found is None:
            found = ParsedFile(path, source)
        else:
            versions.remove(found)
        versions[:] = [*versions[1 - self.KEEP :], found]
        return found


class RepoContext:
    """The repository a transform runs over: which files are in scope, their parses (``sources``, shared with
    the rest of the run when given), and vendoring of runtime modules."""

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
    ``needs`` are words a file must contain for the codemods to find anything in it (a class or method name
    they match): other files are skipped unparsed.
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
    needs: ClassVar[tuple[str, ...]] = ()

    def might_apply(self, source: str) -> bool:
        """False when a file with this text cannot have a site: it mentions none of ``needs``."""
        return not self.needs or any(word in source for word in self.needs)

    def transform_source(
        self, source: str, path: str, ctx: RepoContext, *, sites_only: bool = False
    ) -> FileResult:
        """Rewrite one file; report every site looked at. Must be idempotent. ``sites_only``: only the sites
        are wanted (a scan), so the last codemod's tree is not turned back into code (the result's ``source``
        is then the text before that codemod)."""
        from libcst.codemod import CodemodContext  # imported here: listing optimizations loads no libcst

        result = FileResult(source)
        for position, codemod in enumerate(self.codemods):
            if position and not any(site.applicable for site in result.sites):
                break
            last = position == len(self.codemods) - 1
            command = codemod(CodemodContext(filename=path), self, ctx)
            edited = command.transform_parsed(
                ctx.sources.parse(path, result.source), sites_only=sites_only and last
            )
            code = result.source if sites_only and last else edited.code
            result = FileResult(code, result.sites + command.sites)
        return result

    def dry_run(
        self,
        root: Path,
        exclude: tuple[str, ...] = (),
        focus: tuple[str, ...] = (),
        *,
        sources: SourceCache | None = None,
        on_step: OnStep | None = None,
        sites_only: bool = False,
    ) -> Change:
        """The edits and every site changed or refused, nothing written: ``files`` is empty when nothing would
        change, and ``refused`` says why. ``focus``: only these files (paths or path suffixes, as a plan's
        File:Line hints give them); ``sources``: the run's parses; ``on_step``: called once per file;
        ``sites_only``: the sites alone (``files`` is then incomplete and unchecked), skipping the work of
        finishing the edits."""
        root = Path(root)
        ctx = RepoContext(root, exclude, focus, sources)
        files: dict[str, str] = {}
        sites: list[Site] = []
        paths = ctx.python_files()
        for done, path in enumerate(paths, start=1):
            source = ctx.read(path)
            if self.might_apply(source):
                result = self.transform_source(source, path, ctx, sites_only=sites_only)
                sites.extend(result.sites)
                if result.source != source and not sites_only:
                    check_compiles(result.source, path)
                    files[path] = result.source
            if on_step is not None:
                on_step(done, len(paths), path)
        for path, text in ctx.edits.items():
            if text != (root / path).read_text(encoding="utf-8"):
                files[path] = text
        if files:
            for target, text in ctx.vendored.items():
                if not (root / target).exists() or (root / target).read_text(encoding="utf-8") != text:
                    files[target] = text
        return Change(self.id, files, sites)

    def find(
        self,
        root: Path,
        exclude: tuple[str, ...] = (),
        focus: tuple[str, ...] = (),
        *,
        sources: SourceCache | None = None,
    ) -> list[Site]:
        """Every site this optimization would change or refuses, without touching the repository."""
        return self.dry_run(root, exclude, focus, sources=sources, sites_only=True).sites

    def apply(
        self,
        root: Path,
        exclude: tuple[str, ...] = (),
        focus: tuple[str, ...] = (),
        *,
        sources: SourceCache | None = None,
    ) -> Change | None:
        """Write the edited files into the repository; ``None`` when there is nothing to change."""
        change = self.dry_run(root, exclude, focus, sources=sources)
        if not change.files:
            return None
        change.write(root)
        return change

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
    import libcst as cst

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


def _modules(package: str) -> Iterator[pkgutil.ModuleInfo]:
    """The modules of ``package`` (sub-packages, such as ``runtime``, skipped)."""
    root = importlib.import_module(package)
    for info in pkgutil.iter_modules(root.__path__, prefix=f"{package}."):
        if not info.ispkg:
            yield info


def _module_optimizations(name: str) -> list[type[Optimization]]:
    """The optimizations module ``name`` defines, imported."""
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        raise RegistryError(f"{name} does not import ({exc!r}); fix it to list the optimizations") from exc
    return _defined_in(module)


def _package_optimizations(package: str) -> Iterator[type[Optimization]]:
    """The optimizations defined in the modules of ``package``."""
    for info in _modules(package):
        yield from _module_optimizations(info.name)


def _plugin_optimizations(group: str) -> Iterator[type[Optimization]]:
    """The optimizations third-party packages register under the entry-point ``group``."""
    from importlib import metadata  # here: `bot --help` imports this module and needs no entry points

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


def _registered(entries: Iterator[tuple[str, str, object]], package: str, group: str) -> dict[str, object]:
    """``(id, where, value)`` entries by id: two places registering one id, or none at all, is an error."""
    found: dict[str, tuple[str, object]] = {}
    for key, where, value in entries:
        known, _ = found.setdefault(key, (where, value))
        if known != where:
            raise RegistryError(f"two optimizations register the id {key!r}: {known} and {where}; rename one")
    if not found:
        raise RegistryError(
            f"no optimizations found in the {package} package or under the {group} entry points: run from a "
            f"perfbot checkout (its root on PYTHONPATH) or `pip install perfbot`"
        )
    return {key: value for key, (_, value) in found.items()}


def discover(package: str = __package__, group: str = ENTRY_POINT_GROUP) -> dict[str, Optimization]:
    """Every optimization defined in a module of ``package``, and every one registered under the entry-point
    ``group``, by id, in tier then id order.

    A new module in the package is found without reinstalling, and from a source checkout on ``PYTHONPATH``;
    entry points are for optimizations shipped in other packages.
    """
    classes = chain(_package_optimizations(package), _plugin_optimizations(group))
    found = _registered(((cls.id, _where(cls), _checked(cls)) for cls in classes), package, group)
    return {cls.id: cls() for cls in sorted(found.values(), key=lambda cls: (cls.tier, cls.id))}


@dataclass(frozen=True)
class Listing:
    """What ``bot list`` shows of a registered optimization."""

    id: str
    title: str
    tier: int
    expected: str
    summary: str

    @classmethod
    def of(cls, optimization: type[Optimization]) -> Listing:
        """The listing of an optimization class."""
        return cls(*(getattr(optimization, name) for name in REQUIRED))


def _literal_listings(info: pkgutil.ModuleInfo) -> list[tuple[Listing, str]] | None:
    """The optimizations a module defines, read from its source: classes that assign ``id`` and the other
    listed attributes as literals. ``None`` when the module must be imported to know (no source, a computed
    value)."""
    path = Path(getattr(info.module_finder, "path", "")) / f"{info.name.rpartition('.')[2]}.py"
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError):
        return None
    found = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        values = {
            target.id: statement.value
            for statement in node.body
            if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None
            for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target])
            if isinstance(target, ast.Name) and target.id in REQUIRED
        }
        if "id" not in values:
            continue
        try:
            listing = Listing(*(ast.literal_eval(values[name]) for name in REQUIRED))
        except (KeyError, ValueError, TypeError, SyntaxError):
            return None
        found.append((listing, f"{info.name}:{node.name}"))
    return found


def _package_listings(package: str) -> Iterator[tuple[Listing, str]]:
    for info in _modules(package):
        found = _literal_listings(info)
        if found is None:
            found = [(Listing.of(cls), _where(cls)) for cls in _module_optimizations(info.name)]
        yield from found


def listings(package: str = __package__, group: str = ENTRY_POINT_GROUP) -> list[Listing]:
    """What :func:`discover` registers, as listings in tier then id order, read from the package's source
    where the attributes are literals: no codemod (and no libcst) is imported. Plugins are loaded."""
    plugins = ((Listing.of(_checked(cls)), _where(cls)) for cls in _plugin_optimizations(group))
    entries = chain(_package_listings(package), plugins)
    found = _registered(((listing.id, where, listing) for listing, where in entries), package, group)
    return sorted(found.values(), key=lambda listing: (listing.tier, listing.id))


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
