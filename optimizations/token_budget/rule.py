"""One shape per packed SFT batch, and the decoder compiled whole: TRL's ``SFTTrainer`` gets the shared
``FixBudget`` edit of the compile helper's call. What it changes and when it refuses: README.md."""

from __future__ import annotations

from optimizations.edits.fixed_budget import FixBudget
from optimizations.program.shapes import ProgramShape
from optimizations.registry import Numerics, Optimization
from optimizations.runtime import COMPILE_REPEATED_LAYERS

from .examples import EXAMPLES


class TokenBudget(Optimization):
    """Padding-free packed SFT batches padded to one token budget, and the decoder compiled as one region."""

    id = "token_budget"
    title = "One token budget per packed batch, the decoder compiled whole"
    tier = 2
    expected = "+20-29% SFT tokens/s over per-layer compilation on a host-bound LoRA step, loss within 0.02%"
    summary = (
        "compile_repeated_layers(model, fixed_budget=args) at an SFTTrainer (fixed_budget=trainer after one "
        "that loads its checkpoint): padding-free batches padded to batch × max_length tokens, the decoder "
        "nn.Module.compile()-d whole"
    )
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "pad tokens are one-token sequences with label -100 (same loss); the padded matmuls and the fused "
        "decoder round in another order"
    )
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = (
        "token budget",
        "one shape per packed batch",
        "static shapes",
        "decoder compiled whole",
    )
    capabilities = ("static shapes",)
    codemods = (FixBudget,)
    compiles_model = True
    needs = (COMPILE_REPEATED_LAYERS,)
    examples = EXAMPLES
