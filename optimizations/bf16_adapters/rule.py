"""LoRA adapters computing in the model's bf16 from fp32 weights: no activation casts around every LoRA layer.

``get_peft_model(model, config)`` becomes ``compute_adapters_in_bf16(get_peft_model(model, config))``; a TRL
trainer given ``peft_config=`` wraps the model itself (a TRL script's usual shape), and there the line after
``trainer = SFTTrainer(...)`` becomes ``compute_adapters_in_bf16(trainer.model)``, before ``train()`` builds the
optimizer. ``compute_adapters_in_bf16`` (vendored as ``_perfbot_precision.py``) acts only on a model whose frozen
weights are all bf16: PEFT's fp32 adapters there cast each LoRA layer's activations up to fp32 and the sum back;
instead the activations stay bf16 and each A/B projection casts its small weight to bf16 for the matmul. The
weights and the optimizer state stay fp32, so updates far below a bf16 ulp still land (adapters *stored* in
bf16, this optimization's first form, moved 43% of the LoRA elements a tiny model's unmodified run moved in 8
AdamW steps at lr 5e-6, 70% at 2e-4: ``tests/test_update_fidelity.py``). A quantized (QLoRA), fp16 or fp32 model,
DoRA and embedding adapters keep PEFT's default; a CPU run that loads the model in fp32 trains exactly as before.
A model that comes from PEFT's k-bit preparation (``prepare_model_for_kbit_training``, which casts every weight
it does not quantize to float32) under every condition the wrapping runs under has no bf16 weight left: that
site is refused, since its commit would change nothing.

Tier 2: bf16 rounding of the adapter matmuls (update error against the unmodified program within bf16
autocast's). Refused: a call that sets ``autocast_adapter_dtype`` itself or hides its arguments in ``**kwargs``
(which may set it), a trainer given ``peft_config=`` that is not assigned on a line of its own.
"""

from __future__ import annotations

import libcst as cst

from optimizations.edits.expressions import call_expr
from optimizations.edits.trainer_follow_up import TrainerFollowUp
from optimizations.program.hf import trainer_class
from optimizations.program.kbit import kbit_preparation
from optimizations.program.model_use import kept_as_data
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under, star_kwargs
from optimizations.program.values import assignments
from optimizations.registry import Example, Numerics, Optimization
from optimizations.runtime import PRECISION_RUNTIME

HELPER = "compute_adapters_in_bf16"
FLAG = "autocast_adapter_dtype"
WHAT = "LoRA adapters computing in the model's bf16 from fp32 weights and optimizer state"


class _ComputeAdaptersInBf16(TrainerFollowUp):
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
            reason = f"its arguments are passed through `**{code_of(hidden.value)}`, which may set {FLAG}"
        else:
            self.import_runtime(PRECISION_RUNTIME, HELPER)
            self.changed(original_node, message)
            return call_expr(HELPER, updated_node)
        self.refused(original_node, message, reason)
        return updated_node

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


class Bf16Adapters(Optimization):
    """PEFT LoRA adapters computing in the bf16 of the model they wrap, their weights and optimizer state fp32."""

    id = "bf16_adapters"
    title = "LoRA adapters computing in the model's bf16"
    tier = 2
    expected = (
        "adapter matmuls in bf16, weight-sized casts in place of activation-sized ones (CPU profile of a tiny "
        "Llama: 46% fewer elements cast per step, as many ops); not measured on a GPU with fp32 weights"
    )
    summary = (
        "compute_adapters_in_bf16(get_peft_model(...)), or compute_adapters_in_bf16(trainer.model) after a TRL "
        "trainer given peft_config: bf16 adapter matmuls, fp32 adapter weights, on bf16 models"
    )
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = "adapter matmuls in bf16; adapter weights and AdamW state stay float32"
    keywords = (
        "adapters in bf16",
        "bf16 adapters",
        "autocast_adapter_dtype",
        "adapter dtype",
        "lora in bf16",
    )
    codemods = (_ComputeAdaptersInBf16,)
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
from _perfbot_precision import compute_adapters_in_bf16


