# Vendored by perfbot from optimizations/fa2/helper.py; edit it there, not here.
# This module runs inside the target repository: it imports only the standard library, torch and
# transformers (lazily), never perfbot.
"""Pick the fastest attention that this machine, dtype and model class can really run.

In order of preference: FlashAttention 4, 3, 2, FlexAttention (block-sparse masks, so packed and padded
batches skip the masked blocks), SDPA, and what the call asked for before. The choice and the reason each
faster one was skipped are logged once; ``PERFBOT_ATTENTION=<name>`` forces a choice (for measurements).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, cast

logger = logging.getLogger(__name__)

OVERRIDE = "PERFBOT_ATTENTION"
# What the picker may replace; any other choice the call made (``fallback``) is the user's and is kept.
REPLACEABLE = (None, "sdpa", "eager")
PREFERENCE = ("flash_attention_4", "flash_attention_3", "flash_attention_2", "flex_attention", "sdpa")
HALF_PRECISION = frozenset({"float16", "bfloat16", "half"})
# FlashAttention implementation -> (module that must import, transformers' own availability check).
FLASH_ATTENTION = {
    "flash_attention_4": ("flash_attn.cute", "is_flash_attn_4_available"),
    "flash_attention_3": ("flash_attn_interface", "is_flash_attn_3_available"),
    "flash_attention_2": ("flash_attn", "is_flash_attn_2_available"),
}
# The CUDA compute capabilities (major) each FlashAttention build runs on: 4 Hopper and Blackwell (SM90,
# SM100), 3 Hopper only, 2 Ampere and newer.
FLASH_ATTENTION_GPUS = {
    "flash_attention_4": (9, 10),
    "flash_attention_3": (9,),
    "flash_attention_2": tuple(range(8, 13)),
}
FLEX_MIN_TORCH = (2, 5)
# The class flag transformers checks before it accepts an implementation.
CLASS_FLAG = {"flex_attention": "_supports_flex_attn", "sdpa": "_supports_sdpa"}
_logged: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a machine offers the picker; :func:`machine_capabilities` probes this one.

    ``gpu`` is the CUDA compute capability (``None``: no usable CUDA GPU); ``implementations`` the names the
    installed transformers registers; ``unavailable`` why an implementation's package cannot run here (an
    import that raises, transformers' availability check, a torch without FlexAttention); ``probe_flex``
    runs FlexAttention once on the GPU for a dtype name and a model config, returning the error or ``None``.
    """

    gpu: tuple[int, int] | None
    rocm: bool = False
    implementations: frozenset[str] = frozenset()
    unavailable: Mapping[str, str] = dataclasses.field(default_factory=dict)
    probe_flex: Callable[[str, Any], str | None] = lambda dtype_name, config: probe_flex_attention(
        dtype_name, config
    )


def pick_attention_implementation(
    model_class: Any = None,
    source: Any = None,
    *,
    dtype: Any = None,
    fallback: str | None = "sdpa",
    capabilities: Capabilities | None = None,
) -> str | None:
    """Pick the first of FlashAttention 4/3/2, FlexAttention and SDPA that runs here.

    ``model_class`` is the class whose ``from_pretrained``/``from_config`` loads the model (``None``: the
    architecture named in the checkpoint's config, as TRL does); ``source`` is the checkpoint (path or hub
    id), its config or a model, read to resolve an ``Auto*`` class, a ``dtype`` of ``None``/``"auto"`` and the
    head sizes FlexAttention is probed with. ``fallback`` is what the call asked for before (``None``:
    transformers' own default), kept without a CUDA GPU so nothing changes on CPU machines, and kept everywhere
    when it is a choice other than SDPA or eager (a value read at run time, such as TRL's
    ``model_args.attn_implementation``, that the user set to ``flash_attention_2`` say).
    """
    forced = os.environ.get(OVERRIDE, "").strip()
    if forced:
        _log_once(f"attention: {forced} ({OVERRIDE} is set)")
        return forced
    if fallback not in REPLACEABLE:
        _log_once(f"attention: {fallback}, as the call chose it")
        return fallback
    capabilities = capabilities or machine_capabilities()
    if capabilities.gpu is None:
        _log_once(f"attention: {fallback or 'the default'}, as the call asked (no CUDA GPU)")
        return fallback
    config = _config_of(source)
    cls = _model_class(model_class, config)
    dtype_name = _dtype_name(dtype, config)
    skipped = []
    implementation: str | None
    for implementation in PREFERENCE:
        reason = _why_not(implementation, cls, config, dtype_name, capabilities)
        if reason is None:
            break
        skipped.append(f"{implementation}: {reason}")
    else:
        implementation = fallback
    model = getattr(cls, "__name__", "an unknown model class")
    gpu = ".".join(map(str, capabilities.gpu))
    _log_once(
        f"attention: {implementation or 'the default'} for {model} in {dtype_name} on a GPU of compute "
        f"capability {gpu}" + (f"; skipped {'; '.join(skipped)}" if skipped else "")
    )
    return implementation


