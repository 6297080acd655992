""":class:`OptimizationCodemod`, the base of every optimization's codemod: it asks the program model about the
file (:class:`~optimizations.program.queries.FileQueries`), records the sites it changes or refuses, and queues
the imports and vendored helpers its edits need."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import Any, ClassVar, Protocol

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import BaseMetadataProvider, ParentNodeProvider

from optimizations.edits.imports import add_imports
from optimizations.edits.vendoring import HelperRefused, RuntimeHelper, vendor
from optimizations.program.queries import FileQueries
from optimizations.program.repository import ParsedFile, RepoContext, Site
from optimizations.program.syntax import imported_modules


class Identified(Protocol):
    """What a codemod needs of its optimization: the id its sites carry."""

    @property
    def id(self) -> str: ...


@functools.cache
def node_hooks(
    codemod: type[cst.CSTTransformer],
) -> dict[type[cst.CSTNode], tuple[Callable | None, Callable | None]]:
    """The node types ``codemod`` overrides a ``visit_<Node>`` or ``leave_<Node>`` hook for, with those hooks."""
    hooks: dict[type[cst.CSTNode], tuple[Callable | None, Callable | None]] = {}
    for name in dir(codemod):
        kind, _, node_name = name.partition("_")
        if kind not in ("visit", "leave") or getattr(codemod, name) is getattr(
            cst.CSTTransformer, name, None
        ):
            continue
        node_type = getattr(cst, node_name, None)
        if not (isinstance(node_type, type) and issubclass(node_type, cst.CSTNode)):
            raise TypeError(f"{codemod.__qualname__}.{name}: not a hook on a libcst node type")
        visit, leave = hooks.get(node_type, (None, None))
        hooks[node_type] = (
            (getattr(codemod, name), leave) if kind == "visit" else (visit, getattr(codemod, name))
        )
    return hooks


class LazyMetadata(dict):
    """A codemod's metadata, each provider resolved on the file's wrapper the first time the codemod reads it:
    a file where a codemod finds nothing to ask about costs no scope or name analysis. The wrapper keeps what
    it resolves, so every codemod of the run shares one resolution per provider per file. Parents come from
    the file's shared node walk instead of another traversal."""

    def __init__(self, parsed: ParsedFile, providers: Collection[type[BaseMetadataProvider]]):
        super().__init__()
        self.parsed = parsed
        self.providers = frozenset(providers)

    def __contains__(self, provider: object) -> bool:
        return provider in self.providers

    def __missing__(self, provider: type[BaseMetadataProvider]) -> Mapping[cst.CSTNode, object]:
        if provider not in self.providers:
            raise KeyError(provider)
        resolved: Mapping[cst.CSTNode, object]
        if provider is ParentNodeProvider:
            self[provider] = resolved = self.parsed.parents()
        else:
            self[provider] = resolved = self.parsed.wrapper.resolve(provider)
        return resolved


