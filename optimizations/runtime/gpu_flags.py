# Vendored by perfbot from optimizations/runtime/gpu_flags.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch, never perfbot.
"""GPU settings for hand-written loops: TF32 and cuDNN autotuning through whichever TF32 API this torch has,
and the run-time check that decides whether an Adam/AdamW optimizer can use its fused CUDA kernel."""

from __future__ import annotations

from typing import Any

import torch


def has_fp32_precision_api() -> bool:
    """Whether this torch has the per-backend ``fp32_precision`` settings (torch >= 2.9)."""
    return hasattr(torch.backends.cuda.matmul, "fp32_precision") and hasattr(torch.backends.cudnn, "conv")


def enable_tf32(cudnn_benchmark: bool = True) -> None:
    """Let float32 matmuls and convolutions use TF32 tensor cores; turn on cuDNN autotuning.

    Uses ``fp32_precision`` where it exists and the legacy ``allow_tf32`` flags otherwise, never both:
    recent torch raises when a program mixes the two APIs. cuDNN RNNs get the same setting as
    convolutions, which is what the legacy ``cudnn.allow_tf32`` flag covered.
    """
    if has_fp32_precision_api():
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "tf32"
        torch.backends.cudnn.rnn.fp32_precision = "tf32"
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = cudnn_benchmark


def fused_optimizer_supported(params: list[Any]) -> bool:
    """Whether every parameter is a floating-point CUDA tensor, so ``Adam``/``AdamW(fused=True)`` runs.

    ``params`` is what the optimizer receives: a list of tensors or of parameter-group dicts. A group whose
    ``params`` is an iterator is turned into a list first, as the optimizer itself does, so checking it does
    not use it up.
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
    return bool(tensors) and all(
        isinstance(t, torch.Tensor) and t.is_cuda and t.is_floating_point() for t in tensors
    )
