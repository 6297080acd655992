# Vendored by perfbot from optimizations/runtime/precision.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch and the standard library, never perfbot.
"""Precision checks made at run time: whether this machine runs bf16 autocast natively (a hand-written loop's
``torch.autocast``), and whether a model's LoRA adapters need PEFT's fp32 upcast (:func:`upcast_adapters`)."""

from __future__ import annotations

import functools

import torch


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