class OptimizationCodemod(CodemodCommand, cst.CSTTransformer, FileQueries):
    """The codemod of one optimization over one file: the edits, and the sites it changes or refuses.

    A plain ``CSTTransformer``, not libcst's matcher-decoratable one: ``@m.visit``/``@m.call_if_inside``
    decorators are not supported, as checking every node for them made each pass about four times slower.

    :meth:`optimizations.registry.Optimization.transform_source` constructs it as ``codemod(context, optimization, repo)`` and runs
    it with :meth:`transform_parsed`: the file's path is ``context.filename``, sites carry ``optimization.id``,
    and ``repo`` is the repository the file is in (other files to read or edit, runtime helpers to vendor).
    """

    METADATA_DEPENDENCIES: ClassVar[tuple[type[BaseMetadataProvider[Any]], ...]] = ()

    def __init__(self, context: CodemodContext, optimization: Identified, repo: RepoContext):
        super().__init__(context)
        self.optimization = optimization
        self.repo = repo
        self.path = context.filename or ""
        self.sites: list[Site] = []
        self.imported_modules: set[str] = set()
        # Only the sites are wanted (a scan): the edited tree is thrown away, so a codemod may skip building it.
        self.sites_only = False
        # Why a helper its edits need cannot be imported every way the file runs: then it edits nothing here.
        self.unplaceable = ""

    def transform_parsed(self, parsed: ParsedFile, *, sites_only: bool = False) -> cst.Module:
        """``transform_module`` over a file parsed once for the run: the metadata comes from the file's shared
        wrapper (each provider resolved once for every codemod), not from a copy of the tree. ``sites_only``:
        the caller reads ``sites`` alone, so the imports the edits need are not added."""
        self.parsed = parsed
        self.imported_modules = set(parsed.derived(imported_modules))
        self.sites_only = sites_only
        self.context = replace(self.context, wrapper=parsed.wrapper)
        self.metadata = LazyMetadata(parsed, self.get_inherited_dependencies())
        written = dict(self.repo.vendored), dict(self.repo.edits)
        try:
            tree = self.transform_module_impl(parsed.module)
        finally:
            self.context = replace(self.context, wrapper=None)
            self.metadata = {}
        if self.unplaceable:  # the file is left as it is, each of its changes refused with the reason
            self.repo.vendored, self.repo.edits = written
            self.sites = refuse_all(self.sites, self.unplaceable)
            return parsed.module
        if sites_only:
            return tree
        if AddImportsVisitor.CONTEXT_KEY in self.context.scratch:
            tree = add_imports(self.context, tree)
        if RemoveImportsVisitor.CONTEXT_KEY in self.context.scratch:
            tree = RemoveImportsVisitor(self.context).transform_module(tree)
        return tree

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        hooked = (type(self).on_visit, type(self).on_leave) == (
            cst.CSTTransformer.on_visit,
            cst.CSTTransformer.on_leave,
        )
        if self.sites_only and hooked:
            self.run_hooks()
            return tree
        return tree.visit(self)

    def run_hooks(self) -> None:
        """Call this codemod's ``visit_<Node>``/``leave_<Node>`` hooks as a libcst pass over the file would, in the
        same order and with the same pruning (a ``visit_`` hook returning ``False`` skips the subtree), but over
        the file's shared walk and with nothing rebuilt: ``leave_`` gets the original node twice, and what it
        returns is dropped. For a scan, which keeps the sites and throws the edited tree away."""
        hooks = node_hooks(type(self))
        shared = self.parsed.walk()
        open_nodes: list[tuple[int, cst.CSTNode, Callable | None]] = []
        skip_until = -1
        for position in shared.positions(*hooks):
            while open_nodes and open_nodes[-1][0] <= position:
                _, done, leave = open_nodes.pop()
                if leave is not None:
                    leave(self, done, done)
            if position < skip_until:
                continue
            node = shared.nodes[position]
            visit, leave = hooks[type(node)]
            if visit is not None and visit(self, node) is False:
                skip_until = shared.ends[node]
            open_nodes.append((shared.ends[node], node, leave))
        for _, done, leave in reversed(open_nodes):
            if leave is not None:
                leave(self, done, done)

    def need_module(self, module: str) -> None:
        """``import <module>``, unless the file already has it anywhere at module level.

        libcst's ``AddImportsVisitor`` only looks at the leading import block, so a file whose imports follow
        another statement (``sys.path.insert(...)``) would get a second ``import`` from it.
        """
        if module not in self.imported_modules:
            AddImportsVisitor.add_needed_import(self.context, module)

    def import_runtime(self, helper: RuntimeHelper, name: str) -> None:
        """Vendor the run-time ``helper`` where this file can import it every way it runs
        (:func:`~optimizations.edits.vendoring.vendor`) and import ``name`` from it; where no copy can serve
        it, the file's changes are refused instead (:attr:`unplaceable` says why)."""
        try:
            target = vendor(self.repo, helper, self.path, self.parsed.syntax())
        except HelperRefused as refused:
            self.unplaceable = self.unplaceable or str(refused)
            return
        relative = 1 if target.startswith(".") else 0
        AddImportsVisitor.add_needed_import(self.context, target.lstrip("."), name, relative=relative)

    def changed(self, node: cst.CSTNode, message: str) -> None:
        self.sites.append(Site(self.path, self.line(node), self.optimization.id, message))

    def refused(self, node: cst.CSTNode, message: str, reason: str) -> None:
        self.sites.append(Site(self.path, self.line(node), self.optimization.id, message, False, reason))

    def already(self, node: cst.CSTNode, message: str) -> None:
        """The program already does it at ``node``: ``message`` says what (``TF32 on``, say)."""
        self.sites.append(
            Site(self.path, self.line(node), self.optimization.id, message, False, already=True)
        )

    def kept(self, line: int, message: str, evidence: str) -> None:
        """The program chose otherwise on purpose at ``line``: ``message`` says what it chose, ``evidence`` why
        perfbot reads it as deliberate (a comment, a custom mask); left as it is."""
        self.sites.append(Site(self.path, line, self.optimization.id, message, False, evidence, kept=True))

    def proposed(self, node: cst.CSTNode, message: str, why: str) -> None:
        """A change at ``node`` that needs restructuring: written into the plan for a person (``why``: why it is
        not committed), never edited."""
        self.sites.append(
            Site(self.path, self.line(node), self.optimization.id, message, False, why, proposal=True)
        )


def already_all(sites: list[Site], done: str) -> list[Site]:
    """``sites`` with every change among them reported as done already, ``done`` saying by what."""
    return [
        replace(site, applicable=False, already=True, message=f"{site.message}: {done}")
        if site.applicable
        else site
        for site in sites
    ]


def refuse_all(sites: list[Site], reason: str) -> list[Site]:
    """``sites`` with every change among them refused for ``reason``."""
    return [replace(site, applicable=False, reason=reason) if site.applicable else site for site in sites]
