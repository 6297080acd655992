"""What a function does with a model it loads: train or run it, or only keep it as data (its weights copied
into another model, its config looked at, adapters put on it and the result saved). An optimization of the
loaded model's attention or training has no site on a model that is only kept as data."""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from optimizations.program.names import scoped_names
from optimizations.program.repository import ParsedFile
from optimizations.program.syntax import assigned_target, code_of, walk

# Attributes whose use reads a model without running it.
READS = frozenset(
    {
        "state_dict",
        "named_parameters",
        "parameters",
        "named_buffers",
        "buffers",
        "config",
        "generation_config",
        "peft_config",
        "get_input_embeddings",
        "get_output_embeddings",
    }
)
# Methods that keep a model as data: save or publish it, take its adapters off or merge them in (the result,
# when a name is bound to it, is followed the same way).
KEEPS = frozenset({"save_pretrained", "push_to_hub", "unload", "merge_and_unload"})
# Functions that wrap a model given as their first argument in adapters, without running it.
WRAPPERS = frozenset({"get_peft_model", "PeftModel.from_pretrained"})
# Built-ins that look at a model or set a part of it without running it (``getattr`` gives a part, followed).
INSPECTS = frozenset({"isinstance", "hasattr", "setattr"})
# A part's tensors, read through a chain of attributes and indices (``model.layers[0].q_proj.weight``).
TENSORS = frozenset({"weight", "bias"})


def kept_as_data(
    scope: cst.FunctionDef | cst.Module, call: cst.Call, parsed: ParsedFile
) -> cst.Attribute | None:
    """Where the model ``call`` builds is kept (``model.save_pretrained``), else first read
    (``hf.state_dict``), when ``scope`` (a function, or a script's module) binds it to a name and all it does
    with that name is: read its weights or config, a part's tensors included (:data:`TENSORS`); delete, set or
    look at its parts (:data:`INSPECTS`, a part's attribute assigned) or iterate them (the loop's name followed);
    put it in evaluation mode; put adapters on it (:data:`WRAPPERS`); save,
    publish, unload or merge it (:data:`KEEPS`, an unbound ``Class.save_pretrained(model, ...)`` too); and the
    same of what those give back. Never calls, returns, passes on, trains or moves it. ``None`` otherwise. Only
    the reads of the bindings in ``scope`` count: a nested function's own variable of the same name is another."""
    parents, names = parsed.parents(), scoped_names(parsed)
    name = bound_name(parents, call)
    if name is None:
        return None
    uses: list[cst.Attribute] = []
    pending, seen = [name], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for node in names.reads(current, scope):
            use = _data_use(node, parents)
            if use is None:
                return None
            if isinstance(use, str):
                pending.append(use)
            elif isinstance(use, cst.Attribute):
                uses.append(use)
    kept = [use for use in uses if use.attr.value in KEEPS] or uses
    return min(kept, key=lambda node: _position(scope, node), default=None)


def bound_name(parents: Mapping[cst.CSTNode, cst.CSTNode], value: cst.CSTNode) -> str | None:
    """The name ``name = value`` (or ``name: T = value``) binds, where ``value`` is the whole right side."""
    target = assigned_target(parents.get, value)
    return target.value if isinstance(target, cst.Name) else None


def _data_use(name: cst.Name, parents: Mapping[cst.CSTNode, cst.CSTNode]) -> cst.CSTNode | str | bool | None:
    """What one mention of the model does: a read or a keep (the node to quote), a conversion whose result is
    bound to another name (that name), a deletion or type check (True); ``None`` for any other use."""
    holder = parents.get(name)
    if isinstance(holder, cst.Attribute) and holder.value is name:
        above = parents.get(holder)
        if isinstance(above, cst.Del) or isinstance(above, cst.AssignTarget) and above.target is holder:
            return True
        if holder.attr.value in READS:
            return holder
        if holder.attr.value in KEEPS and isinstance(above, cst.Call) and above.func is holder:
            return bound_name(parents, above) or holder
        if isinstance(above, cst.Call) and above.func is holder and _sets_evaluation_mode(above):
            return True
        return _part_use(holder, parents)
    if isinstance(holder, cst.Del):
        return True
    if isinstance(holder, cst.Arg) and holder.value is name:
        call = parents.get(holder)
        if not isinstance(call, cst.Call) or holder.keyword is not None:
            return None
        callee = code_of(call.func)
        first = call.args[0] is holder
        if callee in INSPECTS and (first or callee == "setattr"):
            return True
        if first and callee.rpartition(".")[2] in KEEPS:  # `LlamaForCausalLM.save_pretrained(model, ...)`
            return call.func if isinstance(call.func, cst.Attribute) else True
        wraps = any(callee == wrapper or callee.endswith(f".{wrapper}") for wrapper in WRAPPERS)
        if first and (callee == "getattr" or wraps):
            return bound_name(parents, call)
    return None


def _sets_evaluation_mode(call: cst.Call) -> bool:
    """``model.eval()`` or ``model.train(False)``: a flag set, nothing run."""
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else ""
    if method == "eval":
        return not call.args
    return method == "train" and len(call.args) == 1 and code_of(call.args[0].value) == "False"


def _part_use(
    part: cst.Attribute, parents: Mapping[cst.CSTNode, cst.CSTNode]
) -> cst.CSTNode | str | bool | None:
    """What a chain of attributes and indices from the model does with the part it ends in: a tensor read, not
    called (``model.model.layers[0].self_attn.q_proj.weight``: that node); a flag set or a part deleted
    (``layer.self_attn.q_proj.merge_weights = True``: True); the parts iterated (``for layer in
    model.model.layers``: the loop's name, followed); ``None`` otherwise."""
    top: cst.CSTNode = part
    while isinstance(above := parents.get(top), (cst.Attribute, cst.Subscript)) and above.value is top:
        top = above
    holder = parents.get(top)
    if isinstance(holder, cst.AssignTarget) and holder.target is top or isinstance(holder, cst.Del):
        return True
    if isinstance(holder, cst.For) and holder.iter is top:
        return holder.target.value if isinstance(holder.target, cst.Name) else None
    called = isinstance(holder, cst.Call) and holder.func is top
    return top if isinstance(top, cst.Attribute) and top.attr.value in TENSORS and not called else None


def _position(scope: cst.CSTNode, node: cst.CSTNode) -> int:
    return next(index for index, found in enumerate(walk(scope, stop=())) if found is node)
