"""The codemod of ``decoder_graphs``: ``compile_repeated_layers(model, fixed_budget=args)`` at a trainer becomes
``compile_repeated_layers(model, fixed_budget=args, cuda_graphs=True)`` (README.md)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from optimizations.edits.trainer_follow_up import TrainerFollowUp
from optimizations.program.hf import is_argument_parser, trainer_class
from optimizations.program.recipes import set_by_every_launch
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.runtime import COMPILE_REPEATED_LAYERS, FIXED_BUDGET

KEYWORD = "cuda_graphs"
# The setting's names: transformers 5 renamed gradient checkpointing to activation checkpointing.
CHECKPOINTING = ("gradient_checkpointing", "activation_checkpointing")


class ReplayGraphs(TrainerFollowUp):
    """Adds ``cuda_graphs=True`` to the compile helper's call that has a ``fixed_budget=``, unless activation
    checkpointing is on in the file or in every launch of the script."""

    def visit_Module(self, node: cst.Module) -> None:
        super().visit_Module(node)
        self.checkpointing = next(
            (
                c
                for c in self.nodes(cst.Call)
                if m.matches(
                    c.func, m.Attribute(attr=m.OneOf(*(m.Name(f"{n}_enable") for n in CHECKPOINTING)))
                )
            ),
            None,
        )

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if (follow_up := self.pending_keywords(original_node, updated_node)) is not None:
            return follow_up
        if trainer_class(self.names(original_node.func)) is None:
            return updated_node
        compiled = self.helper_call(original_node, COMPILE_REPEATED_LAYERS)
        budget = None if compiled is None else keyword(compiled, FIXED_BUDGET)
        if compiled is None or budget is None:
            return updated_node
        if keyword(compiled, KEYWORD) is not None:
            self.already(original_node, f"{COMPILE_REPEATED_LAYERS}(..., {KEYWORD}=...)")
            return updated_node
        message = f"{code_of(original_node.func)}(...): the decoder's training steps as CUDA graphs"
        follows = compiled is not self.links.model_argument(original_node)  # given the built trainer
        arguments = self._checkpointing_arguments(  # a built trainer's config is its args=
            self.links.args_argument(original_node) if follows else budget.value
        )
        checkpointing = self.checkpointing or next(
            (a for a in arguments if not a.star and literal_value(a.value) is True), None
        )
        where = f"line {self.line(checkpointing)}" if checkpointing is not None else self._every_launch()
        if where:
            self.refused(
                original_node,
                message,
                f"{where} turns activation checkpointing on, and the helper compiles without graphs under it. "
                "The graphs would keep a step's activations in memory of their own for the whole run, which a "
                "run short of memory cannot spare",
            )
            return updated_node
        chosen = next((a for a in arguments if a.star or literal_value(a.value) is ...), None)
        if chosen is not None:
            verb = "may set" if chosen.star else "sets"
            message += (
                f" (graphed only in runs without activation checkpointing, which line {self.line(chosen)} "
                f"{verb} from `{chosen.star}{code_of(chosen.value)}`)"
            )
        self.changed(original_node, message)
        return self.add_helper_keywords(original_node, updated_node, compiled, [(KEYWORD, cst.Name("True"))])

    def _every_launch(self) -> str:
        """Where every launch of this argument-parser script turns activation checkpointing on (its flags or
        recipes), in words; empty when a launch leaves it off or the file parses no arguments."""
        if not any(is_argument_parser(self.names(call.func)) for call in self.nodes(cst.Call)):
            return ""
        for name in CHECKPOINTING:
            places = set_by_every_launch(self.repo, self.path, name)
            if places:
                shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
                return f"every launch of this script ({len(places)}: {shown})"
        return ""

    def _checkpointing_arguments(self, config: cst.BaseExpression | None) -> list[cst.Arg]:
        """The arguments of the config ``config`` builds (or of the bindings of the name it is) that may set
        activation checkpointing: its keyword (either name), or ``**settings``."""
        if config is None:
            return []
        values = [config] if isinstance(config, cst.Call) else self.links.bound_values(config)
        return [
            argument
            for value in values
            if isinstance(value, cst.Call)
            for argument in value.args
            if argument.star == "**"
            or (argument.keyword is not None and argument.keyword.value in CHECKPOINTING)
        ]
