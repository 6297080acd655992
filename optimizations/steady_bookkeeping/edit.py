"""The codemod of ``steady_bookkeeping``: ``SFTTrainer(...)`` becomes ``steady_bookkeeping(SFTTrainer(...))``, the
helper vendored from this folder's ``helper.py`` (README.md)."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.expressions import call_expr
from optimizations.edits.trainer_follow_up import TrainerFollowUp
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.hf import trainer_class
from optimizations.program.syntax import code_of, keyword

RUNTIME = RuntimeHelper("trainer_steps", "optimizations.steady_bookkeeping")
HELPER = "steady_bookkeeping"


class WrapTrainer(TrainerFollowUp):
    """Wraps each trainer's construction in ``steady_bookkeeping(...)``, unless the trainer builds its model
    with ``model_init``."""

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if trainer_class(self.names(original_node.func)) is None:
            return updated_node
        name = code_of(original_node.func)
        argument = self.links.parent(original_node)
        wrapper = self.links.parent(argument) if isinstance(argument, cst.Arg) else None
        if isinstance(wrapper, cst.Call) and self.calls(wrapper, HELPER):
            self.already(original_node, f"`{HELPER}({name}(...))`")
            return updated_node
        message = f"{name}(...): its per-step parameter count, train() and parameters() walks paid once"
        if keyword(original_node, "model_init") is not None:
            self.refused(
                original_node,
                message,
                "the trainer builds its model with model_init, again at train() in a hyperparameter search: the "
                "model the helper would prepare is not the one trained",
            )
            return updated_node
        self.import_runtime(RUNTIME, HELPER)
        self.changed(original_node, message)
        return call_expr(HELPER, updated_node)
