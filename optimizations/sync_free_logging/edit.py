"""The codemod of ``sync_free_logging``: a hand-written loop's per-step host reads of the loss kept on the device
and read where the loop logs and after it (see README.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import libcst as cst
from libcst.helpers import parse_template_expression, parse_template_statement

from optimizations.edits.expressions import float_of
from optimizations.edits.planned import PlannedCodemod
from optimizations.program.syntax import NESTED_SCOPES, code_of, literal_value, walk
from optimizations.program.training_loops import LOOPS, is_method_call, loss_names

# Methods that keep a tensor's value (on the host or the device) and may sit between the loss and `.item()`.
PASS_THROUGH = ("detach", "cpu", "float")


@dataclass
class _Plan:
    """Edits for one host read, committed only when every check passes."""

    replacements: dict[cst.CSTNode, Callable[[cst.CSTNode], cst.CSTNode]] = field(default_factory=dict)
    after_loop: list[tuple[str, cst.BaseStatement]] = field(default_factory=list)


class _Refused(Exception):
    """A check failed; the message is the reason."""


class SyncFreeLosses(PlannedCodemod):
    """Per-step ``loss.item()``/``float(loss)`` in training loops rewritten to keep the value on the device, in
    three shapes (a running sum, a last value, a history list); a read it cannot keep exact raises
    :class:`_Refused`."""

    def plan(self, module: cst.Module) -> None:
        self.materialized: set[tuple[int, str]] = set()
        for loop in self.training_loops():
            losses = loss_names(loop)
            per_step: list[tuple[cst.Call, cst.Name]] = []  # host reads every step
            kept: list[cst.CSTNode] = []  # reads where the loop logs, and device copies
            for node in walk(loop.body, NESTED_SCOPES + LOOPS):
                loss = self._host_read_of_loss(node, losses)
                # A host read of the loss is a call.
                if isinstance(node, cst.Call) and loss is not None and not self.in_logging_block(node, loop):
                    per_step.append((node, loss))
                elif loss is not None or self._kept_on_device(node, losses):
                    kept.append(node)
            for node, loss in per_step:
                self._plan_read(loop, node, loss)
            if kept and not per_step:
                where = (
                    "read where the loop logs"
                    if self.in_logging_block(kept[0], loop)
                    else "kept on the device"
                )
                self.already(
                    kept[0], f"the loss is not read on the host every step: `{code_of(kept[0])}` {where}"
                )
            elif not kept and not per_step:
                self._read_by_the_step_loop(loop, losses)

    def _read_by_the_step_loop(self, loop: cst.For | cst.While, losses: set[str]) -> None:
        """An accumulation loop whose loss is read in the loop around it, the optimizer step's (nanoGPT's
        ``for micro_step in range(...)`` inside ``while True``): already done where every host read there is
        in that loop's logging block. Other reads are left to a person (no edit for the outer loop)."""
        outer = next(
            (a for a in self.ancestors(loop) if isinstance(a, (*LOOPS, *NESTED_SCOPES, cst.Module))), None
        )
        if not isinstance(outer, LOOPS):
            return
        reads = [
            node
            for node in walk(outer.body, NESTED_SCOPES + LOOPS)
            if isinstance(node, cst.Call) and self._host_read_of_loss(node, losses) is not None
        ]
        if reads and all(self.in_logging_block(read, outer) for read in reads):
            self.already(
                reads[0],
                f"the loss is not read on the host every step: `{code_of(reads[0])}` read where the step loop logs",
            )

    @staticmethod
    def _kept_on_device(node: cst.CSTNode, losses: set[str]) -> bool:
        """``<loss>.detach()``: the loss's value kept as a tensor, not read on the host."""
        return (
            is_method_call(node, "detach")
            and isinstance(node.func, cst.Attribute)
            and isinstance(node.func.value, cst.Name)
            and node.func.value.value in losses
        )

    def _host_read_of_loss(self, node: cst.CSTNode, losses: set[str]) -> cst.Name | None:
        """The loss name when ``node`` is ``<loss>[.detach()/.cpu()/.float()].item()`` or ``float(<loss>...)``."""
        inner: cst.BaseExpression
        if is_method_call(node, "item") and isinstance(node.func, cst.Attribute) and not node.args:
            inner = node.func.value
        elif (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Name)
            and node.func.value == "float"
            and len(node.args) == 1
            and "builtins.float" in self.names(node.func)
        ):
            inner = node.args[0].value
        else:
            return None
        while (
            is_method_call(inner, *PASS_THROUGH) and isinstance(inner.func, cst.Attribute) and not inner.args
        ):
            inner = inner.func.value
        return inner if isinstance(inner, cst.Name) and inner.value in losses else None

    def _plan_read(self, loop: cst.For | cst.While, read: cst.Call, loss: cst.Name) -> None:
        message = f"`{code_of(read)}` every step → kept on the device, read where the loop logs"
        holder = self.parent(read)
        try:
            if isinstance(holder, cst.AugAssign) and isinstance(holder.operator, cst.AddAssign):
                if not isinstance(holder.target, cst.Name):
                    raise _Refused(f"the sum goes into `{code_of(holder.target)}`, not a local variable")
                plan = self._accumulator(loop, holder.target.value, holder)
                plan.replacements[read] = _detached(loss, double=True)
            elif isinstance(holder, cst.Assign) and len(holder.targets) == 1:
                target = holder.targets[0].target
                if not isinstance(target, cst.Name):
                    raise _Refused(f"the value goes into `{code_of(target)}`, not a local variable")
                plan = self._value(loop, target.value, holder)
                plan.replacements[read] = _detached(loss)
            elif (list_name := self._appended_to(read)) is not None:
                plan = self._history(loop, list_name)
                plan.replacements[read] = _detached(loss)
            else:
                raise _Refused(
                    f"it is read on the host every step (line {self.line(read)}), outside the loop's logging "
                    "condition; move it under the `if` that logs"
                )
        except _Refused as refusal:
            self.refused(read, message, str(refusal))
            return
        self.replacements.update(plan.replacements)
        for list_name, statement in plan.after_loop:
            key = (id(loop), list_name)
            if key not in self.materialized:
                self.materialized.add(key)
                self.inserted_after.setdefault(loop, []).append(statement)
        self.changed(read, message)

    def _appended_to(self, node: cst.CSTNode) -> str | None:
        """``L`` when ``node`` is the only argument of an ``L.append(...)`` statement."""
        arg = self.parent(node)
        call = self.parent(arg) if isinstance(arg, cst.Arg) else None
        if (
            call is not None
            and is_method_call(call, "append")
            and len(call.args) == 1
            and isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name)
            and isinstance(self.parent(call), cst.Expr)
        ):
            return call.func.value.value
        return None

    # -- the three shapes -----------------------------------------------------------------------------------
    def _accumulator(self, loop: cst.For | cst.While, name: str, own: cst.AugAssign) -> _Plan:
        body = self.enclosing_body(loop)
        reads, writes, nested = self.reads_and_writes(body, name)
        self._no_closures(name, nested)
        if all(write is own for write in writes):
            raise _Refused(f"`{name}` is not started from a number in this function")
        for write in writes:
            if write is own:
                continue
            if not (isinstance(write, cst.Assign) and isinstance(literal_value(write.value), (int, float))):
                raise _Refused(
                    f"`{name}` is also set from something other than a number (line {self.line(write)})"
                )
        return self._wrap_reads(loop, name, reads, _float_of)

    def _value(self, loop: cst.For | cst.While, name: str, own: cst.Assign) -> _Plan:
        body = self.enclosing_body(loop)
        reads, _writes, nested = self.reads_and_writes(body, name)
        self._no_closures(name, nested)
        per_step = [
            read for read in reads if self.within(read, loop) and not self.in_logging_block(read, loop)
        ]
        appended_to = {self._appended_to(read) for read in per_step}
        if None in appended_to:
            line = self.line(next(r for r in per_step if self._appended_to(r) is None))
            raise _Refused(f"`{name}` is read every step at line {line}, outside the logging condition")
        plan = self._wrap_reads(loop, name, [r for r in reads if r not in per_step], _float_of)
        for list_name in cast(set[str], appended_to):  # None was refused above
            history = self._history(loop, list_name)
            plan.replacements.update(history.replacements)
            plan.after_loop.extend(history.after_loop)
        return plan

    def _history(self, loop: cst.For | cst.While, name: str) -> _Plan:
        body = self.enclosing_body(loop)
        reads, writes, nested = self.reads_and_writes(body, name)
        self._no_closures(name, nested)
        if not writes:
            raise _Refused(f"`{name}` is not a list this function builds")
        for write in writes:
            empty = isinstance(write, cst.Assign) and (
                isinstance(write.value, cst.List)
                and not write.value.elements
                or isinstance(write.value, cst.Call)
                and code_of(write.value) == "list()"
            )
            if not empty:
                raise _Refused(f"`{name}` is not a list this function builds empty (line {self.line(write)})")
        if any(isinstance(n, (cst.Return, cst.Yield)) for n in walk(loop.body)):
            raise _Refused(f"the loop can return or yield before `{name}` is read back from the device")
        plan = _Plan()
        for read in reads:
            usage = self.parent(read)
            if not self.within(read, loop):
                continue  # after the loop, the list holds floats again
            if isinstance(usage, cst.Attribute) and usage.attr.value == "append":
                continue
            # An argument's holder is a call (a class's bases aside, which only a class statement has).
            if isinstance(usage, cst.Arg) and code_of(cast(cst.Call, self.parent(usage)).func) == "len":
                continue
            if isinstance(usage, cst.Subscript) and self.in_logging_block(read, loop):
                plan.replacements[usage] = _float_of
                continue
            raise _Refused(
                f"`{name}` is read at line {self.line(read)} inside the loop in a way that needs floats "
                "every step"
            )
        materialize = parse_template_statement(
            "{name} = [float(value) for value in {name}]", name=cst.Name(name)
        )
        plan.after_loop.append((name, materialize))
        return plan

    def _wrap_reads(
        self,
        loop: cst.For | cst.While,
        name: str,
        reads: list[cst.Name],
        wrap: Callable[[cst.CSTNode], cst.CSTNode],
    ) -> _Plan:
        plan = _Plan()
        for read in reads:
            if self.within(read, loop) and not self.in_logging_block(read, loop):
                raise _Refused(
                    f"`{name}` is read every step at line {self.line(read)}, outside the logging condition"
                )
            plan.replacements[read] = wrap
        return plan

    def _no_closures(self, name: str, nested: list[cst.Name]) -> None:
        if nested:
            raise _Refused(
                f"`{name}` is used inside a nested function or lambda (line {self.line(nested[0])})"
            )


def _float_of(updated: cst.CSTNode) -> cst.CSTNode:
    """``float(<updated>)``: the replacement of a read (an expression, so its updated node is one too)."""
    return float_of(cast(cst.BaseExpression, updated))


def _detached(loss: cst.Name, double: bool = False) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A replacement building ``<loss>.detach()`` (``<loss>.detach().double()`` for a float64 sum)."""
    template = "{loss}.detach().double()" if double else "{loss}.detach()"
    return lambda _updated: parse_template_expression(template, loss=cst.Name(loss.value))
