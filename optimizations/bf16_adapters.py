"""LoRA adapters in the model's bf16: no fp32 upcast, so no casts around every LoRA layer.

``get_peft_model(model, config)`` becomes ``get_peft_model(model, config,
autocast_adapter_dtype=upcast_adapters(model))``: ``upcast_adapters`` (vendored as ``_perfbot_precision.py``)
is False when every floating-point weight of the model is bf16, so PEFT makes the adapters in bf16 instead of
fp32 and the step loses a cast of each LoRA layer's input and output; an fp16, fp32 or quantized (QLoRA)
model keeps PEFT's default. A CPU run that loads the model in fp32 trains exactly as before.

A TRL trainer given ``peft_config=`` wraps the model itself (a TRL script's usual shape); there the line after
``trainer = SFTTrainer(...)`` becomes ``keep_adapters_in_bf16(trainer.model)``, which casts the fp32 LoRA weights
of a bf16, unquantized model to bf16 before ``train()`` builds the optimizer: the same end state.

The adapters' weights and optimizer updates are then bf16 (no fp32 master copy), which rounds small updates:
tier 2, held to loss parity at equal tokens. Refused: a call that sets ``autocast_adapter_dtype`` itself or
hides its arguments in ``**kwargs``, a model argument that cannot be read twice (a call, say), a trainer given
``peft_config=`` that is not assigned on a line of its own.
"""

from __future__ import annotations

import libcst as cst

from optimizations.program.codemod import (
    add_keywords,
    call_expr,
    code_of,
    keyword,
    literal_value,
    qualified_under,
    star_kwargs,
)
from optimizations.program.hf import trainer_class
from optimizations.program.trainer_calls import TrainerFollowUp, is_plain_reference
from optimizations.registry import Example, Numerics, Optimization

RUNTIME_MODULE = "precision"
HELPER = "upcast_adapters"
TRAINER_HELPER = "keep_adapters_in_bf16"
FLAG = "autocast_adapter_dtype"


class _KeepAdaptersInBf16(TrainerFollowUp):
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        trainer = trainer_class(self.names(original_node.func))
        config = keyword(original_node, "peft_config")
        if trainer is not None and config is not None and literal_value(config.value) is not None:
            message = f"{trainer}(...): the LoRA adapters it makes kept in the model's bf16 (no fp32 upcast)"
            why = "the trainer makes the adapters itself from `peft_config`"
            self.follow_trainer(original_node, RUNTIME_MODULE, TRAINER_HELPER, message, why)
            return updated_node
        if not qualified_under(self.names(original_node.func), ("peft",), ("get_peft_model",)):
            return updated_node
        current = keyword(original_node, FLAG)
        if current is not None and (
            self.calls(current.value, HELPER) or literal_value(current.value) is False
        ):
            shown = f"{FLAG}={code_of(current.value)}"
            self.already(
                original_node,
                f"{code_of(original_node.func)}(...): adapters kept in the model's dtype ({shown})",
            )
            return updated_node
        message = f"{code_of(original_node.func)}(...): LoRA adapters in the model's bf16 (no fp32 upcast)"
        model = keyword(original_node, "model")
        model = (
            model.value if model is not None else original_node.args[0].value if original_node.args else None
        )
        if current is not None:
            reason = f"{FLAG}={code_of(current.value)} is set here and perfbot keeps that choice"
        elif (hidden := star_kwargs(original_node)) is not None:
            reason = f"its arguments are passed through `**{code_of(hidden.value)}`; add {FLAG} where they are built"
        elif model is None or not is_plain_reference(model):
            shown = "no model argument" if model is None else f"the model is `{code_of(model)}`"
            reason = f"{shown}: bind it to a name first so the dtype check can read it"
        else:
            self.import_runtime(RUNTIME_MODULE, HELPER)
            self.changed(original_node, message)
            return add_keywords(updated_node, [(FLAG, call_expr(HELPER, model))])
        self.refused(original_node, message, reason)
        return updated_node


