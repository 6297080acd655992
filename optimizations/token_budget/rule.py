"""One shape per packed SFT batch, and the decoder compiled whole: ``compile_repeated_layers(model)`` at a TRL
``SFTTrainer`` becomes ``compile_repeated_layers(model, fixed_budget=<its args>)``.

With that config (vendored ``_perfbot_compile.py``), when the packing is padding-free, every packed batch is
padded to ``per_device_train_batch_size × max_length`` tokens (``pad_to_multiple_of``, where unset), so each
step has the same shape, and the module holding the layers (the decoder) is compiled as one region instead of
each layer: one guard check and one autograd wrapper a step instead of 24. Measured on the example's
host-bound LoRA SFT step (benchmarks/RESULTS.md). The whole decoder compiles in the first step, once a run:
105 s on an H100 for the example's 24 layers with flex attention (with ``decoder_graphs``'s graphs). Any other
config (no packing, another strategy, a ``pad_to_multiple_of`` of its own) keeps the per-layer compilation.
DPO is :mod:`optimizations.packed_pairs`'s: its batches are padded per batch, not packed.

Each pad token is a one-token sequence with label -100: no real token attends to it and the loss, normalised
by the real tokens, is the same; the padded matmuls and the fused decoder round differently. Applies after
``regional_compile`` (it needs its call). Where the trainer loads its checkpoint itself (TRL's own scripts),
that call follows the built trainer, and the trainer is given instead: ``compile_repeated_layers(trainer.model,
fixed_budget=trainer)`` pads its config and the collator it built from it. A trainer whose config is built in
the file with ``packing`` unset or ``False`` is not a site: there is no packed batch to pad. Refused: a trainer
whose ``args`` is not a name where the model argument is compiled (an inline config would be built twice), a
trainer without ``args``, a trainer given its own ``data_collator`` (which the config's ``pad_to_multiple_of``
does not reach: its batches would keep their lengths).

The fixed shape is what lets ``decoder_graphs`` replay the decoder's training steps as CUDA graphs on top of
this commit (benchmarks/RESULTS.md, "The decoder's training steps as CUDA graphs").
"""

from __future__ import annotations

from optimizations.edits.fixed_budget import FixBudget
from optimizations.program.shapes import ProgramShape
from optimizations.registry import Example, Numerics, Optimization
from optimizations.runtime import COMPILE_REPEATED_LAYERS


class TokenBudget(Optimization):
    """Padding-free packed SFT batches padded to one token budget, and the decoder compiled as one region."""

    id = "token_budget"
    title = "One token budget per packed batch, the decoder compiled whole"
    tier = 2
    expected = "+20-29% SFT tokens/s over per-layer compilation on a host-bound LoRA step, loss within 0.02%"
    summary = (
        "compile_repeated_layers(model, fixed_budget=args) at an SFTTrainer (fixed_budget=trainer after one "
        "that loads its checkpoint): padding-free batches padded to batch × max_length tokens, the decoder "
        "nn.Module.compile()-d whole"
    )
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "pad tokens are one-token sequences with label -100 (same loss); the padded matmuls and the fused "
        "decoder round in another order"
    )
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = (
        "token budget",
        "one shape per packed batch",
        "static shapes",
        "decoder compiled whole",
    )
    capabilities = ("static shapes",)
    codemods = (FixBudget,)
    needs = (COMPILE_REPEATED_LAYERS,)

    examples = (
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
