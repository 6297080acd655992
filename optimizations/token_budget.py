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

import libcst as cst

from optimizations.program.codemod import code_of, keyword, literal_value, star_kwargs
from optimizations.program.hf import is_training_config, trainer_class
from optimizations.program.shapes import ProgramShape
from optimizations.program.trainer_calls import TrainerFollowUp
from optimizations.regional_compile import HELPER
from optimizations.registry import Example, Numerics, Optimization

KEYWORD = "fixed_budget"


class FixBudget(TrainerFollowUp):
    """Adds ``fixed_budget=<the trainer's args>`` to the helper call that compiles one kind of trainer's model;
    :mod:`optimizations.packed_pairs` reuses it for DPO with its own trainer, message and hooks."""

    TRAINER = "SFTTrainer"
    CHANGE = "one token budget per packed batch, the decoder compiled whole"
    GIVEN_THE_TRAINER = "the trainer's collator padded once it is built"

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if (follow_up := self.pending_keywords(original_node, updated_node)) is not None:
            return follow_up
        if trainer_class(self.names(original_node.func)) != self.TRAINER:
            return updated_node
        compiled = self.helper_call(original_node, HELPER)
        if compiled is None:
            return updated_node
        message = f"{code_of(original_node.func)}(...): {self.CHANGE}"
        if keyword(compiled, KEYWORD) is not None:
            self.already(original_node, f"{HELPER}(..., {KEYWORD}=...)")
            return updated_node
        config = self.links.args_argument(original_node)
        if config is None:
            self.refused(
                original_node, message, "the trainer is given no args= to read the batch and max length from"
            )
            return updated_node
        if self.refuses_collator(original_node, message):
            return updated_node
        follows = compiled is not self.links.model_argument(original_node)
        if not follows and not isinstance(config, (cst.Name, cst.Attribute)):
            self.refused(
                original_node,
                message,
                f"args=`{code_of(config)}` is built inline; assign the config to a name first, so that the "
                "trainer and the compilation share one config object",
            )
            return updated_node
        if self.never_applies(config):
            return updated_node  # the config has nothing the budget fixes: not a site
        if follows:  # the built trainer is given: its config, and the collator it built from it
            config = self.links.assigned_line(original_node)[0]
            message += f" ({self.GIVEN_THE_TRAINER})"
        self.changed(original_node, message)
        return self.add_helper_keywords(
            original_node, updated_node, compiled, [(KEYWORD, config.deep_clone())]
        )

    def refuses_collator(self, trainer: cst.Call, message: str) -> bool:
        """Refuses a trainer that may be given its own collator, which the config's budget does not reach."""
        # SFTTrainer(model, args, data_collator, ...); settings hidden in **kwargs may carry a collator too
        positional = [arg for arg in trainer.args if arg.keyword is None and not arg.star]
        collator = keyword(trainer, "data_collator") or star_kwargs(trainer)
        if collator is None and len(positional) > 2:
            collator = positional[2]
        if collator is None:
            return False
        given = code_of(collator.with_changes(comma=cst.MaybeSentinel.DEFAULT))
        self.refused(
            trainer,
            message,
            f"the trainer may be given its own collator (`{given}`): the config's token budget does not "
            "reach it, and a decoder compiled whole would recompile for each new batch length",
        )
        return True

    def never_applies(self, config: cst.BaseExpression) -> bool:
        """``config`` never packs: see :meth:`never_sets`."""
        return self.never_sets(config, "packing")

    def never_sets(self, config: cst.BaseExpression, setting: str) -> bool:
        """``config`` builds (or is a name every binding of which builds) a TRL config that leaves ``setting``
        unset (off by default) or sets it to a literal ``False``, with nothing hidden in ``**kwargs``."""
        values = [config] if isinstance(config, cst.Call) else self.links.bound_values(config)
        return bool(values) and all(
            isinstance(value, cst.Call)
            and is_training_config(self.names(value.func))
            and star_kwargs(value) is None
            and ((given := keyword(value, setting)) is None or literal_value(given.value) is False)
            for value in values
        )


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
    needs = (HELPER,)

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
