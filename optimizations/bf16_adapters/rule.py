"""LoRA adapters computing in the model's bf16 from fp32 weights: no activation casts around every LoRA layer.
README.md says what it changes, what it refuses and why."""

from __future__ import annotations

from optimizations.registry import Numerics, Optimization

from .edit import ComputeAdaptersInBf16
from .examples import EXAMPLES


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
    codemods = (ComputeAdaptersInBf16,)
    examples = EXAMPLES
    needs = ("get_peft_model", "peft_config")
