"""Vocabulary padding: a from-scratch model's ``vocab_size`` rounded up to a multiple of 64 (50257 → 50304).

Where it pads, why that is harmless and when it refuses is in README.md.
"""

from __future__ import annotations

from optimizations.program.shapes import ProgramShape
from optimizations.registry import Numerics, Optimization

from .edit import FIELD, PadVocabulary
from .edit_resize import RESIZE
from .examples import EXAMPLES


class VocabPadding(Optimization):
    """A from-scratch model's vocabulary size rounded up to a multiple of 64 for tensor-core-friendly matmuls."""

    id = "vocab_padding"
    title = "vocabulary size padded to a multiple of 64"
    tier = 2
    expected = "+5% tokens/s compiled, +40% uncompiled (example GPT, H100); loss unchanged within seed noise"
    summary = "vocab_size=50257 → 50304 where the size only shapes the embedding and output layers"
    scope = "model"
    numerics = Numerics.DYNAMICS
    numerics_reason = "logits of ids that never occur enter the softmax: the loss is not the same number"
    measured_on = (ProgramShape.LOOP,)
    keywords = (
        "pad the vocabulary",
        "vocabulary padding",
        "vocab padding",
        "pad vocab",
        "vocab_size",
        "50304",
        "pad_to_multiple_of",
    )
    codemods = (PadVocabulary,)
    needs = (FIELD, RESIZE)

    examples = EXAMPLES
