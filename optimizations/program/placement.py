"""Where a model's parameters move to the device, seen from the line an optimizer is built on.

A model moves with ``model.to(device)``, ``model.cuda()``, or through a framework that places what it is given:
``accelerator.prepare(model, optimizer)``, ``fabric.setup(model, optimizer)``,
``deepspeed.initialize(model=model, ...)``. The usual Accelerate script builds its optimizer first and lets
``prepare`` move the model, so the optimizer is built on parameters that are still on the CPU: a choice made
from where the parameters are (a fused kernel for their device, say) is made for the CPU.

:func:`later_move` finds, in the function that builds the optimizer (and, where the model is one of that
function's parameters, in the callers that pass it), the first such move after the optimizer is built, unless
the model already moved before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import libcst as cst

from optimizations.program.names import ScopedNames, scoped_names
from optimizations.program.positions import start_line
from optimizations.program.repository import ParsedFile
from optimizations.program.syntax import code_of, qualified_under, walk
from optimizations.program.training_loops import CallSite, argument_for, is_method_call

# ``<model>.to(...)`` and ``<model>.cuda()``; ``.to(torch.bfloat16)`` casts and is no move.
MOVE_METHODS = ("to", "cuda")
# ``<framework object>.<method>(model, ...)``: Accelerate's ``prepare``/``prepare_model``, Lightning Fabric's
# ``setup``/``setup_module``.
FRAMEWORK_METHODS = ("prepare", "prepare_model", "setup", "setup_module")


def parameter_owners(params: cst.BaseExpression, bindings: Iterable[cst.BaseExpression] = ()) -> set[str]:
    """The modules whose parameters an optimizer gets, as code (``model``, ``self.policy``): the receivers of
    ``.parameters()``/``.named_parameters()`` in the argument, or in the values a name argument is bound to."""
    owners = set()
    for source in (params, *bindings):
        for node in (source, *walk(source, ())):
            if is_method_call(node, "parameters", "named_parameters"):
                owners.add(code_of(cast(cst.Attribute, node.func).value))
    return owners


def _is_cast(call: cst.Call, names: set[str]) -> bool:
    """``.to(torch.bfloat16)``/``.to(dtype=...)``: a dtype, not a device (``names``: the first argument's)."""
    first = call.args[0] if call.args else None
    if first is None or first.keyword is not None and first.keyword.value == "dtype":
        return True
    return any(name.startswith("torch.") and name != "torch.device" for name in names)


def _device_move(names: ScopedNames, call: cst.CSTNode) -> bool:
    """``<x>.cuda()``, or ``<x>.to(...)`` with a device rather than a dtype."""
    if not is_method_call(call, *MOVE_METHODS):
        return False
    first = call.args[0].value if call.args else None
    return cast(cst.Attribute, call.func).attr.value == "cuda" or not _is_cast(
        call, {q.name for q in names.of(first)} if first else set()
    )


def moves(parsed: ParsedFile, node: cst.CSTNode, owners: set[str]) -> bool:
    """Whether ``node``, in ``parsed``, moves one of ``owners`` (or a module holding it) to a device: a call
    (``model.to(device)``, ``accelerator.prepare(model, ...)``) or an assignment of a moved module to it
    (``model = Net().to(device)``)."""
    names = scoped_names(parsed)

    def covers(expression: cst.BaseExpression) -> bool:
        moved = code_of(expression)
        return any(owner == moved or owner.startswith(f"{moved}.") for owner in owners)

    if isinstance(node, cst.Assign):
        return _device_move(names, node.value) and any(covers(t.target) for t in node.targets)
    if not isinstance(node, cst.Call):
        return False
    if is_method_call(node, *MOVE_METHODS):
        return _device_move(names, node) and covers(cast(cst.Attribute, node.func).value)
    framework = is_method_call(node, *FRAMEWORK_METHODS) or qualified_under(
        {q.name for q in names.of(node.func)}, ("deepspeed",), ("initialize",)
    )
    return framework and any(
        covers(a.value) for a in node.args if a.keyword is None or a.keyword.value == "model"
    )


def later_move(parsed: ParsedFile, scope: cst.CSTNode, built_at: int, owners: set[str]) -> cst.CSTNode | None:
    """The first move of one of ``owners`` (:func:`moves`) in ``scope`` of ``parsed`` (a function or the module,
    nested scopes left out) after line ``built_at``; ``None`` when there is none, or one moved them before."""
    found = [
        node
        for node in walk(scope)
        if isinstance(node, (cst.Call, cst.Assign)) and moves(parsed, node, owners)
    ]
    if any(start_line(parsed, node) <= built_at for node in found):
        return None
    return min(found, key=lambda node: (start_line(parsed, node), isinstance(node, cst.Assign)), default=None)


def caller_owners(function: cst.FunctionDef, site: CallSite, owners: set[str]) -> set[str]:
    """``owners`` as a caller of ``function`` spells them: a parameter of the function (``model``,
    ``model.encoder``) becomes the argument the call passes for it."""
    spelled = set()
    for owner in owners:
        head, dot, rest = owner.partition(".")
        argument = argument_for(function, site.call, head)
        if argument is not None:
            spelled.add(code_of(argument) + dot + rest)
    return spelled
