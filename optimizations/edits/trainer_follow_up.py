"""Edits that reach a model only once a trainer is built: the model a TRL trainer loads from a checkpoint name,
the adapters it makes from ``peft_config``. :class:`TrainerFollowUp` codemods add ``helper(trainer.model)`` on
the line after ``trainer = SFTTrainer(...)``, finding the trainer's model and bindings with
:class:`~optimizations.program.trainer_calls.TrainerLinks`.
"""

from __future__ import annotations

from typing import cast

import libcst as cst

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.edits.expressions import add_keywords, call_expr, expr
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.syntax import code_of
from optimizations.program.trainer_calls import LINK_METADATA, TrainerLinks


class TrainerFollowUp(OptimizationCodemod):
    """A codemod that also acts on built trainers: ``helper(trainer.model)`` on the line after
    ``trainer = SFTTrainer(...)``, for what only exists once the trainer has loaded (and PEFT-wrapped) its model.

    Subclasses that define ``visit_Module`` call this one's first; ``links`` holds the module's
    :class:`TrainerLinks`.
    """

    METADATA_DEPENDENCIES = OptimizationCodemod.METADATA_DEPENDENCIES + LINK_METADATA

    def visit_Module(self, node: cst.Module) -> None:
        self.links = TrainerLinks(self, node)
        self.follow_ups: dict[cst.SimpleStatementLine, list[cst.SimpleStatementLine]] = {}
        self.helper_keywords: dict[cst.Call, list[tuple[str, cst.BaseExpression]]] = {}

    def follow_trainer(
        self, trainer: cst.Call, runtime: RuntimeHelper, helper: str, message: str, why: str
    ) -> None:
        """Plan ``helper(<target>.model)`` (vendored from ``runtime``) after the line that assigns
        ``trainer`` to ``<target>``, unless the file calls it so already (then that call is reported as already done); refuse the site, saying ``why`` the
        model is only there once the trainer is built, when the trainer is not assigned on a line of its own."""
        assigned = self.links.assigned_line(trainer)
        if assigned is None:
            self.refused(
                trainer,
                message,
                f"{why}, and the trainer is not assigned on a line of its own: assign it (`trainer = ...`) so "
                "its model can be reached",
            )
            return
        target, line = assigned
        model = f"{code_of(target)}.model"
        done = self.follow_up_call(trainer, helper)
        if done is not None:
            self.already(done, f"`{helper}({model})` once the trainer is built")
            return
        self.import_runtime(runtime, helper)
        self.changed(trainer, f"{message}: `{helper}({model})` once the trainer is built ({why})")
        statement = cst.SimpleStatementLine([cst.Expr(call_expr(helper, expr(model)))])
        self.follow_ups.setdefault(line, []).append(statement)

    def follow_up_call(self, trainer: cst.Call, helper: str) -> cst.Call | None:
        """The ``helper(<target>.model, ...)`` call for ``trainer``, assigned to ``<target>``: in its scope, after
        it."""
        assigned = self.links.assigned_line(trainer)
        if assigned is None:
            return None
        model, scope, line = f"{code_of(assigned[0])}.model", self.links.scope(trainer), self.line(trainer)
        return next(
            (
                c
                for c in self.nodes(cst.Call)
                if self.calls(c, helper)
                and c.args
                and code_of(c.args[0].value) == model
                and self.links.scope(c) is scope
                and self.line(c) > line
            ),
            None,
        )

    def helper_call(self, trainer: cst.Call, helper: str) -> cst.Call | None:
        """The ``helper`` call that has ``trainer``'s model: the model argument it wraps, or the line after a
        trainer that loads its checkpoint itself (:meth:`follow_up_call`)."""
        model = self.links.model_argument(trainer)
        if model is None:
            return None
        return model if self.calls(model, helper) else self.follow_up_call(trainer, helper)

    def add_helper_keywords(
        self,
        original: cst.Call,
        updated: cst.Call,
        helper_call: cst.Call,
        keywords: list[tuple[str, cst.BaseExpression]],
    ) -> cst.Call:
        """``updated`` (the trainer call) with ``keywords`` added to its :meth:`helper_call`: in place where the
        helper wraps the model argument, else on the follow-up line when the walk reaches it
        (:meth:`pending_keywords`)."""
        if helper_call is not self.links.model_argument(original):
            self.helper_keywords[helper_call] = keywords
            return updated
        wrapped = cast(cst.Call, self.links.model_argument(updated))  # the helper call itself
        return updated.deep_replace(wrapped, add_keywords(wrapped, keywords))

    def pending_keywords(self, original: cst.Call, updated: cst.Call) -> cst.Call | None:
        """``updated`` with the keywords :meth:`add_helper_keywords` left for this follow-up call, if any.
        Subclasses' ``leave_Call`` returns it first."""
        keywords = self.helper_keywords.pop(original, None)
        return None if keywords is None else add_keywords(updated, keywords)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.BaseStatement]:
        follow_ups = self.follow_ups.pop(original_node, [])
        return cst.FlattenSentinel([updated_node, *follow_ups]) if follow_ups else updated_node
