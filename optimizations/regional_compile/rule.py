"""Regional compilation of the model a transformers or TRL trainer trains: its repeated decoder layers compiled.

The trainer's model argument becomes ``compile_repeated_layers(model)`` (vendored as ``_perfbot_compile.py``):
``nn.Module.compile()`` on each block of the model's longest list of same-class layers, in place, on CUDA only
(``PERFBOT_COMPILE=0`` skips). One compiled graph serves every layer, so it compiles in seconds; the PEFT
wrapper, the loss and the trainer's hooks stay eager, which is what makes it work on LoRA models where
``torch_compile=True`` (the whole model) does not pay. It takes the per-op launches and dtype casts out of a
host-bound step.

A TRL trainer given a checkpoint name (a TRL script's ``model=model_args.model_name_or_path``) loads the model
itself; there the line after ``trainer = SFTTrainer(...)`` becomes ``compile_repeated_layers(trainer.model)``,
which compiles the layers of the model it loaded (and wrapped with PEFT) before ``train()`` first calls them.

Compiled kernels fuse and round differently (losses agree closely, not bit for bit) and the first steps pay
the compilation, so it sits in tier 2. Refused: a trainer given a checkpoint name that is not assigned on a line
of its own (no name to reach its model by), a config with ``torch_compile=True`` in this file (the whole model is
compiled already), a file that compiles something itself, a trainer that builds its model with ``model_init``, a
model that comes from PEFT's k-bit preparation (quantized: the helper leaves its layers uncompiled). A
``name = torch.compile(...)`` after every trainer of its function is built compiles nothing those trainers train;
it is not taken for a compile, and the site's message says so (tloen/alpaca-lora compiles its model that way).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from optimizations.edits.expressions import call_expr, replace_keyword
from optimizations.edits.trainer_follow_up import TrainerFollowUp
from optimizations.program.hf import is_training_config, trainer_class
from optimizations.program.kbit import kbit_preparation
from optimizations.program.shapes import ProgramShape
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.registry import Example, Numerics, Optimization
from optimizations.runtime import COMPILE_REPEATED_LAYERS, COMPILE_RUNTIME

STRINGS = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


class _CompileLayers(TrainerFollowUp):
    def visit_Module(self, node: cst.Module) -> None:
        super().visit_Module(node)
        calls = self.nodes(cst.Call)
        trainers = [c for c in calls if trainer_class(self.names(c.func)) is not None]
        compiles = [
            c
            for c in calls
            if "torch.compile" in self.names(c.func)
            or (
                m.matches(c.func, m.Attribute(attr=m.Name("compile")))
                and not any(n.split(".")[0] in ("re", "regex") for n in self.names(c.func))
            )
        ]
        self.too_late = [c for c in compiles if self._after_its_trainers(c, trainers)]
        self.compiles = next((c for c in compiles if c not in self.too_late), None)
        self.whole_model = next(
            (
                c
                for c in calls
                if is_training_config(self.names(c.func))
                and (flag := keyword(c, "torch_compile")) is not None
                and literal_value(flag.value) is True
            ),
            None,
        )

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if trainer_class(self.names(original_node.func)) is None:
            return updated_node
        model = self.links.model_argument(original_node)
        if model is None:
            return updated_node
        if self.calls(model, COMPILE_REPEATED_LAYERS):
            self.already(original_node, f"{code_of(original_node.func)}(...): model=`{code_of(model)}`")
            return updated_node
        message = f"{code_of(original_node.func)}(...): compile the model's repeated layers (on CUDA)"
        function = self.links.values.function_of(original_node)
        late = [c for c in self.too_late if self.links.values.function_of(c) is function]
        if late:
            message += (
                f"; line {self.line(late[0])}'s `{code_of(late[0])}` comes after this trainer is built with the "
                "uncompiled model, so training never ran compiled"
            )
        reason = self._reason(original_node, model)
        if reason is not None:
            self.refused(original_node, message, reason)
            return updated_node
        if self._names_a_checkpoint(model):
            why = f"the trainer loads the model itself from `{code_of(model)}`"
            self.follow_trainer(original_node, COMPILE_RUNTIME, COMPILE_REPEATED_LAYERS, message, why)
            return updated_node
        self.import_runtime(COMPILE_RUNTIME, COMPILE_REPEATED_LAYERS)
        self.changed(original_node, message)
        wrapped = call_expr(COMPILE_REPEATED_LAYERS, self.links.model_argument(updated_node))
        if keyword(updated_node, "model") is not None:
            return replace_keyword(updated_node, "model", wrapped)
        first, *rest = updated_node.args
        return updated_node.with_changes(args=(first.with_changes(value=wrapped), *rest))

    def _reason(self, trainer: cst.Call, model: cst.BaseExpression) -> str | None:
        """Why this trainer's model cannot be compiled here, or ``None``."""
        if keyword(trainer, "model_init") is not None:
            return "the trainer builds its model with model_init; compile the layers inside that function"
        if self.whole_model is not None:
            return (
                f"line {self.line(self.whole_model)}: torch_compile=True compiles the whole model already; drop it "
                "to compile the repeated layers instead"
            )
        if (prepared := kbit_preparation(self, model, trainer)) is not None:
            return (
                f"the model comes from `{code_of(prepared.func)}(...)` (line {self.line(prepared)}), PEFT's "
                "preparation of a quantized (k-bit) model: the helper leaves a quantized model's layers uncompiled "
                "(compiling them is not measured here), so the commit would change nothing"
            )
        if self.compiles is not None:
            return (
                f"line {self.line(self.compiles)}: `{code_of(self.compiles.func)}(...)` compiles here already"
            )
        return None

    def _after_its_trainers(self, compiled: cst.Call, trainers: list[cst.Call]) -> bool:
        """A ``name = torch.compile(...)`` after every trainer of its function is built, outside any loop, whose
        name is never put into an attribute (``trainer.model = name``): it compiles a new object that none of
        those trainers trains."""
        parents = self.parsed.parents()
        statement = parents.get(compiled)  # a call's parent Assign holds it as its value
        if "torch.compile" not in self.names(compiled.func) or not isinstance(statement, cst.Assign):
            return False
        if not all(isinstance(t.target, cst.Name) for t in statement.targets):
            return False
        function = self.links.values.function_of(compiled)
        built = [t for t in trainers if self.links.values.function_of(t) is function]
        if not built or any(self.line(t) >= self.line(compiled) for t in built):
            return False
        enclosing = parents.get(statement)
        while enclosing is not None and enclosing is not function:
            if isinstance(enclosing, (cst.For, cst.While)):
                return False
            enclosing = parents.get(enclosing)
        names = {t.target.value for t in statement.targets}
        return not any(
            isinstance(assign.value, cst.Name)
            and assign.value.value in names
            and any(isinstance(t.target, cst.Attribute) for t in assign.targets)
            and self.links.values.function_of(assign) is function
            for assign in self.nodes(cst.Assign)
        )

    def _names_a_checkpoint(self, model: cst.BaseExpression) -> bool:
        """A string, a name bound only to strings (where it is bound), or a config field
        (``model_args.model_name_or_path``)."""
        if isinstance(model, STRINGS):
            return True
        if isinstance(model, cst.Attribute):
            return model.attr.value.endswith(("_name", "_path", "name_or_path", "_id"))
        values = self.links.bound_values(model)
        return bool(values) and all(isinstance(v, STRINGS) for v in values)


