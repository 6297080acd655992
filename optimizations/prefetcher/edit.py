"""The codemod of ``prefetcher``: a hand-written loop's batches prefetched by ``CudaPrefetcher`` (vendored from
``helper.py``), its loader pinned, and a Trainer config's batches copied without blocking (see README.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeGuard, cast

import libcst as cst
import libcst.matchers as m

from optimizations.edits.expressions import add_keywords, call_expr, expr
from optimizations.edits.planned import PlannedCodemod
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.config_use import not_a_run_config
from optimizations.program.hf import is_training_config
from optimizations.program.syntax import (
    NESTED_SCOPES,
    code_of,
    is_data_loader,
    keyword,
    literal_value,
    qualified_under,
    star_kwargs,
    walk,
)
from optimizations.program.training_loops import is_method_call
from optimizations.program.values import ProgramValues

# What a Trainer config gets: its batches copied without blocking the host.
NON_BLOCKING = 'accelerator_config={"non_blocking": True}'

RUNTIME = RuntimeHelper("prefetcher", "optimizations.prefetcher")
PREFETCHER = "CudaPrefetcher"
PINNED_COLLATE = "NumpyPinnedCollate"
# Calls whose first argument is the iterable a loop really walks: `enumerate(loader)`, `tqdm(loader)`.
ITERATION_WRAPPERS = (
    "builtins.enumerate",
    "tqdm.tqdm",
    "tqdm.auto.tqdm",
    "tqdm.std.tqdm",
    "tqdm.notebook.tqdm",
)
# Tensor metadata that reads the same on any device.
DEVICE_INDEPENDENT_ATTRIBUTES = ("shape", "dtype", "ndim")
DEVICE_INDEPENDENT_METHODS = ("size", "numel", "dim")
DEVICE_HINTS = ("device", "cuda", "rank")


@dataclass(frozen=True)
class InPlaceMover:
    """A library function that moves a whole batch to a device in place and returns nothing."""

    batch: tuple[int, str]  # the batch parameter: position, keyword
    device: tuple[int, str]  # the device parameter: position, keyword
    moves_block_masks: bool  # it moves flex-attention BlockMasks, which CudaPrefetcher leaves where they are


# torchtune's `batch_to_device(batch, device)`: tensors and nested dicts (as CudaPrefetcher does),
# flex-attention BlockMasks too; any other value raises.
TORCHTUNE_BATCH_TO_DEVICE = InPlaceMover(batch=(0, "batch"), device=(1, "device"), moves_block_masks=True)
# Known "move this batch to the device" helpers, by qualified name.
IN_PLACE_MOVERS = {
    "torchtune.utils.batch_to_device": TORCHTUNE_BATCH_TO_DEVICE,
    "torchtune.utils._device.batch_to_device": TORCHTUNE_BATCH_TO_DEVICE,
}
# Library code that puts a flex-attention BlockMask in a batch, as (packages, names): a BlockMask has `.to()`,
# so `{k: v.to(device) ...}` and the movers above move it, and CudaPrefetcher, which moves tensors, does not.
BLOCK_MASK_SOURCES = (
    (("torch.nn.attention.flex_attention",), ("BlockMask", "create_block_mask")),
    (("torchtune",), ("padded_collate_packed", "packed_block_causal_mask", "create_block_causal_mask_flex")),
)


@dataclass(frozen=True)
class _DictMove:
    """``{k: v.to(device) for k, v in batch.items()}``: the comprehension, its ``v.to(device)`` and ``batch``."""

    comprehension: cst.DictComp
    move: cst.Call
    batch: cst.Name


@dataclass(frozen=True)
class _InPlaceMove:
    """A call of an :class:`InPlaceMover` on the loop's batch, and its top-level statement in the loop."""

    call: cst.Call
    mover: InPlaceMover
    batch: cst.Name
    device: cst.BaseExpression
    expression: cst.Expr  # the call as an expression statement
    statement: cst.CSTNode


class _Refused(Exception):
    """A check failed; the message is the reason."""


