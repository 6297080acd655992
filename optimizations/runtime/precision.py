# Vendored by perfbot from optimizations/runtime/precision.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch and the standard library, never perfbot.
"""Whether this machine runs bf16 autocast natively: the check a hand-written loop's ``torch.autocast`` uses."""

from __future__ import annotations

import functools

import torch


@functools.cache
def bf16_supported() -> bool:
    """Whether CUDA is available and its GPU has bf16 tensor cores (compute capability 8.0+, Ampere and newer).

    Older GPUs emulate bf16 slowly, so autocast stays off there and the loop runs in float32 as before.
    """
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)
