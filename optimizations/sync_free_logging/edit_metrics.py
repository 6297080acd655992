"""What ``sync_free_logging`` proposes where a training step copies its metrics to the host every step: a read
(``.item()``, ``.cpu()``, ``.tolist()``) of something other than the loss, outside the loop's logging
condition, in the loop or in a function of the file the step calls (a hand-written loop's metrics method, a
Trainer subclass's ``compute_loss``). Keeping them on the device until the logging step reworks the metrics
dict and what the logger reads, so it is a proposal for a person, never an edit."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.hf import trainer_class
from optimizations.program.syntax import NESTED_SCOPES, code_of, local_callee, walk
from optimizations.program.training_loops import LOOPS, is_method_call, loss_names

# Host reads of a tensor: each waits for the GPU to finish the work queued before it.
HOST_READS = ("item", "cpu", "tolist")
# The methods a transformers/TRL Trainer calls in every training step.
STEP_METHODS = ("compute_loss", "training_step")
WHY = (
    "the values are read on the host in every step, each read a sync that waits for the GPU, outside the "
    "logging condition; keeping them as device tensors until the step that logs reworks the metrics the step "
    "returns and what the logger reads, which a person should restructure"
)


class HostReadsPerStep(PlannedCodemod):
    """Proposes keeping a step's metrics on the device where the step reads them on the host every step."""

    def plan(self, module: cst.Module) -> None:
        for loop in self.training_loops():
            losses = loss_names(loop)
            reads = [
                node
                for node in walk(loop.body, NESTED_SCOPES + LOOPS)
                if self._host_read(node, losses) and not self.in_logging_block(node, loop)
            ]
            for function in self._called(loop.body, NESTED_SCOPES + LOOPS, loop):
                reads += [node for node in walk(function.body, NESTED_SCOPES) if self._host_read(node, set())]
            self._propose(reads, "the training loop")
        for cls in self.nodes(cst.ClassDef):
            if not any(trainer_class(self.names(base.value)) is not None for base in cls.bases):
                continue
            steps = [
                f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value in STEP_METHODS
            ]
            reads = [
                node
                for function in [*steps, *(c for s in steps for c in self._called(s.body, NESTED_SCOPES))]
                for node in walk(function.body, NESTED_SCOPES)
                if self._host_read(node, set())
            ]
            self._propose(reads, f"{cls.name.value}'s training step")
        self._periodic_callbacks()

    def _periodic_callbacks(self) -> None:
        """Reports a step callback (a function of this file passed to ``trainer.set_callback("on_batch_end",
        ...)``, minGPT's projects) that reads values on the host only under a ``%`` period as done already."""
        registered = {
            arg.value.value
            for call in self.nodes(cst.Call)
            if "callback" in code_of(call.func).rpartition(".")[2]
            for arg in call.args
            if isinstance(arg.value, cst.Name)
        }
        for function in self.nodes(cst.FunctionDef):
            if function.name.value not in registered:
                continue
            reads = [node for node in walk(function.body, NESTED_SCOPES) if self._host_read(node, set())]
            gates = [gate for read in reads if (gate := self._period_of(read, function)) is not None]
            if reads and len(gates) == len(reads):
                self.already(
                    reads[0],
                    f"`{code_of(reads[0])}` is read on the host only in some steps, in the step callback "
                    f"`{function.name.value}` (under `if {code_of(gates[0])}`)",
                )

    def _period_of(self, node: cst.CSTNode, scope: cst.CSTNode) -> cst.BaseExpression | None:
        """The ``%`` test of the ``if`` that ``node`` runs under inside ``scope`` (a loop, a function); None where
        it runs every time."""
        for ancestor in self.ancestors(node):
            if ancestor is scope:
                return None
            if isinstance(ancestor, cst.If) and any(
                isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo)
                for n in walk(ancestor.test, ())
            ):
                return ancestor.test
        return None

    def _host_read(self, node: cst.CSTNode, losses: set[str]) -> bool:
        """A ``.item()``/``.cpu()``/``.tolist()`` without arguments, not of the loss (whose reads the loop
        rewrite handles): its receiver's root name is none of ``losses``."""
        if not (is_method_call(node, *HOST_READS) and not node.args and isinstance(node.func, cst.Attribute)):
            return False
        receiver = node.func.value
        while isinstance(receiver, (cst.Attribute, cst.Call, cst.Subscript)):
            receiver = receiver.value if not isinstance(receiver, cst.Call) else receiver.func
        return not (isinstance(receiver, cst.Name) and receiver.value in losses)

    def _called(
        self, body: cst.CSTNode, stop: tuple[type, ...], loop: cst.For | cst.While | None = None
    ) -> list[cst.FunctionDef]:
        """The functions of this file ``body`` calls by name or as ``self.<method>`` in every step: not in the
        loop's logging blocks, nor under an ``if`` that tests a period (``step % eval_every == 0``)."""
        called = {
            name
            for node in walk(body, stop)
            if isinstance(node, cst.Call)
            and (loop is None or not self._periodic(node, loop))
            and (name := local_callee(node)) is not None
        }
        return [
            f for f in self.nodes(cst.FunctionDef) if f.name.value in called and f.name.value != "__init__"
        ]

    def _periodic(self, node: cst.CSTNode, loop: cst.For | cst.While) -> bool:
        """``node`` runs only in some steps of ``loop``: in a logging block, or under an ``if`` with a ``%``."""
        return self.in_logging_block(node, loop) or self._period_of(node, loop) is not None

    def _propose(self, reads: list[cst.CSTNode], where: str) -> None:
        """One proposal at the first of ``reads``, naming how many there are."""
        if not reads:
            return
        first = min(reads, key=self.line)
        lines = sorted({self.line(r) for r in reads})
        shown = ", ".join(map(str, lines[:6])) + (" ..." if len(lines) > 6 else "")
        more = f" and {len(reads) - 1} more host read(s)" if len(reads) > 1 else ""
        self.proposed(
            first,
            f"`{code_of(first)}`{more} every step in {where} (line {shown}) → kept on the device, read where it "
            "logs",
            WHY,
        )
