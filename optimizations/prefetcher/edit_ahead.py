"""A loop that prefetches already: it draws its next batch with ``next(loader)`` after the backward pass, from a
repository generator that copies each batch to the device without blocking (nanochat's data loader stages a
pinned buffer and ``gpu_buffer.copy_(cpu_buffer, non_blocking=True)``), so the copy overlaps the step."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.syntax import NESTED_SCOPES, code_of, keyword, literal_value, walk
from optimizations.program.training_loops import BACKWARD, is_method_call
from optimizations.program.values import ProgramValues


class FetchedAhead(PlannedCodemod):
    """Reports a training loop's ``next(loader)`` after its backward pass as prefetching done, where the loader
    is a repository generator that copies its batches to the device without blocking."""

    def plan(self, module: cst.Module) -> None:
        values = ProgramValues(self)
        for loop in self.training_loops():
            backward = [n for n in walk(loop.body, NESTED_SCOPES) if is_method_call(n, BACKWARD)]
            for call in walk(loop.body, NESTED_SCOPES):
                if not (
                    isinstance(call, cst.Call)
                    and code_of(call.func) == "next"
                    and call.args
                    and isinstance(call.args[0].value, cst.Name)
                    and any(self.line(b) < self.line(call) for b in backward)
                ):
                    continue
                copy = self._copies_without_blocking(values, call.args[0].value.value)
                if copy is not None:
                    self.already(
                        call,
                        f"`{code_of(call)}` draws the next batch while the GPU runs this step, from a loader that "
                        f"copies it to the device without blocking (`{copy}`)",
                    )

    def _copies_without_blocking(self, values: ProgramValues, name: str) -> str | None:
        """The non-blocking copy (``gpu_buffer.copy_(cpu_buffer, non_blocking=...)``) of the repository function
        whose result the module binds to ``name``; None where there is none."""
        for assign in self.nodes(cst.Assign):
            bound = [
                t.target for t in assign.targets if isinstance(t.target, cst.Name) and t.target.value == name
            ]
            if not bound or not isinstance(assign.value, cst.Call):
                continue
            found = values.callee(assign.value, values.here)
            if found is None:
                continue
            for node in walk(found[0].body, NESTED_SCOPES):
                blocking = keyword(node, "non_blocking") if isinstance(node, cst.Call) else None
                if blocking is not None and literal_value(blocking.value) is not False:
                    return code_of(node)
        return None
