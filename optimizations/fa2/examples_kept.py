"""The ``fa2`` examples of an explicit ``"eager"``/``"sdpa"`` chosen on purpose: kept, never overridden."""

from optimizations.registry import Example

KEPT = (
    Example(
        "kept_eager_with_a_reason_above_it",
        before="""\
import torch
from transformers import AutoModelForCausalLM


def load(path):
    return AutoModelForCausalLM.from_pretrained(
        path,
        # eager: the probe reads attention weights, which SDPA and FlashAttention do not return
        attn_implementation="eager",
        dtype=torch.bfloat16,
    )
""",
        kept="the comment at line 8",
    ),
    Example(
        "kept_eager_for_a_family_that_trains_with_it",
        before="""\
import torch
from transformers import AutoModelForCausalLM

CHECKPOINT = "google/gemma-2-2b"


def load():
    return AutoModelForCausalLM.from_pretrained(CHECKPOINT, attn_implementation="eager", dtype=torch.bfloat16)
""",
        kept="transformers asks to train Gemma 2 and 3 with eager attention",
    ),
    Example(
        "kept_sdpa_in_a_file_that_builds_4d_masks",
        before="""\
import torch
from transformers import AutoModelForCausalLM
from transformers.modeling_attn_mask_utils import _prepare_4d_causal_attention_mask


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", dtype=torch.bfloat16)


def mask(batch, embeds):
    return _prepare_4d_causal_attention_mask(batch["attention_mask"], batch["input_ids"].shape, embeds, 0)
""",
        kept="builds 4D attention masks, which FlashAttention does not take",
    ),
    Example(
        "kept_eager_in_model_init_kwargs_with_a_reason",
        before="""\
from trl import SFTConfig, SFTTrainer


def train(model, data):
    config = SFTConfig(
        output_dir="out",
        model_init_kwargs={
            "dtype": "bfloat16",
            "attn_implementation": "eager",  # needed: our collator passes 4D masks
        },
    )
    return SFTTrainer(model=model, args=config, train_dataset=data)
""",
        kept="needed: our collator passes 4D masks",
    ),
    Example(
        "already_attention_patched_to_flash_attention_before_the_model_loads",
        # lm-sys/FastChat's train_mem.py: every Vicuna launch runs it, and the patch replaces LlamaAttention.
        before="""\
from fastchat.train.llama2_flash_attn_monkey_patch import replace_llama_attn_with_flash_attn

replace_llama_attn_with_flash_attn()

from fastchat.train.train import train

if __name__ == "__main__":
    train()
""",
    ),
    Example(
        "already_picked_at_run_time_by_a_function_of_the_program",
        # allenai/open-instruct's finetune.py: model_utils.detect_hf_attn_implementation() checks which
        # FlashAttention is installed.
        before="""\
import torch
from transformers import AutoModelForCausalLM

from lib import attention


def train(name, data, optimizer):
    model = AutoModelForCausalLM.from_pretrained(
        name, dtype=torch.bfloat16, attn_implementation=attention.detect_implementation()
    )
    for batch in data:
        model(**batch).loss.backward()
        optimizer.step()
""",
        files={
            "lib/__init__.py": "",
            "lib/attention.py": """\
import transformers


def _installed():
    if transformers.utils.is_flash_attn_2_available():
        return "flash_attention_2"
    return "sdpa"


def detect_implementation():
    return _installed()
""",
        },
    ),
    Example(
        "refused_where_the_program_patches_in_flash_attention_behind_a_flag",
        # lm-sys/FastChat's train_lora.py: --flash_attn switches LlamaAttention to flash_attn's kernels.
        before="""\
import transformers
from fastchat.train.llama_flash_attn_monkey_patch import replace_llama_attn_with_flash_attn


def train(args):
    if args.flash_attn:
        replace_llama_attn_with_flash_attn()
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
    transformers.Trainer(model=model, args=args).train()
""",
        refusal="patches attention to FlashAttention itself under `if args.flash_attn` (line 6)",
    ),
    Example(
        "refused_where_the_model_class_is_a_parameter",
        # microsoft/DeepSpeedExamples' DeepSpeed-Chat: create_hf_model(model_class, ...) serves steps 1-3.
        before="""\
from transformers import AutoConfig


def create_hf_model(model_class, model_name_or_path, tokenizer):
    model_config = AutoConfig.from_pretrained(model_name_or_path)
    model = model_class.from_pretrained(model_name_or_path, config=model_config)
    model.config.pad_token_id = tokenizer.eos_token_id
    return model
""",
        refusal="the model class is `model_class`, a parameter of create_hf_model() (line 4)",
    ),
)
