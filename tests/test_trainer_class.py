"""optimizations.program.hf.trainer_class: which trainer a call's qualified names make it."""

from __future__ import annotations

import pytest

from optimizations.program.hf import trainer_class


@pytest.mark.parametrize(
    "names",
    [
        ["trl.GKDTrainer", "transformers.Trainer", "transformers.trainer.Trainer"],
        ["transformers.trainer.Trainer", "transformers.Trainer", "trl.GKDTrainer"],
    ],
)
def test_a_trainer_is_named_by_its_own_class_before_the_one_it_derives_from(names):
    # a call's names hold its class and the library classes it derives from, in a set's arbitrary order: the
    # message and the per-class rules (token_budget's SFTTrainer) must not depend on that order
    assert trainer_class(names) == "GKDTrainer"
    assert trainer_class(["transformers.Trainer"]) == "Trainer"
    assert trainer_class(["mypkg.RolloutTrainer", "torch.nn.Module"]) is None  # not a library trainer