def _at_lines(named: Mapping[str, cst.CSTNode], line: Callable[[cst.CSTNode], int]) -> str:
    """``a (line 3), b (line 9)``: each name with the line of its node."""
    return ", ".join(f"{name} (line {line(node)})" for name, node in sorted(named.items()))


class PrefetchBatches(PlannedCodemod):
    """Loops that copy each batch to the device rewritten to iterate a ``CudaPrefetcher``, their ``DataLoader``
    pinned; Trainer configs given non-blocking copies. A loop's checks raise :class:`_Refused`."""

    def plan(self, module: cst.Module) -> None:
        for loop in self.training_loops():
            if isinstance(loop, cst.For):
                self._plan_loop(loop)
        for call in self.nodes(cst.Call):
            if is_training_config(self.names(call.func)):
                self._plan_trainer_config(call)

    # -- hand-written loops ---------------------------------------------------------------------------------
    def _plan_loop(self, loop: cst.For) -> None:
        source, enumerated = self._loaded_iterable(loop.iter)
        if isinstance(source, cst.Call) and any(n.endswith(PREFETCHER) for n in self.names(source.func)):
            self.already(loop, f"`for {code_of(loop.target)} in {code_of(loop.iter)}`: batches prefetched")
            return
        batch_names = _batch_names(loop.target, enumerated)
        moves, dict_moves = self._moves(loop, batch_names)
        helper_calls = self._helper_calls(loop, batch_names)
        if not moves and not dict_moves and not helper_calls:
            return
        copies = "blocking `.to(device)` copies dropped"
        if helper_calls:
            copies = f"blocking `{code_of(helper_calls[0].func)}(...)` copy dropped"
            if moves or dict_moves:
                copies = f"blocking `.to(device)` and `{code_of(helper_calls[0].func)}(...)` copies dropped"
        message = (
            f"`for {code_of(loop.target)} in {code_of(loop.iter)}`: batches copied to the device one step "
            f"ahead on a side stream (CudaPrefetcher); {copies}"
        )
        try:
            in_place = [self._in_place_move(loop, call, batch_names) for call in helper_calls]
            targets = [_device_of(move) for move in moves] + [_device_of(d.move) for d in dict_moves]
            targets += [move.device for move in in_place]
            devices = {code_of(device): device for device in targets}
            if len(devices) > 1:
                raise _Refused(f"the batch goes to different devices: {_at_lines(devices, self.line)}")
            device = next(iter(devices.values()))
            _check_device_fixed(loop, device)
            self._check_batch_stays_on_device(loop, batch_names, moves, dict_moves, in_place)
            movers = [f"`{code_of(move.call.func)}`" for move in in_place if move.mover.moves_block_masks]
            if dict_moves:
                movers.append("`{k: v.to(device) ...}`")
            if movers:
                self._check_no_block_masks(movers[0])
            self._check_loader_state_not_saved(source)
        except _Refused as refusal:
            self.refused(loop, message, str(refusal))
            return

        self.replacements[source] = _prefetched(device)
        for move in moves:
            self.replacements[move] = lambda updated: _receiver(cast(cst.Call, updated))  # a call stays one
            assignment = self.parent(move)
            if isinstance(assignment, cst.Assign) and _assigns_only(assignment, code_of(_receiver(move))):
                self._drop_statement_of(assignment)  # `x = x.to(device)` would become `x = x`
        for dict_move in dict_moves:
            batch = dict_move.batch.value
            self.replacements[dict_move.comprehension] = _replaced_by_name(batch)
            assignment = self.parent(dict_move.comprehension)
            if isinstance(assignment, cst.Assign) and _assigns_only(assignment, batch):
                self._drop_statement_of(assignment)
        for helper_move in in_place:
            # `helper(batch, device)` alone goes; the whole line if nothing else is on it.
            line = self.parent(helper_move.expression)
            if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
                self.dropped.add(line)
            else:
                self.dropped.add(helper_move.expression)
        self.runtime_imports.add((RUNTIME, PREFETCHER))
        if isinstance(source, cst.Name):
            self._plan_dataloader(loop, source.value)
        self.changed(loop, message)

    def _drop_statement_of(self, node: cst.CSTNode) -> None:
        """Drop the statement that holds ``node`` (every node of the module lies in one)."""
        statement = self.statement_of(node)
        if statement is not None:
            self.dropped.add(statement)

    def _loaded_iterable(self, iterable: cst.BaseExpression) -> tuple[cst.BaseExpression, bool]:
        """The expression that yields the batches, and whether ``enumerate`` pairs them with a count."""
        if (
            isinstance(iterable, cst.Call)
            and iterable.args
            and iterable.args[0].keyword is None
            and self.names(iterable.func) & set(ITERATION_WRAPPERS)
        ):
            return iterable.args[0].value, "builtins.enumerate" in self.names(iterable.func)
        return iterable, False

    def _moves(self, loop: cst.For, batch_names: set[str]) -> tuple[list[cst.Call], list[_DictMove]]:
        """``<batch...>.to(device)`` calls, and ``{k: v.to(device) for k, v in batch.items()}`` comprehensions."""
        moves: list[cst.Call] = []
        dict_moves: list[_DictMove] = []
        for node in walk(loop.body, NESTED_SCOPES):
            if _is_device_move(node) and _root_name(_receiver(node)) in batch_names:
                moves.append(node)
            elif isinstance(node, cst.DictComp) and (dict_move := _dict_move(node, batch_names)) is not None:
                dict_moves.append(dict_move)
        return moves, dict_moves

    def _helper_calls(self, loop: cst.For, batch_names: set[str]) -> list[cst.Call]:
        """Calls of a known in-place batch mover (:data:`IN_PLACE_MOVERS`) whose arguments name the batch."""
        return [
            node
            for node in walk(loop.body, NESTED_SCOPES)
            if isinstance(node, cst.Call)
            and self.names(node.func) & IN_PLACE_MOVERS.keys()
            and any(name.value in batch_names for arg in node.args for name in _names_in(arg.value))
        ]

    def _in_place_move(self, loop: cst.For, call: cst.Call, batch_names: set[str]) -> _InPlaceMove:
        """The helper call as the loop's copy of the whole batch, or the reason it cannot be one."""
        mover = IN_PLACE_MOVERS[min(self.names(call.func) & IN_PLACE_MOVERS.keys())]
        shown = f"`{code_of(call)}` (line {self.line(call)})"
        batch, device = _argument(call, *mover.batch), _argument(call, *mover.device)
        if batch is None or device is None:
            raise _Refused(f"{shown}: the batch or the device is not a plain argument")
        if not (isinstance(batch, cst.Name) and {batch.value} == batch_names):
            raise _Refused(
                f"{shown} moves `{code_of(batch)}`, not the whole batch `{code_of(loop.target)}`; "
                "CudaPrefetcher would move all of it"
            )
        if any(name.value in batch_names for name in _names_in(device)):
            raise _Refused(f"{shown}: the device is read from the batch")
        not_a_statement = f"{shown} is not a statement of its own in the loop's body (a condition, a value)"
        expression = self.parent(call)
        if not isinstance(expression, cst.Expr):
            raise _Refused(not_a_statement)
        holder = self.parent(expression)
        statement: cst.CSTNode
        if holder is loop.body:
            statement = expression
        elif isinstance(holder, cst.SimpleStatementLine) and self.parent(holder) is loop.body:
            statement = holder
        else:
            raise _Refused(not_a_statement)
        return _InPlaceMove(call, mover, batch, device, expression, statement)

    def _check_no_block_masks(self, mover: str) -> None:
        """Refused where the file uses library code that can put a BlockMask in the batch
        (:data:`BLOCK_MASK_SOURCES`): the loop's own copy (``mover``) moves it, CudaPrefetcher would not."""
        for packages, attrs in BLOCK_MASK_SOURCES:
            for node in self.nodes(cst.Name, cst.Attribute):
                last = node.value if isinstance(node, cst.Name) else node.attr.value
                if last in attrs and qualified_under(self.names(node), packages, attrs):
                    raise _Refused(
                        f"{mover} also moves flex-attention BlockMasks, which CudaPrefetcher leaves where "
                        "they are, and this file can put one in the batch "
                        f"(`{code_of(node)}` at line {self.line(node)})"
                    )

    def _check_loader_state_not_saved(self, loader: cst.BaseExpression) -> None:
        """Refused where the file checkpoints the loader's position (``loader.state_dict()``, a
        ``StatefulDataLoader``'s): the prefetcher has drawn one batch more than the loop has trained on, so a
        run resumed from that state would skip a batch. The loader is matched by its last name (``_loader`` of
        ``self._loader``), wherever the file reads it (a checkpoint method, a function given the recipe)."""
        name = _last_name(loader)
        for call in self.nodes(cst.Call):
            func = call.func
            if (
                name is not None
                and isinstance(func, cst.Attribute)
                and func.attr.value == "state_dict"
                and _last_name(func.value) == name
            ):
                raise _Refused(
                    f"the loader's position is checkpointed (`{code_of(call)}` at line {self.line(call)}): "
                    "prefetching draws one batch ahead, so a run resumed from that state would skip a batch"
                )

    def _check_batch_stays_on_device(
        self,
        loop: cst.For,
        batch_names: set[str],
        moves: list[cst.Call],
        dict_moves: list[_DictMove],
        in_place: list[_InPlaceMove],
    ) -> None:
        """Every use of the batch before it is rebound (or moved in place) must be a move or
        device-independent metadata."""
        inside_moves = {id(n) for move in moves for n in (_receiver(move), *walk(_receiver(move), ()))}
        inside_moves |= {id(d.batch) for d in dict_moves}
        inside_moves |= {id(move.batch) for move in in_place}
        moved_by = {id(move.statement): move.batch.value for move in in_place}
        rebound: set[str] = set()
        for statement in loop.body.body:
            for node in walk(statement, NESTED_SCOPES):
                if (
                    isinstance(node, cst.Name)
                    and node.value in batch_names - rebound
                    and id(node) not in inside_moves
                    and not self._metadata_only(node)
                    and not _is_binding(node, self.parent(node))
                ):
                    raise _Refused(
                        f"the batch is used on the host at line {self.line(node)} "
                        f"(`{code_of(self._use_of(node))}`); after prefetching it is on the device"
                    )
            rebound |= _assigned_names(statement) & batch_names
            if id(statement) in moved_by:
                rebound.add(moved_by[id(statement)])  # on the device from here on, prefetched or not

    def _use_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """``node`` with the subscripts and attributes applied to it (the expression a reader would quote)."""
        parent = self.parent(node)
        while isinstance(parent, (cst.Subscript, cst.Attribute, cst.Call)):
            if isinstance(parent, cst.Call) and parent.func is not node:
                break
            node = parent
            parent = self.parent(node)
        return node

    def _metadata_only(self, name: cst.Name) -> bool:
        """``len(batch)``, ``batch["x"].shape``, ``batch.size(0)``: the same on any device."""
        node: cst.CSTNode = name
        while True:
            parent = self.parent(node)
            if isinstance(parent, cst.Subscript) and parent.value is node:
                node = parent
            elif isinstance(parent, cst.Attribute) and parent.value is node:
                if parent.attr.value in DEVICE_INDEPENDENT_ATTRIBUTES:
                    return True
                call = self.parent(parent)
                return parent.attr.value in DEVICE_INDEPENDENT_METHODS and isinstance(call, cst.Call)
            else:
                call = self.parent(parent) if isinstance(parent, cst.Arg) else None
                return isinstance(call, cst.Call) and code_of(call.func) == "len"

    def _plan_dataloader(self, loop: cst.For, loader: str) -> None:
        """Pinned memory (and the pinned collate) for the ``DataLoader(...)`` assigned to ``loader``."""
        builders = [
            node.value
            for node in walk(self.enclosing_body(loop), NESTED_SCOPES)
            if isinstance(node, cst.Assign)
            and _assigns_only(node, loader)
            and isinstance(node.value, cst.Call)
            and is_data_loader(self.names(node.value.func))
        ]
        if len(builders) != 1 or star_kwargs(builders[0]) is not None:
            return
        call = builders[0]
        settings: list[tuple[str, cst.BaseExpression]] = []
        if keyword(call, "pin_memory") is None:
            settings.append(("pin_memory", expr("torch.cuda.is_available()")))
            self.need_module("torch")
        if keyword(call, "collate_fn") is None:
            settings.append(("collate_fn", call_expr(PINNED_COLLATE)))
            self.runtime_imports.add((RUNTIME, PINNED_COLLATE))
        if settings:
            self.replacements[call] = lambda updated: add_keywords(cast(cst.Call, updated), settings)

    # -- Trainer configs ----------------------------------------------------------------------------------
    def _plan_trainer_config(self, call: cst.Call) -> None:
        if not_a_run_config(self, call):
            return
        callee = code_of(call.func)
        message = f"{callee}(...): {NON_BLOCKING} (pinned batches copied without blocking)"
        current = keyword(call, "accelerator_config")
        if current is not None and isinstance(current.value, cst.Dict):
            values = {
                literal_value(e.key): e.value
                for e in current.value.elements
                if isinstance(e, cst.DictElement)
            }
            if "non_blocking" in values:
                chosen = values["non_blocking"]
                if literal_value(chosen) is True:
                    self.already(call, f'{callee}(...): accelerator_config={{"non_blocking": True}}')
                else:
                    reason = f"accelerator_config sets non_blocking to `{code_of(chosen)}` at line {self.line(chosen)}"
                    self.refused(call, message, reason)
                return
        hidden = ProgramValues(self).hidden(call, ["accelerator_config"])
        if hidden is not None:
            self.refused(call, message, hidden)
            return
        pin = keyword(call, "dataloader_pin_memory")
        if pin is not None and literal_value(pin.value) is False:
            self.refused(call, message, "dataloader_pin_memory=False: non-blocking copies need pinned memory")
            return
        if current is None:
            self.replacements[call] = lambda updated: add_keywords(
                cast(cst.Call, updated), [("accelerator_config", expr('{"non_blocking": True}'))]
            )
        elif isinstance(current.value, cst.Dict):
            self.replacements[current.value] = lambda updated: _with_dict_entry(
                cast(cst.Dict, updated), '"non_blocking"', "True"
            )
        else:
            self.refused(
                call,
                message,
                f"accelerator_config comes from `{code_of(current.value)}`; set non_blocking=True where it is built",
            )
            return
        self.changed(call, message)


