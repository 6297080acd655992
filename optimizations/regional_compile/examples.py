"""The registry examples of ``regional_compile``: trainers whose model's layers are compiled, and the ones it leaves or refuses."""

from __future__ import annotations

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "lora_model_into_sft_trainer",
        before="""\
from peft import LoraConfig, get_peft_model
from trl import SFTConfig, SFTTrainer


def train(model, dataset):
    model = get_peft_model(model, LoraConfig(r=16, task_type="CAUSAL_LM"))
    trainer = SFTTrainer(model=model, args=SFTConfig(output_dir="out", bf16=True), train_dataset=dataset)
    trainer.train()
""",
        after="""\
from peft import LoraConfig, get_peft_model
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    model = get_peft_model(model, LoraConfig(r=16, task_type="CAUSAL_LM"))
    trainer = SFTTrainer(model=compile_repeated_layers(model), args=SFTConfig(output_dir="out", bf16=True), train_dataset=dataset)
    trainer.train()
""",
    ),
    Example(
        "positional_model_into_transformers_trainer_beside_a_regex",
        before="""\
import re

import transformers

RUN_NAME = re.compile(r"run-(\\d+)")


def main(net, args, data):
    trainer = transformers.Trainer(net, args, train_dataset=data)
    return trainer.train()
""",
        after="""\
import re

import transformers
from _perfbot_compile import compile_repeated_layers

RUN_NAME = re.compile(r"run-(\\d+)")


def main(net, args, data):
    trainer = transformers.Trainer(compile_repeated_layers(net), args, train_dataset=data)
    return trainer.train()
""",
    ),
    Example(
        "trl_script_passes_a_checkpoint_name",
        before="""\
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser, get_peft_config


def main(script_args, training_args, model_args, dataset):
    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
    )
    trainer.train()


if __name__ == "__main__":
    main(*TrlParser((dict, SFTConfig, ModelConfig)).parse_args_and_config(), None)
""",
        after="""\
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser, get_peft_config
from _perfbot_compile import compile_repeated_layers


def main(script_args, training_args, model_args, dataset):
    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
    )
    compile_repeated_layers(trainer.model)
    trainer.train()


if __name__ == "__main__":
    main(*TrlParser((dict, SFTConfig, ModelConfig)).parse_args_and_config(), None)
""",
    ),
    Example(
        "checkpoint_name_into_a_trainer_held_by_an_attribute",
        before="""\
from trl import DPOConfig, DPOTrainer

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


class Run:
    def __init__(self, data):
        self.trainer: DPOTrainer = DPOTrainer(MODEL, args=DPOConfig(output_dir="out"), train_dataset=data)
""",
        after="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


class Run:
    def __init__(self, data):
        self.trainer: DPOTrainer = DPOTrainer(MODEL, args=DPOConfig(output_dir="out"), train_dataset=data)
        compile_repeated_layers(self.trainer.model)
""",
    ),
    Example(
        "module_level_script_reading_a_star_import",
        before="""\
from settings import *
from trl import SFTTrainer

trainer = SFTTrainer(model=MODEL, args=ARGS, train_dataset=DATA)
trainer.train()
""",
        after="""\
from settings import *
from trl import SFTTrainer
from _perfbot_compile import compile_repeated_layers

trainer = SFTTrainer(model=compile_repeated_layers(MODEL), args=ARGS, train_dataset=DATA)
trainer.train()
""",
    ),
    Example(
        "checkpoint_name_into_a_trainer_never_assigned",
        before="""\
from trl import SFTConfig, SFTTrainer


def main(dataset):
    SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=SFTConfig(output_dir="out"), train_dataset=dataset).train()
""",
        refusal="is not assigned on a line of its own",
    ),
    Example(
        "already_compiled_layers",
        before="""\
from trl import SFTTrainer

from _perfbot_compile import compile_repeated_layers


