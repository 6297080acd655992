"""The registry examples of ``packed_pairs``: DPO trainers whose pairs it proposes to pack into a token budget (never
committed), and the ones it leaves or refuses."""

from __future__ import annotations

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "proposal_regionally_compiled_lora_model_into_dpo_trainer",
        before="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=True, max_length=1024)
    trainer = DPOTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset)
    trainer.train()
""",
        proposal="a rewritten training step",
    ),
    Example(
        "proposal_config_from_settings_is_read_at_run_time",
        before="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset, settings):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=settings.get("precompute", True))
    DPOTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset, data_collator=settings["collate"]).train()
""",
        proposal="repacks TRL's padded DPO batch",
    ),
    Example(
        "reference_computed_each_step_is_not_a_site",
        before="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = DPOConfig(output_dir="out", max_length=1024)
    DPOTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset).train()
""",
    ),
    Example(
        "proposal_built_dpo_trainer_is_given",
        before="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(name, dataset):
    trainer = DPOTrainer(model=name, args=DPOConfig(output_dir="out", precompute_ref_log_probs=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model)
    trainer.train()
""",
        proposal="a rewritten training step",
    ),
    Example(
        "inline_config_is_refused",
        before="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    DPOTrainer(model=compile_repeated_layers(model), args=DPOConfig(output_dir="out", precompute_ref_log_probs=True), train_dataset=dataset).train()
""",
        after=None,
        refusal="is built inline",
    ),
    Example(
        "sft_trainer_is_token_budgets",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = SFTConfig(output_dir="out", packing=True)
    SFTTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset).train()
""",
    ),
)