def _batch_names(target: cst.BaseExpression, enumerated: bool) -> set[str]:
    if enumerated and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
        target = target.elements[1].value  # `for step, batch in enumerate(loader)`
    return {name.value for name in _names_in(target)}


def _check_device_fixed(loop: cst.For, device: cst.BaseExpression) -> None:
    device_names = {name.value for name in _names_in(device)}
    for name in _names_in(loop.target):
        if name.value in device_names:
            raise _Refused(f"`{name.value}` (in the device `{code_of(device)}`) changes with each batch")
    for node in walk(loop.body, NESTED_SCOPES):
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name):
            if node.target.value in device_names:
                raise _Refused(f"`{node.target.value}` (the device) is assigned inside the loop")
        elif isinstance(node, cst.AssignTarget) and code_of(node.target) == code_of(device):
            raise _Refused(f"`{code_of(device)}` (the device) is assigned inside the loop")


def _prefetched(device: cst.BaseExpression) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A planned replacement: the loaded iterable (an expression, updated as one) in ``CudaPrefetcher(...)``."""
    return lambda updated: call_expr(PREFETCHER, cast(cst.BaseExpression, updated), device)


def _root_name(node: cst.BaseExpression) -> str | None:
    while isinstance(node, (cst.Attribute, cst.Subscript, cst.Call)):
        node = node.func if isinstance(node, cst.Call) else node.value
    return node.value if isinstance(node, cst.Name) else None


def _last_name(node: cst.BaseExpression) -> str | None:
    """``loader`` for ``loader`` and ``self._data.loader``; None for any other expression."""
    if isinstance(node, cst.Name):
        return node.value
    return node.attr.value if isinstance(node, cst.Attribute) else None


def _argument(call: cst.Call, position: int, name: str) -> cst.BaseExpression | None:
    """The value passed for parameter ``name`` (at ``position``); None when ``*args``/``**kwargs`` hide it."""
    if any(arg.star for arg in call.args):
        return None
    given = keyword(call, name)
    if given is not None:
        return given.value
    positional = [arg for arg in call.args if arg.keyword is None]
    return positional[position].value if position < len(positional) else None


def _replaced_by_name(name: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A planned replacement: the node becomes the bare name ``name``."""
    return lambda _updated: cst.Name(name)


