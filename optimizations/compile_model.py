"""``torch.compile`` for the model a hand-written training loop trains.

The model is the name whose ``.parameters()`` the function reads and that the loop calls (``model(x, y)``).
Right after the last statement before the loop that builds or moves it (``model = GPT(config).to(device)``)
comes ``compile_model(model)`` (vendored as ``_perfbot_compile.py``): ``nn.Module.compile()`` in place, so the
class, ``isinstance`` checks and state-dict keys stay as they were (``model = torch.compile(model)`` would
prefix every key with ``_orig_mod.``). It does nothing when no parameter is on a CUDA device, when torch is
older than 2.2, or when ``PERFBOT_COMPILE=0``.

Compiled kernels fuse element-wise work and round differently: losses agree closely, not bit for bit, and the
first steps pay the compilation. Refused: a file that calls ``torch.compile`` or a model already
``.compile()``-d, a model wrapped in DistributedDataParallel or FSDP (compile the inner module before wrapping,
by hand), a loop that trains several modules or none the function can name.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from optimizations.program.codemod import code_of, walk
from optimizations.program.training_loops import BACKWARD, NESTED_SCOPES, PlannedCodemod, is_method_call
from optimizations.registry import Example, Optimization

RUNTIME_MODULE = "compile"
COMPILE = "compile_model"
WRAPPERS = ("DistributedDataParallel", "FullyShardedDataParallel", "DataParallel", "fully_shard")
MOVES = ("to", "cuda", "half", "bfloat16", "float", "load_state_dict", "apply", "requires_grad_")


class _Refused(Exception):
    """A check failed; the message is the reason."""


class _Compile(PlannedCodemod):
    def plan(self, module: cst.Module) -> None:
        vendored = f"_perfbot_{RUNTIME_MODULE}.{COMPILE}"
        calls = self.nodes(cst.Call)
        if any(any(n.endswith(vendored) for n in self.names(c.func)) for c in calls):
            return  # already compiled by this transform
        self.compiled = next((c for c in calls if "torch.compile" in self.names(c.func)), None)
        self.wrapped = next(
            (c for c in calls if any(n.rsplit(".", 1)[-1] in WRAPPERS for n in self.names(c.func))), None
        )
        seen: list[cst.CSTNode] = []
        for loop in self.training_loops():
            owner = self.enclosing_body(loop)
            if isinstance(owner, cst.FunctionDef) and all(owner is not s for s in seen):
                seen.append(owner)
                self._plan_function(owner, loop)

    def _plan_function(self, function: cst.FunctionDef, loop: cst.For | cst.While) -> None:
        message = (
            f"{function.name.value}(): torch.compile the model in place (on CUDA; PERFBOT_COMPILE=0 skips)"
        )
        try:
            if self.compiled is not None:
                raise _Refused(
                    f"the file already compiles at line {self.line(self.compiled)} (`{code_of(self.compiled)}`)"
                )
            if self.wrapped is not None:
                raise _Refused(
                    f"the model is wrapped at line {self.line(self.wrapped)} (`{code_of(self.wrapped.func)}`): "
                    "compile the inner module before wrapping it, by hand"
                )
            model = self._model(function, loop)
            compiled = next(
                (
                    c
                    for c in m.findall(function, m.Call())
                    if is_method_call(c, "compile") and m.matches(c.func.value, m.Name(model))
                ),
                None,
            )
            if compiled is not None:
                raise _Refused(f"`{model}` is already compiled at line {self.line(compiled)}")
            anchor, after = self._anchor(function, loop, model)
        except _Refused as refusal:
            self.refused(loop, message, str(refusal))
            return
        statement = cst.SimpleStatementLine([cst.Expr(cst.parse_expression(f"{COMPILE}({model})"))])
        if after:
            self.inserted_after.setdefault(anchor, []).append(statement)
        else:
            self.inserted_before.setdefault(anchor, []).append(statement)
        self.runtime_imports.add((RUNTIME_MODULE, COMPILE))
        self.changed(anchor, message)

    def _model(self, function: cst.FunctionDef, loop: cst.For | cst.While) -> str:
        """The one name whose parameters the function reads and that the loop calls."""
        with_parameters = {
            call.func.value.value
            for call in walk(function.body, NESTED_SCOPES)
            if is_method_call(call, "parameters", "named_parameters")
            and isinstance(call.func.value, cst.Name)
        }
        called = {
            call.func.value
            for call in walk(loop.body, NESTED_SCOPES)
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Name)
        }
        models = sorted(with_parameters & called)
        if len(models) != 1:
            found = ", ".join(models) or "none"
            raise _Refused(f"cannot tell which one module the loop trains (called and optimised: {found})")
        return models[0]

    def _anchor(self, function: cst.FunctionDef, loop, model: str) -> tuple[cst.BaseStatement, bool]:
        """The statement to compile after (``True``) or before (``False``): the last one before the loop that
        builds or moves the model, or, where the function receives the model, its docstring or first statement."""
        top = loop
        while self.parent(top) is not function.body:
            top = self.parent(top)
        body = list(function.body.body)
        index = next(i for i, s in enumerate(body) if s is top)
        for statement in reversed(body[:index]):
            if self._builds_or_moves(statement, model):
                return statement, True
        params = {p.name.value for p in function.params.params}
        if model not in params:
            raise _Refused(f"`{model}` is not built before the loop in {function.name.value}()")
        first = body[0]
        docstring = m.matches(
            first, m.SimpleStatementLine([m.Expr(m.SimpleString() | m.ConcatenatedString())])
        )
        return first, docstring

    def _builds_or_moves(self, statement: cst.BaseStatement, model: str) -> bool:
        for node in m.findall(statement, m.AssignTarget() | m.Call()):
            if isinstance(node, cst.AssignTarget) and m.findall(node.target, m.Name(model)):
                return True
            if (
                isinstance(node, cst.Call)
                and is_method_call(node, *MOVES)
                and m.matches(node.func.value, m.Name(model))
            ):
                return True
        return False


class CompileModel(Optimization):
    """The model of a hand-written training loop compiled in place with torch.compile, on CUDA."""

    id = "compile_model"
    title = "torch.compile the model of a hand-written loop"
    tier = 2
    expected = "+20-80% tokens/s after the first steps (example GPT, H100: x1.79); compiling takes a minute"
    summary = "compile_model(model) after it is built and moved: nn.Module.compile() on CUDA, PERFBOT_COMPILE=0 skips"
    scope = "model"
    keywords = ("inductor",)
    capabilities = ("compile model", "torch.compile")
    codemods = (_Compile,)
    needs = (BACKWARD,)

    examples = (
        Example(
            "built_and_moved",
            before="""\
