"""The ``liger_guard`` examples the registry runs: configs guarded, refused or left alone, and recipes."""

from __future__ import annotations

from optimizations.program.config_use import HELPER_ONLY_CONFIG_FILES, HELPER_ONLY_CONFIG_PROGRAM
from optimizations.registry import Example

EXAMPLES = (
    Example(
        "no_site_config_only_a_repository_helper_reads",
        before=HELPER_ONLY_CONFIG_PROGRAM,
        files=HELPER_ONLY_CONFIG_FILES,
    ),
    Example(
        "full_fine_tune",
        before="""\
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer


def train(path, data):
    model = AutoModelForCausalLM.from_pretrained(path)
    args = SFTConfig(output_dir="out", bf16=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=data)
    trainer.train()
""",
        after="""\
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer
from _perfbot_liger import liger_kernel_usable


def train(path, data):
    model = AutoModelForCausalLM.from_pretrained(path)
    args = SFTConfig(output_dir="out", bf16=True, use_liger_kernel=liger_kernel_usable(model))
    trainer = SFTTrainer(model=model, args=args, train_dataset=data)
    trainer.train()
""",
    ),
    Example(
        "module_import_inline_config_hub_model",
        before="""\
import trl


def train(data):
    trainer = trl.SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=trl.SFTConfig(output_dir="out"), train_dataset=data)
    trainer.train()
""",
        after="""\
import trl
from _perfbot_liger import liger_kernel_usable


def train(data):
    trainer = trl.SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=trl.SFTConfig(output_dir="out", use_liger_kernel=liger_kernel_usable("Qwen/Qwen2.5-0.5B")), train_dataset=data)
    trainer.train()
""",
    ),
    Example(
        "aliased_multiline_unguarded_flag_with_comments",
        before="""\
import transformers as hf


def train(model, data, cfg):
    args = hf.TrainingArguments(
        output_dir=cfg.out,  # checkpoints
        use_liger_kernel=True,  # fused kernels
        bf16=True
    )
    return hf.Trainer(model, args, train_dataset=data).train()
""",
        after="""\
import transformers as hf
from _perfbot_liger import liger_kernel_usable


def train(model, data, cfg):
    args = hf.TrainingArguments(
        output_dir=cfg.out,  # checkpoints
        use_liger_kernel=liger_kernel_usable(model),  # fused kernels
        bf16=True
    )
    return hf.Trainer(model, args, train_dataset=data).train()
""",
    ),
    Example(
        "dpo_precompute_from_settings",
        before="""\
from trl import DPOConfig, DPOTrainer


def train(model, data, dpo):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=dpo["precompute"])
    DPOTrainer(model=model, args=config, train_dataset=data).train()
""",
        after="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_liger import liger_kernel_usable


def train(model, data, dpo):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=dpo["precompute"], use_liger_kernel=liger_kernel_usable(model, precompute_ref_log_probs=dpo["precompute"]))
    DPOTrainer(model=model, args=config, train_dataset=data).train()
""",
    ),
    Example(
        "explicit_keyword_beside_a_splat",
        before="""\
from trl import SFTConfig, SFTTrainer


def train(model, data, overrides):
    args = SFTConfig(output_dir="out", use_liger_kernel=True, **overrides)
    SFTTrainer(model=model, args=args, train_dataset=data).train()
""",
        after="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_liger import liger_kernel_usable


def train(model, data, overrides):
    args = SFTConfig(output_dir="out", use_liger_kernel=liger_kernel_usable(model), **overrides)
    SFTTrainer(model=model, args=args, train_dataset=data).train()
""",
    ),
    Example(
        "refuses_model_returned_wrapped_from_a_helper_module",
        before="""\
from trl import SFTConfig, SFTTrainer

from setup_model import prepare


def train(path, data):
    model, tokenizer = prepare(path)
    args = SFTConfig(output_dir="out")
    SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer).train()
""",
        files={
            "setup_model.py": """\
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer


def with_adapter(base, rank):
    wrapped = get_peft_model(base, LoraConfig(r=rank))
    return wrapped


def prepare(path):
    base = AutoModelForCausalLM.from_pretrained(path)
    return with_adapter(base, 8), AutoTokenizer.from_pretrained(path)
"""
        },
        refusal="`prepare(...)` (train.py:7), which returns `with_adapter(...)` (setup_model.py:12), which returns "
        "`get_peft_model(...)` (setup_model.py:6)",
    ),
    Example(
        "already_guarded",
        before="""\
from _perfbot_liger import liger_kernel_usable
from trl import SFTConfig, SFTTrainer


def train(model, data):
    args = SFTConfig(output_dir="out", use_liger_kernel=liger_kernel_usable(model))
    SFTTrainer(model=model, args=args, train_dataset=data).train()
""",
    ),
    Example(
        "refuses_model_wrapped_by_get_peft_model",
        before="""\
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer


def load(path):
    model = AutoModelForCausalLM.from_pretrained(path)
    return get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))


def train(path, data):
    model = load(path)
    args = SFTConfig(output_dir="out", use_liger_kernel=True)
    SFTTrainer(model=model, args=args, train_dataset=data).train()
""",
        refusal="the model is a LoRA model (`load(...)` (train.py:12), which returns `get_peft_model(...)` (train.py:8))",
    ),
    Example(
        "refuses_trainer_peft_config",
        before="""\
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer


def train(model, data):
    lora = LoraConfig(r=16, target_modules=["q_proj", "v_proj"])
    args = SFTConfig(output_dir="out")
    SFTTrainer(model=model, args=args, train_dataset=data, peft_config=lora).train()
""",
        refusal="took 2x as long",
    ),
    Example(
        "refuses_dpo_precompute",
        before="""\
from trl import DPOConfig, DPOTrainer


def train(model, data):
    args = DPOConfig(output_dir="out", precompute_ref_log_probs=True)
    DPOTrainer(model=model, args=args, train_dataset=data).train()
""",
        refusal="precompute_ref_log_probs=True",
    ),
    Example(
        "refuses_model_built_after_config",
        before="""\
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer


def train(path, data):
    args = SFTConfig(output_dir="out")
    model = AutoModelForCausalLM.from_pretrained(path)
    SFTTrainer(model=model, args=args, train_dataset=data).train()
""",
        refusal="`model` is assigned after this line (line 7)",
    ),
    Example(
        "refuses_config_without_trainer",
        before="""\
from trl import SFTConfig


def make_args(out):
    return SFTConfig(output_dir=out)
""",
        refusal="no trainer call in this module takes this config",
    ),
)
