"""Liger-Kernel switched on by a run-time check (never on LoRA, never beside precomputed DPO log-probs), or in the
recipes an argument-parser script is launched with. What it changes and when it refuses: README.md."""

from __future__ import annotations

from optimizations.program.hf import ARGUMENT_PARSERS, HF_CONFIGS
from optimizations.registry import Numerics, Optimization

from .edit import GuardLiger
from .examples import EXAMPLES


class LigerGuard(Optimization):
    """Liger-Kernel's fused Triton kernels, switched on at run time only where they help (never on LoRA)."""

    id = "liger_guard"
    title = "use Liger-Kernel where it helps, checked at run time"
    tier = 1
    expected = "+10-20% full fine-tune throughput"
    summary = "use_liger_kernel guarded by a run-time check: liger installed, supported model, no LoRA, no DPO precompute"
    scope = "train"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "Liger's Triton kernels (norms, RoPE, SwiGLU, chunked cross-entropy): same loss, other order"
    )
    keywords = ("use_liger_kernel", "liger")
    codemods = (GuardLiger,)
    needs = (*HF_CONFIGS, *(parser for _, parser in ARGUMENT_PARSERS))

    examples = EXAMPLES
