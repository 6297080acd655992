"""Batches built in the training process between steps, with no loader to give workers to: a training loop that
iterates a repository generator which tokenizes and collates each batch itself (eric-mitchell's DPO trainer
iterates ``get_batch_iterator(...)``). Worker processes need that generator turned into a Dataset read by a
DataLoader, with its shuffling kept: a proposal for a person."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.syntax import NESTED_SCOPES, code_of, walk
from optimizations.program.training_loops import BACKWARD, is_method_call
from optimizations.program.values import ProgramValues

# Calls that show a generator prepares batches itself: it tokenizes or collates.
PREPARES = ("tokenizer", "tokenize", "encode", "collate")
WHY = (
    "the generator tokenizes and collates each batch in the training process, between steps; giving that work to "
    "worker processes needs it turned into a Dataset read by a DataLoader, with its shuffling and epochs kept, "
    "which a person should restructure"
)


class GeneratedInline(PlannedCodemod):
    """Proposes a DataLoader with workers where a training loop iterates a repository generator that prepares its
    batches itself."""

    def plan(self, module: cst.Module) -> None:
        values = ProgramValues(self)
        for loop in self.nodes(cst.For):
            if not any(is_method_call(n, BACKWARD) for n in walk(loop.body, NESTED_SCOPES)) or not self.runs(
                loop
            ):
                continue
            built = self._built_by(loop.iter)
            found = values.callee(built, values.here) if built is not None else None
            if built is None or found is None:
                continue
            function, source = found
            nodes = list(walk(function.body, NESTED_SCOPES))
            prepares = [
                n
                for n in nodes
                if isinstance(n, cst.Call)
                and any(w in code_of(n.func).rpartition(".")[2].lower() for w in PREPARES)
            ]
            if prepares and any(isinstance(n, cst.Yield) for n in nodes):
                self.proposed(
                    loop,
                    f"`for ... in {code_of(loop.iter)}`: batches from `{code_of(built.func)}(...)` "
                    f"({source.where(function)}), built in the training process → a DataLoader with workers",
                    WHY,
                )

    def _built_by(self, iterated: cst.BaseExpression) -> cst.Call | None:
        """The call whose result the loop iterates: itself, or the one assignment of the name (or ``self.``
        attribute) in this module."""
        if isinstance(iterated, cst.Call):
            return iterated
        target = code_of(iterated)
        built = [
            node.value
            for node in self.nodes(cst.Assign)
            if isinstance(node.value, cst.Call) and any(code_of(t.target) == target for t in node.targets)
        ]
        return built[0] if len(built) == 1 else None
