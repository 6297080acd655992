"""The codemod of ``steady_bookkeeping``: ``SFTTrainer(...)`` would become ``steady_bookkeeping(SFTTrainer(...))``,
the helper vendored from this folder's ``helper.py``; a monkeypatch of the model's methods that the Trainer calls
every step, so each site is a proposal for a person, never committed (README.md)."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.trainer_follow_up import TrainerFollowUp
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.hf import trainer_class
from optimizations.program.syntax import code_of, keyword

# What a person who takes the proposal vendors: this folder's helper.py, as _perfbot_trainer_steps.py.
RUNTIME = RuntimeHelper("trainer_steps", "optimizations.steady_bookkeeping")
HELPER = "steady_bookkeeping"
# Why the wrap is proposed, not committed (issue #51: small, mergeable diffs).
RESTRUCTURING = (
    "a monkeypatch of library internals: the vendored helper rebinds the model's num_parameters(), train() and "
    "parameters(), which the Trainer calls every step; a person should weigh it against the transformers release "
    "in use before wrapping the trainer in `steady_bookkeeping(...)`"
)


class WrapTrainer(TrainerFollowUp):
    """Proposes wrapping each trainer's construction in ``steady_bookkeeping(...)``, unless the trainer builds its
    model with ``model_init``."""

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
        self.proposed(original_node, f"{message} (`{HELPER}({name}(...))`)", RESTRUCTURING)
        return updated_node