def main(model, args, data):
    SFTTrainer(model=compile_repeated_layers(model), args=args, train_dataset=data).train()
    trainer = SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=args, train_dataset=data)
    compile_repeated_layers(trainer.model)
    trainer.train()
""",
    ),
    Example(
        "whole_model_compiled_by_the_config",
        before="""\
from trl import DPOConfig, DPOTrainer


def main(model, data):
    config = DPOConfig(output_dir="out", torch_compile=True)
    DPOTrainer(model=model, args=config, train_dataset=data).train()
""",
        refusal="torch_compile=True compiles the whole model already",
    ),
    Example(
        "model_compiled_after_the_trainer_is_built",
        before="""\
import torch
import transformers


def train(model, args, data):
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    model = torch.compile(model)
    trainer.train()
    model.save_pretrained("out")
""",
        after="""\
import torch
import transformers
from _perfbot_compile import compile_repeated_layers


def train(model, args, data):
    trainer = transformers.Trainer(model=compile_repeated_layers(model), args=args, train_dataset=data)
    model = torch.compile(model)
    trainer.train()
    model.save_pretrained("out")
""",
    ),
    Example(
        "model_compiled_after_the_trainer_and_handed_to_it",
        before="""\
import torch
import transformers


def train(model, args, data):
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    model = torch.compile(model)
    trainer.model = model
    trainer.train()
""",
        refusal="line 7: `torch.compile(...)` compiles here already",
    ),
    Example(
        "model_compiled_before_the_trainer",
        before="""\
import torch
import transformers


def train(model, args, data):
    model = torch.compile(model)
    transformers.Trainer(model=model, args=args, train_dataset=data).train()
""",
        refusal="line 6: `torch.compile(...)` compiles here already",
    ),
    Example(
        "model_compiled_for_the_next_round",
        before="""\
import torch
import transformers


def rounds(model, args, data):
    for _ in range(2):
        transformers.Trainer(model=model, args=args, train_dataset=data).train()
        model = torch.compile(model)
""",
        refusal="line 8: `torch.compile(...)` compiles here already",
    ),
    Example(
        "quantized_model_prepared_for_kbit_training",
        before="""\
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, Trainer


def train(path, args, data):
    model = AutoModelForCausalLM.from_pretrained(path, load_in_8bit=True)
    model = prepare_model_for_kbit_training(model)
    model = get_peft_model(model, LoraConfig(r=8))
    Trainer(model=model, args=args, train_dataset=data).train()
""",
        refusal="the model comes from `prepare_model_for_kbit_training(...)` (line 7)",
    ),
    Example(
        "no_trainer",
        before="""\
import torch


def evaluate(model, batches):
    with torch.no_grad():
        return [model(b).logits.argmax(-1) for b in batches]
""",
    ),
    Example(
        "kept_torch_compile_turned_off_with_a_reason",
        before="""\
from trl import SFTConfig, SFTTrainer


def train(model, dataset):
    config = SFTConfig(
        output_dir="out",
        # compile stays off: recompiles on every new sequence length of our unpacked data
        torch_compile=False,
    )
    SFTTrainer(model=model, args=config, train_dataset=dataset).train()
""",
        kept="compile stays off",
    ),
    Example(
        "refused_where_runs_patch_attention_to_varlen_kernels_first",
        # lm-sys/FastChat: every Vicuna launch runs train_mem.py, which patches LlamaAttention first.
        before="""\
import transformers


def train():
    model = transformers.AutoModelForCausalLM.from_pretrained("m")
    transformers.Trainer(model=model, args=transformers.TrainingArguments("out")).train()
""",
        files={
            "train_mem.py": """\
from llama_flash_attn_monkey_patch import replace_llama_attn_with_flash_attn

replace_llama_attn_with_flash_attn()

from train import train

if __name__ == "__main__":
    train()
""",
        },
        refusal="patch attention to FlashAttention's varlen kernels first (train_mem.py:3)",
    ),
)