import torch

from model import GPT


def main(config, loader, device):
    model = GPT(config)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model.train()
    for x, y in loader:
        _, loss = model(x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
""",
            after="""\
import torch

from model import GPT
from _perfbot_compile import compile_model


def main(config, loader, device):
    model = GPT(config)
    model.to(device)
    compile_model(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model.train()
    for x, y in loader:
        _, loss = model(x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
""",
        ),
        Example(
            "model_passed_in",
            before="""\
import torch


def fit(net, loader, epochs):
    \"\"\"Train `net` in place.\"\"\"
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
""",
            after="""\
import torch
from _perfbot_compile import compile_model


def fit(net, loader, epochs):
    \"\"\"Train `net` in place.\"\"\"
    compile_model(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
""",
        ),
        Example(
            "no_training_loop",
            before="""\
import torch


@torch.no_grad()
def evaluate(model, loader):
    return sum(model(x).argmax(-1).eq(y).sum().item() for x, y in loader)
""",
        ),
        Example(
            "refuses_already_compiled",
            before="""\
import torch


def main(model, loader, optimizer):
    model = torch.compile(model)
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
            refusal="already compiles",
        ),
        Example(
            "refuses_distributed_wrapper",
            before="""\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def main(model, loader, rank):
    model = DDP(model.to(rank), device_ids=[rank])
    optimizer = torch.optim.AdamW(model.parameters())
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
            refusal="compile the inner module",
        ),
    )
