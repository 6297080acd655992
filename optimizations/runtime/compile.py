# Vendored by perfbot from optimizations/runtime/compile.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch and the standard library, never perfbot.
"""``torch.compile`` where it pays off and can be switched off: a hand-written loop's whole model
(:func:`compile_model`), or the repeated layers of a model a trainer trains (:func:`compile_repeated_layers`)."""

from __future__ import annotations

import os
from typing import Any, TypeVar

import torch

# Set to 0 (or false/no/off) to train without compiling.
SWITCH = "PERFBOT_COMPILE"

Model = TypeVar("Model")


def _switched_off() -> bool:
    return os.environ.get(SWITCH, "1").strip().lower() in ("0", "false", "no", "off")


def compile_model(model: torch.nn.Module) -> None:
    """Compile ``model`` in place (``nn.Module.compile``: its class and state-dict keys stay as they were).

    Skipped, leaving the model as it was, when ``PERFBOT_COMPILE=0``, when torch has no ``nn.Module.compile``
    (before 2.2), or when none of the model's parameters is on a CUDA device (compiling for the CPU costs more
    start-up than it saves in a short run).
    """
    if _switched_off() or not hasattr(torch, "compile") or not hasattr(model, "compile"):
        return
    if not any(p.is_cuda for p in model.parameters()):
        return
    model.compile()


def repeated_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks of the longest ``nn.ModuleList`` whose blocks are all of one class (a transformer's decoder
    layers, ``model.model.layers``), or ``[]`` when the model has no such list of two or more."""
    longest: list[torch.nn.Module] = []
    for module in model.modules():
        longer = isinstance(module, torch.nn.ModuleList) and len(module) > max(1, len(longest))
        if longer and len({type(block) for block in module}) == 1:
            longest = list(module)
    return longest


def compile_repeated_layers(model: Model, fixed_budget: Any = None) -> Model:
    """Regional compilation: ``nn.Module.compile()`` on each of ``model``'s :func:`repeated_layers`, in place;
    returns ``model``.

    The blocks share their code, so one compiled graph serves them all (compiling takes seconds, not the
    minutes of a whole model), and what surrounds them (a PEFT wrapper, the loss, the trainer's own hooks)
    stays eager. PEFT adapters added later are compiled with the blocks, which are traced at their first call.
    Anything but an ``nn.Module`` (a checkpoint name a trainer loads itself) is returned untouched, as is
    every model when ``PERFBOT_COMPILE=0``, when torch has no ``nn.Module.compile`` (before 2.2), or when no
    GPU is present (compiling for the CPU costs more start-up than it saves in a short run).

    ``fixed_budget``: the TRL ``SFTConfig`` the model trains with. When its packing is padding-free, every
    packed batch is padded to one token budget (:func:`fix_token_budget`), and with one shape per step the
    whole decoder (the module holding the layers) is compiled as one region instead: one guard check and one
    autograd wrapper a step instead of one per layer. A decoder compiled whole without a fixed shape recompiles
    for new lengths, so any other config keeps the per-layer compilation.
    """
    if _switched_off() or not isinstance(model, torch.nn.Module) or not hasattr(model, "compile"):
        return model
    if not torch.cuda.is_available():
        return model
    layers = repeated_layers(model)
    decoder = _holder(model, layers) if fixed_budget is not None else None
    if decoder is not None and fix_token_budget(fixed_budget):
        decoder.compile()
        return model
    for block in layers:
        block.compile()
    return model


def fix_token_budget(config: Any) -> bool:
    """Pad every padding-free packed batch of a TRL ``SFTConfig`` to the same number of tokens: set its
    ``pad_to_multiple_of`` to ``per_device_train_batch_size * max_length`` (the most a batch packs) where
    it is unset. Each pad token becomes a one-token sequence of its own with label -100: no real token attends
    to it and the loss, normalised by the real tokens, is unchanged. True when the config has that budget."""
    strategy = getattr(config, "packing_strategy", None)
    padding_free = getattr(config, "padding_free", False) or (
        getattr(config, "packing", False) and strategy in ("bfd", "bfd_split")
    )
    batch = getattr(config, "per_device_train_batch_size", None)
    length = getattr(config, "max_length", None)
    if not padding_free or not batch or not length or not hasattr(config, "pad_to_multiple_of"):
        return False
    if config.pad_to_multiple_of is None:
        config.pad_to_multiple_of = batch * length
    return config.pad_to_multiple_of == batch * length


def _holder(model: torch.nn.Module, layers: list[torch.nn.Module]) -> torch.nn.Module | None:
    """The module whose ``nn.ModuleList`` child holds ``layers`` (a transformer's decoder), if any."""
    for module in model.modules() if layers else ():
        for child in module.children():
            if isinstance(child, torch.nn.ModuleList) and len(child) and child[0] is layers[0]:
                return module
    return None
