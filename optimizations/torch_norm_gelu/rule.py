"""Hand-written layer norm and GELU → torch's own kernels, where the formula is provably the same.

What it matches, and what it refuses, is in README.md.
"""

from __future__ import annotations

from optimizations.program.shapes import ProgramShape
from optimizations.registry import AllOf, Numerics, Optimization, Word

from .edit import NormGelu
from .examples import EXAMPLES


class TorchNormGelu(Optimization):
    """Hand-written layer norm and GELU → F.layer_norm / F.gelu, parameters and callers unchanged."""

    id = "torch_norm_gelu"
    title = "torch's own layer norm and GELU kernels for hand-written ones"
    tier = 1
    expected = "+20-75% tokens/s on a from-scratch GPT (example GPT in bf16 with SDPA, H100: x1.76)"
    summary = "hand-written layer norm → F.layer_norm(x, x.shape[-1:], w, b, eps); tanh/erf GELU → F.gelu"
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = "torch's layer-norm and GELU kernels compute the same functions in another order"
    measured_on = (ProgramShape.LOOP,)
    keywords = (
        "layernorm",
        "layer norm",
        "gelu",
        "nn.layernorm",
        "f.layer_norm",
        "hand-written layer norm",
    )
    codemods = (NormGelu,)
    # GELU's erf or tanh constant anywhere; a norm, in a module's forward, divides by a root or a std
    needs = (
        Word("erf"),
        "0.044715",
        *(AllOf((Word("forward"), root)) for root in (Word("sqrt"), Word("rsqrt"), ".std(")),
    )

    examples = EXAMPLES
