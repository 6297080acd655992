"""The optimization registry: what an optimization is, and how the registered ones are found.

Shaped like a lint-rule registry (Fixit's ``LintRule``): an optimization is one :class:`Optimization` subclass
in its own folder (``optimizations/<id>/rule.py``), carrying an ``id``, a default tier, the win it is expected
to bring, its numerics contract (:class:`Numerics`: exact, rounding or dynamics, and why), the phrases that name
it in a plan, the before/after ``examples`` the test-suite runs, and the libcst ``codemods`` that carry it out.
The base class turns the codemods into ``transform_source`` (one file), ``find`` (what would change, where),
``dry_run`` (that and the edited files) and ``apply`` (the edited files written, ready to commit).

Built-in optimizations are found by importing the ``rule`` module of every folder of this package that has one
(``optimizations/<id>/rule.py``); third-party packages register theirs under the entry-point group
``bot.optimizations``. :func:`listings` reads what ``bot list`` shows from the rules' source instead, so listing
them loads no libcst (this module imports it only where it parses).

What an optimization reads and reports about the target (files in scope, their shared parses, sites, changes)
is the program model's: :mod:`optimizations.program`. An optimization's ``needs`` skip files it cannot change.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from functools import cache, lru_cache
from itertools import chain
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from optimizations.program.collector import collector_paused
from optimizations.program.reachability import in_snapshot_folder, in_vendor_folder, program_of
from optimizations.program.repository import (
    Change,
    FileResult,
    RepoContext,
    Site,
    SourceCache,
    check_compiles,
)
from optimizations.program.shapes import ProgramShape

if TYPE_CHECKING:
    from optimizations.edits.codemod import OptimizationCodemod

V = TypeVar("V")
ENTRY_POINT_GROUP = "bot.optimizations"
# The first torch release with torch.compile: a requirement that keeps torch below it leaves nothing to compile.
TORCH_COMPILE_SINCE = "2.0"
# A progress callback: ``on_step(done, total, label)`` after each step, ``label`` naming the step just done.
OnStep = Callable[[int, int, str], None]


class Numerics(Enum):
    """An optimization's numerics contract: how far what the program trains may move once it is applied.

    ``EXACT``: the same results up to run-to-run nondeterminism; ``ROUNDING``: the same math at another
    precision or kernel order; ``DYNAMICS``: training itself changes (its steps, its batches, the precision
    its weights are kept in). Only ``EXACT`` is a pure speedup everywhere (see :mod:`bot.scan`).
    """

    EXACT = "exact"
    ROUNDING = "rounding"
    DYNAMICS = "dynamics"

    @property
    def meaning(self) -> str:
        """What the contract promises, in words."""
        return {
            Numerics.EXACT: "same results up to run-to-run nondeterminism",
            Numerics.ROUNDING: "same math at another precision or kernel order",
            Numerics.DYNAMICS: "changes what training does",
        }[self]

    def shown(self, reason: str = "") -> str:
        """How ``bot list`` and a drafted plan show it: ``exact``, else ``<contract>: <reason>`` (the contract's
        meaning standing in for a reason not given)."""
        return self.value if self is Numerics.EXACT else f"{self.value}: {reason or self.meaning}"


class Word(str):
    """A need matched as a whole identifier: ``Word("erf")`` is in ``torch.erf(x)``, not in ``perf`` or
    ``interface``. A plain string need matches anywhere (``"Trainer"`` is in ``SFTTrainer``)."""


class AllOf(tuple):
    """A need met when the file has every one of these words (each a :class:`Word` or a plain string):
    ``AllOf((Word("forward"), Word("sqrt")))`` is a module's ``forward`` that takes a root."""


IDENTIFIER = re.compile(r"\w+")


def _has(source: str, need: str | AllOf) -> bool:
    if isinstance(need, AllOf):
        return all(_has(source, word) for word in need)
    return need in identifiers(source) if isinstance(need, Word) else need in source


@lru_cache(maxsize=1024)
def identifiers(source: str) -> frozenset[str]:
    """The words (runs of letters, digits and underscores) of a file's text, read once per text."""
    return frozenset(IDENTIFIER.findall(source))


