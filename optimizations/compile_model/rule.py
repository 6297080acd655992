"""``torch.compile`` for the model a hand-written training loop trains.

The model is the name whose ``.parameters()`` the function reads and that the loop calls (``model(x, y)``).
Where the function receives the model and its optimizer as parameters (``def train(model, loader, optimizer)``),
the calls of the function in the repository (in its own file, or in the files that import it) tell which
parameter gets the module whose ``.parameters()`` built the optimizer the loop steps; without such a call, the
one parameter the loop reaches and the function uses as a module (``model.train()``) is the model.
Right after the last statement before the loop that builds or moves it (``model = GPT(config).to(device)``)
comes ``compile_model(model)`` (vendored as ``_perfbot_compile.py``), or, for a model passed in, at the top of
the function: ``nn.Module.compile()`` in place, so the class, ``isinstance`` checks and state-dict keys stay as
they were (``model = torch.compile(model)`` would prefix every key with ``_orig_mod.``). It does nothing when no
parameter is on a CUDA device, when torch is older than 2.2, or when ``PERFBOT_COMPILE=0``.

A program that builds its parts from YAML configs by class name and reads a ``compile`` setting from them
(torchtune's recipes: ``cfg.get("compile", False)``, then its own per-layer compilation) is compiled by its
configs: a top-level ``compile: false`` becomes true (:meth:`CompileModel.config_sites`), in its own spelling;
``true`` is already done, and a commented ``false`` is left to a human, with the comment quoted.

Compiled kernels fuse element-wise work and round differently: losses agree closely, not bit for bit, and the
first steps pay the compilation. A model already compiled (``torch.compile(model)``, ``model.compile()``, in the
function or a caller in the same file) is reported as already done, as is a file that calls a training
framework's own compilation (torchtune's ``training.compile_model``). Refused: a file that calls
``torch.compile`` on something else, a model wrapped in DistributedDataParallel, FSDP or by a Lightning Fabric's
``setup`` (compile the inner module before wrapping, by hand), a loop that trains several modules or none the function can name.
"""

from __future__ import annotations

from itertools import groupby

import libcst as cst
import libcst.matchers as m

from optimizations.edits.component_configs import switch_on
from optimizations.edits.planned import PlannedCodemod
from optimizations.program.components import instantiates_components, reads_config_key, top_level_settings
from optimizations.program.frameworks import LIGHTNING
from optimizations.program.repository import RepoContext, Site
from optimizations.program.shapes import ProgramShape
from optimizations.program.syntax import NESTED_SCOPES, code_of, qualified_under, walk
from optimizations.program.training_loops import BACKWARD, argument_for, is_method_call
from optimizations.registry import Example, Numerics, Optimization
from optimizations.runtime import COMPILE_RUNTIME

COMPILE = "compile_model"
# Training frameworks' own in-place compilation of a model: a program that calls one has its own compilation.
FRAMEWORK_COMPILERS = ("torchtune.training.compile_model",)
WRAPPERS = ("DistributedDataParallel", "FullyShardedDataParallel", "DataParallel", "fully_shard")
# Lightning's class whose ``setup``/``setup_module`` wraps a module too.
FABRIC = ("Fabric",)
# Methods only a module has: a parameter the function calls them on is a model.
MODULE_METHODS = ("train", "eval", "parameters", "named_parameters", "state_dict")
MOVES = ("to", "cuda", "half", "bfloat16", "float", "load_state_dict", "apply", "requires_grad_")


class _Refused(Exception):
    """A check failed; the message is the reason."""


def _called_names(loop: cst.For | cst.While) -> set[str]:
    """The names the loop calls (``model(x)``) or calls a method of (``model.forward(x)``)."""
    funcs = [c.func for c in walk(loop.body, NESTED_SCOPES) if isinstance(c, cst.Call)]
    heads = [f.value if isinstance(f, cst.Attribute) else f for f in funcs]
    return {h.value for h in heads if isinstance(h, cst.Name)}


