"""What ``dpo_precompute`` proposes for a hand-written DPO loop: a precompute pass of the reference log-probs that
the loop lacks. Writing one restructures the data pipeline and the step, so it is a proposal for a person, never an
edit (issue #51: small, mergeable diffs)."""

from __future__ import annotations

import re

import libcst as cst

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.syntax import NESTED_SCOPES, code_of, walk

# The names a reference model goes by: `ref_model`, `reference_model`, `self.ref`, `model_ref`, `ref_policy`.
REFERENCE = re.compile(r"^(?:ref|reference)(?:_model|_policy|_net|_lm)?$|^(?:model|policy)_ref$", re.I)
# torch's contexts that run without gradients, as a reference forward does.
NO_GRADIENTS = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.grad_mode.no_grad"})
# A preference loss's word: a file without it holds no DPO loop.
PREFERENCE_LOSS = "logsigmoid"
WHY = (
    "a precompute pass the loop lacks: the reference log-probs would be computed once over the dataset before "
    "training and carried with each batch, which changes how the data is built and what the step reads; a person "
    "should write that pass (TRL's DPOTrainer does it with precompute_ref_log_probs=True)"
)


def _head(node: cst.BaseExpression) -> str:
    """The last name of ``node``: ``ref_model`` of ``self.ref_model``, of ``ref_model.forward`` too."""
    if isinstance(node, cst.Attribute) and node.attr.value in ("forward", "__call__"):
        node = node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return node.value if isinstance(node, cst.Name) else ""


class ReferencePerStep(PlannedCodemod):
    """Proposes a precompute pass where a hand-written loop that computes a preference loss runs its reference
    model under ``torch.no_grad()`` in every step."""

    def plan(self, module: cst.Module) -> None:
        if PREFERENCE_LOSS not in self.parsed.source:
            return
        for loop in self.training_loops():
            call = self._reference_forward(loop)
            if call is not None:
                self.proposed(
                    call,
                    f"`{code_of(call)}` runs the reference model in every step: its log-probs computed once, before "
                    "training",
                    WHY,
                )

    def _reference_forward(self, loop: cst.For | cst.While) -> cst.Call | None:
        """The loop's first call, under a no-gradient context, of a reference model or of a function given one."""
        for block in walk(loop.body, NESTED_SCOPES):
            if not isinstance(block, cst.With) or not any(
                isinstance(item.item, cst.Call) and self.names(item.item.func) & NO_GRADIENTS
                for item in block.items
            ):
                continue
            for call in walk(block.body, NESTED_SCOPES):
                if not isinstance(call, cst.Call):
                    continue
                given = [
                    argument.value for argument in call.args if argument.keyword is None and not argument.star
                ]
                if any(REFERENCE.match(_head(node)) for node in (call.func, *given)):
                    return call
        return None
