# Vendored by perfbot from optimizations/runtime/precision.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch and the standard library, never perfbot.
"""Precision checks made at run time.

Whether this machine runs bf16 autocast natively (a hand-written loop's ``torch.autocast``), the precision an
``Accelerator`` gets unless its launch chose one (:func:`bf16_unless_launched_otherwise`), and LoRA adapters
that compute in their bf16 base model's dtype while their weights and optimizer state stay fp32
(:func:`compute_adapters_in_bf16`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TypeVar, cast

import torch

Model = TypeVar("Model")


@functools.cache
def bf16_supported() -> bool:
    """Whether a CUDA GPU is present with bf16 tensor cores (compute capability 8.0+).

    That is Ampere and newer. Older GPUs emulate bf16 slowly, so autocast stays off there and the loop runs in
    float32 as before.
    """
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)


# Where ``accelerate launch`` (its config file or ``--mixed_precision``) passes the precision it chose.
ACCELERATE_LAUNCH_PRECISION = "ACCELERATE_MIXED_PRECISION"


def bf16_unless_launched_otherwise() -> str | None:
    """Return the precision for an ``Accelerator``: bf16 unless its launch chose one.

    ``"bf16"`` where :func:`bf16_supported` and ``accelerate launch`` chose nothing (its default ``no``);
    ``None`` otherwise, which leaves Accelerate to read the launch's choice. Accelerate lets the argument win
    over the launch, so a plain ``"bf16"`` would silently replace a run launched with ``--mixed_precision fp8``.
    """
    launched = os.environ.get(ACCELERATE_LAUNCH_PRECISION, "no").strip().lower()
    return "bf16" if bf16_supported() and launched == "no" else None


class Bf16ComputeLinear(torch.nn.Linear):
    """A LoRA A or B projection whose fp32 weight is cast to its input's dtype.

    The weight stays fp32 (the optimizer's master copy) and is cast for the matmul: the step computes in bf16
    and its update lands on fp32 weights.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Project ``x`` with the weight cast to ``x``'s dtype."""
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return torch.nn.functional.linear(x, self.weight.to(x.dtype), bias)


def _vanilla_lora_linears(layer: torch.nn.Module) -> list[torch.nn.Linear] | None:
    """Return the A and B projections of a PEFT LoRA linear layer, or ``None``.

    ``None`` when ``layer`` is none or one of its adapters is a variant (DoRA) whose forward reads the weights
    itself.
    """
    lora_a, lora_b = getattr(layer, "lora_A", None), getattr(layer, "lora_B", None)
    if not isinstance(lora_a, torch.nn.ModuleDict) or not isinstance(lora_b, torch.nn.ModuleDict):
        return None
    if getattr(layer, "lora_variant", None) or not hasattr(layer, "cast_input_dtype_enabled"):
        return None
    modules = [*lora_a.values(), *lora_b.values()]
    if not all(type(m) in (torch.nn.Linear, Bf16ComputeLinear) for m in modules):
        return None
    return cast("list[torch.nn.Linear]", modules)  # each one's type was just checked


def compute_adapters_in_bf16(model: Model) -> Model:
    """Make ``model``'s LoRA adapters compute in bf16 from fp32 weights, in place.

    PEFT makes LoRA weights fp32 on a bf16 model, so every LoRA layer casts its activations up to fp32, runs
    the adapter matmuls in fp32 and casts the sum back. Here the layer's input stays bf16 (PEFT's
    ``cast_input_dtype_enabled`` off) and each A/B projection casts its small weight to bf16 instead: the
    activation-sized casts go, the adapter matmuls run in bf16. The weights stay fp32 (adapters PEFT was told
    to make in bf16 are cast back up), so the optimizer keeps fp32 weights and state: an update far below a
    bf16 ulp (lr 5e-6) still moves them, where bf16 adapter weights would round it away.

    Call it before the optimizer is built. Only on a model whose frozen weights are all bf16; a quantized base
    (integer weights, ``is_quantized``), an fp16 or fp32 model, DoRA and other variant adapters, embedding and
    convolution adapters, and anything but an ``nn.Module`` are left as they were.
    """
    if not isinstance(model, torch.nn.Module) or getattr(model, "is_quantized", False):
        return model
    if {p.dtype for p in model.parameters() if not p.requires_grad} != {torch.bfloat16}:
        return model
    for layer in model.modules():
        linears = _vanilla_lora_linears(layer)
        if linears is None:
            continue
        _compute_in_bf16(layer, linears)
        _keep_added_adapters_in_bf16(layer)
    return model


def _compute_in_bf16(layer: torch.nn.Module, linears: list[torch.nn.Linear]) -> None:
    """Keep the layer's input bf16 and cast its A/B projections' weights per matmul."""
    # torch types a Module's attribute values as tensors or modules; it takes any value
    layer.cast_input_dtype_enabled = False  # type: ignore[assignment]
    for linear in linears:
        for parameter in linear.parameters():
            if parameter.dtype != torch.float32:
                parameter.data = parameter.data.float()
        linear.__class__ = Bf16ComputeLinear


def _keep_added_adapters_in_bf16(layer: torch.nn.Module) -> None:
    """Give an adapter added to the layer later the same bf16-computing projections.

    TRL's DPO trainer adds a reference adapter to a PEFT model. PEFT builds it as plain fp32 ``nn.Linear``,
    which a bf16 input no longer cast up would not multiply. A variant adapter (DoRA) added later gives the
    layer back PEFT's own input cast.
    """
    update_layer = cast("Callable[..., object]", layer.update_layer)

    def update_and_keep_bf16(*args: object, **kwargs: object) -> object:
        result = update_layer(*args, **kwargs)
        linears = _vanilla_lora_linears(layer)
        if linears is None:
            layer.cast_input_dtype_enabled = True  # type: ignore[assignment]
        else:
            _compute_in_bf16(layer, linears)
        return result

    layer.update_layer = update_and_keep_bf16  # type: ignore[assignment]  # a Module takes any attribute
