"""The ``liger_guard`` codemod: ``use_liger_kernel=liger_kernel_usable(model)`` on TrainingArguments-family
configs, and ``use_liger_kernel: true`` in the recipes an argument-parser script is launched with."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import libcst as cst

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.edits.expressions import add_keywords, call_expr, replace_keyword
from optimizations.edits.recipe_switch import RecipeSetting, switch
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.config_use import not_a_run_config
from optimizations.program.hf import PEFT_FROM_FLAGS, is_argument_parser, is_training_config, trainer_class
from optimizations.program.recipes import launches, parser_types
from optimizations.program.repository import RepoContext, Site
from optimizations.program.requirements import declares_dependency
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under
from optimizations.program.trainer_calls import LINK_METADATA, TrainerLinks
from optimizations.registry import Optimization

HELPER = "liger_kernel_usable"
RUNTIME = RuntimeHelper("liger", "optimizations.liger_guard")
LORA_SLOWDOWN = (
    "Liger's kernels do not compose with PEFT's LoRA layers (a LoRA SFT run took 2x as long with them), and "
    "its fused linear cross-entropy on a LoRA model's untouched lm_head measured no gain (+0.1%, H200, TRL "
    "1.16 fuses the LM head itself); keep use_liger_kernel off on LoRA runs"
)
PRECOMPUTE_CLASH = (
    "DPO precomputes the reference log-probs here (precompute_ref_log_probs=True), and Liger had to be turned "
    "off beside them when this plan was first carried out: keep one of the two"
)
EXPLICITLY_OFF = (
    "use_liger_kernel=False is set explicitly and perfbot keeps that choice; replace it with the run-time "
    "check if Liger should be used where it helps"
)
LIGER_DISTRIBUTION = "liger-kernel"


def _recipe_blocked(siblings: dict[str, object]) -> str | None:
    """Why a recipe with these keys keeps Liger off: a LoRA run, precomputed DPO log-probs, an explicit false."""
    if siblings.get("use_peft") is True:
        return f"the recipe trains LoRA adapters (use_peft: true): {LORA_SLOWDOWN}"
    if siblings.get("precompute_ref_log_probs") is True:
        return (
            "the recipe precomputes the DPO reference log-probs (precompute_ref_log_probs: true), which Liger "
            "is kept apart from on one config: keep one of the two"
        )
    if siblings.get("use_liger_kernel") is False:
        return "the recipe sets use_liger_kernel: false and perfbot keeps that choice"
    return None


def _dpo_recipe_blocked(siblings: dict[str, object]) -> str | None:
    """A DPO recipe keeps Liger off unless it turns precomputed reference log-probs off."""
    if siblings.get("precompute_ref_log_probs") is False:
        return _recipe_blocked(siblings)
    return _recipe_blocked(siblings) or (
        "a DPO recipe: Liger is kept apart from precomputed reference log-probs on one config, and perfbot leaves "
        "DPO configs to precompute (dpo_precompute, the measured DPO win); set precompute_ref_log_probs: false "
        "here to choose Liger"
    )


# The setting in the recipes of an argument-parser script: fixed there, as a recipe has no run-time check.
RECIPE_LIGER = RecipeSetting(
    "use_liger_kernel",
    "true",
    lambda value: value is True,
    comment="# perfbot: Liger's fused kernels (full fine-tunes; liger-kernel is a dependency).",
    blocked=_recipe_blocked,
)


class GuardLiger(OptimizationCodemod):
    """``use_liger_kernel`` guarded at run time on each training config a trainer here trains with; Liger in the
    recipes of an argument-parser script."""

    METADATA_DEPENDENCIES = OptimizationCodemod.METADATA_DEPENDENCIES + LINK_METADATA
    links: TrainerLinks  # the module's, set on entering it (visit_Module)

    def __init__(self, context, optimization: Optimization, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.edited = False

    def visit_Module(self, node: cst.Module) -> None:
        self.links = TrainerLinks(self, node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if is_argument_parser(self.names(original_node.func)):
            self._parser(original_node)
            return updated_node
        if not is_training_config(self.names(original_node.func)):
            return updated_node
        if not_a_run_config(self, original_node):
            return updated_node
        current = keyword(original_node, "use_liger_kernel")
        if current is not None and self.calls(current.value, HELPER):
            written = f"use_liger_kernel={code_of(current.value)}"
            self.already(
                original_node, f"{code_of(original_node.func)}(...): Liger guarded at run time ({written})"
            )
            return updated_node
        message = (
            f"{code_of(original_node.func)}(...): use_liger_kernel where Liger helps (checked at run time)"
        )
        model, precompute, reason = self._guard_inputs(original_node, current)
        if reason is not None:
            self.refused(original_node, message, reason)
            return updated_node
        trained = cast(cst.BaseExpression, model)  # _guard_inputs gives the model whenever it gives no reason
        guard = (
            call_expr(HELPER, trained)
            if precompute is None
            else call_expr(HELPER, trained, precompute_ref_log_probs=precompute)
        )
        if current is not None:
            call = replace_keyword(updated_node, "use_liger_kernel", guard)
        else:
            call = add_keywords(updated_node, [("use_liger_kernel", guard)])
        self.changed(original_node, message)
        self.edited = True
        return call

    def _guard_inputs(
        self, call: cst.Call, current: cst.Arg | None
    ) -> tuple[cst.BaseExpression | None, cst.BaseExpression | None, str | None]:
        """``(model, precompute_ref_log_probs value or None, None)`` for the guard, or ``(None, None, reason)``."""
        setting = None if current is None else literal_value(current.value)
        if current is not None and setting not in (True, False):
            return (
                None,
                None,
                f"use_liger_kernel comes from `{code_of(current.value)}`; guard it where that is set",
            )
        model, reason = self._trained_model(call)
        settings = ["use_liger_kernel"]
        if qualified_under(self.names(call.func), ("trl",), ("DPOConfig",)):
            settings.append("precompute_ref_log_probs")  # a precompute hidden in the splat would clash
        hidden = self.links.values.hidden(call, settings)
        if reason is None and hidden is not None:
            return None, None, hidden
        precompute = keyword(call, "precompute_ref_log_probs")
        precompute_value = None if precompute is None else literal_value(precompute.value)
        if reason is None and precompute_value is True:
            reason = PRECOMPUTE_CLASH
        if reason is None and setting is False:
            reason = EXPLICITLY_OFF
        if reason is not None:
            return None, None, reason
        forwarded = precompute.value if precompute is not None and precompute_value is ... else None
        return model, forwarded, None

    def _trained_model(self, call: cst.Call) -> tuple[cst.BaseExpression | None, str | None]:
        """The model the config's trainer trains, readable at the config call; or why not."""
        trainers = self.links.trainers_receiving(call)
        if not trainers:
            return None, (
                "no trainer call in this module takes this config as args=, so the guard cannot see the model; "
                "build the config where the model and trainer are, or set use_liger_kernel by hand for full "
                "fine-tunes only"
            )
        for trainer in trainers:
            peft = keyword(trainer, "peft_config")
            if peft is not None and literal_value(peft.value) is not None:
                adapter = f"peft_config={code_of(peft.value)}"
                return None, f"the trainer adds a LoRA adapter ({adapter}): {LORA_SLOWDOWN}"
            if keyword(trainer, "model_init") is not None:
                return None, "the trainer builds its model with model_init, which the guard cannot see"
        models = {
            code_of(model): model for t in trainers if (model := self.links.model_argument(t)) is not None
        }
        if len(models) != 1:
            return (
                None,
                "the trainers that take this config train different models; set use_liger_kernel by hand",
            )
        model = next(iter(models.values()))
        scope = cast(cst.CSTNode, self.links.scope(call))  # the config call is of this module: it has a scope
        wrapped = self.links.peft_wrap(model)
        if wrapped is not None:
            return None, f"the model is a LoRA model ({wrapped}): {LORA_SLOWDOWN}"
        problem = self.links.unbound_at(model, self.line(call), self.line(trainers[0]), scope)
        if problem is not None:
            return None, f"the guard needs the trained model where the config is built, but {problem}"
        return model, None

    def _parser(self, call: cst.Call) -> None:
        """An argument parser filling a TrainingArguments-family config: Liger in the recipes its launches pass."""
        types = parser_types(call, self.nodes(cst.Assign))
        if not any(is_training_config(self.names(e)) for e in types):
            return
        message = f"`{code_of(call.func)}` fills the config from flags: use_liger_kernel in its recipes"
        reason = self._fixed_adapter()
        unlisted = reason is None and declares_dependency(self.repo, LIGER_DISTRIBUTION) is None
        if unlisted:
            reason = (
                f"a recipe cannot check at run time that {LIGER_DISTRIBUTION} is installed, and the repository does "
                f"not list it among its requirements for the parser at line {self.line(call)}: add it, then set "
                "use_liger_kernel: true in full fine-tune recipes"
            )
        dpo = any(qualified_under(self.names(e), ("trl",), ("DPOConfig",)) for e in types)
        setting = replace(RECIPE_LIGER, blocked=_dpo_recipe_blocked) if dpo else RECIPE_LIGER
        launched = None if reason else switch(self.repo, self.path, setting, self.optimization.id)
        if reason is None and launched is None:
            reason = (
                "no shell script or README command launches this script: pass `--use_liger_kernel true` where a "
                "full fine-tune is launched"
            )
        if reason is not None:
            self.refused(call, message, reason)
        if unlisted:
            self.sites.extend(self._unlisted_at_launches(call))
        self.sites.extend(launched or [])

    def _unlisted_at_launches(self, parser: cst.Call) -> list[Site]:
        """Each launch of this script, refused: Liger is not among the repository's requirements, so a flag
        that asks for it fails where it is not installed."""
        return [
            Site(
                launch.path,
                launch.line,
                self.optimization.id,
                "launch flag --use_liger_kernel true",
                False,
                f"{LIGER_DISTRIBUTION} is not among the repository's requirements, so a run launched with "
                f"`--use_liger_kernel true` fails where it is not installed (the parser at {self.path}:"
                f"{self.line(parser)}): add it to the requirements first",
            )
            for launch in launches(self.repo, self.path)
        ]

    def _fixed_adapter(self) -> str | None:
        """Why every run of this script trains LoRA: a trainer here gets a ``peft_config`` that flags cannot
        turn off (anything but TRL's ``get_peft_config(model_args)``, which is ``None`` without ``use_peft``)."""
        for trainer in self.nodes(cst.Call):
            if trainer_class(self.names(trainer.func)) is None:
                continue
            peft = keyword(trainer, "peft_config")
            if peft is None or literal_value(peft.value) is None:
                continue
            from_flags = isinstance(peft.value, cst.Call) and qualified_under(
                self.names(peft.value.func), (PEFT_FROM_FLAGS[0],), PEFT_FROM_FLAGS[1:]
            )
            if not from_flags:
                return f"the trainer adds a LoRA adapter (peft_config={code_of(peft.value)}): {LORA_SLOWDOWN}"
        return None

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.edited:
            self.import_runtime(RUNTIME, HELPER)
        return updated_node