def _why_not(
    implementation: str, cls: Any, config: Any, dtype_name: str, capabilities: Capabilities
) -> str | None:
    """Say why ``implementation`` cannot run this model here, or return ``None``.

    FlexAttention is probed last.
    """
    if implementation not in capabilities.implementations:
        return "this transformers does not offer it"
    if implementation in capabilities.unavailable:
        return capabilities.unavailable[implementation]
    major = cast(tuple[int, int], capabilities.gpu)[0]  # asked only where there is a GPU
    if implementation in FLASH_ATTENTION:
        if capabilities.rocm and implementation != "flash_attention_2":
            return "not built for ROCm"
        if major not in FLASH_ATTENTION_GPUS[implementation]:
            return f"not built for GPUs of compute capability {major}.x"
    if implementation != "sdpa" and dtype_name not in HALF_PRECISION:
        return f"the weights load in {dtype_name}, not bf16/fp16"
    if cls is None:
        return "the model class is unknown, so its support cannot be checked"
    flag = CLASS_FLAG.get(implementation, "_supports_flash_attn")
    legacy = f"_supports_flash_attn_{implementation[-1]}"  # transformers < 4.54 named the version
    if not (getattr(cls, flag, False) or (implementation in FLASH_ATTENTION and getattr(cls, legacy, False))):
        return f"{cls.__name__} does not support it"
    if implementation == "flex_attention":
        error = capabilities.probe_flex(dtype_name, config)
        if error is not None:
            return f"a forward and backward pass failed on this GPU ({error})"
    return None


