"""Hand-written causal attention → ``F.scaled_dot_product_attention``: recognised by its math, replaced only when
every step is provably what SDPA computes. What it changes and when it refuses: README.md."""

from __future__ import annotations

from optimizations.program.shapes import ProgramShape
from optimizations.registry import Numerics, Optimization, Word

from .edit import SdpaCodemod
from .examples import EXAMPLES


class Sdpa(Optimization):
    """Hand-written masked-softmax causal attention → torch's fused scaled_dot_product_attention."""

    id = "sdpa"
    title = "scaled_dot_product_attention for hand-written causal attention"
    tier = 1
    expected = (
        "+60% tokens/s on a from-scratch GPT in bf16 (example GPT, H100: x1.59); no T×T matrix in memory"
    )
    summary = "softmax(q @ k.T * 1/sqrt(d), causal mask) [dropout] @ v → F.scaled_dot_product_attention(is_causal=True)"
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "F.scaled_dot_product_attention computes the same causal attention in a fused kernel's order"
    )
    measured_on = (ProgramShape.LOOP,)
    keywords = (
        "scaled_dot_product_attention",
        "scaled dot product attention",
        "hand-written attention",
        "masked softmax",
    )
    capabilities = ("fused attention", "flash attention", "flashattention", "efficient attention")
    codemods = (SdpaCodemod,)
    needs = (Word("softmax"), Word("scaled_dot_product_attention"))

    examples = EXAMPLES
