"""TF32: float32 matmuls and convolutions on tensor cores, and cuDNN autotuning, set once at start-up.

In a file with a hand-written training loop, the function that holds the loop starts with
``enable_tf32()`` (vendored as ``_perfbot_gpu_flags.py``): ``fp32_precision = "tf32"`` for cuBLAS matmuls and
cuDNN where this torch has that API, the legacy ``allow_tf32`` flags otherwise (never both: recent torch
raises when a program mixes them), and ``cudnn.benchmark = True`` -- left off (``cudnn_benchmark=False``)
when the file asks for deterministic algorithms. ``TrainingArguments``-family configs get
``tf32=True if is_torch_tf32_available() else None`` (transformers raises on ``tf32=True`` without an
Ampere-or-newer GPU).

TF32 keeps float32's range with a 10-bit mantissa in the products: a numerics change, so losses move in
the last digits. Where the file already turns TF32 on (any API, or a config's ``tf32=`` that may be true) the
site is reported as already done; a file that switches it off is refused. A loss that back-propagates chunk by
chunk in its ``__call__`` is no site (see :mod:`optimizations.program.training_loops`): flags set there would be
set again every step, over whatever the program set in between (torchtitan turns TF32 off for its
batch-invariant mode).
"""

from __future__ import annotations

import libcst as cst
from libcst.codemod.visitors import AddImportsVisitor
from libcst.helpers import parse_template_expression

from optimizations.edits.expressions import add_keywords, call_expr
from optimizations.edits.imports import import_end
from optimizations.edits.planned import PlannedCodemod
from optimizations.program.config_use import (
    HELPER_ONLY_CONFIG_FILES,
    HELPER_ONLY_CONFIG_PROGRAM,
    not_a_run_config,
)
from optimizations.program.hf import HF_CONFIGS, TF32_CHECK, is_training_config
from optimizations.program.syntax import code_of, keyword, literal_value, star_kwargs
from optimizations.program.training_loops import BACKWARD
from optimizations.program.values import outcomes
from optimizations.registry import Example, Numerics, Optimization
from optimizations.runtime import GPU_FLAGS_RUNTIME

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


class _Tf32(PlannedCodemod):
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
        functions: list[cst.CSTNode] = []
        for loop in self.training_loops():
            owner = self.enclosing_body(loop)
            if all(owner is not seen for seen in functions):
                functions.append(owner)
        for owner in functions:
            self._plan_startup(module, owner, settings, deterministic)

    def _settings(self, module: cst.Module, table: dict, only_matching: bool = False):
        """``(node, matches)`` for each assignment to, or call of, a setting in ``table``."""
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
        self, module: cst.Module, owner: cst.CSTNode, settings: dict, deterministic: bool
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
        hidden = star_kwargs(call)
        if hidden is not None:
            self.refused(call, message, f"settings are passed through `**{code_of(hidden.value)}`")
            return
        check = parse_template_expression(
            "True if {available}() else None", available=cst.Name(TF32_CHECK[1])
        )
        self.replacements[call] = lambda updated: add_keywords(updated, [("tf32", check)])
        AddImportsVisitor.add_needed_import(self.context, *TF32_CHECK)
        self.changed(call, message)


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


class Tf32(Optimization):
    """Float32 matmuls and convolutions on tensor cores (TF32); cuDNN picks the fastest convolution kernels."""

    id = "tf32"
    title = "TF32 matmuls/convolutions and cuDNN autotuning"
    tier = 2
    expected = "up to 2-3x float32 matmul throughput on Ampere+; changes float32 rounding"
    summary = "enable_tf32() at start-up (fp32_precision API or legacy flags, never both); Trainer: tf32=True"
    scope = "train"
    numerics = Numerics.ROUNDING
    numerics_reason = "float32 matmuls and convolutions round their inputs to TF32's 10-bit mantissa"
    keywords = (
        "tf32",
        "tensorfloat",
        "allow_tf32",
        "fp32_precision",
        "cudnn.benchmark",
        "float32 matmul",
        "matmul precision",
    )
    codemods = (_Tf32,)
    needs = (BACKWARD, *HF_CONFIGS)

    examples = (
        Example(
            "no_site_config_only_a_repository_helper_reads",
            before=HELPER_ONLY_CONFIG_PROGRAM,
            files=HELPER_ONLY_CONFIG_FILES,
        ),
        Example(
            "training_function",
            before="""\
import torch


def main():
    \"\"\"Train.\"\"\"
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
""",
            after="""\
import torch
from _perfbot_gpu_flags import enable_tf32


def main():
    \"\"\"Train.\"\"\"
    enable_tf32()
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "aliased_torch_deterministic",
            before="""\
import torch as th


def train(model, loader, optimizer):
    th.use_deterministic_algorithms(True)
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
            after="""\
import torch as th
from _perfbot_gpu_flags import enable_tf32


def train(model, loader, optimizer):
    enable_tf32(cudnn_benchmark=False)
    th.use_deterministic_algorithms(True)
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        ),
        Example(
            "trainer_config_multiline",
            before="""\
from trl import SFTConfig


def build(out):
    return SFTConfig(
        output_dir=out,  # checkpoints
        bf16=True,
    )
""",
            after="""\
from trl import SFTConfig
from transformers.utils import is_torch_tf32_available


def build(out):
    return SFTConfig(
        output_dir=out,  # checkpoints
        bf16=True,
        tf32=True if is_torch_tf32_available() else None,
    )
""",
        ),
        Example(
            "already_sets_legacy_flags",
            before="""\
import torch

torch.backends.cuda.matmul.allow_tf32 = True


def train(model, loader, optimizer):
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        ),
        Example(
            "chunked_loss_back_propagating_per_call",
            before="""\
import torch


class ChunkedLoss:
    def __call__(self, hidden, head, labels):
        total = 0.0
        for h, y in zip(hidden.chunk(4), labels.chunk(4)):
            loss = torch.nn.functional.cross_entropy(head(h), y)
            loss.backward(retain_graph=True)
            total += loss.detach()
        return total
""",
        ),
        Example(
            "autograd_function_backward_per_shard",
            before="""\
import torch


class TiledMLP(torch.autograd.Function):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        grads = []
        for shard, grad_shard in zip(x.chunk(4, dim=1), grad.chunk(4, dim=1)):
            shard = shard.detach().requires_grad_()
            with torch.enable_grad():
                ctx.fn(shard).backward(grad_shard)
            grads.append(shard.grad)
        return torch.cat(grads, dim=1), None
""",
        ),
        Example(
            "trainer_class_call_steps",
            before="""\
import torch


class Trainer:
    def __call__(self, model, loader, optimizer):
        for batch in loader:
            model(batch).backward()
            optimizer.step()
""",
            after="""\
import torch
from _perfbot_gpu_flags import enable_tf32


class Trainer:
    def __call__(self, model, loader, optimizer):
        enable_tf32()
        for batch in loader:
            model(batch).backward()
            optimizer.step()
""",
        ),
        Example(
            "refuses_tf32_switched_off",
            before="""\
import torch


def train(model, loader, optimizer):
    torch.set_float32_matmul_precision("highest")
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
            refusal="switched off explicitly",
        ),
    )
