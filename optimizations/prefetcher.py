"""CUDA prefetcher: copy the next batch to the GPU on a side stream while the current one trains.

In a hand-written loop ``for batch in loader:`` whose body moves the batch with ``.to(device)``, the
copies are blocking (pageable memory, default stream) and nothing overlaps them. The loop is rewritten to
iterate over ``CudaPrefetcher(loader, device)`` (vendored next to the file as ``_perfbot_prefetcher.py``),
which pins each batch and copies it one step ahead on its own stream, and the ``.to(device)`` calls on the
batch are dropped. The ``DataLoader`` that builds the loader gets ``pin_memory`` and, when it has no
``collate_fn`` of its own, ``NumpyPinnedCollate`` (``default_collate`` that stacks straight into pinned
memory). On a CPU-only machine the prefetcher is a plain loop that calls ``.to(device)``.

``TrainingArguments``-family configs (``transformers``, ``trl``) get ``accelerator_config={"non_blocking": True}``:
accelerate then copies the pinned batches without blocking the host.

A loop is refused when the batch is also used on the host (``.tolist()``, ``.numpy()``, ...), when its
tensors are moved to different devices, or when the device is chosen inside the loop.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from optimizations.program.codemod import (
    add_keywords,
    call_expr,
    code_of,
    expr,
    keyword,
    literal_value,
    qualified_under,
    star_kwargs,
)
from optimizations.program.hf import HF_CONFIGS, is_training_config
from optimizations.program.training_loops import BACKWARD, NESTED_SCOPES, PlannedCodemod, is_method_call, walk
from optimizations.registry import Example, Numerics, Optimization

RUNTIME_MODULE = "prefetcher"
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


class _Refused(Exception):
    """A check failed; the message is the reason."""


class _Prefetch(PlannedCodemod):
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
        batch_names = self._batch_names(loop.target, enumerated)
        moves, dict_moves = self._moves(loop, batch_names)
        if not moves and not dict_moves:
            return
        targets = [_device_of(move) for move in moves] + [_device_of(d.value) for d in dict_moves]
        devices = {code_of(device): device for device in targets}
        message = (
            f"`for {code_of(loop.target)} in {code_of(loop.iter)}`: batches copied to the device one step "
            "ahead on a side stream (CudaPrefetcher); blocking `.to(device)` copies dropped"
        )
        try:
            if len(devices) > 1:
                raise _Refused(f"the batch goes to different devices ({', '.join(sorted(devices))})")
            device = next(iter(devices.values()))
            self._check_device_fixed(loop, device)
            self._check_batch_stays_on_device(loop, batch_names, moves, dict_moves)
        except _Refused as refusal:
            self.refused(loop, message, str(refusal))
            return

        self.replacements[source] = lambda updated: call_expr(PREFETCHER, updated, device)
        for move in moves:
            self.replacements[move] = lambda updated: updated.func.value
            assignment = self.parent(move)
            if isinstance(assignment, cst.Assign) and _assigns_only(assignment, code_of(move.func.value)):
                self.dropped.add(self.statement_of(assignment))  # `x = x.to(device)` would become `x = x`
        for comprehension in dict_moves:
            batch = comprehension.for_in.iter.func.value.value
            self.replacements[comprehension] = lambda _updated, batch=batch: cst.Name(batch)
            assignment = self.parent(comprehension)
            if isinstance(assignment, cst.Assign) and _assigns_only(assignment, batch):
                self.dropped.add(self.statement_of(assignment))
        self.runtime_imports.add((RUNTIME_MODULE, PREFETCHER))
        if isinstance(source, cst.Name):
            self._plan_dataloader(loop, source.value)
        self.changed(loop, message)

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

    def _batch_names(self, target: cst.BaseAssignTargetExpression, enumerated: bool) -> set[str]:
        if enumerated and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
            target = target.elements[1].value  # `for step, batch in enumerate(loader)`
        return {name.value for name in m.findall(target, m.Name())}

    def _moves(self, loop: cst.For, batch_names: set[str]) -> tuple[list[cst.Call], list[cst.DictComp]]:
        """``<batch...>.to(device)`` calls, and ``{k: v.to(device) for k, v in batch.items()}`` comprehensions."""
        moves: list[cst.Call] = []
        dict_moves: list[cst.DictComp] = []
        for node in walk(loop.body, NESTED_SCOPES):
            if _is_device_move(node) and _root_name(node.func.value) in batch_names:
                moves.append(node)
            elif isinstance(node, cst.DictComp) and _is_dict_move(node, batch_names):
                dict_moves.append(node)
        return moves, dict_moves

    def _check_device_fixed(self, loop: cst.For, device: cst.BaseExpression) -> None:
        device_names = {name.value for name in m.findall(device, m.Name())}
        for node in walk(loop.body, NESTED_SCOPES):
            if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name):
                if node.target.value in device_names:
                    raise _Refused(f"`{node.target.value}` (the device) is assigned inside the loop")

    def _check_batch_stays_on_device(self, loop, batch_names, moves, dict_moves) -> None:
        """Every use of the batch before it is rebound must be a move or device-independent metadata."""
        inside_moves = {id(n) for move in moves for n in (move.func.value, *walk(move.func.value, ()))}
        inside_moves |= {id(d.for_in.iter.func.value) for d in dict_moves}
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

    def _use_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """``node`` with the subscripts and attributes applied to it (the expression a reader would quote)."""
        while isinstance(self.parent(node), (cst.Subscript, cst.Attribute, cst.Call)):
            parent = self.parent(node)
            if isinstance(parent, cst.Call) and parent.func is not node:
                break
            node = parent
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
            and qualified_under(self.names(node.value.func), ("torch.utils.data",), ("DataLoader",))
        ]
        if len(builders) != 1 or star_kwargs(builders[0]) is not None:
            return
        call = builders[0]
        settings = []
        if keyword(call, "pin_memory") is None:
            settings.append(("pin_memory", expr("torch.cuda.is_available()")))
            self.need_module("torch")
        if keyword(call, "collate_fn") is None:
            settings.append(("collate_fn", call_expr(PINNED_COLLATE)))
            self.runtime_imports.add((RUNTIME_MODULE, PINNED_COLLATE))
        if settings:
            self.replacements[call] = lambda updated: add_keywords(updated, settings)

    # -- Trainer configs ----------------------------------------------------------------------------------
    def _plan_trainer_config(self, call: cst.Call) -> None:
        callee = code_of(call.func)
        message = f'{callee}(...): accelerator_config={{"non_blocking": True}} (pinned batches copied without blocking)'
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
        if star_kwargs(call) is not None:
            self.refused(call, message, f"settings are passed through `**{code_of(star_kwargs(call).value)}`")
            return
        pin = keyword(call, "dataloader_pin_memory")
        if pin is not None and literal_value(pin.value) is False:
            self.refused(call, message, "dataloader_pin_memory=False: non-blocking copies need pinned memory")
            return
        if current is None:
            self.replacements[call] = lambda updated: add_keywords(
                updated, [("accelerator_config", expr('{"non_blocking": True}'))]
            )
        elif isinstance(current.value, cst.Dict):
            self.replacements[current.value] = lambda updated: _with_dict_entry(
                updated, '"non_blocking"', "True"
            )
        else:
            self.refused(
                call,
                message,
                f"accelerator_config comes from `{code_of(current.value)}`; set non_blocking=True where it is built",
            )
            return
        self.changed(call, message)


def _root_name(node: cst.BaseExpression) -> str | None:
    while isinstance(node, (cst.Attribute, cst.Subscript, cst.Call)):
        node = node.func if isinstance(node, cst.Call) else node.value
    return node.value if isinstance(node, cst.Name) else None


def _device_of(move: cst.Call) -> cst.BaseExpression:
    device = keyword(move, "device")
    return device.value if device is not None else move.args[0].value


def _is_device_move(node: cst.CSTNode) -> bool:
    """``x.to(device)``, ``x.to(device, non_blocking=...)``, ``x.to(device=...)``: a pure device move."""
    if not is_method_call(node, "to"):
        return False
    if any(a.star for a in node.args):
        return False
    positional = [a for a in node.args if a.keyword is None]
    keywords = {a.keyword.value for a in node.args if a.keyword is not None}
    if len(positional) == 1 and keywords <= {"non_blocking"}:
        device = positional[0].value
    elif not positional and "device" in keywords and keywords <= {"device", "non_blocking"}:
        device = keyword(node, "device").value
    else:
        return False
    code = code_of(device).lower()
    return isinstance(device, cst.SimpleString) or any(hint in code for hint in DEVICE_HINTS)


def _is_dict_move(node: cst.DictComp, batch_names: set[str]) -> bool:
    """``{k: v.to(device) for k, v in batch.items()}`` over a batch name."""
    target = node.for_in.target
    return (
        node.for_in.inner_for_in is None
        and not node.for_in.ifs
        and isinstance(target, cst.Tuple)
        and len(target.elements) == 2
        and all(isinstance(e.value, cst.Name) for e in target.elements)
        and code_of(node.key) == code_of(target.elements[0].value)
        and _is_device_move(node.value)
        and code_of(node.value.func.value) == code_of(target.elements[1].value)
        and is_method_call(node.for_in.iter, "items")
        and not node.for_in.iter.args
        and isinstance(node.for_in.iter.func.value, cst.Name)
        and node.for_in.iter.func.value.value in batch_names
    )


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
    """A name being assigned (``batch = ...``), not read."""
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


class Prefetcher(Optimization):
    """The next batch's host-to-device copy overlaps the current step instead of blocking before it."""

    id = "prefetcher"
    title = "CUDA prefetcher: pinned batches copied one step ahead on a side stream"
    tier = 2
    expected = "-10-40% step time where host-to-device copies are exposed"
    summary = "for batch in CudaPrefetcher(loader, device) + pinned memory; Trainer: non_blocking copies"
    scope = "data"
    numerics = Numerics.EXACT
    numerics_reason = "the same batches, copied to the GPU one step ahead"
    keywords = ("prefetch", "cuda prefetcher", "non_blocking", "non-blocking", "h2d", "host-to-device")
    codemods = (_Prefetch,)
    needs = (BACKWARD, *HF_CONFIGS)

    examples = (
        Example(
            "loop_over_dataloader",
            before="""\
import torch
from torch.utils.data import DataLoader


def train(model, dataset, optimizer, device):
    loader = DataLoader(dataset, batch_size=64, shuffle=True)
    for batch in loader:
        images = batch["images"].to(device)
        labels = batch["labels"].to(device, non_blocking=True)
        loss = model(images, labels)
        loss.backward()
        optimizer.step()
""",
            after="""\
import torch
from torch.utils.data import DataLoader
from _perfbot_prefetcher import CudaPrefetcher, NumpyPinnedCollate


def train(model, dataset, optimizer, device):
    loader = DataLoader(dataset, batch_size=64, shuffle=True, pin_memory=torch.cuda.is_available(), collate_fn=NumpyPinnedCollate())
    for batch in CudaPrefetcher(loader, device):
        images = batch["images"]
        labels = batch["labels"]
        loss = model(images, labels)
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "aliased_enumerate_dict_comprehension_multiline",
            before="""\
import torch.utils.data as tud


def train(model, dataset, optimizer, collate, args):
    loader = tud.DataLoader(
        dataset,  # tokenized examples
        batch_size=args.batch_size,
        collate_fn=collate,
    )
    for step, batch in enumerate(loader, start=1):
        batch = {key: value.to(args.device) for key, value in batch.items()}
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
""",
            after="""\
import torch.utils.data as tud
import torch
from _perfbot_prefetcher import CudaPrefetcher


def train(model, dataset, optimizer, collate, args):
    loader = tud.DataLoader(
        dataset,  # tokenized examples
        batch_size=args.batch_size,
        collate_fn=collate,
        pin_memory=torch.cuda.is_available(),
    )
    for step, batch in enumerate(CudaPrefetcher(loader, args.device), start=1):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "tuple_batch_under_tqdm",
            before="""\
from tqdm.auto import tqdm


def train(model, loader, optimizer, device):
    for inputs, labels in tqdm(loader):
        inputs = inputs.to(device)
        labels = labels.to(device=device, non_blocking=True)
        loss = model(inputs, labels)
        loss.backward()
        optimizer.step()
""",
            after="""\
from tqdm.auto import tqdm
from _perfbot_prefetcher import CudaPrefetcher


def train(model, loader, optimizer, device):
    for inputs, labels in tqdm(CudaPrefetcher(loader, device)):
        loss = model(inputs, labels)
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "trainer_config_non_blocking",
            before="""\
from transformers import TrainingArguments as TA


def build(out):
    return TA(
        output_dir=out,
        bf16=True,  # H100
    )
""",
            after="""\
from transformers import TrainingArguments as TA


def build(out):
    return TA(
        output_dir=out,
        bf16=True,  # H100
        accelerator_config={"non_blocking": True},
    )
""",
        ),
        Example(
            "already_prefetched",
            before="""\
from _perfbot_prefetcher import CudaPrefetcher


def train(model, loader, optimizer, device):
    for batch in CudaPrefetcher(loader, device):
        loss = model(batch["x"], batch["y"])
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "refuses_batch_read_on_host",
            before="""\
def train(model, loader, optimizer, device):
    for batch in loader:
        lengths = batch["lengths"].tolist()
        inputs = batch["inputs"].to(device)
        loss = model(inputs, lengths)
        loss.backward()
        optimizer.step()
""",
            refusal="used on the host",
        ),
    )
