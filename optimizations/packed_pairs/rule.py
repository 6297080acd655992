"""A DPO step's chosen and rejected sequences packed into one row of a fixed token budget, and the decoder compiled
whole. What it changes and when it refuses: README.md."""

from __future__ import annotations

from optimizations.program.shapes import ProgramShape
from optimizations.registry import Numerics, Optimization
from optimizations.runtime import COMPILE_REPEATED_LAYERS

from .edit import PackPairs
from .examples import EXAMPLES


class PackedPairs(Optimization):
    """DPO pairs packed into one token budget a step, and the decoder compiled as one region."""

    id = "packed_pairs"
    title = "DPO pairs packed into one token budget, the decoder compiled whole"
    tier = 2
    expected = "+81% DPO tokens/s over per-layer compilation on a host-bound LoRA step, with decoder_graphs"
    summary = (
        "compile_repeated_layers(model, fixed_budget=args) at a DPOTrainer that precomputes its reference "
        "log-probs: each step's sequences packed into batch × max_length tokens, the decoder compiled whole"
    )
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "the same tokens attend to the same tokens; the packed row's matmuls and the fused decoder round in "
        "another order"
    )
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = ("packed pairs", "pairs packed", "padding-free dpo", "packed into one token budget")
    capabilities = ("static shapes",)
    codemods = (PackPairs,)
    compiles_model = True
    needs = (COMPILE_REPEATED_LAYERS,)
    examples = EXAMPLES
