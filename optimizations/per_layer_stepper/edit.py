"""The codemod: AdamW in a hand-written loop becomes the per-layer stepper of the vendored helper (``helper.py``,
vendored as ``_perfbot_per_layer_stepper.py``); the optimizer a trainer builds is proposed for a person, never
committed, as the helper would rebuild the trainer's own optimizer outside it."""

from __future__ import annotations

from typing import cast

import libcst as cst
import libcst.matchers as m
from libcst.codemod.visitors import RemoveImportsVisitor

from optimizations.edits.expressions import add_keywords
from optimizations.edits.planned import PlannedCodemod
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.hf import TRAINER_OPTIMIZER_KEYWORDS, TRAINER_POSITIONAL_LIMIT, trainer_class
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under, star_kwargs
from optimizations.program.trainer_calls import is_plain_reference

RUNTIME = RuntimeHelper("per_layer_stepper", "optimizations.per_layer_stepper")
LOOP_FACTORY = "per_layer_adamw"
TRAINER_WRAPPER = "with_per_layer_adamw"
# Why a trainer's stepper is proposed, not committed (issue #51: small, mergeable diffs); a loop's AdamW is one call.
TRAINER_RESTRUCTURING = (
    "a patch of Trainer internals: the vendored helper rebuilds what the Trainer's create_optimizer builds (decay "
    "groups, hyperparameters read from the trainer) outside it and sets trainer.optimizer; a person should check "
    "it against the trainer class and release in use before wrapping the trainer in `with_per_layer_adamw(...)`"
)
# AdamW settings the stepper does not run, and the literal value that asks for them.
UNSUPPORTED = {"amsgrad": True, "capturable": True, "differentiable": True, "foreach": True, "fused": False}


class _Refused(Exception):
    """A check failed; the message is the reason."""


def _is_none_pair(node: cst.BaseExpression) -> bool:
    """``(None, None)``: the trainer's default ``optimizers``."""
    return isinstance(node, cst.Tuple) and all(literal_value(e.value) is None for e in node.elements)


class StreamAdamW(PlannedCodemod):
    """``torch.optim.AdamW(...)`` → ``per_layer_adamw(..., model=...)``; a trainer call: a proposal of
    ``with_per_layer_adamw(Trainer(...))``."""

    def plan(self, module: cst.Module) -> None:
        wrapped: set[cst.CSTNode] = set()
        for node in self.nodes(cst.Call):
            names = self.names(node.func)
            helper = {name.rpartition(".")[2] for name in names} & {TRAINER_WRAPPER, LOOP_FACTORY}
            if helper and node.args:
                wrapped.add(node.args[0].value)
                self.already(node, f"AdamW state streamed per layer group (`{helper.pop()}(...)`)")
            elif qualified_under(names, ("torch.optim",), ("AdamW",)):
                self._plan_adamw(node, names)
            elif qualified_under(names, ("torch.optim",), ("Adam",)):
                self.refused(
                    node,
                    f"{code_of(node.func)}(...): per-layer GPU optimizer stepper",
                    "torch.optim.Adam folds weight decay into the gradient; the stepper implements AdamW only",
                )
            elif trainer_class(names) is not None and node not in wrapped:
                self._plan_trainer(node)

    # -- hand-written loops -----------------------------------------------------------------------------
    def _plan_adamw(self, call: cst.Call, names: set[str]) -> None:
        callee = code_of(call.func)
        message = f"{callee}(...) -> {LOOP_FACTORY}(...): AdamW state in pinned host memory, streamed per layer group"
        try:
            for name, wanted in UNSUPPORTED.items():
                given = keyword(call, name)
                if given is not None and literal_value(given.value) is wanted:
                    raise _Refused(
                        f"{name}={wanted} is set, and the stepper runs torch's fused AdamW kernel only"
                    )
            hidden = star_kwargs(call)
            if hidden is not None:
                raise _Refused(
                    f"settings are passed through `**{code_of(hidden.value)}` (line {self.line(hidden)})"
                )
            params = keyword(call, "params")
            if params is None and call.args and call.args[0].keyword is None and not call.args[0].star:
                params = call.args[0]
            if params is None:
                raise _Refused("no parameters argument")
        except _Refused as refusal:
            self.refused(call, message, str(refusal))
            return
        model = self._model_of(params.value, call)
        extra = [] if model is None else [("model", model)]
        # The updated node of a call is a call.
        self.replacements[call] = lambda updated: add_keywords(
            cast(cst.Call, updated).with_changes(func=cst.Name(LOOP_FACTORY)), extra
        )
        if isinstance(call.func, cst.Name):  # `from torch.optim import AdamW [as W]` may now be unused
            for name in names:
                module, _, obj = name.rpartition(".")
                asname = call.func.value if call.func.value != obj else None
                RemoveImportsVisitor.remove_unused_import(self.context, module, obj, asname)
        self.runtime_imports.add((RUNTIME, LOOP_FACTORY))
        where = (
            f"layer groups from `{code_of(model)}`" if model is not None else "no model found: equal pieces"
        )
        self.changed(call, f"{message} ({where})")

    def _model_of(self, params: cst.BaseExpression, call: cst.Call) -> cst.BaseExpression | None:
        """The module whose parameters ``params`` lists, when exactly one is named in it or its binding."""
        sources = [params]
        if isinstance(params, cst.Name):
            _reads, writes, _nested = self.reads_and_writes(self.enclosing_body(call), params.value)
            if not writes or not all(isinstance(w, cst.Assign) for w in writes):
                return None
            sources = [w.value for w in writes]
        owners: dict[str, cst.BaseExpression] = {}
        listing = m.Call(func=m.Attribute(attr=m.Name("parameters") | m.Name("named_parameters")))
        for source in sources:
            for node in m.findall(source, listing):
                if (
                    isinstance(node, cst.Call)  # what `listing` matches
                    and isinstance(node.func, cst.Attribute)
                    and is_plain_reference(node.func.value)
                ):
                    owners.setdefault(code_of(node.func.value), node.func.value)
        return next(iter(owners.values())) if len(owners) == 1 else None

    # -- trainers ---------------------------------------------------------------------------------------
    def _plan_trainer(self, call: cst.Call) -> None:
        callee = code_of(call.func)
        message = f"{callee}(...): optimizer = PerLayerAdamW built as the trainer builds AdamW"
        try:
            for name in TRAINER_OPTIMIZER_KEYWORDS:
                given = keyword(call, name)
                if (
                    given is not None
                    and literal_value(given.value) is not None
                    and not _is_none_pair(given.value)
                ):
                    raise _Refused(f"the trainer is given `{name}=`: it already chooses its optimizer")
            hidden = star_kwargs(call)
            if hidden is not None:
                raise _Refused(
                    f"arguments are passed through `**{code_of(hidden.value)}` (line {self.line(hidden)})"
                )
            if sum(1 for a in call.args if a.keyword is None) >= TRAINER_POSITIONAL_LIMIT:
                raise _Refused(
                    "too many positional arguments to tell whether optimizers/model_init is among them"
                )
        except _Refused as refusal:
            self.refused(call, message, str(refusal))
            return
        self.proposed(call, f"{message} (`{TRAINER_WRAPPER}({callee}(...))`)", TRAINER_RESTRUCTURING)