def _names_in(node: cst.CSTNode) -> list[cst.Name]:
    """The names in ``node``'s subtree."""
    return [name for name in m.findall(node, m.Name()) if isinstance(name, cst.Name)]


def _receiver(method_call: cst.Call) -> cst.BaseExpression:
    """``x`` of ``x.method(...)``: a call that :func:`is_method_call` accepted."""
    return cast(cst.Attribute, method_call.func).value


def _device_of(move: cst.Call) -> cst.BaseExpression:
    device = keyword(move, "device")
    return device.value if device is not None else move.args[0].value


def _is_device_move(node: cst.CSTNode) -> TypeGuard[cst.Call]:
    """``x.to(device)``, ``x.to(device, non_blocking=...)``, ``x.to(device=...)``: a pure device move."""
    if not is_method_call(node, "to"):
        return False
    if any(a.star for a in node.args):
        return False
    positional = [a for a in node.args if a.keyword is None]
    keywords = {a.keyword.value for a in node.args if a.keyword is not None}
    device_keyword = keyword(node, "device")
    if len(positional) == 1 and keywords <= {"non_blocking"}:
        device = positional[0].value
    elif not positional and device_keyword is not None and keywords <= {"device", "non_blocking"}:
        device = device_keyword.value
    else:
        return False
    code = code_of(device).lower()
    return isinstance(device, cst.SimpleString) or any(hint in code for hint in DEVICE_HINTS)