class _Compile(PlannedCodemod):
    def plan(self, module: cst.Module) -> None:
        vendored = f"{COMPILE_RUNTIME.module}.{COMPILE}"
        calls = self.nodes(cst.Call)
        done = next((c for c in calls if any(n.endswith(vendored) for n in self.names(c.func))), None)
        if done is not None:
            self.already(done, f"the model is compiled: `{code_of(done)}`")
            return
        framework = next((c for c in calls if self.names(c.func) & set(FRAMEWORK_COMPILERS)), None)
        if framework is not None:
            self.already(framework, f"the program has its own compilation: `{code_of(framework)}`")
            return
        self.compiled = next((c for c in calls if "torch.compile" in self.names(c.func)), None)
        self.wrapped = next(
            (c for c in calls if any(n.rsplit(".", 1)[-1] in WRAPPERS for n in self.names(c.func))), None
        ) or self._fabric_setup(calls)
        seen: list[cst.CSTNode] = []
        for loop in self.training_loops():
            owner = self.enclosing_body(loop)
            if all(owner is not s for s in seen):
                seen.append(owner)
                if isinstance(owner, cst.FunctionDef):
                    self._plan_function(owner, loop)
                else:
                    self._plan_script(loop)

    def _plan_script(self, loop: cst.For | cst.While) -> None:
        """A loop at the top level of a script: already done where the model it calls is compiled, else left to
        a human (the compile goes where the script builds the model, which only a function's scope shows)."""
        compiled = self._compiling(_called_names(loop))
        if compiled is not None:
            self.already(compiled, f"the model the loop calls is compiled: `{code_of(compiled)}`")
            return
        self.refused(
            loop,
            "torch.compile the model of a top-level training loop",
            "the loop runs at the top level of the script, not in a function: compile the model by hand where "
            "the script builds it (`model = torch.compile(model)`)",
        )

    def _plan_function(self, function: cst.FunctionDef, loop: cst.For | cst.While) -> None:
        message = (
            f"{function.name.value}(): torch.compile the model in place (on CUDA; PERFBOT_COMPILE=0 skips)"
        )
        try:
            model, passed = self._model(function, loop)
        except _Refused as refusal:
            compiled = self._compiling(_called_names(loop))
            if compiled is not None:
                self.already(compiled, f"the model the loop calls is compiled: `{code_of(compiled)}`")
            else:
                self.refused(loop, message, str(refusal))
            return
        compiled = self._compiling({model, *passed})
        if compiled is not None:
            self.already(compiled, f"the model is compiled: `{code_of(compiled)}`")
            return
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
            anchor, after = self._anchor(function, loop, model)
        except _Refused as refusal:
            self.refused(loop, message, str(refusal))
            return
        statement = cst.SimpleStatementLine([cst.Expr(cst.parse_expression(f"{COMPILE}({model})"))])
        if after:
            self.inserted_after.setdefault(anchor, []).append(statement)
        else:
            self.inserted_before.setdefault(anchor, []).append(statement)
        self.runtime_imports.add((COMPILE_RUNTIME, COMPILE))
        self.changed(anchor, message)

    def _fabric_setup(self, calls: list[cst.Call]) -> cst.Call | None:
        """A Lightning Fabric's ``setup(module)`` or ``setup_module(module)`` in the file: the module it returns is
        a ``_FabricModule`` wrapper, and compiling that in place recurses without end under bf16-mixed
        (Lightning-AI/litgpt's tutorial): Lightning compiles a module before ``setup``."""
        fabrics = {
            target.target.value
            for assign in self.nodes(cst.Assign)
            if isinstance(assign.value, cst.Call)
            and qualified_under(self.names(assign.value.func), LIGHTNING.packages, FABRIC)
            for target in assign.targets
            if isinstance(target.target, cst.Name)
        } | {
            param.name.value
            for param in self.nodes(cst.Param)
            if param.annotation is not None
            and qualified_under(self.names(param.annotation.annotation), LIGHTNING.packages, FABRIC)
        }
        return next(
            (
                call
                for call in calls
                if is_method_call(call, "setup", "setup_module")
                and isinstance(call.func.value, cst.Name)
                and call.func.value.value in fabrics
                and call.args
            ),
            None,
        )

    def _compiling(self, models: set[str]) -> cst.Call | None:
        """The ``torch.compile(m)`` (or ``m = torch.compile(...)``) or ``m.compile()`` of one of ``models``."""
        for call in self.nodes(cst.Call):
            if "torch.compile" in self.names(call.func):
                assigned = self.parent(call)
                targets = [t.target for t in assigned.targets] if isinstance(assigned, cst.Assign) else []
                operand = call.args[0].value if call.args else None
                if any(isinstance(n, cst.Name) and n.value in models for n in (operand, *targets)):
                    return call
            elif is_method_call(call, "compile") and m.matches(
                call.func.value, m.Name(m.MatchIfTrue(lambda name: name in models))
            ):
                return call
        return None

    def _model(self, function: cst.FunctionDef, loop: cst.For | cst.While) -> tuple[str, set[str]]:
        """The one module the loop trains, and the names its callers pass in for it: the name whose parameters
        the function reads and that the loop calls; else the parameter that every call of the function in the
        repository passes the module whose parameters the optimizer it steps was built from; else the one
        parameter the loop reaches that the function uses as a module (``.train()``, ``.eval()``)."""
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
        if len(models) > 1:
            raise _Refused(f"the loop calls and optimises several modules: {', '.join(models)}")
        if models:
            return models[0], set()
        parameters = [
            p.name.value
            for p in (
                *function.params.posonly_params,
                *function.params.params,
                *function.params.kwonly_params,
            )
        ]
        reached = {p for p in parameters if self.reads_and_writes(loop.body, p)[0]}
        stepped = {
            call.func.value.value
            for call in walk(loop.body, NESTED_SCOPES)
            if is_method_call(call, "step") and isinstance(call.func.value, cst.Name)
        } & reached
        passed = self._passed_modules(function, stepped, reached - stepped)
        if len(passed) > 1:
            found = "; ".join(
                f"`{p}` gets {', '.join(sorted(w.values()))}" for p, w in sorted(passed.items())
            )
            raise _Refused(
                f"several modules reach the loop through {function.name.value}()'s parameters: {found}"
            )
        if passed:
            ((parameter, modules),) = passed.items()
            return parameter, set(modules)
        used = {
            call.func.value.value
            for call in walk(function.body, NESTED_SCOPES)
            if is_method_call(call, *MODULE_METHODS) and isinstance(call.func.value, cst.Name)
        } & (reached - stepped)
        if len(used) == 1:
            return used.pop(), set()
        raise _Refused(
            f"cannot tell which one module the loop trains: no call of {function.name.value}() passes it the "
            f"module its optimizer steps, and it uses {', '.join(sorted(used)) or 'no parameter'} as a module"
        )

    def _passed_modules(self, function: cst.FunctionDef, optimizers: set[str], candidates: set[str]):
        """``{parameter: {module: where}}``: for each call of ``function``, the parameter it passes the module
        whose ``.parameters()`` built the optimizer it passes for one of ``optimizers``."""
        found: dict[str, dict[str, str]] = {}
        for site in self.call_sites(function):
            for optimizer in optimizers:
                module = self._optimised_module(site.scope, argument_for(function, site.call, optimizer))
                for candidate in candidates:
                    if module is not None and m.matches(
                        argument_for(function, site.call, candidate), m.Name(module)
                    ):
                        scope = (
                            f"{site.scope.name.value}()"
                            if isinstance(site.scope, cst.FunctionDef)
                            else "module"
                        )
                        found.setdefault(candidate, {})[module] = f"`{module}` of {scope} in {site.path}"
        return found

    def _optimised_module(self, scope: cst.CSTNode, optimizer: cst.BaseExpression | None) -> str | None:
        """The one name whose ``.parameters()`` build ``optimizer``: in the call itself, or in the assignment
        of the name in ``scope``."""
        if isinstance(optimizer, cst.Name):
            body = scope if isinstance(scope, cst.Module) else scope.body
            values = [
                node.value
                for node in walk(body, NESTED_SCOPES)
                if isinstance(node, cst.Assign)
                and any(m.matches(t.target, m.Name(optimizer.value)) for t in node.targets)
            ]
            optimizer = values[0] if len(values) == 1 else None
        if optimizer is None:
            return None
        modules = {
            call.func.value.value
            for call in m.findall(optimizer, m.Call())
            if is_method_call(call, "parameters", "named_parameters")
            and isinstance(call.func.value, cst.Name)
        }
        return modules.pop() if len(modules) == 1 else None

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
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "Inductor fuses and reorders the model's kernels: the same math, rounded in another order"
    )
    measured_on = (ProgramShape.LOOP,)
    keywords = ("inductor",)
    capabilities = ("compile model", "torch.compile")
    codemods = (_Compile,)
    needs = (BACKWARD,)

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """``compile: false`` -> true at the top of the component configs of a program that instantiates
        components and reads a ``compile`` setting; none otherwise."""
        if not instantiates_components(ctx) or not reads_config_key(ctx, "compile"):
            return []
        sites: list[Site] = []
        for path, found in groupby(top_level_settings(ctx, "compile"), key=lambda setting: setting.path):
            text = original = ctx.read(path)
            for setting in reversed(list(found)):
                text, site = switch_on(text, setting, self.id, "the recipe compiles its model")
                sites.append(site)
            if text != original:
                ctx.edit(path, text)
        return sorted(sites, key=lambda site: (site.path, site.line))

    examples = (
        Example(
            "module_set_up_by_lightning_fabric",
            before="""\
import lightning as L
import torch

from model import GPT


def train(fabric: L.Fabric, model, optimizer, loader):
    for batch in loader:
        loss = model(batch)
        fabric.backward(loss)
        optimizer.step()


def main(config, loader):
    fabric = L.Fabric(precision="bf16-mixed")
    model = fabric.setup(GPT(config))
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters()))
    train(fabric, model, optimizer, fabric.setup_dataloaders(loader))
""",
            refusal="compile the inner module before wrapping it",
        ),
        Example(
            "framework_compiles_the_model",
            before="""\
from torchtune import training


def train(model, loader, optimizer, compile_model):
    if compile_model:
        training.compile_model(model)
    model.train()
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        ),
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
            "already_compiled",
            before="""\
import torch


def main(model, loader, optimizer):
    model = torch.compile(model)
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "already_compiled_in_a_script",
            before="""\
import torch

from model import GPT

compile = True
model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
if compile:
    model = torch.compile(model)
while True:
    loss = model(*next_batch())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
""",
        ),
        Example(
            "refuses_a_loop_at_the_top_level_of_a_script",
            before="""\
import torch

from model import GPT

model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
for batch in batches():
    loss = model(*batch)
    loss.backward()
    optimizer.step()
""",
            refusal="the loop runs at the top level of the script, not in a function",
        ),
        Example(
            "model_and_optimizer_passed_by_the_caller",
            before="""\
import torch


def step_loss(batch, net):
    inputs, labels = batch
    return torch.nn.functional.cross_entropy(net(inputs), labels)


def fit(net, batches, opt, sched, epochs):
    for _ in range(epochs):
        net.train()
        for batch in batches:
            opt.zero_grad()
            step_loss(batch, net).backward()
            opt.step()
            sched.step()


def run(build, batches):
    classifier = build()
    opt = torch.optim.AdamW(classifier.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    fit(classifier, batches, opt, sched, epochs=3)
""",
            after="""\
import torch
from _perfbot_compile import compile_model


def step_loss(batch, net):
    inputs, labels = batch
    return torch.nn.functional.cross_entropy(net(inputs), labels)


def fit(net, batches, opt, sched, epochs):
    compile_model(net)
    for _ in range(epochs):
        net.train()
        for batch in batches:
            opt.zero_grad()
            step_loss(batch, net).backward()
            opt.step()
            sched.step()


def run(build, batches):
    classifier = build()
    opt = torch.optim.AdamW(classifier.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    fit(classifier, batches, opt, sched, epochs=3)
""",
        ),
        Example(
            "refuses_two_modules_passed_in",
            before="""\
import torch


def adversarial(gen, disc, batches, g_opt, d_opt):
    for noise, real in batches:
        d_loss = disc(gen(noise).detach()).mean() - disc(real).mean()
        d_loss.backward()
        d_opt.step()
        g_loss = -disc(gen(noise)).mean()
        g_loss.backward()
        g_opt.step()


def main(make_gen, make_disc, batches):
    generator, critic = make_gen(), make_disc()
    g_opt = torch.optim.Adam(generator.parameters())
    d_opt = torch.optim.Adam(critic.parameters())
    adversarial(generator, critic, batches, g_opt, d_opt)
""",
            refusal="several modules reach the loop",
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
