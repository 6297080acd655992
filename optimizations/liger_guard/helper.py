# Vendored by perfbot from optimizations/liger_guard/helper.py; edit it there, not here.
# This module runs inside the target repository: it imports only the standard library, torch,
# transformers and liger_kernel (all lazily), never perfbot.
"""Whether Liger-Kernel's fused kernels should be on for a training run."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


def liger_kernel_usable(model: Any, precompute_ref_log_probs: Any = False) -> bool:
    """Tell whether ``use_liger_kernel`` will speed this run up.

    ``model`` is what the trainer trains: a model, or a checkpoint path/hub id that TRL loads. Liger is
    used only when the model carries no PEFT adapter (Liger's kernels do not compose with PEFT's LoRA
    layers, LoRA on ``lm_head`` included: a LoRA SFT run took 2x as long with them), DPO does not
    precompute reference log-probs (Liger had to be turned off beside them), a CUDA or XPU device is
    present, ``liger_kernel`` imports, and Liger has kernels for the model type. Why it is not used is
    logged.
    """
    reason = _why_not(model, precompute_ref_log_probs)
    if reason is not None:
        logger.info("Liger-Kernel off: %s", reason)
        return False
    logger.info("Liger-Kernel on")
    return True


def _why_not(model: Any, precompute_ref_log_probs: Any) -> str | None:
    if precompute_ref_log_probs:
        return "DPO precomputes the reference log-probs (precompute_ref_log_probs=True)"
    adapter = _peft_adapter(model)
    if adapter is not None:
        return f"{adapter}: Liger's kernels do not compose with PEFT's LoRA layers (measured 2x slower)"
    try:
        import torch

        on_gpu = torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())
    except Exception:  # noqa: BLE001
        # a broken device setup: no GPU for the kernels
        on_gpu = False
    if not on_gpu:
        return "no CUDA or XPU device for its Triton kernels"
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except Exception as error:  # noqa: BLE001
        # not installed, or a build that does not match this torch/triton
        return f"liger_kernel does not import ({type(error).__name__}: {error})"
    model_type = _model_type(model)
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        return f"Liger has no kernels for model type {model_type!r}"
    return None


def _peft_adapter(model: Any) -> str | None:
    """Name what makes ``model`` a PEFT model, if anything."""
    if isinstance(model, str) or not hasattr(model, "named_modules"):
        return None
    adapted = [name for name, module in model.named_modules() if type(module).__module__.startswith("peft.")]
    if not adapted:
        return None
    if any(name == "lm_head" or name.endswith(".lm_head") for name in adapted):
        return "LoRA targets lm_head"
    return "the model carries a PEFT adapter"


def _model_type(model: Any) -> str | None:
    """``config.model_type`` of a model, or of the checkpoint a path/hub id names."""
    config = getattr(model, "config", None)
    if config is None and isinstance(model, str):
        try:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(model)
        except Exception:  # noqa: BLE001
            # no config to read: no model type
            return None
    return getattr(config, "model_type", None)