class RegionalCompile(Optimization):
    """The repeated layers of a trainer's model compiled (regional compilation), on CUDA."""

    id = "regional_compile"
    title = "Regional compilation of the trained model's repeated layers"
    tier = 2
    expected = "fewer kernel launches in a host-bound step; compiling takes seconds"
    summary = "model=compile_repeated_layers(model) at the trainer: each decoder layer nn.Module.compile()-d on CUDA"
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "each compiled decoder layer fuses and reorders its kernels: the same math, rounded in another order"
    )
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = (
        "regional compilation",
        "regional compile",
        "compile the decoder layers",
        "compile the repeated layers",
        "compile each layer",
    )
    capabilities = ("compile model", "torch.compile")
    codemods = (_CompileLayers,)
    needs = ("Trainer",)

    examples = (
        Example(
            "lora_model_into_sft_trainer",
            before="""\
from peft import LoraConfig, get_peft_model
from trl import SFTConfig, SFTTrainer


def train(model, dataset):
    model = get_peft_model(model, LoraConfig(r=16, task_type="CAUSAL_LM"))
    trainer = SFTTrainer(model=model, args=SFTConfig(output_dir="out", bf16=True), train_dataset=dataset)
    trainer.train()
""",
            after="""\
from peft import LoraConfig, get_peft_model
from trl import SFTConfig, SFTTrainer
from _perfbot_compile import compile_repeated_layers


def train(model, dataset):
    model = get_peft_model(model, LoraConfig(r=16, task_type="CAUSAL_LM"))
    trainer = SFTTrainer(model=compile_repeated_layers(model), args=SFTConfig(output_dir="out", bf16=True), train_dataset=dataset)
    trainer.train()
""",
        ),
        Example(
            "positional_model_into_transformers_trainer_beside_a_regex",
            before="""\
import re

import transformers

RUN_NAME = re.compile(r"run-(\\d+)")


def main(net, args, data):
    trainer = transformers.Trainer(net, args, train_dataset=data)
    return trainer.train()
""",
            after="""\
import re

import transformers
from _perfbot_compile import compile_repeated_layers

RUN_NAME = re.compile(r"run-(\\d+)")


def main(net, args, data):
    trainer = transformers.Trainer(compile_repeated_layers(net), args, train_dataset=data)
    return trainer.train()
""",
        ),
        Example(
            "trl_script_passes_a_checkpoint_name",
            before="""\
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser, get_peft_config


def main(script_args, training_args, model_args, dataset):
    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
    )
    trainer.train()


if __name__ == "__main__":
    main(*TrlParser((dict, SFTConfig, ModelConfig)).parse_args_and_config(), None)
""",
            after="""\
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser, get_peft_config
from _perfbot_compile import compile_repeated_layers


def main(script_args, training_args, model_args, dataset):
    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
    )
    compile_repeated_layers(trainer.model)
    trainer.train()


if __name__ == "__main__":
    main(*TrlParser((dict, SFTConfig, ModelConfig)).parse_args_and_config(), None)
""",
        ),
        Example(
            "checkpoint_name_into_a_trainer_held_by_an_attribute",
            before="""\
from trl import DPOConfig, DPOTrainer

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


class Run:
    def __init__(self, data):
        self.trainer: DPOTrainer = DPOTrainer(MODEL, args=DPOConfig(output_dir="out"), train_dataset=data)
""",
            after="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_compile import compile_repeated_layers

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


class Run:
    def __init__(self, data):
        self.trainer: DPOTrainer = DPOTrainer(MODEL, args=DPOConfig(output_dir="out"), train_dataset=data)
        compile_repeated_layers(self.trainer.model)
""",
        ),
        Example(
            "module_level_script_reading_a_star_import",
            before="""\
from settings import *
from trl import SFTTrainer

trainer = SFTTrainer(model=MODEL, args=ARGS, train_dataset=DATA)
trainer.train()
""",
            after="""\
from settings import *
from trl import SFTTrainer
from _perfbot_compile import compile_repeated_layers

trainer = SFTTrainer(model=compile_repeated_layers(MODEL), args=ARGS, train_dataset=DATA)
trainer.train()
""",
        ),
        Example(
            "checkpoint_name_into_a_trainer_never_assigned",
            before="""\
from trl import SFTConfig, SFTTrainer


def main(dataset):
    SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=SFTConfig(output_dir="out"), train_dataset=dataset).train()
""",
            refusal="is not assigned on a line of its own",
        ),
        Example(
            "already_compiled_layers",
            before="""\
from trl import SFTTrainer

from _perfbot_compile import compile_repeated_layers


def main(model, args, data):
    SFTTrainer(model=compile_repeated_layers(model), args=args, train_dataset=data).train()
    trainer = SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=args, train_dataset=data)
    compile_repeated_layers(trainer.model)
    trainer.train()
