"""The codemod: ``get_peft_model(...)`` wrapped in ``compute_adapters_in_bf16(...)``, or the adapters of a TRL
trainer given ``peft_config=`` reached through ``trainer.model``."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.expressions import call_expr
from optimizations.edits.trainer_follow_up import TrainerFollowUp
from optimizations.program.hf import trainer_class
from optimizations.program.kbit import kbit_preparation
from optimizations.program.model_use import kept_as_data
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under, star_kwargs, walk
from optimizations.program.training_loops import is_method_call
from optimizations.program.values import assignments
from optimizations.runtime import PRECISION_RUNTIME

HELPER = "compute_adapters_in_bf16"
FLAG = "autocast_adapter_dtype"
WHAT = "LoRA adapters computing in the model's bf16 from fp32 weights and optimizer state"


class ComputeAdaptersInBf16(TrainerFollowUp):
    """Wraps each ``get_peft_model(...)`` that makes LoRA adapters to train; after a TRL trainer that makes them
    from ``peft_config=``, calls the helper on ``trainer.model``."""

    def visit_Module(self, node: cst.Module) -> None:
        super().visit_Module(node)
        self.wrapped: set[cst.Call] = set()

    def visit_Call(self, node: cst.Call) -> None:
        if self.calls(node, HELPER) and node.args and isinstance(node.args[0].value, cst.Call):
            self.wrapped.add(node.args[0].value)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        trainer = trainer_class(self.names(original_node.func))
        config = keyword(original_node, "peft_config")
        if trainer is not None and config is not None and literal_value(config.value) is not None:
            message = f"{trainer}(...): the {WHAT}"
            why = "the trainer makes the adapters itself from `peft_config`"
            self.follow_trainer(original_node, PRECISION_RUNTIME, HELPER, message, why)
            return updated_node
        if not qualified_under(self.names(original_node.func), ("peft",), ("get_peft_model",)):
            return updated_node
        callee = code_of(original_node.func)
        if original_node in self.wrapped:
            self.already(original_node, f"`{HELPER}({callee}(...))`: the {WHAT}")
            return updated_node
        message = f"{callee}(...): {WHAT}"
        scope = self.links.values.function_of(original_node) or self.parsed.module
        if (cast := self._cast_by_hand(original_node, scope)) is not None:
            self.already(
                original_node,
                f"{callee}(...): the LoRA layers are cast by hand after it (`{code_of(cast)}` at line "
                f"{self.line(cast)}), so the adapters compute in that dtype already",
            )
            return updated_node
        kept = kept_as_data(scope, original_node, self.parsed)
        other = self._other_adapter(original_node, scope)
        if kept is not None:
            reason = (
                f"the adapters are only made and saved here (`{code_of(kept)}` at line {self.line(kept)}); "
                "nothing in this function trains them"
            )
        elif other is not None:
            reason = (
                f"the adapter is built from `{other}`, not LoRA: it has no LoRA layers to compute in bf16"
            )
        elif (
            prepared := kbit_preparation(self, self._wrapped_model(original_node), original_node)
        ) is not None:
            reason = (
                f"the model comes from `{code_of(prepared.func)}(...)` (line {self.line(prepared)}), which casts "
                "every weight it does not quantize to float32: no frozen weight is bf16, so the helper would keep "
                "PEFT's default and the commit would change nothing"
            )
        elif (current := keyword(original_node, FLAG)) is not None:
            reason = f"{FLAG}={code_of(current.value)} is set here and perfbot keeps that choice"
        elif (hidden := star_kwargs(original_node)) is not None:
            reason = (
                f"its arguments are passed through `**{code_of(hidden.value)}` (line {self.line(hidden)}), which "
                f"may set {FLAG}"
            )
        else:
            self.import_runtime(PRECISION_RUNTIME, HELPER)
            self.changed(original_node, message)
            return call_expr(HELPER, updated_node)
        self.refused(original_node, message, reason)
        return updated_node

    def _cast_by_hand(self, call: cst.Call, scope: cst.CSTNode) -> cst.Call | None:
        """A ``module.to(...)`` after ``call`` in ``scope``, in a ``for ... in <model>.named_modules()`` loop and
        under an ``if`` that names LoRA (``if 'lora_' in name``, ``isinstance(module, LoraLayer)``): the
        program casts its LoRA layers itself (artidoro/qlora, ContextualAI/HALOs)."""
        parents = self.parsed.parents()
        for node in walk(scope):
            if not (is_method_call(node, "to") and node.args and self.line(node) > self.line(call)):
                continue
            under_lora = looped = False
            current = parents.get(node)
            while current is not None and current is not scope:
                if isinstance(current, cst.If) and "lora" in code_of(current.test).lower():
                    under_lora = True
                if isinstance(current, cst.For) and is_method_call(current.iter, "named_modules"):
                    looped = True
                current = parents.get(current)
            if under_lora and looped:
                return node
        return None

    @staticmethod
    def _wrapped_model(call: cst.Call) -> cst.BaseExpression | None:
        """The model ``get_peft_model(model, ...)`` wraps: its first argument or ``model=``."""
        given = keyword(call, "model")
        if given is not None:
            return given.value
        return call.args[0].value if call.args and call.args[0].keyword is None else None

    def _other_adapter(self, call: cst.Call, scope: cst.CSTNode) -> str | None:
        """The PEFT config class other than ``LoraConfig`` that ``get_peft_model``'s config is built from in
        ``scope`` (``AdaptionPromptConfig``, ``IA3Config``), where one assignment there builds it."""
        config = call.args[1].value if len(call.args) > 1 and call.args[1].keyword is None else None
        given = keyword(call, "peft_config")
        config = given.value if given is not None else config
        if isinstance(config, cst.Name):
            built = assignments(scope, config.value)
            config = built[0].value if len(built) == 1 else None
        if not isinstance(config, cst.Call):
            return None
        classes = {name.rpartition(".")[2] for name in self.names(config.func) if name.startswith("peft.")}
        other = sorted(c for c in classes if c.endswith("Config") and c != "LoraConfig")
        return other[0] if other else None
