"""The codemod: each DDP model, Accelerator or trainer whose DDP searches for unused parameters every step is
wrapped in a function of the vendored helper (``helper.py``, vendored as ``_perfbot_ddp_check.py``)."""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.config_use import not_a_run_config
from optimizations.program.hf import is_training_config
from optimizations.program.repository import RepoContext
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under
from optimizations.program.trainer_calls import LINK_METADATA, TrainerLinks
from optimizations.registry import Optimization

RUNTIME = RuntimeHelper("ddp_check", "optimizations.ddp_static_graph")
GUARD_DDP = "guard_static_graph"
GUARD_TRAINER = "static_graph_trainer"
GUARD_ACCELERATOR = "static_graph_accelerator"
HELPERS = (GUARD_DDP, GUARD_TRAINER, GUARD_ACCELERATOR)
EXPLICITLY_DYNAMIC = (
    "static_graph=False is set explicitly and perfbot keeps that choice; remove it if the set of parameters "
    "that get gradients is the same at every step"
)


# A test that says the process runs under DDP: `ddp`, `world_size > 1`, `is_distributed`.
DDP_TEST = re.compile(r"\bddp\b|world_size|distributed", re.I)
GUARDED = "static graph once the first batch shows no unused parameter (already guarded)"


def _settled(static: cst.Arg | None, find_unused: cst.Arg | None) -> str | None:
    """What already spares DDP the per-step unused-parameter search, if something does: no search asked for
    (``find_unused_parameters`` off, or left at DDP's default, off) or a static graph."""
    if find_unused is None:
        return "find_unused_parameters left at its default (False): no per-step search"
    if literal_value(find_unused.value) is False:
        return "find_unused_parameters=False: no per-step search"
    if static is not None and literal_value(static.value) is True:
        return "static_graph=True"
    return None


