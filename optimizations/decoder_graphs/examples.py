"""The registry examples of ``decoder_graphs``: budgeted trainers whose decoder replays as CUDA graphs, and the ones it leaves or refuses."""

from __future__ import annotations

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "trainer_that_loads_its_checkpoint",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(name, dataset):
    trainer = SFTTrainer(model=name, args=SFTConfig(output_dir="out", packing=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model, fixed_budget=trainer)
    trainer.train()
""",
        after="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(name, dataset):
    trainer = SFTTrainer(model=name, args=SFTConfig(output_dir="out", packing=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model, fixed_budget=trainer, cuda_graphs=True)
    trainer.train()
""",
    ),
    Example(
        "built_trainer_with_checkpointing_in_its_config_is_refused",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(name, dataset):
    config = SFTConfig(output_dir="out", packing=True, gradient_checkpointing=True)
    trainer = SFTTrainer(model=name, args=config, train_dataset=dataset)
    compile_repeated_layers(trainer.model, fixed_budget=trainer)
    trainer.train()
""",
        after=None,
        refusal="line 6 turns activation checkpointing on",
    ),
    Example(
        "dpo_pairs_packed_into_a_token_budget",
        before="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=True)
    DPOTrainer(model=compile_repeated_layers(model, fixed_budget=config), args=config, train_dataset=dataset).train()
""",
        after="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=True)
    DPOTrainer(model=compile_repeated_layers(model, fixed_budget=config, cuda_graphs=True), args=config, train_dataset=dataset).train()
""",
    ),
    Example(
        "decoder_compiled_whole_at_a_token_budget",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = SFTConfig(output_dir="out", packing=True, max_length=1024, per_device_train_batch_size=8)
    trainer = SFTTrainer(model=compile_repeated_layers(model, fixed_budget=config), args=config, train_dataset=dataset)
    trainer.train()
""",
        after="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = SFTConfig(output_dir="out", packing=True, max_length=1024, per_device_train_batch_size=8)
    trainer = SFTTrainer(model=compile_repeated_layers(model, fixed_budget=config, cuda_graphs=True), args=config, train_dataset=dataset)
    trainer.train()
""",
    ),
    Example(
        "checkpointing_chosen_by_a_flag",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset, args):
    config = SFTConfig(output_dir="out", packing=True, gradient_checkpointing=args.gradient_checkpointing)
    SFTTrainer(model=compile_repeated_layers(model, fixed_budget=config), args=config, train_dataset=dataset).train()
""",
        after="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset, args):
    config = SFTConfig(output_dir="out", packing=True, gradient_checkpointing=args.gradient_checkpointing)
    SFTTrainer(model=compile_repeated_layers(model, fixed_budget=config, cuda_graphs=True), args=config, train_dataset=dataset).train()
""",
    ),
    Example(
        "positional_model_into_a_wrapped_trainer",
        before="""\
import trl
from _perfbot_compile import compile_repeated_layers
from _perfbot_trainer_steps import steady_bookkeeping


class Run:
    def fit(self, model, data):
        return steady_bookkeeping(trl.SFTTrainer(compile_repeated_layers(model, fixed_budget=self.args), self.args, train_dataset=data)).train()
""",
        after="""\
import trl
from _perfbot_compile import compile_repeated_layers
from _perfbot_trainer_steps import steady_bookkeeping


class Run:
    def fit(self, model, data):
        return steady_bookkeeping(trl.SFTTrainer(compile_repeated_layers(model, fixed_budget=self.args, cuda_graphs=True), self.args, train_dataset=data)).train()
""",
    ),
    Example(
        "graphs_already_asked_for",
        before="""\
from trl import SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, config, dataset):
    SFTTrainer(model=compile_repeated_layers(model, fixed_budget=config, cuda_graphs=False), args=config, train_dataset=dataset).train()
""",
    ),
    Example(
        "activation_checkpointing_in_the_config_is_refused",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = SFTConfig(output_dir="out", packing=True, gradient_checkpointing=True)
    SFTTrainer(model=compile_repeated_layers(model, fixed_budget=config), args=config, train_dataset=dataset).train()
""",
        refusal="line 6 turns activation checkpointing on",
    ),
    Example(
        "activation_checkpointing_on_the_model_is_refused",
        before="""\
from trl import SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, config, dataset):
    model.gradient_checkpointing_enable()
    SFTTrainer(model=compile_repeated_layers(model, fixed_budget=config), args=config, train_dataset=dataset).train()
""",
        refusal="line 6 turns activation checkpointing on",
    ),
    Example(
        "layers_compiled_one_by_one_are_left_alone",
        before="""\
from trl import DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, config, dataset):
    DPOTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset).train()
""",
    ),
)
