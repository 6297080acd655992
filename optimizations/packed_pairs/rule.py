"""A DPO step's chosen and rejected sequences packed into one row of a fixed token budget, and the decoder compiled
whole: ``compile_repeated_layers(model)`` at a TRL ``DPOTrainer`` becomes ``compile_repeated_layers(model,
fixed_budget=<its args>)``.

TRL 1.16 pads each DPO batch to its longest sequence (its padding-free mode is disabled "after a refactor"), so
every step has a shape of its own, and per-layer compilation is all that fits. With a ``DPOConfig`` that
precomputes its reference log-probs, the vendored ``_perfbot_compile.py`` wraps the decoder (``PackedPairs``):
it lays each step's real tokens end to end in one row of ``per_device_train_batch_size × max_length`` tokens,
each sequence with its own positions (transformers reads the boundaries from them, so no token attends across
sequences), runs the decoder compiled whole at that one shape, and hands the hidden states back in the padded
layout, zeros at the padding, so TRL's loss is computed as before. The padding is no longer computed and
``decoder_graphs`` can replay the step as CUDA graphs. Measured on the example's DPO LoRA step (H100): 113.5 ms
a step at the per-layer head against 58.9 ms packed with graphs, on one machine (benchmarks/RESULTS.md). Without
graphs (a run under activation checkpointing, on by default in TRL's configs) the packed decoder is compiled
whole and not replayed: not measured. A step over the budget runs uncompiled; where more than one step in 16 is,
the budget doubles, a second compilation.

Applies after ``regional_compile`` (it needs its call). Not a site: a config built in the file that leaves
``precompute_ref_log_probs`` unset or ``False``, whose reference pass each step would run uncompiled. Refused
like ``token_budget``: a trainer without ``args``, or whose inline config the compilation cannot share. The
helper keeps the per-layer compilation at run time for a config without the precomputation or the two
settings, for a vision-language model and under a prompt-learning adapter (both give the decoder embeddings,
not token ids).
"""

from __future__ import annotations

import libcst as cst

from optimizations.edits.fixed_budget import FixBudget
from optimizations.program.shapes import ProgramShape
from optimizations.registry import Example, Numerics, Optimization
from optimizations.runtime import COMPILE_REPEATED_LAYERS


class _PackPairs(FixBudget):
    TRAINER = "DPOTrainer"
    CHANGE = "chosen and rejected sequences packed into one token budget, the decoder compiled whole"
    GIVEN_THE_TRAINER = "its config read when it runs: packed where it precomputes the reference log-probs"

    def refuses_collator(self, trainer: cst.Call, message: str) -> bool:
        return False  # the decoder packs whatever padded batch the collator makes

    def never_applies(self, config: cst.BaseExpression) -> bool:
        return self.never_sets(config, "precompute_ref_log_probs")


class PackedPairs(Optimization):
    """DPO pairs packed into one token budget a step, and the decoder compiled as one region."""

    id = "packed_pairs"
    title = "DPO pairs packed into one token budget, the decoder compiled whole"
    tier = 2
    expected = "+81% DPO tokens/s over per-layer compilation on a host-bound LoRA step, with decoder_graphs"
    summary = (
        "compile_repeated_layers(model, fixed_budget=args) at a DPOTrainer that precomputes its reference "
        "log-probs: each step's sequences packed into batch × max_length tokens, the decoder compiled whole"
    )
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "the same tokens attend to the same tokens; the packed row's matmuls and the fused decoder round in "
        "another order"
    )
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = ("packed pairs", "pairs packed", "padding-free dpo", "packed into one token budget")
    capabilities = ("static shapes",)
    codemods = (_PackPairs,)
    needs = (COMPILE_REPEATED_LAYERS,)

    examples = (
        Example(
            "regionally_compiled_lora_model_into_dpo_trainer",
            before="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=True, max_length=1024)
    trainer = DPOTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset)
    trainer.train()
""",
            after="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=True, max_length=1024)
    trainer = DPOTrainer(model=compile_repeated_layers(model, fixed_budget=config), args=config, train_dataset=dataset)
    trainer.train()
""",
        ),
        Example(
            "config_from_settings_is_read_at_run_time",
            before="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset, settings):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=settings.get("precompute", True))
    DPOTrainer(model=compile_repeated_layers(model), args=config, train_dataset=dataset, data_collator=settings["collate"]).train()
""",
            after="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset, settings):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=settings.get("precompute", True))
    DPOTrainer(model=compile_repeated_layers(model, fixed_budget=config), args=config, train_dataset=dataset, data_collator=settings["collate"]).train()
""",
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
            "built_dpo_trainer_is_given",
            before="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(name, dataset):
    trainer = DPOTrainer(model=name, args=DPOConfig(output_dir="out", precompute_ref_log_probs=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model)
    trainer.train()
""",
            after="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers


def train(name, dataset):
    trainer = DPOTrainer(model=name, args=DPOConfig(output_dir="out", precompute_ref_log_probs=True), train_dataset=dataset)
    compile_repeated_layers(trainer.model, fixed_budget=trainer)
    trainer.train()
""",
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