class Bf16Adapters(Optimization):
    """PEFT LoRA adapters made in the bf16 of the model they wrap instead of fp32."""

    id = "bf16_adapters"
    title = "LoRA adapters in the model's bf16"
    tier = 2
    expected = "fewer dtype casts per LoRA layer in a host-bound step"
    summary = (
        "get_peft_model(..., autocast_adapter_dtype=upcast_adapters(model)), or keep_adapters_in_bf16(trainer.model) "
        "after a TRL trainer given peft_config: no fp32 upcast on bf16 models"
    )
    scope = "model"
    numerics = Numerics.DYNAMICS
    numerics_reason = (
        "adapter weights and updates kept in bf16: a step below half a bf16 ulp of its weight rounds away"
    )
    keywords = (
        "adapters in bf16",
        "bf16 adapters",
        "autocast_adapter_dtype",
        "adapter dtype",
        "lora in bf16",
    )
    codemods = (_KeepAdaptersInBf16,)
    needs = ("get_peft_model", "peft_config")

    examples = (
        Example(
            "lora_wrap",
            before="""\
from peft import LoraConfig, get_peft_model


def apply_lora(model):
    config = LoraConfig(r=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    return get_peft_model(model, config)
""",
            after="""\
from peft import LoraConfig, get_peft_model
from _perfbot_precision import upcast_adapters


def apply_lora(model):
    config = LoraConfig(r=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    return get_peft_model(model, config, autocast_adapter_dtype=upcast_adapters(model))
""",
        ),
        Example(
            "module_import_keyword_model",
            before="""\
import peft


def wrap(self, lora_config):
    self.net = peft.get_peft_model(
        model=self.net,
        peft_config=lora_config,
    )
""",
            after="""\
import peft
from _perfbot_precision import upcast_adapters


def wrap(self, lora_config):
    self.net = peft.get_peft_model(
        model=self.net,
        peft_config=lora_config,
        autocast_adapter_dtype=upcast_adapters(self.net),
    )
""",
        ),
        Example(
            "model_built_inline",
            before="""\
from peft import get_peft_model
from transformers import AutoModelForCausalLM


def load(path, lora):
    return get_peft_model(AutoModelForCausalLM.from_pretrained(path), lora)
""",
            refusal="bind it to a name first",
        ),
        Example(
            "already_kept_in_the_model_dtype",
            before="""\
from peft import get_peft_model

from _perfbot_precision import upcast_adapters


def wrap(model, lora, frozen):
    adapted = get_peft_model(model, lora, autocast_adapter_dtype=upcast_adapters(model))
    return adapted, get_peft_model(frozen, lora, autocast_adapter_dtype=False)
""",
        ),
        Example(
            "upcast_kept_by_choice",
            before="""\
from peft import get_peft_model


def wrap(model, lora):
    return get_peft_model(model, lora, autocast_adapter_dtype=True)
""",
            refusal="autocast_adapter_dtype=True is set here",
        ),
        Example(
            "trl_script_trainer_builds_the_adapter",
            before="""\
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser, get_peft_config


def main(training_args, model_args, dataset):
    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
    )
    trainer.train()
""",
            after="""\
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser, get_peft_config
from _perfbot_precision import keep_adapters_in_bf16


def main(training_args, model_args, dataset):
    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
    )
    keep_adapters_in_bf16(trainer.model)
    trainer.train()
""",
        ),
        Example(
            "trainer_builds_the_adapter_and_is_never_assigned",
            before="""\
from peft import LoraConfig
from trl import SFTTrainer


def train(model, args, data):
    SFTTrainer(model=model, args=args, train_dataset=data, peft_config=LoraConfig(r=8)).train()
""",
            refusal="is not assigned on a line of its own",
        ),
        Example(
            "trainer_without_an_adapter",
            before="""\
from trl import DPOTrainer


def train(model, args, data):
    trainer = DPOTrainer(model=model, args=args, train_dataset=data, peft_config=None)
    trainer.train()
""",
        ),
    )
