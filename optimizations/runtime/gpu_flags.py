# Vendored by perfbot from optimizations/runtime/gpu_flags.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch, never perfbot.
"""GPU settings for hand-written loops.

TF32 and cuDNN autotuning through whichever TF32 API this torch has, and the run-time check that decides
whether an Adam/AdamW optimizer can use its fused kernel.
"""

from __future__ import annotations

import sys
from typing import Any

import torch


def has_fp32_precision_api() -> bool:
    """Whether torch has per-backend ``fp32_precision`` settings (>= 2.9)."""
    return hasattr(torch.backends.cuda.matmul, "fp32_precision") and hasattr(torch.backends.cudnn, "conv")


def enable_tf32(cudnn_benchmark: bool = True) -> None:
    """Let float32 matmuls and convolutions use TF32; turn on cuDNN autotuning.

    Uses ``fp32_precision`` where it exists and the legacy ``allow_tf32`` flags otherwise, never both:
    recent torch raises when a program mixes the two APIs. cuDNN RNNs get the same setting as
    convolutions, which is what the legacy ``cudnn.allow_tf32`` flag covered.
    """
    if has_fp32_precision_api():
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        # torch declares these on the objects that replace its cudnn modules, where type checkers do not look
        torch.backends.cudnn.conv.fp32_precision = "tf32"  # type: ignore[attr-defined]
        torch.backends.cudnn.rnn.fp32_precision = "tf32"  # type: ignore[attr-defined]
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = cudnn_benchmark


def fused_kernel_devices() -> tuple[str, ...]:
    """List the device types with fused Adam/AdamW kernels in this torch.

    CUDA, and the CPU too from torch 2.4, but not the CPU where ``torch_xla`` is loaded: parameters on the CPU
    there are headed for a TPU, which has no fused kernel, and torch checks the device again at the first step.
    """
    from torch.utils import _foreach_utils

    listed = getattr(_foreach_utils, "_get_fused_kernels_supported_devices", lambda: ["cuda"])()
    return tuple(d for d in listed if not (d == "cpu" and "torch_xla" in sys.modules))


def fused_optimizer_supported(params: list[Any]) -> bool:
    """Whether ``Adam``/``AdamW(fused=True)`` runs on these parameters.

    It does when every parameter is a floating-point tensor on a device this torch fuses Adam/AdamW for. On
    torch 2.4 and later that includes the CPU, so an optimizer built before the model moves to the GPU
    (``accelerator.prepare(model, optimizer)``, ``model.to(device)`` after the optimizer) is fused there too:
    the flag stays with the optimizer and its parameters, which move in place. ``params`` is what the
    optimizer receives: a list of tensors or of parameter-group dicts. A group whose ``params`` is an iterator
    is turned into a list first, as the optimizer itself does, so checking it does not use it up.
    """
    tensors: list[Any] = []
    for item in params:
        if isinstance(item, dict):
            if not isinstance(item["params"], (torch.Tensor, list, tuple)):
                item["params"] = list(item["params"])
            group = item["params"]
            tensors.extend([group] if isinstance(group, torch.Tensor) else group)
        else:
            tensors.append(item)
    devices = fused_kernel_devices()
    return bool(tensors) and all(
        isinstance(t, torch.Tensor) and t.device.type in devices and t.is_floating_point() for t in tensors
    )