def apply_lora(model):
    config = LoraConfig(r=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    return compute_adapters_in_bf16(get_peft_model(model, config))
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
from _perfbot_precision import compute_adapters_in_bf16


def wrap(self, lora_config):
    self.net = compute_adapters_in_bf16(peft.get_peft_model(
        model=self.net,
        peft_config=lora_config,
    ))
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
            after="""\
from peft import get_peft_model
from transformers import AutoModelForCausalLM
from _perfbot_precision import compute_adapters_in_bf16


def load(path, lora):
    return compute_adapters_in_bf16(get_peft_model(AutoModelForCausalLM.from_pretrained(path), lora))
""",
        ),
        Example(
            "already_computing_in_bf16",
            before="""\
from peft import get_peft_model

from _perfbot_precision import compute_adapters_in_bf16


def wrap(model, lora):
    return compute_adapters_in_bf16(get_peft_model(model, lora))
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
            "bf16_adapter_weights_by_choice",
            before="""\
from peft import get_peft_model


def wrap(model, lora, **options):
    return get_peft_model(model, lora, autocast_adapter_dtype=False), get_peft_model(model, lora, **options)
""",
            refusal="autocast_adapter_dtype=False is set here",
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
from _perfbot_precision import compute_adapters_in_bf16


def main(training_args, model_args, dataset):
    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
    )
    compute_adapters_in_bf16(trainer.model)
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
            "adapters_made_only_to_be_saved",
            before="""\
from peft import LoraConfig, get_peft_model


def initialise_adapters(model, out):
    peft_model = get_peft_model(model, LoraConfig(r=8, init_lora_weights="pissa"))
    peft_model.peft_config["default"].init_lora_weights = True
    peft_model.save_pretrained(out)
""",
            refusal="the adapters are only made and saved here (`peft_model.save_pretrained` at line 7)",
        ),
        Example(
            "qlora_model_prepared_under_the_same_condition",
            before="""\
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, BitsAndBytesConfig


def load(args):
    quantized = BitsAndBytesConfig(load_in_4bit=args.bits == 4)
    model = AutoModelForCausalLM.from_pretrained(args.path, quantization_config=quantized)
    if not args.full_finetune:
        model = prepare_model_for_kbit_training(model)
    if not args.full_finetune:
        model = get_peft_model(model, LoraConfig(r=64))
    return model
""",
            refusal="the model comes from `prepare_model_for_kbit_training(...)` (line 9)",
        ),
        Example(
            "kbit_preparation_in_the_quantized_branch_only",
            before="""\
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training


def wrap(model, quantized):
    if quantized:
        model = prepare_model_for_kbit_training(model)
    return get_peft_model(model, LoraConfig(r=8))
""",
            after="""\
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from _perfbot_precision import compute_adapters_in_bf16


def wrap(model, quantized):
    if quantized:
        model = prepare_model_for_kbit_training(model)
    return compute_adapters_in_bf16(get_peft_model(model, LoraConfig(r=8)))
""",
        ),
        Example(
            "qlora_branch_refused_bf16_branch_changed",
            before="""\
from peft import get_peft_model, prepare_model_for_kbit_training


def wrap(model, lora, args):
    if args.qlora:
        model = prepare_model_for_kbit_training(model)
        model = get_peft_model(model, lora)
    else:
        model = get_peft_model(model, lora)
    return model
""",
            after="""\
from peft import get_peft_model, prepare_model_for_kbit_training
from _perfbot_precision import compute_adapters_in_bf16


def wrap(model, lora, args):
    if args.qlora:
        model = prepare_model_for_kbit_training(model)
        model = get_peft_model(model, lora)
    else:
        model = compute_adapters_in_bf16(get_peft_model(model, lora))
    return model
""",
            refusal="the model comes from `prepare_model_for_kbit_training(...)` (line 6)",
        ),
        Example(
            "prompt_adapter_has_no_lora_layers",
            before="""\
from peft import AdaptionPromptConfig, get_peft_model


def wrap(model):
    config = AdaptionPromptConfig(adapter_layers=8, adapter_len=10, task_type="CAUSAL_LM")
    return get_peft_model(model, config)
""",
            refusal="the adapter is built from `AdaptionPromptConfig`, not LoRA",
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
