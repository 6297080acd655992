"""The edit that fixes a packed trainer's token budget on the shared compile helper's call:
``compile_repeated_layers(model)`` at a trainer becomes ``compile_repeated_layers(model, fixed_budget=<its args>)``.
``token_budget`` applies it to TRL's ``SFTTrainer``, ``packed_pairs`` to ``DPOTrainer`` with its own hooks."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.trainer_follow_up import TrainerFollowUp
from optimizations.program.hf import is_training_config, trainer_class
from optimizations.program.syntax import code_of, keyword, literal_value, star_kwargs
from optimizations.runtime import COMPILE_REPEATED_LAYERS, FIXED_BUDGET


class FixBudget(TrainerFollowUp):
    """Adds ``fixed_budget=<the trainer's args>`` to the helper call that compiles one kind of trainer's model;
    ``packed_pairs`` uses it for DPO with its own trainer, message and hooks."""

    TRAINER = "SFTTrainer"
    CHANGE = "one token budget per packed batch, the decoder compiled whole"
    GIVEN_THE_TRAINER = "the trainer's collator padded once it is built"
    # Why the keyword is proposed to a person instead of committed (what the helper then patches); empty: committed.
    PROPOSAL = ""

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if (follow_up := self.pending_keywords(original_node, updated_node)) is not None:
            return follow_up
        if trainer_class(self.names(original_node.func)) != self.TRAINER:
            return updated_node
        compiled = self.helper_call(original_node, COMPILE_REPEATED_LAYERS)
        if compiled is None:
            return updated_node
        message = f"{code_of(original_node.func)}(...): {self.CHANGE}"
        if keyword(compiled, FIXED_BUDGET) is not None:
            self.already(original_node, f"{COMPILE_REPEATED_LAYERS}(..., {FIXED_BUDGET}=...)")
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
            assigned = self.links.assigned_line(original_node)  # a follow-up call needs an assigned trainer
            config = assigned[0] if assigned is not None else config
            message += f" ({self.GIVEN_THE_TRAINER})"
        if self.PROPOSAL:
            self.proposed(original_node, f"{message} (`{FIXED_BUDGET}={code_of(config)}`)", self.PROPOSAL)
            return updated_node
        self.changed(original_node, message)
        return self.add_helper_keywords(
            original_node, updated_node, compiled, [(FIXED_BUDGET, config.deep_clone())]
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
