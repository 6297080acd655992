"""A model prepared for k-bit (QLoRA) training: PEFT's ``prepare_model_for_kbit_training`` casts every weight it
does not quantize to float32 (and freezes them), so a model that comes from it has no bf16 weight and, on a
quantized base, integer ones. Optimizations whose helpers act only on a bf16, unquantized model find here that
their commit would change nothing."""

from __future__ import annotations

from typing import Protocol

import libcst as cst

from optimizations.program.queries import FileQuery
from optimizations.program.syntax import code_of
from optimizations.program.trainer_calls import TrainerLinks


class LinkedFile(FileQuery, Protocol):
    """A file whose trainer calls are linked to their models (a :class:`TrainerLinks` as ``links``)."""

    links: TrainerLinks


# PEFT's preparations of a k-bit model (the second is the name it had before PEFT 0.4).
KBIT_PREPARATIONS = frozenset({"prepare_model_for_kbit_training", "prepare_model_for_int8_training"})


def kbit_preparation(codemod: LinkedFile, model: cst.BaseExpression | None, at: cst.Call) -> cst.Call | None:
    """Return the PEFT k-bit preparation in ``at``'s function that ``model`` (an argument of ``at``) comes from.

    Only one that runs under every condition ``at`` runs under: a preparation in a quantized branch alone
    leaves the other branch's model as it was.
    """
    if model is None:
        return None
    wrapping = conditions(codemod, at)
    for origin in codemod.links.values.origins(model, at):
        preparation = {name.rpartition(".")[2] for name in origin.names if name.startswith("peft.")}
        if (
            not origin.through
            and preparation & KBIT_PREPARATIONS
            and conditions(codemod, origin.call) <= wrapping
        ):
            return origin.call
    return None


def conditions(codemod: FileQuery, node: cst.CSTNode) -> frozenset[str]:
    """Return the ``if`` tests ``node`` runs under within its function (``not (test)`` in an ``else``)."""
    parents = codemod.parsed.parents()
    found = set()
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.Module)):
        if isinstance(parent, cst.If) and child is not parent.test:
            test = code_of(parent.test)
            found.add(test if child is parent.body else f"not ({test})")
        child, parent = parent, parents.get(parent)
    return frozenset(found)
