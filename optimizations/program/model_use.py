"""What a function does with a model it loads: train or run it, or only read it (its weights copied into
another model, its config looked at). An optimization of the loaded model's attention or training has no
site on a model that is only read."""

from __future__ import annotations

import libcst as cst

from optimizations.program.codemod import walk

# Attributes whose use reads a model without running it.
READS = frozenset(
    {
        "state_dict",
        "named_parameters",
        "parameters",
        "named_buffers",
        "buffers",
        "config",
        "get_input_embeddings",
        "get_output_embeddings",
    }
)


def loaded_only_to_read(function: cst.FunctionDef, call: cst.Call) -> cst.Attribute | None:
    """The first read (``hf.state_dict``) of the model ``call`` loads, when ``function`` binds it to a name
    (``hf = X.from_pretrained(...)``) and reads its weights or config is all it ever does with that name:
    never calls, returns, passes on, trains or moves it. ``None`` otherwise."""
    name = next(
        (
            node.targets[0].target.value
            for node in walk(function)
            if isinstance(node, cst.Assign)
            and node.value is call
            and len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
        ),
        None,
    )
    if name is None:
        return None
    nodes = list(walk(function, stop=()))
    mentions = sum(isinstance(n, cst.Name) and n.value == name for n in nodes)
    reads = [
        n
        for n in nodes
        if isinstance(n, cst.Attribute)
        and isinstance(n.value, cst.Name)
        and n.value.value == name
        and n.attr.value in READS
    ]
    deleted = sum(
        isinstance(n, cst.Del) and isinstance(n.target, cst.Name) and n.target.value == name for n in nodes
    )
    return reads[0] if reads and mentions == 1 + len(reads) + deleted else None
