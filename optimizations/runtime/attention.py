# Vendored by perfbot from optimizations/runtime/attention.py; edit it there, not here.
# This module runs inside the target repository: it imports only the standard library, torch and
# transformers (the last two lazily), never perfbot.
"""Pick the fastest attention implementation that this machine, dtype and model class can really run."""

from __future__ import annotations

import importlib
import logging
from typing import Any

logger = logging.getLogger(__name__)

HALF_PRECISION = frozenset({"float16", "bfloat16", "half"})
# FlashAttention version -> (module to import, transformers availability check, minimum compute capability).
FLASH_ATTENTION = {
    3: ("flash_attn_interface", "is_flash_attn_3_available", 9),
    2: ("flash_attn", "is_flash_attn_2_available", 8),
}


def pick_attention_implementation(
    model_class: Any = None, source: Any = None, *, dtype: Any = None, fallback: str | None = "sdpa"
) -> str | None:
    """``"flash_attention_3"`` or ``"flash_attention_2"`` where it will run, ``fallback`` everywhere else.

    FlashAttention is picked only when its package really imports (a wheel built for another torch or CUDA
    fails there), transformers accepts it, a CUDA GPU of compute capability 8.0+ is present (9.x, Hopper,
    for FlashAttention 3, which is preferred), the weights load in bf16/fp16, and the model class supports
    it. ``model_class`` is the class whose ``from_pretrained``/``from_config`` loads the model (``None``: the
    architecture named in the checkpoint's config, as TRL does); ``source`` is the checkpoint (path or hub
    id), its config or a model, read to resolve an ``Auto*`` class and a ``dtype`` of ``None``/``"auto"``.
    ``fallback`` is what the call asked for before (``None``: transformers' own default).
    """
    version = _flash_attention_version()
    if version is None:
        return fallback
    config = None
    if _is_auto_class(model_class) or model_class is None or dtype in (None, "auto"):
        config = _config_of(source)
    if _dtype_name(dtype, config) not in HALF_PRECISION:
        logger.info(
            "FlashAttention %d needs bf16/fp16 weights; using %s attention", version, fallback or "default"
        )
        return fallback
    if not _supports_flash_attention(_model_class(model_class, config), version):
        logger.info(
            "the model class does not support FlashAttention; using %s attention", fallback or "default"
        )
        return fallback
    return f"flash_attention_{version}"


def _flash_attention_version() -> int | None:
    """The newest FlashAttention that imports, that transformers accepts and that this GPU can run."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, _minor = torch.cuda.get_device_capability()
        rocm = getattr(torch.version, "hip", None) is not None
    except Exception:  # a broken CUDA setup: no FlashAttention
        return None
    for version, (module, transformers_check, min_major) in FLASH_ATTENTION.items():
        if major < min_major or (version == 3 and (major != 9 or rocm)):
            continue
        if _imports(module) and _transformers_accepts(transformers_check):
            return version
    return None


def _imports(module: str) -> bool:
    """Whether ``module`` imports: a wheel built against another torch/CUDA raises here, with any error."""
    try:
        importlib.import_module(module)
    except Exception as error:  # ImportError, OSError (undefined symbol), RuntimeError ...
        logger.info("%s does not import (%s: %s)", module, type(error).__name__, error)
        return False
    return True


def _transformers_accepts(check_name: str) -> bool:
    """transformers' own availability check (package name and version), which ``from_pretrained`` applies."""
    try:
        import transformers.utils

        check = getattr(transformers.utils, check_name, None)
        return bool(check is not None and check())
    except Exception:
        return False


def _is_auto_class(model_class: Any) -> bool:
    return model_class is not None and hasattr(model_class, "_model_mapping")


def _config_of(source: Any) -> Any:
    """The model config behind ``source`` (a config, a model, or a checkpoint path/hub id); ``None`` if unknown."""
    if source is None:
        return None
    if hasattr(source, "model_type") and hasattr(source, "to_dict"):
        return source
    if hasattr(source, "config") and hasattr(source.config, "model_type"):
        return source.config
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(source)
    except Exception as error:
        logger.info("cannot read the model config of %r (%s)", source, error)
        return None


def _dtype_name(dtype: Any, config: Any) -> str:
    """The dtype the weights load in, as a torch attribute name (``"bfloat16"``)."""
    import torch

    if dtype in (None, "auto"):
        # transformers 5 loads the checkpoint's dtype by default; 4.x loaded float32 unless told otherwise.
        import transformers

        if dtype is None and int(transformers.__version__.split(".")[0]) < 5:
            config = None
        dtype = None
        if config is not None:
            dtype = config.dtype if hasattr(config, "dtype") else getattr(config, "torch_dtype", None)
        if dtype is None:
            dtype = torch.get_default_dtype()
    return str(dtype).removeprefix("torch.")


def _model_class(model_class: Any, config: Any) -> Any:
    """The concrete class that loads the model: ``model_class`` itself, or what an ``Auto*`` class maps to."""
    if model_class is not None and not _is_auto_class(model_class):
        return model_class
    if config is None:
        return None
    architectures = list(getattr(config, "architectures", None) or [])
    try:
        if model_class is None:
            import transformers

            return getattr(transformers, architectures[0], None) if architectures else None
        candidates = model_class._model_mapping[type(config)]
    except Exception:
        return None
    if not isinstance(candidates, (list, tuple)):
        return candidates
    by_name = {candidate.__name__: candidate for candidate in candidates}
    return next((by_name[a] for a in architectures if a in by_name), candidates[0])


def _supports_flash_attention(model_class: Any, version: int) -> bool:
    """The class flag transformers checks (``_supports_flash_attn``; ``_supports_flash_attn_<n>`` before 4.54)."""
    return model_class is not None and bool(
        getattr(model_class, "_supports_flash_attn", False)
        or getattr(model_class, f"_supports_flash_attn_{version}", False)
    )