""",
        ),
        Example(
            "whole_model_compiled_by_the_config",
            before="""\
from trl import DPOConfig, DPOTrainer


def main(model, data):
    config = DPOConfig(output_dir="out", torch_compile=True)
    DPOTrainer(model=model, args=config, train_dataset=data).train()
""",
            refusal="torch_compile=True compiles the whole model already",
        ),
        Example(
            "model_compiled_after_the_trainer_is_built",
            before="""\
import torch
import transformers


def train(model, args, data):
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    model = torch.compile(model)
    trainer.train()
    model.save_pretrained("out")
""",
            after="""\
import torch
import transformers
from _perfbot_compile import compile_repeated_layers


def train(model, args, data):
    trainer = transformers.Trainer(model=compile_repeated_layers(model), args=args, train_dataset=data)
    model = torch.compile(model)
    trainer.train()
    model.save_pretrained("out")
""",
        ),
        Example(
            "model_compiled_after_the_trainer_and_handed_to_it",
            before="""\
import torch
import transformers


def train(model, args, data):
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    model = torch.compile(model)
    trainer.model = model
    trainer.train()
""",
            refusal="line 7: `torch.compile(...)` compiles here already",
        ),
        Example(
            "model_compiled_before_the_trainer",
            before="""\
import torch
import transformers


def train(model, args, data):
    model = torch.compile(model)
    transformers.Trainer(model=model, args=args, train_dataset=data).train()
""",
            refusal="line 6: `torch.compile(...)` compiles here already",
        ),
        Example(
            "model_compiled_for_the_next_round",
            before="""\
import torch
import transformers


def rounds(model, args, data):
    for _ in range(2):
        transformers.Trainer(model=model, args=args, train_dataset=data).train()
        model = torch.compile(model)
""",
            refusal="line 8: `torch.compile(...)` compiles here already",
        ),
        Example(
            "quantized_model_prepared_for_kbit_training",
            before="""\
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, Trainer


def train(path, args, data):
    model = AutoModelForCausalLM.from_pretrained(path, load_in_8bit=True)
    model = prepare_model_for_kbit_training(model)
    model = get_peft_model(model, LoraConfig(r=8))
    Trainer(model=model, args=args, train_dataset=data).train()
""",
            refusal="the model comes from `prepare_model_for_kbit_training(...)` (line 7)",
        ),
        Example(
            "no_trainer",
            before="""\
import torch


def evaluate(model, batches):
    with torch.no_grad():
        return [model(b).logits.argmax(-1) for b in batches]
""",
        ),
    )
