"""The codemod: a framework's precision setting where one drives training, else bf16 autocast around the
forward pass and loss of each hand-written training loop."""

from __future__ import annotations

from typing import cast

import libcst as cst
import libcst.matchers as m
from libcst.helpers import parse_template_statement

from optimizations.program.frameworks import framework_backward, framework_calls
from optimizations.program.runs.every_run import launched_in
from optimizations.program.runs.settings import cite
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.program.training_loops import BACKWARD, backward_calls, is_method_call, loss_names
from optimizations.program.values import outcomes
from optimizations.runtime import PRECISION_RUNTIME

from .edit_frameworks import CHECK, FrameworkPrecision
from .edit_loop_precision import UNFOLLOWED_DTYPE, LoopPrecision, configured_bf16

AUTOCAST = (
    'with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):\n    pass\n'
)
# Calls that only move or re-type data: a statement made of these is not part of the forward pass.
DATA_METHODS = ("to", "cuda", "pin_memory", "contiguous", "long", "int", "float", "get", "items", "keys")
DATA_FUNCTIONS = ("next", "len", "iter", "tuple", "list", "dict")


class _Refused(Exception):
    """A check failed; the message is the reason."""


def _assigned(statement: cst.BaseStatement) -> set[str]:
    """Names a simple statement binds (assignment targets, unpacking included), and the dotted attributes it
    assigns (``self.loss`` of ``logits, self.loss = model(x, y)``)."""
    names: set[str] = set()
    if not isinstance(statement, cst.SimpleStatementLine):
        return names
    for small in statement.body:
        targets = []
        if isinstance(small, cst.Assign):
            targets = [t.target for t in small.targets]
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            targets = [small.target]
        for target in targets:
            names |= {
                n.value
                for n in m.findall(target, m.Name())
                if isinstance(n, cst.Name) and not _attribute_part(target, n)
            }
            names |= {code_of(a) for a in _unpacked(target) if _dotted(a)}
    return names