@dataclass(frozen=True)
class Example:
    """A before/after pair the test-suite runs: ``after=None`` means the transform must change nothing.

    ``refusal`` is a fragment of the reason the transform must report for a refused site; ``kept`` of the
    evidence of a site kept as chosen on purpose; ``proposal`` of why a proposed site is not committed (both
    change nothing). ``files`` are other files of the example repository (a config the transform reads, say).
    """

    name: str
    before: str
    after: str | None = None
    refusal: str | None = None
    path: str = "train.py"
    files: dict[str, str] = field(default_factory=dict)
    kept: str | None = None
    proposal: str | None = None


def _editable(ctx: RepoContext, path: str) -> bool:
    """Whether optimizations may change the file ``path``: not in a vendor or snapshot folder, unless the
    program reaches it (:meth:`Program.edits`; the program is read only where such a folder is)."""
    return not (in_vendor_folder(path) or in_snapshot_folder(path)) or program_of(ctx).edits(path)


class Optimization:
    """One registered optimization: what it is (the class attributes) and the codemods that carry it out.

    ``codemods`` are :class:`optimizations.edits.codemod.OptimizationCodemod` subclasses, constructed as
    ``codemod(context, optimization, repo)``. :meth:`transform_source` runs them over one file in order, each
    over the previous one's output; the ones after the first are follow-ups that run only where an earlier
    one changed something. ``proposers`` run over the file as it is, for proposals alone. An optimization that is not a codemod overrides :meth:`transform_source` instead.
    ``needs`` are words a file must contain one of for the codemods to find anything in it (a class or method
    name they match): other files are skipped unparsed. A :class:`Word` must be there as a whole identifier, a
    plain string anywhere in the text, and each word of an :class:`AllOf` together.
    """

    id: ClassVar[str]
    title: ClassVar[str]
    tier: ClassVar[int]
    expected: ClassVar[str]
    summary: ClassVar[str]
    scope: ClassVar[str] = "train"
    # Lower-cased phrases that identify this optimization in a plan row's text.
    keywords: ClassVar[tuple[str, ...]] = ()
    # Plain words for what it achieves, shared with the optimizations that achieve it another way ("fused
    # attention": fa2 for a Hugging Face model, sdpa for hand-written attention); the repository decides.
    capabilities: ClassVar[tuple[str, ...]] = ()
    examples: ClassVar[tuple[Example, ...]] = ()
    codemods: ClassVar[tuple[type[OptimizationCodemod], ...]] = ()
    # Codemods that find changes needing restructuring (a missing precompute pass): proposals, never edits.
    proposers: ClassVar[tuple[type[OptimizationCodemod], ...]] = ()
    needs: ClassVar[tuple[str | AllOf, ...]] = ()
    compiles_model: ClassVar[bool] = False  # refused where every run shards or quantizes the model
    # The run-configuration settings that say it is done, each with the test of its value (a name of
    # :data:`optimizations.program.runs.settings.DONE`), all of which a run must pass; the first is the one
    # cited. Where a run sets it so outside Python (a launch flag, a recipe, a launcher config), that line is a
    # site of "already done"; where every run of a file passes, the file's changes are done there.
    done_by_settings: ClassVar[tuple[tuple[str, str], ...]] = ()
    # Run settings a launch chooses that rule the optimization out for that run, ``(setting, test, why)``: each
    # line outside Python where a run sets one is a refused site (a launch that trains in fp16 on purpose), and
    # with ``chosen_in_code`` each literal in the code too, where no codemod of its own judges that setting.
    chosen_by_launches: ClassVar[tuple[tuple[str, str, str], ...]] = ()
    chosen_in_code: ClassVar[bool] = False
    # The numerics contract, and in one line what changes (required unless ``Numerics.EXACT``).
    numerics: ClassVar[Numerics]
    numerics_reason: ClassVar[str] = ""
    # The program shapes ``expected`` was measured on (benchmarks/RESULTS.md); empty: an estimate.
    measured_on: ClassVar[tuple[ProgramShape, ...]] = ()

    @classmethod
    def expected_for(cls, shapes: frozenset[ProgramShape]) -> str:
        """``expected`` as a claim for a repository of these shapes: as it stands where it was measured on one
        of them, else saying it was not measured for this shape (and where it was)."""
        if set(cls.measured_on) & shapes:
            return cls.expected
        where = f"measured on {' and '.join(s.value for s in cls.measured_on)}; " if cls.measured_on else ""
        return f"{cls.expected} ({where}not measured for this shape)"

    def subject(self, changed: list[Site]) -> str:
        """What a commit of these changed sites does, for its subject: the title, unless the optimization can
        say more exactly what its sites did."""
        return self.title

    def might_apply(self, source: str) -> bool:
        """False when a file with this text cannot have a site: it meets none of ``needs``."""
        return not self.needs or any(_has(source, need) for need in self.needs)

    def transform_source(
        self, source: str, path: str, ctx: RepoContext, *, sites_only: bool = False
    ) -> FileResult:
        """Rewrite one file; report every site looked at. Must be idempotent. Each codemod edits the text the
        one before it left, and runs only where that one found a site to change; every site is found in the
        file as it is, so its line is the file's own. ``sites_only``: only the sites are wanted (a scan), so
        no tree is turned back into code (the result's ``source`` is the text given)."""
        from libcst.codemod import CodemodContext  # imported here: listing optimizations loads no libcst

        from optimizations.edits.codemod import already_all, refuse_all

        written = dict(ctx.vendored), dict(ctx.edits)
        result = FileResult(source)
        for position, codemod in enumerate(self.codemods):
            if position and not any(site.applicable for site in result.sites):
                break
            finder = codemod(CodemodContext(filename=path), self, ctx)
            edited = finder.transform_parsed(
                ctx.sources.parse(path, source), sites_only=sites_only or position > 0
            )
            unplaceable = finder.unplaceable
            if position and not sites_only:  # the edit builds on the one before it
                editor = codemod(CodemodContext(filename=path), self, ctx)
                edited = editor.transform_parsed(ctx.sources.parse(path, result.source))
                unplaceable = unplaceable or editor.unplaceable
            if unplaceable:  # a helper no copy can serve: the file keeps its text, every change refused
                ctx.vendored, ctx.edits = written
                return FileResult(source, refuse_all(result.sites + finder.sites, unplaceable))
            result = FileResult(source if sites_only else edited.code, result.sites + finder.sites)
        changes = any(s.applicable for s in result.sites)
        # the runs as they were before this file's edits: a recipe switched on here does not make it done
        own_edits, ctx.edits = ctx.edits, dict(written[1])
        try:
            done = self.run_done(ctx, path) if changes else None
        finally:
            ctx.edits = own_edits
        refusal = self.run_refusal(ctx, path) if changes and done is None else None
        if done is not None:  # every run of this file does it already: its sites say where, no edit
            ctx.vendored, ctx.edits = written
            result = FileResult(source, already_all(result.sites, done))
        elif refusal is not None:  # the runs of this file rule the edit out: its sites stand, refused
            ctx.vendored, ctx.edits = written
            result = FileResult(source, refuse_all(result.sites, refusal))
        for proposer in self.proposers:
            finder = proposer(CodemodContext(filename=path), self, ctx)
            finder.transform_parsed(ctx.sources.parse(path, source), sites_only=True)
            result = FileResult(result.source, result.sites + finder.sites)
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
        from optimizations.program.runs.resolve import launched_first  # loads libcst: not for listing

        paths = launched_first(ctx, [path for path in ctx.python_files() if _editable(ctx, path)])
        with collector_paused():
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
        sites.extend(site for site in self.config_sites(ctx) if _editable(ctx, site.path))
        sites.extend(self._done_by_runs(ctx, sites))
        for path, text in ctx.edits.items():
            if _editable(ctx, path) and text != (root / path).read_text(encoding="utf-8"):
                files[path] = text
        if files:
            for target, text in ctx.vendored.items():
                if not (root / target).exists() or (root / target).read_text(encoding="utf-8") != text:
                    files[target] = text
        return Change(self.id, files, sites)

    def run_done(self, ctx: RepoContext, path: str) -> str | None:
        """What every run that loads ``path`` sets that does this optimization already (:attr:`done_by_settings`
        from a flag, a recipe, a config, another file's code or the library's default), with where; ``None``
        when some run does not, or no run is known."""
        if not self.done_by_settings:
            return None
        from optimizations.program.runs.every_run import done_in_every_run  # loads libcst: not for listing
        from optimizations.program.runs.settings import cite

        settings = done_in_every_run(ctx, path, self.done_by_settings)
        return (
            f"{settings[0].name} {settings[0].value} in every run that loads this file ({cite(settings)})"
            if settings
            else None
        )

    def run_refusal(self, ctx: RepoContext, path: str) -> str | None:
        """Why no run that loads ``path`` should get this optimization's edit there, naming the line of the run
        configuration it rests on: the library of a framework its commands drive by recipe, and for an
        optimization that compiles the model, a file every run shards (FSDP, ZeRO-3) or quantizes, or a torch
        the requirements keep below 2.0, which has no ``torch.compile``."""
        # imported here: listing optimizations loads no libcst, which the run configuration's readers use
        from optimizations.program.requirements import excludes
        from optimizations.program.runs.every_run import framework_library, sharded_in_every_run

        library = framework_library(ctx, path)
        if library or not self.compiles_model:
            return library
        if (pinned := excludes(ctx, "torch", TORCH_COMPILE_SINCE)) is not None:
            return f"{pinned} keeps torch below {TORCH_COMPILE_SINCE}, which has no torch.compile"
        return sharded_in_every_run(ctx, path)

    def _done_by_runs(self, ctx: RepoContext, sites: list[Site]) -> list[Site]:
        """The lines outside Python where a run of an entry point sets :attr:`done_by_settings` (done) or
        :attr:`chosen_by_launches` (refused), once per line and not where a site is already reported (nor, for a
        choice, where one already cites its line)."""
        if not self.done_by_settings and not self.chosen_by_launches:
            return []
        from optimizations.program.runs.every_run import done_by_runs  # loads libcst: not for listing

        seen, cited = {(s.path, s.line) for s in sites}, " ".join(f"{s.message} {s.reason}" for s in sites)
        found: dict[tuple[str, int], Site] = {}
        for entry, setting in done_by_runs(ctx, self.done_by_settings, defaults=True):
            path, _, line = setting.source.rpartition(":")
            if (path, int(line)) not in seen and (path, int(line)) not in found:
                message = f"{setting.name} {setting.value} for the run of {entry} (`{setting.written}`)"
                found[path, int(line)] = Site(path, int(line), self.id, message, False, already=True)
        for name, test, why in self.chosen_by_launches:
            for entry, setting in done_by_runs(ctx, ((name, test),), in_code=self.chosen_in_code):
                path, _, line = setting.source.rpartition(":")
                if setting.source not in cited and (path, int(line)) not in seen | found.keys():
                    message = f"{setting.name} {setting.value} for the run of {entry}"
                    reason = f"{why}: `{setting.written}` at {setting.source}"
                    found[path, int(line)] = Site(path, int(line), self.id, message, False, reason)
        return list(found.values())

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """Sites in the repository's config files that no Python file's transform reaches (an optimizer a YAML
        config builds by class name), their edits recorded with ``ctx.edit``; none unless overridden."""
        return []

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


