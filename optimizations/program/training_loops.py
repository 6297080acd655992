"""Hand-written PyTorch training loops as the host-stall transforms (prefetcher, sync-free logging, fused
AdamW, TF32) see them; their codemod base is :class:`~optimizations.edits.planned.PlannedCodemod`.

A *training loop* is the innermost ``for``/``while`` loop whose own body (outside nested functions, classes
and loops) calls ``.backward()``. To the transforms, a loop in a class's ``forward`` or ``__call__`` that steps
no optimizer there is not one: it is part of one step's computation, run once per call (a loss that
back-propagates chunk by chunk, as torchtitan's chunked cross-entropy does). Its *loss names* are the names
``.backward()`` is called on (``loss.backward()``, ``(loss / accumulation).backward()``,
``scaler.scale(loss).backward()``), or the one a framework's backward is given (``accelerator.backward(loss)``).
A *logging block* is the body of an ``if`` in the loop that prints or logs: a host read there costs one sync per logged
step, not one per step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeGuard, cast

import libcst as cst

from optimizations.program.frameworks import framework_backward
from optimizations.program.repository import ParsedFile
from optimizations.program.syntax import NESTED_SCOPES, walk

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


def is_method_call(node: cst.CSTNode, *methods: str) -> TypeGuard[cst.Call]:
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
        child: cst.CSTNode = call
        holder = parents.get(call)
        while holder is not None and not isinstance(holder, NESTED_SCOPES + LOOPS):
            child, holder = holder, parents.get(holder)
        if isinstance(holder, LOOPS) and child is holder.body:
            found.add(holder)
    return [loop for loop in parsed.nodes(cst.For, cst.While) if loop in found] if found else []


def loss_names(loop: cst.For | cst.While) -> set[str]:
    """The names the loop calls ``.backward()`` on, through scaling and arithmetic."""
    names: set[str] = set()
    for call in backward_calls(loop):
        receiver = call.args[0].value if framework_backward(call) else cast(cst.Attribute, call.func).value
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
            writes.append(
                cast(cst.Assign, parent(binding)) if isinstance(binding, cst.AssignTarget) else binding
            )
        else:
            reads.append(node)
    return reads, writes, nested


def _binding_of(name: cst.Name, parent: Callable[[cst.CSTNode], cst.CSTNode | None]) -> cst.CSTNode | None:
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


def _inside_nested_scope(
    node: cst.CSTNode, body: cst.CSTNode, parent: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> bool:
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