def _log_once(message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        logger.info(message)


@functools.cache
def machine_capabilities() -> Capabilities:
    """Read the GPU, the attention implementations and which packages import."""
    import torch

    try:
        gpu = (
            cast(tuple[int, int], tuple(torch.cuda.get_device_capability()))  # (major, minor)
            if torch.cuda.is_available()
            else None
        )
    except Exception:  # noqa: BLE001
        # a broken CUDA setup: no GPU to pick for
        gpu = None
    if gpu is None:
        return Capabilities(gpu=None)
    unavailable = {name: error for name in FLASH_ATTENTION if (error := flash_attention_error(name))}
    torch_version = tuple(int(part) for part in torch.__version__.split(".")[:2])
    if torch_version < FLEX_MIN_TORCH:
        unavailable["flex_attention"] = f"torch {torch.__version__} has none (2.5 or newer has)"
    return Capabilities(
        gpu=gpu,
        rocm=getattr(torch.version, "hip", None) is not None,
        implementations=registered_implementations(),
        unavailable=unavailable,
    )


def registered_implementations() -> frozenset[str]:
    """List the ``attn_implementation`` names transformers accepts, but ``"eager"``."""
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    except ImportError:  # transformers < 4.48: FlashAttention 2 and SDPA only
        return frozenset({"flash_attention_2", "sdpa"})
    return frozenset(ALL_ATTENTION_FUNCTIONS)


def flash_attention_error(implementation: str) -> str | None:
    """Say why a FlashAttention package cannot run here; ``None`` where it can.

    A wheel built against another torch or CUDA raises on import (``OSError: undefined symbol``), which
    transformers' own check, reading package metadata only, does not see.
    """
    module, check_name = FLASH_ATTENTION[implementation]
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001
        # ImportError, OSError (undefined symbol), RuntimeError ...
        return f"{module} does not import ({type(error).__name__}: {error})"
    try:
        import transformers.utils

        check = getattr(transformers.utils, check_name)
        accepted = bool(check())
    except Exception as error:  # noqa: BLE001
        # any failure: transformers cannot tell
        return f"transformers cannot check it ({type(error).__name__}: {error})"
    return None if accepted else f"transformers' {check_name}() says no (package name or version)"


def probe_flex_attention(dtype_name: str, config: Any, device: str | None = None) -> str | None:
    """Run FlexAttention once at the model's head sizes; return the error, or ``None``.

    Two packed documents of 64 tokens, causal, forward and (when gradients are enabled) backward, through the
    very function the model calls, on ``device`` (default: this process's GPU, ``LOCAL_RANK``'s under torchrun
    or accelerate). Its compiled kernel stays cached, so the model's first step compiles once, for dynamic
    lengths, instead of once for its first length and again for the next.
    """
    import torch

    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(text, "num_attention_heads", None) or 8
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or getattr(text, "hidden_size", 64 * heads) // heads
    return _probe_flex(device, dtype_name, heads, kv_heads, head_dim, torch.is_grad_enabled())


@functools.cache
def _probe_flex(
    device: str | None, dtype_name: str, heads: int, kv_heads: int, head_dim: int, backward: bool
) -> str | None:
    """Run the probe once per process and shape; return its error line, or ``None``."""
    try:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        if device is None:
            rank = int(os.environ.get("LOCAL_RANK", "0"))
            device = f"cuda:{rank if rank < torch.cuda.device_count() else torch.cuda.current_device()}"
        length, dtype = 128, getattr(torch, dtype_name)
        query, key, value = (
            torch.randn(1, h, length, head_dim, device=device, dtype=dtype, requires_grad=backward)
            for h in (heads, kv_heads, kv_heads)
        )
        document = torch.arange(length, device=device) // 64

        def causal_document(batch, head, q_index, kv_index):
            return (q_index >= kv_index) & (document[q_index] == document[kv_index])

        block_mask = create_block_mask(causal_document, None, None, length, length, device=device)
        attend = ALL_ATTENTION_FUNCTIONS["flex_attention"]
        output, _ = attend(
            torch.nn.Module(), query, key, value, block_mask, scaling=head_dim**-0.5, dropout=0.0
        )
        if backward:
            output.float().sum().backward()
        # The query's gradient is read only after backward() has filled it.
        if not torch.isfinite(output).all() or (
            backward and not torch.isfinite(cast(torch.Tensor, query.grad)).all()
        ):
            return "it returned non-finite values"
    except Exception as error:  # noqa: BLE001
        # no triton, a kernel that does not fit in shared memory, a dtype ...
        first_line = str(error).splitlines()[0] if str(error) else ""
        return f"{type(error).__name__}: {first_line}".rstrip(": ")
    return None


def _config_of(source: Any) -> Any:
    """Find the model config behind ``source`` (config, model, path or hub id)."""
    if source is None:
        return None
    if hasattr(source, "model_type") and hasattr(source, "to_dict"):
        return source
    if hasattr(source, "config") and hasattr(source.config, "model_type"):
        return source.config
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(source)
    except Exception as error:  # noqa: BLE001
        # no config to read: nothing to pick for
        logger.info("cannot read the model config of %r (%s)", source, error)
        return None


def _dtype_name(dtype: Any, config: Any) -> str:
    """Name the dtype the weights load in as a torch attribute (``"bfloat16"``)."""
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


def _is_auto_class(model_class: Any) -> bool:
    return model_class is not None and hasattr(model_class, "_model_mapping")


def _model_class(model_class: Any, config: Any) -> Any:
    """Find the concrete class that loads the model, resolving an ``Auto*`` class."""
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
    except Exception:  # noqa: BLE001
        # no mapping for this config: nothing to pick for
        return None
    if not isinstance(candidates, (list, tuple)):
        return candidates
    by_name = {candidate.__name__: candidate for candidate in candidates}
    return next((by_name[a] for a in architectures if a in by_name), candidates[0])