class RegistryError(Exception):
    """The registered optimizations cannot be listed: none found, two with one id, or one that is malformed."""


REQUIRED = ("id", "title", "tier", "expected", "summary", "numerics")
# What ``bot list`` shows: the required attributes and the optional ones after them.
LISTED = (*REQUIRED, "numerics_reason")


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


RULE = "rule"


def rule_modules(package: str = __package__) -> Iterator[tuple[str, Path]]:
    """``(module name, source path)`` of each optimization folder's rule: the ``rule.py`` of every sub-package
    of ``package`` that has one (the framework's own sub-packages, such as ``program``, have none)."""
    root = importlib.import_module(package)
    for info in pkgutil.iter_modules(root.__path__, prefix=f"{package}."):
        folder = Path(getattr(info.module_finder, "path", "")) / info.name.rpartition(".")[2]
        if info.ispkg and (folder / f"{RULE}.py").is_file():
            yield f"{info.name}.{RULE}", folder / f"{RULE}.py"


def _module_optimizations(name: str) -> list[type[Optimization]]:
    """The optimizations module ``name`` defines, imported."""
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        raise RegistryError(f"{name} does not import ({exc!r}); fix it to list the optimizations") from exc
    return _defined_in(module)


def _package_optimizations(package: str) -> Iterator[type[Optimization]]:
    """The optimizations defined in the rules of ``package``'s folders."""
    for name, _ in rule_modules(package):
        yield from _module_optimizations(name)


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