class GuardStaticGraph(OptimizationCodemod):
    """DDP models, Accelerate handlers and Trainers that search for unused parameters every step → handed to
    the vendored check that switches them to a static graph once the first batch shows it is safe."""

    METADATA_DEPENDENCIES = OptimizationCodemod.METADATA_DEPENDENCIES + LINK_METADATA

    def __init__(self, context, optimization: Optimization, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.classes: dict[str, cst.ClassDef] = {}
        self.helpers: set[str] = set()
        self.trainers: list[cst.Call] = []
        self.handlers: list[cst.Call] = []
        self.handled: list[cst.Call] = []

    def visit_Module(self, node: cst.Module) -> None:
        self.links = TrainerLinks(self, node)  # the module's scopes and bindings, for every visit after this
        self.classes = {s.name.value: s for s in node.body if isinstance(s, cst.ClassDef)}

    # -- helpers ----------------------------------------------------------------------------------------
    def _helper_name(self, call: cst.Call) -> str | None:
        names = {n.rpartition(".")[2] for n in self.names(call.func)}
        if isinstance(call.func, cst.Name):
            names.add(call.func.value)
        found = names & set(HELPERS)
        return next(iter(found)) if found else None

    def _already_guarded(self, call: cst.Call) -> bool:
        arg = self.links.parent(call)
        outer = self.links.parent(arg) if isinstance(arg, cst.Arg) else None
        return isinstance(outer, cst.Call) and self._helper_name(outer) is not None

    def _wrap(self, call: cst.Call, helper: str) -> cst.Call:
        self.helpers.add(helper)
        return cst.Call(func=cst.Name(helper), args=[cst.Arg(call)])

    # -- visiting ---------------------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self._helper_name(original_node) is not None:
            return updated_node
        names = self.names(original_node.func)
        if qualified_under(names, ("torch.nn.parallel",), ("DistributedDataParallel",)):
            return self._ddp(original_node, updated_node)
        if qualified_under(names, ("accelerate",), ("DistributedDataParallelKwargs",)):
            self._handler(original_node)
        elif qualified_under(names, ("accelerate",), ("Accelerator",)):
            return self._accelerator(original_node, updated_node)
        elif is_training_config(names):
            if not not_a_run_config(self, original_node):
                self._config(original_node)
        elif any(original_node is trainer for trainer in self.trainers):
            return self._trainer(original_node, updated_node)
        return updated_node

    def _ddp(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self._already_guarded(original):
            self.already(original, f"{code_of(original.func)}(...): {GUARDED}")
            return updated
        message = (
            f"{code_of(original.func)}(...): static graph once the first batch shows no unused parameter"
        )
        static = keyword(original, "static_graph")
        if static is not None and literal_value(static.value) is False:
            self.refused(original, message, EXPLICITLY_DYNAMIC)
            return updated
        find_unused = keyword(original, "find_unused_parameters")
        settled = _settled(static, find_unused)
        if settled is not None:
            self.already(original, f"{code_of(original.func)}(...): {settled}")
            return updated
        branch = self._conditional_submodule(original)
        if branch is not None:
            self.refused(original, message, branch)
            return updated
        self.changed(original, message)
        return self._wrap(updated, GUARD_DDP)

    def _handler(self, call: cst.Call) -> None:
        static = keyword(call, "static_graph")
        if static is not None and literal_value(static.value) is False:
            message = f"{code_of(call.func)}(...): static DDP graph once checked"
            self.refused(call, message, EXPLICITLY_DYNAMIC)
            return
        find_unused = keyword(call, "find_unused_parameters")
        settled = _settled(static, find_unused)
        if settled is not None:
            self.already(call, f"{code_of(call.func)}(...): {settled}")
            return
        self.handlers.append(call)

    def _accelerator(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        given = keyword(original, "kwargs_handlers")
        if given is None or not isinstance(given.value, (cst.List, cst.Tuple)):
            return updated
        searching = [call for call in self._handler_calls(given.value) if call in self.handlers]
        if not searching:
            return updated
        self.handled.extend(searching)
        if self._already_guarded(original):
            self.already(original, f"{code_of(original.func)}(...): {GUARDED}")
            return updated
        self.changed(
            original,
            f"{code_of(original.func)}(...): DDP models it prepares get a static graph once the first batch "
            "shows no unused parameter",
        )
        return self._wrap(updated, GUARD_ACCELERATOR)

    def _handler_calls(self, handlers: cst.List | cst.Tuple) -> list[cst.Call]:
        """The calls the elements of a ``kwargs_handlers`` list are, inline or through a local name."""
        calls = []
        scope = self.links.scope(handlers)
        for element in handlers.elements:
            value = element.value
            if isinstance(value, cst.Name) and scope is not None:
                bound = [b.value for b in self.links.bindings(value.value, scope)[0] if b.value is not None]
                value = bound[-1] if bound else value
            if isinstance(value, cst.Call):
                calls.append(value)
        return calls

    def _config(self, call: cst.Call) -> None:
        static = keyword(call, "ddp_static_graph")
        find_unused = keyword(call, "ddp_find_unused_parameters")
        message = (
            f"{code_of(call.func)}(...): static DDP graph once the first batch shows no unused parameter"
        )
        if static is not None and literal_value(static.value) is False:
            self.refused(call, message, EXPLICITLY_DYNAMIC.replace("static_graph", "ddp_static_graph"))
            return
        if static is not None and literal_value(static.value) is True:
            self.already(call, f"{code_of(call.func)}(...): ddp_static_graph=True")
            return
        if find_unused is not None and literal_value(find_unused.value) is False:
            self.already(
                call, f"{code_of(call.func)}(...): ddp_find_unused_parameters=False, no per-step search"
            )
            return
        if find_unused is not None and _off_under_ddp(find_unused.value):
            self.already(
                call,
                f"{code_of(call.func)}(...): ddp_find_unused_parameters=`{code_of(find_unused.value)}`, no per-step "
                "search wherever DDP runs",
            )
            return
        trainers = self.links.trainers_receiving(call)
        if not trainers:
            self.refused(
                call,
                message,
                "no trainer call in this module takes this config as args=, so the check cannot be attached; "
                f"wrap the trainer by hand: `{GUARD_TRAINER}(Trainer(...))` from "
                f"{RUNTIME.path}",
            )
            return
        self.trainers.extend(t for t in trainers if not any(t is known for known in self.trainers))

    def _trainer(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self._already_guarded(original):
            self.already(original, f"{code_of(original.func)}(...): {GUARDED}")
            return updated
        self.changed(
            original,
            f"{code_of(original.func)}(...): static DDP graph once the first batch shows no unused parameter",
        )
        return self._wrap(updated, GUARD_TRAINER)

    # -- static refusal: parameters reached only under a condition --------------------------------------
    def _conditional_submodule(self, ddp: cst.Call) -> str | None:
        """Why the wrapped model's own ``forward`` shows parameters used on some batches only, if it does."""
        model = keyword(ddp, "module")
        if model is None:
            model = ddp.args[0] if ddp.args and ddp.args[0].keyword is None else None
        if model is None:
            return None
        class_def = self._model_class(model.value)
        if class_def is None:
            return None
        forward = next(
            (s for s in class_def.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"),
            None,
        )
        if forward is None:
            return None
        submodules = _constructed_attributes(class_def)
        branches = [b for b in m.findall(forward.body, m.If()) if isinstance(b, cst.If)]
        for branch in branches:
            for call in _calls(branch.body, branch.orelse):
                attribute = _self_attribute(call.func)
                if attribute in submodules:
                    return (
                        f"`{class_def.name.value}.forward` calls `self.{attribute}` only under the condition at "
                        f"line {self.line(branch)}: its parameters get gradients on some batches only, which one "
                        "batch cannot show and a static graph does not allow; keep find_unused_parameters=True, "
                        "or make the graph the same every step (e.g. add `0 * out.sum()` of the skipped branch)"
                    )
        return None

    def _model_class(self, value: cst.BaseExpression) -> cst.ClassDef | None:
        """The class defined here that builds ``value``: ``Net(...)``, ``Net(...).to(d)`` or a name bound to it."""
        for _ in range(4):
            if isinstance(value, cst.Name):
                scope = self.links.scope(value)
                bound = [b.value for b in self.links.bindings(value.value, scope)[0]] if scope else []
                if not bound or bound[-1] is None:
                    return None
                value = bound[-1]
                continue
            if isinstance(value, cst.Call):
                if isinstance(value.func, cst.Name) and value.func.value in self.classes:
                    return self.classes[value.func.value]
                if isinstance(value.func, cst.Attribute):  # .to(device), .cuda(): the model is the receiver
                    value = value.func.value
                    continue
            return None
        return None

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        for handler in self.handlers:
            if not any(handler is done for done in self.handled):
                self.refused(
                    handler,
                    f"{code_of(handler.func)}(...): static DDP graph once checked",
                    "no Accelerator(kwargs_handlers=[...]) in this module receives this handler, so the check "
                    f"cannot be attached; wrap the accelerator by hand: `{GUARD_ACCELERATOR}(Accelerator(...))` "
                    f"from {RUNTIME.path}",
                )
        if self.helpers:
            for helper in sorted(self.helpers):
                self.import_runtime(RUNTIME, helper)
        return updated_node


def _off_under_ddp(value: cst.BaseExpression) -> bool:
    """``False if ddp else None`` (tloen/alpaca-lora): the search is off whenever the test says DDP runs, and left
    to the default only where it does not, where no DDP model searches at all."""
    return (
        isinstance(value, cst.IfExp)
        and literal_value(value.body) is False
        and literal_value(value.orelse) is None
        and bool(DDP_TEST.search(code_of(value.test)))
    )


def _self_attribute(node: cst.BaseExpression) -> str | None:
    """``x`` for ``self.x``."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def _constructed_attributes(class_def: cst.ClassDef) -> set[str]:
    """Attributes the class's ``__init__`` sets from a call (``self.head = nn.Linear(...)``): its submodules."""
    return {
        attribute
        for statement in class_def.body.body
        if m.matches(statement, m.FunctionDef(name=m.Name("__init__")))
        for assignment in m.findall(statement, m.Assign(value=m.Call()))
        if isinstance(assignment, cst.Assign)
        for target in assignment.targets
        if (attribute := _self_attribute(target.target)) is not None
    }


def _calls(*blocks: cst.CSTNode | None) -> list[cst.Call]:
    """Every call in the blocks (an ``if``'s body and ``else``), in order."""
    return [
        call
        for block in blocks
        if block is not None
        for call in m.findall(block, m.Call())
        if isinstance(call, cst.Call)
    ]
