# Vendored by perfbot from optimizations/runtime/compile.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch and the standard library, never perfbot.
"""``torch.compile`` for a hand-written training loop's model, where it pays off and can be switched off."""

from __future__ import annotations

import os

import torch

# Set to 0 (or false/no/off) to train without compiling.
SWITCH = "PERFBOT_COMPILE"


def compile_model(model: torch.nn.Module) -> None:
    """Compile ``model`` in place (``nn.Module.compile``: its class and state-dict keys stay as they were).

    Skipped, leaving the model as it was, when ``PERFBOT_COMPILE=0``, when torch has no ``nn.Module.compile``
    (before 2.2), or when none of the model's parameters is on a CUDA device (compiling for the CPU costs more
    start-up than it saves in a short run).
    """
    if os.environ.get(SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return
    if not hasattr(torch, "compile") or not hasattr(model, "compile"):
        return
    if not any(p.is_cuda for p in model.parameters()):
        return
    model.compile()
