"""The codemod of ``regional_compile``: a trainer's model argument becomes ``compile_repeated_layers(model)``, or
``compile_repeated_layers(trainer.model)`` follows a trainer that loads its checkpoint itself (README.md)."""

from __future__ import annotations

from typing import cast

import libcst as cst
import libcst.matchers as m

from optimizations.edits.expressions import call_expr, replace_keyword
from optimizations.edits.trainer_follow_up import TrainerFollowUp
from optimizations.program.choices import compile_turned_off
from optimizations.program.hf import is_training_config, trainer_class
from optimizations.program.kbit import kbit_preparation
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.runtime import COMPILE_REPEATED_LAYERS, COMPILE_RUNTIME

STRINGS = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


class CompileLayers(TrainerFollowUp):
    """Wraps a trainer's model argument in ``compile_repeated_layers``, or compiles the model a trainer loads
    itself on the line after it is built, unless something in the file compiles already."""

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
        self.turned_off = compile_turned_off(self.parsed)
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
        if self.turned_off is not None:  # one kept site for the file's switch, however many trainers read it
            if not any(site.kept for site in self.sites):
                self.kept(self.turned_off.line, "compilation turned off", self.turned_off.evidence)
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
        # the updated call has the original's arguments, and so its model
        updated_model = cast(cst.BaseExpression, self.links.model_argument(updated_node))
        wrapped = call_expr(COMPILE_REPEATED_LAYERS, updated_model)
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
        names = {t.target.value for t in statement.targets if isinstance(t.target, cst.Name)}
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
