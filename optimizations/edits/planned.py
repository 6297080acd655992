""":class:`PlannedCodemod`, the codemod base of the host-stall transforms (prefetcher, sync-free logging, fused
AdamW, TF32): it walks the whole module first (``plan``), with qualified names, positions and parents at hand,
and records its edits by original node: replacements, statements to insert before or after a statement,
statements to drop, runtime helpers to vendor and import. The transform pass then applies them. Its
:meth:`~PlannedCodemod.call_sites` finds the calls of a loop's function across the repository, so that a model
or optimizer the function receives as a parameter can be traced to what its callers pass.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.metadata import ParentNodeProvider

from optimizations.edits.codemod import Identified, OptimizationCodemod
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.reachability import program_of
from optimizations.program.repository import ParsedFile, RepoContext
from optimizations.program.syntax import NESTED_SCOPES, code_of, walk
from optimizations.program.training_loops import (
    PER_CALL_METHODS,
    CallSite,
    is_logging_block,
    is_method_call,
    name_reads_and_writes,
    training_loops,
)


class PlannedCodemod(OptimizationCodemod):
    """A codemod that plans every edit over the whole module first, then applies them in one pass."""

    METADATA_DEPENDENCIES = (ParentNodeProvider,)

    def __init__(self, context: CodemodContext, optimization: Identified, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.replacements: dict[cst.CSTNode, Callable[[cst.CSTNode], cst.CSTNode]] = {}
        self.inserted_before: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
        self.inserted_after: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
        self.dropped: set[cst.CSTNode] = set()
        self.runtime_imports: set[tuple[RuntimeHelper, str]] = set()

    @abstractmethod
    def plan(self, module: cst.Module) -> None:
        """Record the edits (and the sites) for this module."""

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        self.plan(tree)
        planned = self.replacements or self.inserted_before or self.inserted_after or self.dropped
        if self.sites_only or not (planned or self.runtime_imports):
            return tree  # nothing to edit, or only the sites wanted: no pass over the tree
        for helper, name in sorted(self.runtime_imports):
            self.import_runtime(helper, name)
        return tree.visit(self)

    def on_leave(self, original_node, updated_node):
        updated = super().on_leave(original_node, updated_node)
        if original_node in self.dropped:
            return cst.RemoveFromParent()
        if original_node in self.replacements:
            updated = self.replacements[original_node](updated)
        before = self.inserted_before.get(original_node, [])
        after = self.inserted_after.get(original_node, [])
        if before or after:
            return cst.FlattenSentinel([*before, updated, *after])
        return updated

    # -- planning helpers ---------------------------------------------------------------------------------
    def training_loops(self) -> list[cst.For | cst.While]:
        """:func:`training_loops` of the module that the program runs, from the file's shared node index,
        less those that are one step's computation (:meth:`computes_per_call`)."""
        return [
            loop
            for loop in training_loops(self.parsed)
            if self.runs(loop) and not self.computes_per_call(loop)
        ]

    def computes_per_call(self, loop: cst.For | cst.While) -> bool:
        """``loop`` is in a class's ``forward``, ``__call__`` or ``backward`` (an autograd Function's, say), which
        steps no optimizer (no ``.step()``)."""
        owner = self.enclosing_body(loop)
        return (
            isinstance(owner, cst.FunctionDef)
            and owner.name.value in PER_CALL_METHODS
            and any(isinstance(ancestor, cst.ClassDef) for ancestor in self.ancestors(owner))
            and not any(is_method_call(node, "step") for node in walk(owner.body, NESTED_SCOPES))
        )

    def runs(self, node: cst.CSTNode) -> bool:
        """Whether the program's entry points reach ``node``: its file, and the top-level function or class
        holding it (:mod:`optimizations.program.reachability`)."""
        top = None
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                top = ancestor.name.value
        return program_of(self.repo).runs(self.path, top)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.get_metadata(ParentNodeProvider, node, None)

    def owning_class(self, function: cst.FunctionDef) -> cst.ClassDef | None:
        """The class whose body defines ``function`` (a method); ``None`` for a function outside a class body."""
        block = self.parent(function)
        owner = self.parent(block) if block is not None else None
        return owner if isinstance(owner, cst.ClassDef) else None

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def statement_of(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The statement, directly in a block or the module, that contains ``node``."""
        for ancestor in (node, *self.ancestors(node)):
            if isinstance(ancestor, cst.BaseStatement) and isinstance(
                self.parent(ancestor), (cst.IndentedBlock, cst.Module)
            ):
                return ancestor
        return None

    def enclosing_body(self, node: cst.CSTNode) -> cst.CSTNode:
        """The function definition (or the module) whose code contains ``node``."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Module)):
                return ancestor
        raise ValueError("node outside any module")

    def within(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        return any(ancestor is container for ancestor in self.ancestors(node))

    def in_logging_block(self, node: cst.CSTNode, loop: cst.For | cst.While) -> bool:
        """Whether ``node`` runs only when the loop logs: inside the body of a logging ``if`` of the loop."""
        for ancestor in self.ancestors(node):
            if ancestor is loop:
                return False
            if isinstance(ancestor, cst.IndentedBlock):
                owner = self.parent(ancestor)
                if isinstance(owner, cst.If) and owner.body is ancestor and is_logging_block(owner):
                    return True
        return False

    def reads_and_writes(self, scope_body: cst.CSTNode, name: str):
        """:func:`name_reads_and_writes` with this module's parent links."""
        return name_reads_and_writes(scope_body, name, self.parent)

    def call_sites(self, function: cst.FunctionDef) -> list[CallSite]:
        """Where the repository calls ``function``, a module-level function of this file: by its bare name
        here, and in the files that import it from this module (``from <module> import <name>``, or
        ``import <module>`` then ``<module>.<name>(...)``)."""
        if not isinstance(self.parent(function), cst.Module):
            return []
        name, module = function.name.value, PurePosixPath(self.path).stem
        sites = []
        for path in self.repo.python_files():
            here = path == self.path
            text = self.parsed.source if here else self.repo.read(path)
            if name not in text or (not here and module not in text):
                continue
            parsed = self.parsed if here else self.repo.sources.parse(path, text)
            spelled = _spellings(parsed, name, module, here)
            scopes: list[cst.Module | cst.FunctionDef] = [parsed.module, *parsed.nodes(cst.FunctionDef)]
            for scope in scopes:
                body = scope if isinstance(scope, cst.Module) else scope.body
                for call in walk(body, NESTED_SCOPES):
                    if isinstance(call, cst.Call) and code_of(call.func) in spelled:
                        sites.append(CallSite(path, scope, call))
        return sites


def _spellings(parsed: ParsedFile, name: str, module: str, here: bool) -> set[str]:
    """How a file calls ``name`` of ``module``: bare in the module itself, else as it imports it."""
    if here:
        return {name}
    spelled = set()
    for node in parsed.nodes(cst.ImportFrom, cst.Import):
        if isinstance(node.names, cst.ImportStar):
            continue
        if isinstance(node, cst.ImportFrom):
            source = code_of(node.module) if node.module is not None else ""
            if source.rpartition(".")[2] == module:
                spelled |= {
                    code_of(a.asname.name) if a.asname else name
                    for a in node.names
                    if code_of(a.name) == name
                }
            elif any(code_of(a.name) == module for a in node.names):  # `from . import module`
                spelled |= {
                    f"{code_of(a.asname.name) if a.asname else module}.{name}"
                    for a in node.names
                    if code_of(a.name) == module
                }
        else:
            spelled |= {
                f"{code_of(a.asname.name) if a.asname else code_of(a.name)}.{name}"
                for a in node.names
                if code_of(a.name).rpartition(".")[2] == module
            }
    return spelled
