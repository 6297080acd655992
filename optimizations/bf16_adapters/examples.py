"""The ``bf16_adapters`` examples the test-suite runs."""

from optimizations.registry import Example

EXAMPLES = (
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
        "already_lora_layers_cast_by_hand",
        before="""\
import torch
from peft import LoraConfig, get_peft_model


def apply_lora(model):
    model = get_peft_model(model, LoraConfig(r=16, task_type="CAUSAL_LM"))
    for name, module in model.named_modules():
        if "lora_" in name:
            module.to(torch.bfloat16)
    return model
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
