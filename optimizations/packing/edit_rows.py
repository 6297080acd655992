"""How a hand-written program fills its rows: examples padded one per row to the full length, a proposal to pack
them or collate them padding-free, which only a new collator and dataset output give (FastChat's ``preprocess``
pads every conversation to ``model_max_length``); or examples packed already, attended block-diagonally by their
lengths (mistral-finetune's ``BlockDiagonalCausalMask.from_seqlens``)."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under
from optimizations.program.training_loops import BACKWARD

# Text that shows the file trains on what it builds: a trainer or a backward pass.
TRAINS = ("Trainer(", f".{BACKWARD}(")
WHY = (
    "the data path pads every example to the full length, so the MLPs, norms and LM head compute the pads too; "
    "packing examples into rows, or collating them padding-free with position_ids, needs a new collator and "
    "dataset output, which a person should write"
)


class PaddedToMaxLength(PlannedCodemod):
    """Proposes packing where a training file tokenizes with ``padding="max_length"``."""

    def plan(self, module: cst.Module) -> None:
        if not any(marker in self.parsed.source for marker in TRAINS):
            return
        for call in self.nodes(cst.Call):
            padding = keyword(call, "padding")
            if padding is None or literal_value(padding.value) != "max_length" or not self.runs(call):
                continue
            message = (
                f'`{code_of(call.func)}(..., padding="max_length")`: every example padded to the full length; '
                "packed or padding-free batches would compute only real tokens"
            )
            self.proposed(call, message, WHY)


class PackedByLengths(PlannedCodemod):
    """Reports packing done where attention is masked block-diagonally from the packed examples' lengths
    (xformers' ``BlockDiagonalCausalMask.from_seqlens``): each example attends only to itself in a shared row."""

    def plan(self, module: cst.Module) -> None:
        for call in self.nodes(cst.Call):
            if qualified_under(self.names(call.func), ("xformers",), ("from_seqlens",)) and self.runs(call):
                self.already(
                    call, f"`{code_of(call.func)}(...)`: examples packed into rows, each attending to itself"
                )
