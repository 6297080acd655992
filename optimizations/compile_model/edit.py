"""The codemod of ``compile_model``: ``compile_model(model)`` after the statement that builds or moves the model a
hand-written training loop trains, or at the top of the function it is passed to (README.md)."""

from __future__ import annotations

from typing import cast

import libcst as cst
import libcst.matchers as m

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.choices import compile_turned_off
from optimizations.program.frameworks import LIGHTNING
from optimizations.program.syntax import NESTED_SCOPES, code_of, qualified_under, walk
from optimizations.program.training_loops import argument_for, is_method_call
from optimizations.runtime import COMPILE_RUNTIME

from .edit_flags import off_by_default

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


class CompileLoopModel(PlannedCodemod):
    """Compiles in place the one model a function's training loop trains, where the file has no compilation of
    its own and no wrapper around the model."""

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
        loops = self.training_loops()
        if loops and (off := compile_turned_off(self.parsed)) is not None:
            self.kept(off.line, "compilation turned off", off.evidence)
            return
        self.compiled = next((c for c in calls if "torch.compile" in self.names(c.func)), None)
        self.wrapped = next(
            (c for c in calls if any(n.rsplit(".", 1)[-1] in WRAPPERS for n in self.names(c.func))), None
        ) or self._fabric_setup(calls)
        seen: list[cst.CSTNode] = []
        for loop in loops:
            owner = self.enclosing_body(loop)
            if all(owner is not s for s in seen):
                seen.append(owner)
                if isinstance(owner, cst.FunctionDef):
                    self._plan_function(owner, loop)
                else:
                    self._plan_script(loop)

    def _compiled(self, compiled: cst.Call, message: str) -> None:
        """Reports the program's own ``torch.compile`` as done, or refused where it runs only behind a flag that
        is off by default (minimind's ``if args.use_compile == 1:``, ``--use_compile`` default 0): turning it on
        is the launch's choice, not an edit. A launch that turns the flag on (llm.c's ``--compile 1``) makes it
        done."""
        reason = off_by_default(self, compiled)
        if reason is not None:
            self.refused(compiled, message, reason)
            return
        self.already(compiled, message)

    def _plan_script(self, loop: cst.For | cst.While) -> None:
        """A loop at the top level of a script: already done where the model it calls is compiled, else left to
        a human (the compile goes where the script builds the model, which only a function's scope shows)."""
        compiled = self._compiling(_called_names(loop))
        if compiled is not None:
            self._compiled(compiled, f"the model the loop calls is compiled: `{code_of(compiled)}`")
            return
        self.refused(
            loop,
            "torch.compile the model of a top-level training loop",
            f"the loop (line {self.line(loop)}) runs at the top level of the script, not in a function: compile "
            "the model by hand where the script builds it (`model = torch.compile(model)`)",
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
                self._compiled(compiled, f"the model the loop calls is compiled: `{code_of(compiled)}`")
            else:
                self.refused(loop, message, str(refusal))
            return
        compiled = self._compiling({model, *passed})
        if compiled is not None:
            self._compiled(compiled, f"the model is compiled: `{code_of(compiled)}`")
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
                and isinstance(call.func, cst.Attribute)
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
            elif (
                is_method_call(call, "compile")
                and isinstance(call.func, cst.Attribute)
                and m.matches(call.func.value, m.Name(m.MatchIfTrue(lambda name: name in models)))
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
            and isinstance(call.func, cst.Attribute)
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
            if is_method_call(call, "step")
            and isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name)
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
            if is_method_call(call, *MODULE_METHODS)
            and isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name)
        } & (reached - stepped)
        if len(used) == 1:
            return used.pop(), set()
        raise _Refused(
            f"cannot tell which one module the loop trains: no call of {function.name.value}() (defined at line "
            f"{self.line(function)}) passes it the module its optimizer steps, and it uses "
            f"{', '.join(sorted(used)) or 'no parameter'} as a module"
        )

    def _passed_modules(
        self, function: cst.FunctionDef, optimizers: set[str], candidates: set[str]
    ) -> dict[str, dict[str, str]]:
        """``{parameter: {module: where}}``: for each call of ``function``, the parameter it passes the module
        whose ``.parameters()`` built the optimizer it passes for one of ``optimizers``."""
        found: dict[str, dict[str, str]] = {}
        for site in self.call_sites(function):
            for optimizer in optimizers:
                module = self._optimised_module(site.scope, argument_for(function, site.call, optimizer))
                if module is None:
                    continue
                for candidate in candidates:
                    argument = argument_for(function, site.call, candidate)
                    if argument is not None and m.matches(argument, m.Name(module)):
                        scope = (
                            f"{site.scope.name.value}()"
                            if isinstance(site.scope, cst.FunctionDef)
                            else "module"
                        )
                        found.setdefault(candidate, {})[module] = f"`{module}` of {scope} in {site.path}"
        return found

    def _optimised_module(self, scope: cst.CSTNode, optimizer: cst.BaseExpression | None) -> str | None:
        """The one name whose ``.parameters()`` build ``optimizer``: in the call itself, or in the assignments
        of the name in ``scope`` (litgpt builds it in either branch of an ``if``, then wraps it with
        ``fabric.setup_optimizers``)."""
        values: list[cst.BaseExpression] = [optimizer] if optimizer is not None else []
        if isinstance(optimizer, cst.Name):
            # a call site's scope is its module or a function
            body = scope.body if isinstance(scope, cst.FunctionDef) else scope
            values = [
                node.value
                for node in walk(body, NESTED_SCOPES)
                if isinstance(node, cst.Assign)
                and any(m.matches(t.target, m.Name(optimizer.value)) for t in node.targets)
            ]
        modules = {
            call.func.value.value
            for value in values
            for call in m.findall(value, m.Call())
            if is_method_call(call, "parameters", "named_parameters")
            and isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name)
        }
        return modules.pop() if len(modules) == 1 else None

    def _anchor(self, function: cst.FunctionDef, loop, model: str) -> tuple[cst.BaseStatement, bool]:
        """The statement to compile after (``True``) or before (``False``): the last one before the loop that
        builds or moves the model, or, where the function receives the model, its docstring or first statement."""
        top = loop
        while self.parent(top) is not function.body:
            top = self.parent(top)
        # the function holds the loop, a compound statement, so its body is an indented block
        body = list(cast(cst.IndentedBlock, function.body).body)
        index = next(i for i, s in enumerate(body) if s is top)
        for statement in reversed(body[:index]):
            if self._builds_or_moves(statement, model):
                return statement, True
        params = {p.name.value for p in function.params.params}
        if model not in params:
            raise _Refused(
                f"`{model}` is not built before the loop (line {self.line(top)}) in {function.name.value}()"
            )
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
                and isinstance(node.func, cst.Attribute)
                and m.matches(node.func.value, m.Name(model))
            ):
                return True
        return False
