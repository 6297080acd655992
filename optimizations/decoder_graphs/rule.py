"""The decoder's training steps replayed as CUDA graphs: ``compile_repeated_layers(model, fixed_budget=args)``
at a TRL ``SFTTrainer`` (or a ``DPOTrainer``: ``packed_pairs``) becomes ``compile_repeated_layers(model,
fixed_budget=args, cuda_graphs=True)``.

Where the token budget gives every step one shape and the decoder is compiled whole, the vendored
``_perfbot_compile.py`` compiles its forward with inductor's CUDA graphs without trees (``TrainingGraphs``).
The forward and the backward each replay as one recorded graph: a few launches a step instead of hundreds, so
the host queues a step faster than the GPU runs it. (Graph trees' liveness checks killed 3 of 8 runs,
pytorch/pytorch#194124.) The config's ``logging_nan_inf_filter`` is turned off: it reads every step's loss on
the host, a device sync that leaves the graphs waiting, and a nan or inf loss is now logged as it is. On the
example's LoRA step (H100) the head ran at 0.97x the hand-written compiled step of the same machine, its loss
at equal steps the token budget's to four digits (benchmarks/RESULTS.md).

A replay overwrites the previous replay's outputs and saved activations, so the helper graphs only what that
cannot hurt, and compiles the rest without graphs or runs it eagerly:

- only a forward with gradients on whose predecessor's backward has run (``no_grad`` passes and a second
  forward before a backward run eagerly), and only the first model of its class in the process;
- not under DeepSpeed or FSDP (the config's ``deepspeed``/``fsdp``, or ``accelerate launch``'s environment),
  which gather each parameter for its use, away from the address a replay reads;
- not under activation checkpointing, which a run short of memory turns on: the graphs would hold a step's
  activations in memory of their own for the whole run, and recomputing in the backward was not measured;
- not once the model's parameters have moved from where the graphs recorded (``model.to(...)``); the helper
  checks their addresses itself, and turns off inductor's size asserts, whose per-replay check of every input
  in Python cost the DPO head about 8 ms of host time a step;
- nowhere with ``PERFBOT_CUDA_GRAPHS=0``.

The helper reads these settings at run time, so a config that takes them from a flag or a file is edited, and
graphs only a run without them. Refused, as an edit that would not take effect: a file that turns activation
checkpointing on in code (``gradient_checkpointing=True`` or ``activation_checkpointing=True`` in the config
the budget reads, ``model.gradient_checkpointing_enable()``), and an argument-parser script every launch of
which turns it on (its flag, or every recipe it passes with ``--config``). Applies after ``token_budget`` or
``packed_pairs`` (it needs their ``fixed_budget=``), on the model argument or on the call that follows a built trainer.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from optimizations.edits.trainer_follow_up import TrainerFollowUp
from optimizations.program.hf import is_argument_parser, trainer_class
from optimizations.program.recipes import set_by_every_launch
from optimizations.program.shapes import ProgramShape
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.registry import Example, Numerics, Optimization
from optimizations.runtime import COMPILE_REPEATED_LAYERS, FIXED_BUDGET

KEYWORD = "cuda_graphs"
# The setting's names: transformers 5 renamed gradient checkpointing to activation checkpointing.
CHECKPOINTING = ("gradient_checkpointing", "activation_checkpointing")


class _ReplayGraphs(TrainerFollowUp):
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
        if budget is None:
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
        values = [] if config is None else [config] if isinstance(config, cst.Call) else None
        return [
            argument
            for value in (self.links.bound_values(config) if values is None else values)
            if isinstance(value, cst.Call)
            for argument in value.args
            if argument.star == "**"
            or (argument.keyword is not None and argument.keyword.value in CHECKPOINTING)
        ]


class DecoderGraphs(Optimization):
    """The whole-compiled decoder's training forward and backward replayed as CUDA graphs, guarded."""

    id = "decoder_graphs"
    title = "The decoder's training steps replayed as CUDA graphs"
    tier = 2
    expected = (
        "a host-bound LoRA SFT step from 0.88x to 0.97x the hand-written compiled step's tokens/s (H100)"
    )
    summary = (
        "compile_repeated_layers(model, fixed_budget=args, cuda_graphs=True): the decoder compiled whole replays "
        "its training forward and backward as CUDA graphs (no trees), eager under no_grad; the logged loss "
        "unfiltered"
    )
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "the decoder compiled whole (another kernel order than eager), replayed from graphs; a non-finite loss is "
        "logged as it is instead of being left out of the logged mean"
    )
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = ("cuda graphs", "cudagraphs", "graph replay", "replayed as graphs")
    capabilities = ("cuda graphs",)
    codemods = (_ReplayGraphs,)
    needs = (FIXED_BUDGET,)

    examples = (
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
