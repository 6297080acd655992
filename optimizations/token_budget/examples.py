"""The registry examples of ``token_budget``: packed SFT trainers given one token budget, and the ones it leaves or refuses."""

from __future__ import annotations

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "config_that_does_not_pack",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = SFTConfig(output_dir="out", max_length=1024, per_device_train_batch_size=8)
    trainer = SFTTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset)
    trainer.train()
""",
    ),
    Example(
        "regionally_compiled_lora_model_into_sft_trainer",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = SFTConfig(output_dir="out", packing=True, max_length=1024, per_device_train_batch_size=8)
    trainer = SFTTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset)
    trainer.train()
""",
        after="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = SFTConfig(output_dir="out", packing=True, max_length=1024, per_device_train_batch_size=8)
    trainer = SFTTrainer(model=compile_repeated_layers(model, fixed_budget=config), args=config, train_dataset=dataset)
    trainer.train()
""",
    ),
    Example(
        "trainer_that_loads_its_checkpoint",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(name, dataset):
    trainer = SFTTrainer(model=name, args=SFTConfig(output_dir="out", packing=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model)
    trainer.train()
""",
        after="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(name, dataset):
    trainer = SFTTrainer(model=name, args=SFTConfig(output_dir="out", packing=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model, fixed_budget=trainer)
    trainer.train()
""",
    ),
    Example(
        "two_trainers_that_load_their_checkpoints",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def first(name, dataset):
    trainer = SFTTrainer(model=name, args=SFTConfig(output_dir="a", packing=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model)
    trainer.train()


def second(name, dataset):
    trainer = SFTTrainer(model=name, args=SFTConfig(output_dir="b", packing=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model)
    trainer.train()
""",
        after="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def first(name, dataset):
    trainer = SFTTrainer(model=name, args=SFTConfig(output_dir="a", packing=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model, fixed_budget=trainer)
    trainer.train()


def second(name, dataset):
    trainer = SFTTrainer(model=name, args=SFTConfig(output_dir="b", packing=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model, fixed_budget=trainer)
    trainer.train()
""",
    ),
    Example(
        "built_trainer_given_its_own_collator_is_refused",
        before="""\
from trl import SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(name, config, dataset, collator):
    trainer = SFTTrainer(model=name, args=config, train_dataset=dataset, data_collator=collator)
    compile_repeated_layers(trainer.model)
    trainer.train()
""",
        after=None,
        refusal="given its own collator (`data_collator=collator`)",
    ),
    Example(
        "built_trainer_whose_config_does_not_pack",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(name, dataset):
    trainer = SFTTrainer(model=name, args=SFTConfig(output_dir="out"), train_dataset=dataset)
    compile_repeated_layers(trainer.model)
    trainer.train()
""",
    ),
    Example(
        "positional_args_attribute",
        before="""\
import trl
from _perfbot_compile import compile_repeated_layers


class Run:
    def fit(self, model, data):
        return trl.SFTTrainer(compile_repeated_layers(model), self.args, train_dataset=data).train()
""",
        after="""\
import trl
from _perfbot_compile import compile_repeated_layers


class Run:
    def fit(self, model, data):
        return trl.SFTTrainer(compile_repeated_layers(model, fixed_budget=self.args), self.args, train_dataset=data).train()
""",
    ),
    Example(
        "inline_config_is_refused",
        before="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    SFTTrainer(model=compile_repeated_layers(model), args=SFTConfig(output_dir="out", packing=True), train_dataset=dataset).train()
""",
        after=None,
        refusal="is built inline",
    ),
    Example(
        "own_collator_is_refused",
        before="""\
from trl import SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, config, dataset, collator):
    SFTTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset, data_collator=collator).train()
""",
        after=None,
        refusal="given its own collator (`data_collator=collator`)",
    ),
    Example(
        "positional_collator_is_refused",
        before="""\
import trl
from _perfbot_compile import compile_repeated_layers


def train(model, config, dataset):
    collate = trl.DataCollatorForLanguageModeling(pad_token_id=0)
    trl.SFTTrainer(compile_repeated_layers(model), config, collate, dataset).train()
""",
        after=None,
        refusal="given its own collator (`collate`)",
    ),
    Example(
        "settings_hidden_in_kwargs_are_refused",
        before="""\
from trl import SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, config, **extra):
    SFTTrainer(model=compile_repeated_layers(model), args=config, **extra).train()
""",
        after=None,
        refusal="given its own collator (`**extra`)",
    ),
    Example(
        "dpo_trainer_is_left_alone",
        before="""\
from trl import DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, config, dataset):
    DPOTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset).train()
""",
        after=None,
    ),
)
