# Vendored by perfbot from optimizations/runtime/precision.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch and the standard library, never perfbot.
"""Precision checks made at run time: whether this machine runs bf16 autocast natively (a hand-written loop's
``torch.autocast``), and whether a model's LoRA adapters need PEFT's fp32 upcast (:func:`upcast_adapters`, or
:func:`keep_adapters_in_bf16` once a trainer has made them)."""

from __future__ import annotations

import functools
from typing import TypeVar

import torch

Model = TypeVar("Model")
# The LoRA weights PEFT upcasts (DoRA's magnitude vectors are not among them: bf16 would round their small
# updates away, as TRL notes for QLoRA).
ADAPTER_WEIGHTS = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B")


@functools.cache
def bf16_supported() -> bool:
    """Whether CUDA is available and its GPU has bf16 tensor cores (compute capability 8.0+, Ampere and newer).

    Older GPUs emulate bf16 slowly, so autocast stays off there and the loop runs in float32 as before.
    """
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)


def upcast_adapters(model: torch.nn.Module) -> bool:
    """PEFT's ``autocast_adapter_dtype`` for ``model``: False when every weight is bf16.

    PEFT makes LoRA adapters in fp32 by default, so every LoRA layer casts its bf16 input up and its output
    back down, two extra kernels per adapter per step. On a bf16 model the adapters then stay in bf16, as TRL
    does under ZeRO-3. A quantized base (QLoRA: integer weights, or ``is_quantized``) keeps the fp32 upcast it
    needs, an fp16 model keeps fp32 adapters (fp16 training's gradient scaler refuses fp16 weights), and an
    fp32 model is unaffected either way.
    """
    if getattr(model, "is_quantized", False):
        return True
    return {p.dtype for p in model.parameters()} != {torch.bfloat16}


def keep_adapters_in_bf16(model: Model) -> Model:
    """The LoRA weights PEFT made in fp32 on a bf16 model cast to bf16, in place; returns ``model``.

    For a trainer that wraps the model itself (TRL's ``peft_config=``), where ``get_peft_model`` cannot be given
    ``autocast_adapter_dtype``: called once the trainer is built, before ``train()`` makes the optimizer, it
    leaves the LoRA A/B weights as :func:`upcast_adapters` would have (DoRA's magnitude vectors stay fp32).
    Only when every frozen weight is bf16; a quantized
    base (integer weights, ``is_quantized``), an fp16 or fp32 model, and anything but an ``nn.Module`` are left
    as they were.
    """
    if not isinstance(model, torch.nn.Module) or getattr(model, "is_quantized", False):
        return model
    parameters = list(model.named_parameters())
    frozen = {p.dtype for _, p in parameters if not p.requires_grad}
    if frozen != {torch.bfloat16}:
        return model
    for name, parameter in parameters:
        if parameter.dtype == torch.float32 and any(f".{part}." in f".{name}." for part in ADAPTER_WEIGHTS):
            parameter.data = parameter.data.to(torch.bfloat16)
    return model