def _contract_problem(numerics: object, reason: str) -> str | None:
    """What is wrong with a declared numerics contract, or ``None``."""
    if not isinstance(numerics, Numerics):
        return f"sets numerics = {numerics!r}: use Numerics.EXACT, Numerics.ROUNDING or Numerics.DYNAMICS"
    if numerics is not Numerics.EXACT and not reason:
        return f"is Numerics.{numerics.name} but sets no numerics_reason: say in one line what changes"
    return None


def _declared(cls: type[Optimization]) -> type[Optimization]:
    """``cls``, once it sets every required attribute and a numerics contract that says why where not exact."""
    missing = [name for name in REQUIRED if not hasattr(cls, name)]
    if missing:
        hint = (
            " (its numerics contract: Numerics.EXACT, ROUNDING or DYNAMICS)" if "numerics" in missing else ""
        )
        raise RegistryError(f"{_where(cls)} does not set {', '.join(missing)}{hint}")
    if problem := _contract_problem(cls.numerics, cls.numerics_reason):
        raise RegistryError(f"{_where(cls)} {problem}")
    return cls


def _checked(cls: type[Optimization]) -> type[Optimization]:
    """``cls``, once it is :func:`_declared` and has something to run."""
    _declared(cls)
    if not cls.codemods and cls.transform_source is Optimization.transform_source:
        raise RegistryError(
            f"{_where(cls)} has nothing to run: set `codemods = (...)` or override transform_source"
        )
    return cls


