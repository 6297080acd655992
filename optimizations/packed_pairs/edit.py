"""The codemod of ``packed_pairs``: the shared ``FixBudget`` edit for TRL's ``DPOTrainer``, whose config is packed
where it precomputes the reference log-probs; proposed to a person, never committed, as the helper then rewrites
the decoder's step (README.md)."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.fixed_budget import FixBudget


class PackPairs(FixBudget):
    """``FixBudget`` for a ``DPOTrainer``: any collator, and not a site where the config never precomputes the
    reference log-probs."""

    TRAINER = "DPOTrainer"
    CHANGE = "chosen and rejected sequences packed into one token budget, the decoder compiled whole"
    GIVEN_THE_TRAINER = "its config read when it runs: packed where it precomputes the reference log-probs"
    PROPOSAL = (
        "a rewritten training step: with the keyword, the vendored helper replaces the decoder's forward with one "
        "that repacks TRL's padded DPO batch into one row and unpacks the hidden states (TRL's own padding-free DPO "
        "is disabled); a person should review that patch of TRL's batches before adding the keyword"
    )

    def refuses_collator(self, trainer: cst.Call, message: str) -> bool:
        return False  # the decoder packs whatever padded batch the collator makes

    def never_applies(self, config: cst.BaseExpression) -> bool:
        return self.never_sets(config, "precompute_ref_log_probs")
