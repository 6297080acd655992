"""What a training step counts: the non-padding tokens and sequences of a model call's inputs, and a model's
training FLOPs per token (the meter's counts, :mod:`benchmarks.metrics`, and the ceiling's MFU)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

_IGNORE_INDEX = -100


def count_batch(
    args: Sequence[Any], kwargs: dict[str, Any], pad_token_id: int | None = None
) -> tuple[int | torch.Tensor | None, int | torch.Tensor]:
    """Non-padding tokens and sequences in one model call's inputs, as ints or 0-d tensors (never synced).

    Tokens: ``attention_mask.sum()`` when a mask of the input's shape is given; otherwise every input token except
    padding (``input_ids == pad_token_id`` whose label, when labels are given, is -100, so an EOS that doubles as
    the pad token still counts inside packed sequences); all of ``input_ids`` when no pad id is known. Sequences:
    the rows of the batch, or, for packed batches (``position_ids`` and no mask), the positions where
    ``position_ids`` restarts at 0. Returns ``(None, rows)`` when the call has no integer token ids.
    """
    input_ids = kwargs.get("input_ids")
    if not _is_token_tensor(input_ids):
        input_ids = next((arg for arg in args if _is_token_tensor(arg)), None)
    if input_ids is None:
        first = next(
            (t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor) and t.dim() > 0), None
        )
        return None, (first.shape[0] if first is not None else 0)
    rows = input_ids.shape[0] if input_ids.dim() > 1 else 1
    attention_mask = kwargs.get("attention_mask")
    if isinstance(attention_mask, torch.Tensor) and attention_mask.shape == input_ids.shape:
        return attention_mask.sum(), rows
    real = None
    if pad_token_id is not None:
        real = input_ids != pad_token_id
        labels = kwargs.get("labels")
        if isinstance(labels, torch.Tensor) and labels.shape == input_ids.shape:
            real = real | (labels != _IGNORE_INDEX)
    tokens = real.sum() if real is not None else input_ids.numel()
    position_ids = kwargs.get("position_ids")
    if isinstance(position_ids, torch.Tensor) and position_ids.shape == input_ids.shape:
        starts = position_ids == 0
        return tokens, (starts & real if real is not None else starts).sum()
    return tokens, rows


def _is_token_tensor(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and value.dim() > 0
        and not value.is_floating_point()
        and value.dtype != torch.bool
    )


def model_flops_per_token(model: torch.nn.Module) -> float:
    """Training FLOPs per token: 2·N forward + 2·N input gradients + 2·N_trainable weight gradients.

    N counts the weights of the matmul layers (``nn.Linear``, which includes a tied LM head and LoRA's A/B
    matrices; embedding lookups cost no matmul FLOPs), N_trainable those that require grad. A full fine-tune gives
    the usual 6·N; LoRA about 4·N. Attention score/value matmuls (12·layers·hidden·seq_len per token, ~2% for a
    0.5B model at 257 tokens) and activation-checkpoint recomputation are not counted, as in the usual MFU
    definition. Models without ``nn.Linear`` layers fall back to all parameters.
    """
    linear = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weights = linear or list(model.parameters())
    total = sum(w.numel() for w in weights)
    trainable = sum(w.numel() for w in weights if w.requires_grad)
    return float(4 * total + 2 * trainable)


def model_facts(model: torch.nn.Module | None) -> dict[str, Any]:
    """A run's model as its metrics record it: parameters, trainable parameters, the attention implementation
    its config names and the training FLOPs per token (each None without a model)."""
    model_params = trainable_params = flops_per_token = None
    if model is not None:
        parameters = list(model.parameters())
        model_params = sum(p.numel() for p in parameters)
        trainable_params = sum(p.numel() for p in parameters if p.requires_grad)
        flops_per_token = model_flops_per_token(model)
    return {
        "model_params": model_params,
        "trainable_params": trainable_params,
        "attn_implementation": getattr(getattr(model, "config", None), "_attn_implementation", None),
        "flops_per_token": flops_per_token,
    }
