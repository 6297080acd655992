"""The registry examples of ``steady_bookkeeping``: trainers it proposes to wrap in the bookkeeping helper (never
committed), and the ones it leaves or refuses."""

from __future__ import annotations

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "proposal_assigned_sft_trainer",
        before="""\
from trl import SFTConfig, SFTTrainer


def train(model, dataset):
    trainer = SFTTrainer(model=model, args=SFTConfig(output_dir="out"), train_dataset=dataset)
    trainer.train()
""",
        proposal="a monkeypatch of library internals",
    ),
    Example(
        "proposal_trainer_trained_at_once",
        before="""\
import transformers


def main(net, args, data):
    return transformers.Trainer(net, args, train_dataset=data).train()
""",
        proposal="rebinds the model's num_parameters()",
    ),
    Example(
        "model_built_by_model_init",
        before="""\
from transformers import Trainer


def search(make_model, args, data):
    trainer = Trainer(model_init=make_model, args=args, train_dataset=data)
    return trainer.hyperparameter_search(n_trials=4)
""",
        refusal="builds its model with model_init",
    ),
    Example(
        "already_wrapped",
        before="""\
from trl import DPOTrainer
from _perfbot_trainer_steps import steady_bookkeeping


def main(model, config, data):
    steady_bookkeeping(DPOTrainer(model=model, args=config, train_dataset=data)).train()
""",
        after=None,
    ),
)