def _registered(entries: Iterator[tuple[str, str, V]], package: str, group: str) -> dict[str, V]:
    """``(id, where, value)`` entries by id: two places registering one id, or none at all, is an error."""
    found: dict[str, tuple[str, V]] = {}
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
    """Every optimization defined in a folder's rule of ``package``, and every one registered under the
    entry-point ``group``, by id, in tier then id order.

    A new folder in the package is found without reinstalling, and from a source checkout on ``PYTHONPATH``;
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
    numerics: Numerics
    numerics_reason: str = ""

    @classmethod
    def of(cls, optimization: type[Optimization]) -> Listing:
        """The listing of an optimization class."""
        return cls(*(getattr(optimization, name) for name in LISTED))


def _literal(node: ast.expr) -> object:
    """The value of a literal, or the :class:`Numerics` member that ``Numerics.NAME`` names."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Numerics":
        return Numerics[node.attr]
    return ast.literal_eval(node)


def _literal_listings(name: str, path: Path) -> list[tuple[Listing, str]] | None:
    """The optimizations the module ``name`` defines, read from its source at ``path``: classes that assign
    ``id`` and the other listed attributes as literals. ``None`` when the module must be imported to know (no
    source, a computed value)."""
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
            if isinstance(target, ast.Name) and target.id in LISTED
        }
        if "id" not in values:
            continue
        try:
            literals: dict[str, Any] = {name: _literal(value) for name, value in values.items()}
            listing = Listing(**literals)
        except (KeyError, ValueError, TypeError, SyntaxError):
            return None
        where = f"{name}:{node.name}"
        if problem := _contract_problem(listing.numerics, listing.numerics_reason):
            raise RegistryError(f"{where} {problem}")
        found.append((listing, where))
    return found


def _package_listings(package: str) -> Iterator[tuple[Listing, str]]:
    for name, path in rule_modules(package):
        found = _literal_listings(name, path)
        if found is None:
            found = [(Listing.of(_declared(cls)), _where(cls)) for cls in _module_optimizations(name)]
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
