"""DPO reference log-probs computed once before training instead of in every step (``precompute_ref_log_probs``).
What it changes and when it refuses: README.md."""

from __future__ import annotations

from optimizations.registry import Numerics, Optimization, Word

from .edit import Precompute, SharedCache
from .edit_loops import PREFERENCE_LOSS, ReferencePerStep
from .examples import EXAMPLES


class DpoPrecompute(Optimization):
    """Reference log-probs computed once before DPO training; each step skips the reference forward pass."""

    id = "dpo_precompute"
    title = "precompute DPO reference log-probs"
    tier = 1
    expected = "+20% DPO throughput"
    summary = "DPOConfig precompute_ref_log_probs=True with a reference batch twice the training batch"
    scope = "train"
    numerics = Numerics.EXACT
    numerics_reason = "the same reference log-probs, computed once before training instead of in every step"
    keywords = (
        "precompute_ref_log_probs",
        "precompute_ref_batch_size",
        "precompute reference log",
        "precomputed reference log",
        "precompute dpo reference",
        "precompute ref log",
    )
    # Where precompute is switched on, the trainers' datasets get one cache file for every rank.
    codemods = (Precompute, SharedCache)
    # A hand-written DPO loop lacks the precompute pass: proposed to a person, never an edit.
    proposers = (ReferencePerStep,)
    needs = (*Precompute.needs(), Word(PREFERENCE_LOSS), Word("ref_model"), "reference")

    examples = EXAMPLES