def _dict_move(node: cst.DictComp, batch_names: set[str]) -> _DictMove | None:
    """``{k: v.to(device) for k, v in batch.items()}`` over a batch name; None for any other comprehension."""
    target = node.for_in.target
    move, items = node.value, node.for_in.iter
    if (
        node.for_in.inner_for_in is None
        and not node.for_in.ifs
        and isinstance(target, cst.Tuple)
        and len(target.elements) == 2
        and all(isinstance(e.value, cst.Name) for e in target.elements)
        and code_of(node.key) == code_of(target.elements[0].value)
        and _is_device_move(move)
        and code_of(_receiver(move)) == code_of(target.elements[1].value)
        and is_method_call(items, "items")
        and not items.args
        and isinstance(batch := _receiver(items), cst.Name)
        and batch.value in batch_names
    ):
        return _DictMove(node, move, batch)
    return None


def _assigns_only(assignment: cst.Assign, name: str) -> bool:
    return len(assignment.targets) == 1 and code_of(assignment.targets[0].target) == name


def _assigned_names(statement: cst.CSTNode) -> set[str]:
    return {
        node.target.value
        for node in walk(statement, NESTED_SCOPES)
        if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign))
        and isinstance(node.target, cst.Name)
    }


def _is_binding(node: cst.Name, parent: cst.CSTNode | None) -> bool:
    """A name being assigned (``batch = ...``), or a keyword's name (``f(batch=...)``), not read."""
    if isinstance(parent, cst.Arg):
        return parent.keyword is node
    return isinstance(parent, (cst.AssignTarget, cst.AnnAssign)) and parent.target is node


def _with_dict_entry(node: cst.Dict, key: str, value: str) -> cst.Dict:
    elements = list(node.elements)
    entry = cst.DictElement(expr(key), expr(value))
    if elements:
        last = elements[-1]
        trailing = last.comma
        elements[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        entry = entry.with_changes(comma=trailing)
    return node.with_changes(elements=[*elements, entry])
