"""The codemod: ``enable_tf32()`` at the start of each function that holds a training loop, and
``tf32=True if is_torch_tf32_available() else None`` in ``TrainingArguments``-family configs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import cast

import libcst as cst
from libcst.codemod.visitors import AddImportsVisitor
from libcst.helpers import parse_template_expression

from optimizations.edits.expressions import add_keywords, call_expr
from optimizations.edits.imports import import_end
from optimizations.edits.planned import PlannedCodemod
from optimizations.program.config_use import not_a_run_config
from optimizations.program.hf import TF32_CHECK, is_training_config
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.program.values import ProgramValues, outcomes
from optimizations.runtime import GPU_FLAGS_RUNTIME

from .run_settings import set_at_import, set_by_called_function

ENABLE = "enable_tf32"
# Settings that decide TF32, by qualified name, and the values that turn it on.
TF32_SETTINGS = {
    "torch.backends.cuda.matmul.allow_tf32": (True,),
    "torch.backends.cudnn.allow_tf32": (True,),
    "torch.backends.cuda.matmul.fp32_precision": ("tf32",),
    "torch.backends.cudnn.conv.fp32_precision": ("tf32",),
    "torch.backends.cudnn.fp32_precision": ("tf32",),
    "torch.backends.fp32_precision": ("tf32",),
    "torch.set_float32_matmul_precision": ("high", "medium"),
}
# Settings that ask for reproducible kernels, by qualified name, and the values that do.
DETERMINISM = {
    "torch.use_deterministic_algorithms": (True,),
    "torch.backends.cudnn.deterministic": (True,),
    "torch.backends.cudnn.benchmark": (False,),
}


class EnableTf32(PlannedCodemod):
    """Turns TF32 on: a start-up call in each function that holds a training loop, the ``tf32``
    argument of each training config the run uses; reports where the file already decides TF32."""

    def plan(self, module: cst.Module) -> None:
        settings = dict(self._settings(module, TF32_SETTINGS))
        vendored = f"{GPU_FLAGS_RUNTIME.module}.{ENABLE}"
        calls = self.nodes(cst.Call)
        enabled = next((c for c in calls if any(n.endswith(vendored) for n in self.names(c.func))), None)
        if enabled is not None:
            self.already(enabled, f"TF32 on (`{code_of(enabled)}`)")
            return
        deterministic = any(True for _ in self._settings(module, DETERMINISM, only_matching=True))
        for call in calls:
            if is_training_config(self.names(call.func)) and not not_a_run_config(self, call):
                self._plan_trainer_config(call)
        functions: list[cst.FunctionDef | cst.Module] = []
        for loop in self.training_loops():
            # enclosing_body finds a function definition or the module (its signature says CSTNode).
            owner = cast(cst.FunctionDef | cst.Module, self.enclosing_body(loop))
            if all(owner is not seen for seen in functions):
                functions.append(owner)
        for owner in functions:
            self._plan_startup(module, owner, settings, deterministic)
        on = next((node for node, matches in settings.items() if matches), None)
        if not functions and on is not None:
            self.already(on, f"TF32 on (`{code_of(on)}`) for what this file runs")

    def _settings(
        self, module: cst.Module, table: Mapping[str, tuple[object, ...]], only_matching: bool = False
    ) -> Iterator[tuple[cst.Assign | cst.Call, bool]]:
        """``(node, matches)`` for each assignment to, or call of, a setting in ``table``."""
        targets: list[cst.BaseExpression]
        for node in self.nodes(cst.Assign, cst.Call):
            if isinstance(node, cst.Assign):
                targets, value = [t.target for t in node.targets], node.value
            elif isinstance(node, cst.Call) and node.args:
                targets, value = [node.func], node.args[0].value
            else:
                continue
            for target in targets:
                for name in self.names(target) & table.keys():
                    matches = literal_value(value) in table[name]
                    if matches or not only_matching:
                        yield node, matches

    def _plan_startup(
        self,
        module: cst.Module,
        owner: cst.FunctionDef | cst.Module,
        settings: dict[cst.Assign | cst.Call, bool],
        deterministic: bool,
    ) -> None:
        where = "the module" if isinstance(owner, cst.Module) else f"{owner.name.value}()"
        message = f"TF32 matmuls/convolutions set at the start of {where}" + (
            " (cuDNN autotuning left off: the file asks for deterministic algorithms)"
            if deterministic
            else " with cuDNN autotuning"
        )
        if settings:
            on = next((node for node, matches in settings.items() if matches), None)
            if on is not None:
                if not any(site.already for site in self.sites):
                    self.already(on, f"TF32 on (`{code_of(on)}`)")
                return
            off = next(iter(settings))
            self.refused(
                owner, message, f"TF32 is switched off explicitly at line {self.line(off)} (`{code_of(off)}`)"
            )
            return
        if self._set_elsewhere(owner):
            return
        call = call_expr(ENABLE, cudnn_benchmark=cst.Name("False")) if deterministic else call_expr(ENABLE)
        statement = cst.SimpleStatementLine([cst.Expr(call)])
        if isinstance(owner, cst.Module):
            index = import_end(module)
            if index >= len(module.body):
                return
            self.inserted_before.setdefault(module.body[index], []).append(
                statement.with_changes(leading_lines=[cst.EmptyLine()])
            )
        else:
            first = owner.body.body[0]
            if _is_docstring(first):
                self.inserted_after.setdefault(first, []).append(statement)
            else:
                self.inserted_before.setdefault(first, []).append(statement)
        self.runtime_imports.add((GPU_FLAGS_RUNTIME, ENABLE))
        self.changed(owner, message)

    def _set_elsewhere(self, owner: cst.FunctionDef | cst.Module) -> bool:
        """Reports TF32 already on where a module this file loads turns it on at import, or a repository
        function the file calls does; True where one does."""
        where = set_at_import(self, TF32_SETTINGS)
        if where is not None:
            self.already(owner, f"TF32 on at import of a module this file loads ({where})")
            return True
        found = set_by_called_function(self, self.nodes(cst.Call), TF32_SETTINGS)
        if found is not None:
            call, where = found
            self.already(call, f"TF32 on in `{code_of(call.func)}()` ({where})")
            return True
        return False

    def _plan_trainer_config(self, call: cst.Call) -> None:
        callee = code_of(call.func)
        message = f"{callee}(...): tf32=True where the GPU supports it"
        given = keyword(call, "tf32")
        if given is not None:
            owner = self.enclosing_body(call)
            values = outcomes(given.value, [owner, self.parsed.module]) or []
            if any(literal_value(value) is True for value in values):
                self.already(call, f"TF32 on (`{callee}(tf32=True)`)")
            else:
                self.refused(
                    call, message, f"tf32 is set to `{code_of(given.value)}` at line {self.line(given)}"
                )
            return
        hidden = ProgramValues(self).hidden(call, ["tf32"])
        if hidden is not None:
            self.refused(call, message, hidden)
            return
        check = parse_template_expression(
            "True if {available}() else None", available=cst.Name(TF32_CHECK[1])
        )
        self.replacements[call] = lambda updated: add_keywords(cast(cst.Call, updated), [("tf32", check)])
        AddImportsVisitor.add_needed_import(self.context, *TF32_CHECK)
        self.changed(call, message)


def _is_docstring(statement: cst.BaseStatement | cst.BaseSmallStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
