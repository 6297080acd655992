"""In-process LoRA training with TRL: supervised fine-tuning (``train_sft``) and DPO (``train_dpo``).

Both phases load the cached Qwen2 model, wrap it with a LoRA adapter on the attention projections and train
it with TRL's trainers; the settings come from ``configs/training/default.yaml`` and
``configs/dpo/default.yaml``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import PreTrainedTokenizerBase, set_seed
from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

from data import dpo_dataset, sft_dataset
from model_loading import load_model, load_tokenizer

logger = logging.getLogger(__name__)


def apply_lora(model: torch.nn.Module) -> PeftModel:
    """Wrap ``model`` with a rank-16 LoRA adapter on the attention projections."""
    lora_config = LoraConfig(
        r=16,
        lora_alpha=32,
        lora_dropout=0.05,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lora_config)
    model.print_trainable_parameters()
    return model


def _init_phase(cfg: dict[str, Any]) -> tuple[PeftModel, PreTrainedTokenizerBase]:
    """Seed, then load the tokenizer and the LoRA-wrapped model for one training phase."""
    set_seed(cfg["seed"])
    tokenizer = load_tokenizer(cfg["size"])
    model = load_model(cfg["size"])
    logger.info("Loaded %s model (%s)", cfg["size"], model.config._attn_implementation)
    return apply_lora(model), tokenizer


def train_sft(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Supervised LoRA fine-tuning on the prompt/completion data; returns the trainer's log history.

    ``cfg`` holds ``size``, ``seed``, ``max_steps``, ``output_dir`` and ``training`` (the YAML settings).
    """
    training = cfg["training"]
    model, tokenizer = _init_phase(cfg)
    train_dataset = sft_dataset(cfg["size"])

    sft_config = SFTConfig(
        output_dir=cfg["output_dir"],
        num_train_epochs=training["epochs"],
        max_steps=cfg["max_steps"],
        per_device_train_batch_size=training["per_device_batch_size"],
        gradient_accumulation_steps=training["gradient_accumulation_steps"],
        gradient_checkpointing=training["gradient_checkpointing"],
        learning_rate=training["learning_rate"],
        lr_scheduler_type=training["lr_scheduler_type"],
        warmup_steps=training["warmup_steps"],
        weight_decay=training["weight_decay"],
        max_length=training["max_length"],
        packing=False,
        bf16=torch.cuda.is_available(),
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=cfg["seed"],
    )

    trainer = SFTTrainer(
        model=model,
        args=sft_config,
        train_dataset=train_dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model()
    return trainer.state.log_history


def train_dpo(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """DPO on the LoRA adapter, the frozen base model serving as reference; returns the log history.

    ``cfg`` holds ``size``, ``seed``, ``max_steps``, ``output_dir`` and ``dpo`` (the YAML settings).
    """
    dpo = cfg["dpo"]
    model, tokenizer = _init_phase(cfg)
    train_dataset = dpo_dataset(cfg["size"])

    dpo_config = DPOConfig(
        output_dir=cfg["output_dir"],
        num_train_epochs=dpo["epochs"],
        max_steps=cfg["max_steps"],
        per_device_train_batch_size=dpo["per_device_batch_size"],
        gradient_accumulation_steps=dpo["gradient_accumulation_steps"],
        gradient_checkpointing=dpo["gradient_checkpointing"],
        learning_rate=dpo["learning_rate"],
        lr_scheduler_type=dpo["lr_scheduler_type"],
        warmup_steps=dpo["warmup_steps"],
        beta=dpo["beta"],
        loss_type=[dpo["loss_type"]],
        max_length=dpo["max_length"],
        bf16=torch.cuda.is_available(),
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=cfg["seed"],
    )

    trainer = DPOTrainer(
        model=model,
        ref_model=None,
        args=dpo_config,
        train_dataset=train_dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model()
    return trainer.state.log_history
