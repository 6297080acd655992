"""The ``dpo_precompute`` codemods: ``precompute_ref_log_probs=True`` with a reference batch twice the training batch
wherever a DPO config takes it from, and the datasets of each ``DPOTrainer`` handed through ``with_shared_cache``."""

from __future__ import annotations

import libcst as cst
from libcst.helpers import parse_template_expression

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.edits.config_switch import SettingSwitch
from optimizations.edits.expressions import call_expr, parenthesized, replace_keyword
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.hf import DEFAULT_TRAIN_BATCH_SIZE
from optimizations.program.repository import RepoContext
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under
from optimizations.registry import Optimization

RUNTIME = RuntimeHelper("dpo_cache", "optimizations.dpo_precompute")
SHARED_CACHE = "with_shared_cache"
DATASET_KEYWORDS = ("train_dataset", "eval_dataset")
# Liger settings that keep precompute off, and why.
LIGER_SETTINGS = {
    "use_liger_loss": "the Liger DPO loss computes the reference log-probs itself",
    "use_liger_kernel": "Liger kernels and precomputed reference log-probs are kept apart on one config",
}


def _atomic(node: cst.BaseExpression) -> bool:
    """True when ``2 * node`` needs no parentheses around ``node``."""
    return isinstance(node, (cst.Name, cst.Attribute, cst.Subscript, cst.Call, cst.Integer)) and not node.lpar


def reference_batch_size(call: cst.Call) -> cst.BaseExpression:
    """Twice the call's training batch: a literal when it is one, ``2 * <expression>`` when it is read."""
    given = keyword(call, "per_device_train_batch_size")
    if given is None:
        return cst.Integer(str(2 * DEFAULT_TRAIN_BATCH_SIZE))
    value = literal_value(given.value)
    if isinstance(value, int) and not isinstance(value, bool):
        return cst.Integer(str(2 * value))
    operand = given.value if _atomic(given.value) else parenthesized(given.value)
    return parse_template_expression("2 * {batch}", batch=operand)


class Precompute(SettingSwitch):
    """``precompute_ref_log_probs=True``, and a ``precompute_ref_batch_size`` where none is set, wherever a DPO
    config takes the setting from; refused where TRL cannot precompute or Liger is on."""

    setting = "precompute_ref_log_probs"
    configs = ("DPOConfig",)
    field_comment = "# perfbot: compute the DPO reference log-probs once, before training."
    flag_hint = "--precompute_ref_log_probs true"

    def companions(self, call: cst.Call) -> list[tuple[str, cst.BaseExpression]]:
        if keyword(call, "precompute_ref_batch_size") is not None:
            return []
        return [("precompute_ref_batch_size", reference_batch_size(call))]

    def blocked(self, call: cst.Call | None, function: cst.FunctionDef | None) -> str | None:
        if call is not None:
            sync = keyword(call, "sync_ref_model")
            if sync is not None and literal_value(sync.value) is not False:
                return (
                    f"sync_ref_model={code_of(sync.value)}: the reference model moves during training, so its "
                    "log-probs cannot be computed up front (TRL raises); leave precompute off"
                )
            for name, why in LIGER_SETTINGS.items():
                liger = keyword(call, name)
                if liger is not None and literal_value(liger.value) is not False:
                    return f"{name}={code_of(liger.value)}: {why}; choose one of the two by hand"
        if self.scope.iterable_dataset is not None:
            return (
                f"`{self.scope.iterable_dataset}` makes an iterable dataset: TRL caches reference log-probs as "
                "columns of a map-style Dataset and raises on an IterableDataset; load it without streaming first"
            )
        if self.scope.vision_model is not None:
            return (
                f"`{self.scope.vision_model}` may load a vision-language model or processor: TRL does not precompute "
                "reference log-probs for vision datasets (it raises)"
            )
        return None

    def yaml_blocked(self, siblings: dict[str, object]) -> str | None:
        if siblings.get("sync_ref_model") is True:
            return "sync_ref_model: true moves the reference model during training; leave precompute off"
        for name, why in LIGER_SETTINGS.items():
            if siblings.get(name) is True:
                return f"{name}: true: {why}; choose one of the two by hand"
        return None


class SharedCache(OptimizationCodemod):
    """Hands the datasets of every ``DPOTrainer(...)`` in the module through ``with_shared_cache``."""

    def __init__(self, context, optimization: Optimization, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.wrapped = False

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not qualified_under(self.names(original_node.func), ("trl",), ("DPOTrainer",)):
            return updated_node
        call = updated_node
        for name in DATASET_KEYWORDS:
            given = keyword(call, name)
            if given is None or literal_value(given.value) is None or _shared(given.value):
                continue
            call = replace_keyword(call, name, call_expr(SHARED_CACHE, given.value))
            self.changed(
                original_node,
                f"{code_of(original_node.func)}({name}={SHARED_CACHE}({code_of(given.value)})): one cache file "
                "for the reference log-probs on every rank",
            )
            self.wrapped = True
        return call

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.wrapped:
            self.import_runtime(RUNTIME, SHARED_CACHE)
        return updated_node


def _shared(value: cst.BaseExpression) -> bool:
    """True for ``with_shared_cache(...)``: a dataset handed through already."""
    return (
        isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == SHARED_CACHE
    )