def _unpacked(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The target itself, or the elements a tuple or list target unpacks into, nested ones included."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [part for element in target.elements for part in _unpacked(element.value)]
    return [target]


def _dotted(node: cst.BaseExpression) -> bool:
    """``self.loss``, ``state.out.loss``: an attribute of a name, through attributes only."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _losses(loop: cst.For | cst.While) -> set[str]:
    """The names the loop calls ``.backward()`` on, or the dotted attribute it calls it on directly
    (``self.loss.backward()``, minGPT's trainer)."""
    names = loss_names(loop)
    receivers = [call.func.value for call in backward_calls(loop) if isinstance(call.func, cst.Attribute)]
    return names or {code_of(r) for r in receivers if isinstance(r, cst.Attribute) and _dotted(r)}


def _attribute_part(target: cst.CSTNode, name: cst.Name) -> bool:
    """``name`` is inside an attribute or subscript target (``self.x = ...``, ``d[k] = ...``): not a binding."""
    return any(
        isinstance(node, (cst.Attribute, cst.Subscript)) and m.findall(node, m.Name(name.value))
        for node in m.findall(target, m.Attribute() | m.Subscript())
    )


def _read(statement: cst.BaseStatement) -> set[str]:
    return {n.value for n in m.findall(statement, m.Name()) if isinstance(n, cst.Name)}


class Bf16AutocastCodemod(FrameworkPrecision, LoopPrecision):
    """Plans the file's edits: each framework call that runs sets the precision of every loop in the file; without
    one, and unless the configs build the program in bf16, each training loop gets its forward pass and loss
    wrapped in bf16 autocast."""

    def plan(self, module: cst.Module) -> None:
        self.framework_calls = framework_calls(self.nodes(cst.Call), self.names)
        frameworks = [f for f in self.framework_calls if self.runs(f.call)]
        for found in frameworks:
            self._plan_framework(found)
        if frameworks:
            return  # the framework owns the precision of every loop in this file
        if configured_bf16(self.repo):
            return  # the configs build the model in bf16: their lines are the sites (config_sites)
        self.scaler = next(
            (
                call
                for call in self.nodes(cst.Call)
                if any(name.rsplit(".", 1)[-1] == "GradScaler" for name in self.names(call.func))
                and self._may_be_enabled(call)
            ),
            None,
        )
        for loop in self.training_loops():
            self._plan_loop(loop)

    def _may_be_enabled(self, scaler: cst.Call) -> bool:
        """A ``GradScaler`` that scales unless ``enabled=`` is always false (``enabled=False``, or a name
        bound only to false)."""
        enabled = keyword(scaler, "enabled")
        if enabled is None:
            return True
        values = outcomes(enabled.value, self._scopes(scaler))
        return values is None or any(literal_value(v) is not False for v in values)

    def _plan_loop(self, loop: cst.For | cst.While) -> None:
        message = (
            "forward and loss under bf16 autocast (CUDA GPUs with bf16 tensor cores; unchanged elsewhere)"
        )
        owner = self.enclosing_body(loop)
        existing = self._autocasts(owner)
        bf16 = [(item, call, dtypes) for item, call, dtypes in existing if "bfloat16" in dtypes]
        if bf16:
            item, call, dtypes = bf16[0]
            if all(site.line != self.line(item) for site in self.sites):
                dtype = keyword(call, "dtype") or call.args[1]
                either = (
                    ""
                    if dtypes == ["bfloat16"]
                    else f"; dtype `{code_of(dtype.value)}` is {' or '.join(dtypes)}"
                )
                self.already(
                    item, f"forward and loss under autocast to bfloat16 (`with {code_of(item)}:`{either})"
                )
            return
        launched = launched_in(self.repo, self.path, "bf16")
        if launched and not existing:
            self.already(
                loop, f"every launch of this loop trains in bf16 ({cite(launched)}): no autocast to add"
            )
            return
        chosen = next((entry for entry in existing if entry[2] == [UNFOLLOWED_DTYPE]), None)
        # an autocast whose dtype each run chooses (``--dtype bfloat16``): the mixed precision is there
        if chosen is not None:
            item, call, _ = chosen
            dtype = keyword(call, "dtype") or call.args[1]
            self.already(
                item,
                f"forward and loss under autocast (`with {code_of(item)}:`) to the dtype each run chooses "
                f"(`{code_of(dtype.value)}`): no second autocast to add",
            )
            return
        try:
            if existing:
                item, _call, dtypes = existing[0]
                raise _Refused(
                    f"the loop already autocasts at line {self.line(item)} (`{code_of(item)}`, "
                    f"to {' or '.join(dtypes)})"
                )
            sharded = self._fsdp_mixed_precision
            if sharded is not None:
                raise _Refused(
                    f"FSDP mixed precision is set up at {sharded}: the framework that shards the model casts "
                    "its forward; choose bf16 there, not an autocast inside it"
                )
            by_hand = self._cast_by_hand_in_its_modules
            if by_hand is not None and not any(half in by_hand for half in ("float16", "half()")):
                self.already(
                    loop,
                    f"the model casts itself to its compute dtype by hand at {by_hand}: its forward computes "
                    "in that dtype without an autocast",
                )
                return
            if by_hand is not None:
                raise _Refused(
                    f"the model casts itself to its compute dtype by hand at {by_hand}: its precision is chosen "
                    "there, not by an autocast"
                )
            framework = next((b for b in backward_calls(loop) if framework_backward(b)), None)
            if framework is not None:
                raise _Refused(
                    f"`{code_of(framework)}` at line {self.line(framework)}: the framework that owns this "
                    "backward sets the precision, and its set-up is not in this file"
                )
            if self.scaler is not None:
                raise _Refused(
                    f"the file uses a GradScaler at line {self.line(self.scaler)} (`{code_of(self.scaler)}`): "
                    "float16 mixed precision; moving it to bf16 is a separate change"
                )
            half = self._float16(owner)
            if half is not None:
                raise _Refused(f"the loop's code uses float16 at line {self.line(half)} (`{code_of(half)}`)")
            cast = self._weights_in_bf16(loop)
            if cast is not None:
                if all(site.line != self.line(cast) for site in self.sites):  # one site for the file's loops
                    written = code_of(cast).strip().splitlines()[0]
                    self.already(
                        cast,
                        f"the model is put in bfloat16 by hand (`{written}`): its forward computes in bf16 "
                        "without autocast",
                    )
                return
            block, span = self._span(loop)
        except _Refused as refusal:
            self.refused(loop, message, str(refusal))
            return
        self._wrap(block, span)
        self.runtime_imports.add((PRECISION_RUNTIME, CHECK))
        self.need_module("torch")
        self.changed(span[0], message)

    def _span(
        self, loop: cst.For | cst.While
    ) -> tuple[cst.IndentedBlock | cst.Module, list[cst.BaseStatement]]:
        """The block holding ``.backward()`` and the statements in it to wrap: from the first one of the
        forward pass to the last assignment of the loss."""
        backwards = backward_calls(loop)
        if len(backwards) > 1:
            lines = ", ".join(str(self.line(b)) for b in backwards)
            raise _Refused(
                f"the loop calls .backward() {len(backwards)} times (lines {lines}): wrap each forward pass by hand"
            )
        backward = backwards[0]
        # Every node of the module is in a statement directly in a block or in the module itself.
        statement = cast(cst.BaseStatement, self.statement_of(backward))
        block = cast(cst.IndentedBlock | cst.Module, self.parent(statement))
        body = list(block.body)
        index = next(i for i, s in enumerate(body) if s is statement)
        losses = _losses(loop)
        last = next((i for i in range(index - 1, -1, -1) if _assigned(body[i]) & losses), None)
        if last is None:
            receiver = cast(cst.Attribute, backward.func).value  # ``<receiver>.backward()``
            raise _Refused(
                f"the loss ({', '.join(sorted(losses)) or code_of(receiver)}) is not computed in the "
                "block that calls .backward(): wrap its forward pass by hand"
            )
        first, needed = last, _read(body[last])
        for i in range(last - 1, -1, -1):
            earlier = body[i]
            written = _assigned(earlier) if isinstance(earlier, cst.SimpleStatementLine) else _read(earlier)
            if not written & needed:
                continue
            if not isinstance(earlier, cst.SimpleStatementLine):
                break
            if not self._moves_data(earlier):
                first, needed = i, needed | _read(earlier)
        span = body[first : last + 1]
        for node in span:
            for call in m.findall(node, m.Call()):
                if is_method_call(call, BACKWARD, "step"):
                    raise _Refused(
                        f"line {self.line(call)} steps or calls .backward() inside the forward pass"
                    )
        return block, span

    def _moves_data(self, statement: cst.SimpleStatementLine) -> bool:
        """Only moves or unpacks data: every call is ``.to(...)``, ``.cuda()``, ``next(...)``, ..."""
        for call in m.findall(statement, m.Call()):
            if is_method_call(call, *DATA_METHODS):
                continue
            if (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Name)
                and call.func.value in DATA_FUNCTIONS
            ):
                continue
            return False
        return True

    def _wrap(self, block: cst.IndentedBlock | cst.Module, span: list[cst.BaseStatement]) -> None:
        body = list(block.body)
        start = next(i for i, s in enumerate(body) if s is span[0])
        count = len(span)

        def wrap(node: cst.CSTNode) -> cst.CSTNode:
            updated = cast(cst.IndentedBlock | cst.Module, node)  # the block, as the pass leaves it
            statements = list(updated.body)
            inner = statements[start : start + count]
            # _span starts the span at a simple statement line, and the pass keeps it one.
            first = cast(cst.SimpleStatementLine, inner[0])
            leading = first.leading_lines
            inner[0] = first.with_changes(leading_lines=[])
            template = cast(cst.With, parse_template_statement(AUTOCAST))
            with_statement = template.with_changes(
                body=template.body.with_changes(body=inner), leading_lines=leading
            )
            return updated.with_changes(
                body=[*statements[:start], with_statement, *statements[start + count :]]
            )

        self.replacements[block] = wrap
