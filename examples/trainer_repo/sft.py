"""Standalone SFT LoRA path: its own settings dataclass, model loading and SFTConfig, no YAML.

Run it with ``python sft.py --size tiny --max-steps 3``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import trl
from peft import LoraConfig
from transformers import AutoModelForCausalLM, set_seed

from cli import parse_run_args, print_losses
from data import sft_dataset
from model_loading import ensure_model, load_tokenizer


@dataclass
class TrainLoraConfig:
    """Settings of one standalone LoRA SFT run."""

    size: str = "tiny"
    output_dir: str = "outputs/sft-standalone"
    seed: int = 42
    max_steps: int = -1
    epochs: int = 1
    learning_rate: float = 2e-4
    batch_size: int = 8
    max_length: int = 1024
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05


def load_base_model(size: str) -> torch.nn.Module:
    """The cached base model of ``size``, in bf16 on CUDA and fp32 on CPU."""
    return AutoModelForCausalLM.from_pretrained(
        ensure_model(size),
        attn_implementation="sdpa",
        dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32,
    )


def train_lora(config: TrainLoraConfig) -> list[dict[str, Any]]:
    """LoRA SFT with the adapter built by the trainer from ``peft_config``; returns the log history."""
    set_seed(config.seed)
    tokenizer = load_tokenizer(config.size)
    model = load_base_model(config.size)
    peft_config = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
    )

    args = trl.SFTConfig(
        output_dir=config.output_dir,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        max_length=config.max_length,
        packing=False,  # one example per row
        gradient_checkpointing=False,
        bf16=torch.cuda.is_available(),
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=config.seed,
    )

    trainer = trl.SFTTrainer(
        model=model,
        args=args,
        train_dataset=sft_dataset(config.size),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainer.train()
    trainer.save_model()
    return trainer.state.log_history


def main(argv: list[str] | None = None) -> None:
    """Parse the shared flags and run :func:`train_lora`."""
    args = parse_run_args("Standalone SFT LoRA training with TRL.", TrainLoraConfig.output_dir, argv)
    config = TrainLoraConfig(
        size=args.size,
        output_dir=args.output_dir,
        seed=args.seed,
        max_steps=args.max_steps,
    )
    print_losses(train_lora(config))


if __name__ == "__main__":
    main()
