"""Hand-written PyTorch training loops as the host-stall transforms (prefetcher, sync-free logging, fused
AdamW, TF32) see them, and :class:`PlannedCodemod`, the codemod base they share.

A *training loop* is the innermost ``for``/``while`` loop whose own body (outside nested functions, classes
and loops) calls ``.backward()``. To the transforms, a loop in a class's ``forward`` or ``__call__`` that steps
no optimizer there is not one: it is part of one step's computation, run once per call (a loss that
back-propagates chunk by chunk, as torchtitan's chunked cross-entropy does). Its *loss names* are the names
``.backward()`` is called on (``loss.backward()``, ``(loss / accumulation).backward()``,
``scaler.scale(loss).backward()``), or the one a framework's backward is given (``accelerator.backward(loss)``).
A *logging block* is the body of an ``if`` in the loop that prints or logs: a host read there costs one sync per logged
step, not one per step.

:class:`PlannedCodemod` walks the whole module first (``plan``), with qualified names, positions and
parents at hand, and records its edits by original node: replacements, statements to insert before or after
a statement, statements to drop, runtime helpers to vendor and import. The transform pass then applies them.
Its :meth:`~PlannedCodemod.call_sites` finds the calls of a loop's function across the repository, so that a
model or optimizer the function receives as a parameter can be traced to what its callers pass.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import NamedTuple

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.metadata import ParentNodeProvider

from optimizations.program.codemod import (
    NESTED_SCOPES,
    Identified,
    OptimizationCodemod,
    code_of,
    walk,
)
from optimizations.program.frameworks import framework_backward
from optimizations.program.reachability import program_of
from optimizations.program.repository import ParsedFile, RepoContext, RuntimeHelper

LOOPS = (cst.For, cst.While)
# Methods a class runs once per call: a module's forward, a loss object's __call__, an autograd Function's
# backward.
PER_CALL_METHODS = ("forward", "__call__", "backward")
# The method a training loop calls: a file without this word has no training loop.
BACKWARD = "backward"
LOG_METHODS = frozenset(
    {
        "info",
        "debug",
        "warning",
        "error",
        "log",
        "log_dict",
        "log_metric",
        "log_metrics",
        "add_scalar",
        "add_scalars",
        "write",
        "set_postfix",
        "set_postfix_str",
        "set_description",
    }
)


def is_method_call(node: cst.CSTNode, *methods: str) -> bool:
    """``<receiver>.<method>(...)`` for one of ``methods``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in methods
    )


def backward_calls(loop: cst.For | cst.While) -> list[cst.Call]:
    """The ``.backward()`` calls of the loop's own body (not of nested loops or functions)."""
    return [n for n in walk(loop.body, NESTED_SCOPES + LOOPS) if is_method_call(n, BACKWARD)]


def training_loops(parsed: ParsedFile) -> list[cst.For | cst.While]:
    """Every innermost loop that calls ``.backward()`` in its own body, in source order: the loops that hold a
    ``.backward()`` call of the file, found from the calls up (the file's shared walk) rather than by walking
    every loop."""
    parents, found = parsed.parents(), set()
    for call in parsed.nodes(cst.Call):
        if not is_method_call(call, BACKWARD):
            continue
        child, holder = call, parents.get(call)
        while holder is not None and not isinstance(holder, NESTED_SCOPES + LOOPS):
            child, holder = holder, parents.get(holder)
        if isinstance(holder, LOOPS) and child is holder.body:
            found.add(holder)
    return [loop for loop in parsed.nodes(*LOOPS) if loop in found] if found else []


def loss_names(loop: cst.For | cst.While) -> set[str]:
    """The names the loop calls ``.backward()`` on, through scaling and arithmetic."""
    names: set[str] = set()
    for call in backward_calls(loop):
        receiver = call.args[0].value if framework_backward(call) else call.func.value
        while True:
            if isinstance(receiver, cst.Name):
                names.add(receiver.value)
                break
            if isinstance(receiver, cst.BinaryOperation):
                receiver = receiver.left
            elif is_method_call(receiver, "scale") and receiver.args:
                receiver = receiver.args[0].value
            else:
                break
    return names


def is_log_call(node: cst.CSTNode) -> bool:
    """``print(...)`` or a logger/tracker/progress-bar method (``logger.info``, ``wandb.log``, ``writer.add_scalar``)."""
    if not isinstance(node, cst.Call):
        return False
    if isinstance(node.func, cst.Name):
        return node.func.value == "print"
    return isinstance(node.func, cst.Attribute) and node.func.attr.value in LOG_METHODS


def is_logging_block(node: cst.If) -> bool:
    """An ``if`` whose body prints or logs."""
    return any(is_log_call(n) for n in walk(node.body))


def name_reads_and_writes(
    body: cst.CSTNode, name: str, parent: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> tuple[list[cst.Name], list[cst.CSTNode], list[cst.Name]]:
    """Uses of variable ``name`` in ``body`` (outside nested scopes): reads, writes (the Assign/AugAssign
    statement parts, or the binding node for any other kind of binding), and uses inside nested scopes."""
    reads: list[cst.Name] = []
    writes: list[cst.CSTNode] = []
    nested: list[cst.Name] = []
    for node in (n for n in walk(body, ()) if isinstance(n, cst.Name) and n.value == name):
        up = parent(node)
        if (
            isinstance(up, cst.Attribute)
            and up.attr is node
            or isinstance(up, cst.Arg)
            and up.keyword is node
        ):
            continue
        if _inside_nested_scope(node, body, parent):
            nested.append(node)
            continue
        binding = _binding_of(node, parent)
        if binding is not None:
            writes.append(parent(binding) if isinstance(binding, cst.AssignTarget) else binding)
        else:
            reads.append(node)
    return reads, writes, nested


def _binding_of(name: cst.Name, parent) -> cst.CSTNode | None:
    """The node that binds ``name`` when it is an assignment/loop/import/``del`` target (unpacking included)."""
    node: cst.CSTNode = name
    up = parent(node)
    while isinstance(up, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        node, up = up, parent(up)
    if isinstance(up, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr)):
        return up if up.target is node else None
    if isinstance(up, (cst.AsName, cst.NameItem, cst.Del, cst.ImportAlias)):
        return up
    if isinstance(up, (cst.Param, cst.FunctionDef, cst.ClassDef)):
        return up if up.name is node else None
    return None


def _inside_nested_scope(node: cst.CSTNode, body: cst.CSTNode, parent) -> bool:
    current = parent(node)
    while current is not None and current is not body:
        if isinstance(current, NESTED_SCOPES):
            return True
        current = parent(current)
    return False


class CallSite(NamedTuple):
    """A call of a function somewhere in the repository: the file, the function (or module) it is made in,
    and the call."""

    path: str
    scope: cst.CSTNode
    call: cst.Call


def argument_for(function: cst.FunctionDef, call: cst.Call, parameter: str) -> cst.BaseExpression | None:
    """The argument ``call`` passes to ``parameter`` of ``function``, by position or keyword; ``None`` when it
    passes none (or only through ``*args``/``**kwargs``)."""
    positional = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    for index, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is not None:
            if arg.keyword.value == parameter:
                return arg.value
        elif index < len(positional) and positional[index] == parameter:
            return arg.value
    return None


def float_of(node: cst.BaseExpression) -> cst.Call:
    """``float(<node>)``."""
    return cst.Call(func=cst.Name("float"), args=[cst.Arg(node)])


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
            for scope in (parsed.module, *parsed.nodes(cst.FunctionDef)):
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
