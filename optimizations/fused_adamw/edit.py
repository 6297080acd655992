"""The edits: ``fused=fused_optimizer_supported(<parameter list>)`` on each Adam/AdamW the program builds (the
list hoisted before it, gradient clipping reusing it), and why a YAML config's optimizer mapping cannot take
``fused: True``."""

from __future__ import annotations

from typing import cast

import libcst as cst
import libcst.matchers as m
from libcst.helpers import parse_template_statement

from optimizations.edits.expressions import add_keywords, call_expr
from optimizations.program.components import Component
from optimizations.program.placement import caller_owners, later_move, parameter_owners
from optimizations.program.positions import start_line
from optimizations.program.runs.every_run import runs_of
from optimizations.program.runs.settings import DONE, Setting, cite
from optimizations.program.syntax import (
    NESTED_SCOPES,
    code_of,
    imported_modules,
    keyword,
    literal_value,
    qualified_under,
    star_kwargs,
    walk,
)
from optimizations.program.training_loops import is_method_call
from optimizations.program.values import dict_items, outcomes
from optimizations.runtime import GPU_FLAGS_RUNTIME

from .edit_trainer_optim import TrainerOptim

CHECK = "fused_optimizer_supported"
OPTIMIZERS = ("Adam", "AdamW")
CLIPPING = ("clip_grad_norm_", "clip_grad_value_")
# Factories that build an optimizer from its parameters and keywords, dropping those its class does not take:
# (module, function) -> the parameters' position and keyword.
FACTORIES = {("litgpt.utils", "instantiate_torch_optimizer"): (1, "model_parameters")}
# The optimizer classes a YAML config names, and the settings torch rejects beside ``fused``.
# Optimizer classes of other libraries that step Adam/AdamW in fused kernels already (DeepSpeed's CPU Adam: a
# vectorised host kernel, for a ZeRO-Offload run).
FUSED_CLASSES = (
    "deepspeed.ops.adam.FusedAdam",
    "deepspeed.ops.adam.DeepSpeedCPUAdam",
    "apex.optimizers.FusedAdam",
)
CONFIG_CLASSES = tuple(f"torch.optim.{name}" for name in OPTIMIZERS)
NOT_WITH_FUSED = ("foreach", "differentiable")
INLINE_SCOPES = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


class _Refused(Exception):
    """A check failed; the message is the reason."""


class FuseAdamW(TrainerOptim):
    """Gives each Adam/AdamW call (``torch.optim`` or a factory such as litgpt's) a run-time ``fused=`` check
    over a parameter list built once, or reports the call fused already or refused."""

    def plan(self, module: cst.Module) -> None:
        self.plan_trainer_optim()
        self._fused_classes()
        self._deepspeed_optimizer_blocks()
        self._compiled_adam_steps()
        for call in self.nodes(cst.Call):
            names = self.names(call.func)
            factory = next((f for f in FACTORIES if qualified_under(names, (f[0],), (f[1],))), None)
            if factory is not None and self.runs(call):
                self._plan_optimizer(call, FACTORIES[factory])
            elif qualified_under(names, ("torch.optim",), OPTIMIZERS) and self.runs(call):
                self._plan_optimizer(call)
            elif (named := self._named_optimizers(call)) and self.runs(call):
                self._plan_named(call, named)

    def _fused_classes(self) -> None:
        """Reports each statement that builds (or picks, ``A = CPUAdam if offload else FusedAdam``) an optimizer
        of :data:`FUSED_CLASSES` as fused already."""
        found: dict[int, tuple[cst.BaseStatement, list[str]]] = {}
        for node in self.nodes(cst.Name, cst.Attribute):
            fused = self.names(node) & set(FUSED_CLASSES)
            statement = self.statement_of(node)
            if fused and statement is not None and self.runs(statement):
                classes = found.setdefault(self.line(statement), (statement, []))[1]
                classes += sorted(name.rpartition(".")[2] for name in fused)
        for statement, classes in found.values():
            self.already(statement, f"{' / '.join(dict.fromkeys(classes))}: fused Adam kernels already")

    def _named_optimizers(self, call: cst.Call) -> list[Setting]:
        """For ``getattr(torch.optim, config.optimizer)(...)``, the optimizer each run of the file names (its
        recipe's ``optimizer: AdamW``); empty for another call, or where some run names none."""
        func = call.func
        if not (isinstance(func, cst.Call) and code_of(func.func) == "getattr" and len(func.args) == 2):
            return []
        if "torch.optim" not in self.names(func.args[0].value):
            return []
        named = [run.settings.get("optimizer") for run in runs_of(self.repo, self.path)]
        return [s for s in named if s is not None] if all(named) else []

    def _plan_named(self, call: cst.Call, named: list[Setting]) -> None:
        """Fuse the optimizer class every run names where each names Adam or AdamW; keep an optimizer a run's
        config chooses otherwise (``optimizer: RMSprop``), which fused AdamW would replace, not speed up."""
        if all(DONE["adam"](setting.value) for setting in named):
            self._plan_optimizer(call)
            return
        others = [s for s in named if not DONE["adam"](s.value)]
        self.refused(
            call,
            f"{code_of(call.func)}(...): fused=True",
            f"the run's config chooses {others[0].value} ({cite(others)}): the optimizer is kept as chosen, and "
            "fused=True is for Adam and AdamW",
        )

    def _compiled_adam_steps(self) -> None:
        """Reports each Adam update the program writes itself and compiles (``@torch.compile def
        adamw_step_fused(...)``, nanochat's) as fused already: Inductor fuses its element-wise ops."""
        for function in self.nodes(cst.FunctionDef):
            compiled = any(
                "torch.compile"
                in self.names(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
                for d in function.decorators
            )
            if compiled and "adam" in function.name.value.lower() and self.runs(function):
                self.already(function, f"`{function.name.value}`: an Adam update compiled into fused kernels")

    def _deepspeed_optimizer_blocks(self) -> None:
        """Reports each DeepSpeed config optimizer block written in code (``{"type": "AdamW", "params": {...}}``
        in a file that imports deepspeed) as fused already: DeepSpeed builds its FusedAdam from it (its CPU Adam
        under ZeRO-Offload), unless the block asks for torch's Adam."""
        if not any(name.split(".")[0] == "deepspeed" for name in imported_modules(self.parsed)):
            return
        for block in self.nodes(cst.Dict):
            items = {
                literal_value(element.key): element.value
                for element in block.elements
                if isinstance(element, cst.DictElement)
            }
            params, kind = items.get("params"), literal_value(items.get("type", cst.Name("None")))
            if kind not in OPTIMIZERS or not isinstance(params, cst.Dict) or "torch_adam" in code_of(params):
                continue
            statement = self.statement_of(block)
            if statement is not None and self.runs(statement):
                self.already(
                    statement, f'DeepSpeed optimizer block `"type": "{kind}"`: DeepSpeed builds FusedAdam'
                )

    def _options(self, call: cst.Call) -> list[dict[str, cst.BaseExpression]] | None:
        """The keyword settings of the call, one dict per way its ``**kwargs`` may be built (``extra =
        dict(fused=True) if use_fused else dict()``); ``None`` when a splat's keys cannot be read."""
        hidden = star_kwargs(call)
        given = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
        if hidden is None:
            return [given]
        owner = self.enclosing_body(call)
        scopes: list[cst.CSTNode] = [owner] if owner is self.parsed.module else [owner, self.parsed.module]
        built = [dict_items(value) for value in outcomes(hidden.value, scopes) or [hidden.value]]
        if any(items is None for items in built):
            return None
        return [given | items for items in built if items is not None]

    def _plan_optimizer(self, call: cst.Call, params_at: tuple[int, str] = (0, "params")) -> None:
        """Fuse the optimizer ``call`` builds; ``params_at``: the position and keyword of its parameters."""
        callee = code_of(call.func)
        message = (
            f"{callee}(...): fused=True where every parameter is a floating-point tensor on a device torch fuses "
            "the step on (checked at run time: CUDA, and the CPU from torch 2.4); the parameter list is built once"
        )
        try:
            options = self._options(call)
            if options is None:  # only a `**` splat's keys can be unreadable
                splat = cast(cst.Arg, star_kwargs(call))
                raise _Refused(
                    f"settings are passed through `**{code_of(splat.value)}` (line {self.line(splat)})"
                )
            fused = [o["fused"] for o in options if "fused" in o]
            if fused:
                where = (
                    ""
                    if keyword(call, "fused") is not None
                    else f" through `**{code_of(cast(cst.Arg, star_kwargs(call)).value)}`"  # not a keyword: splatted
                )
                if any(literal_value(value) is not False for value in fused):
                    self.already(call, f"{callee} fused (`fused={code_of(fused[0])}`{where})")
                    return
                raise _Refused(f"fused={code_of(fused[0])} is set{where}: the author turned it off")
            for name in ("foreach", "differentiable"):
                given = [o[name] for o in options if name in o]
                if any(literal_value(value) not in (None, False) for value in given):
                    raise _Refused(
                        f"{name}= is set (`{name}={code_of(given[0])}`), and torch does not combine it with "
                        "fused=True"
                    )
            params = self._params_argument(call, *params_at)
            statement = self.statement_of(call)
            if not isinstance(statement, cst.SimpleStatementLine) or any(
                isinstance(a, INLINE_SCOPES) for a in self._ancestors_until(call, statement)
            ):
                raise _Refused(
                    "the optimizer is built inside an expression the parameter list cannot precede"
                )
            body = self.enclosing_body(call)
            if isinstance(params.value, cst.Name):
                name = params.value.value
                self._check_is_list(body, name)
            else:
                name = self._fresh_name(body, params.value)
                self._hoist(statement, name, params.value)
                self.replacements[params] = lambda updated: updated.with_changes(value=cst.Name(name))
                self._reuse_in_clipping(body, call, params.value, name)
        except _Refused as refusal:
            self.refused(call, message, str(refusal))
            return
        check = call_expr(CHECK, cst.Name(name))
        self.replacements[call] = lambda updated: add_keywords(cast(cst.Call, updated), [("fused", check)])
        self.runtime_imports.add((GPU_FLAGS_RUNTIME, CHECK))
        moved = self._later_move(call, params.value, body)
        if moved is not None:
            message += (
                f"; the model moves to its device after the optimizer is built ({moved}), so the check sees CPU "
                "parameters: live from torch 2.4, where the fused flag holds on the CPU and stays with the "
                "parameters as they move; on older torch the optimizer keeps its default implementation"
            )
        self.changed(call, message)

    def _later_move(self, call: cst.Call, params: cst.BaseExpression, body: cst.CSTNode) -> str | None:
        """Where the model whose parameters ``call`` gets moves to its device after ``call`` builds the optimizer
        (here, or in a caller that passes the model in), as ``code at path:line``; ``None`` when it moves
        before, or perfbot sees no move."""
        bound = []
        if isinstance(params, cst.Name):
            _reads, writes, _nested = self.reads_and_writes(body, params.value)
            bound = [write.value for write in writes if isinstance(write, cst.Assign)]
        owners = parameter_owners(params, bound)
        move = later_move(self.parsed, body, self.line(call), owners) if owners else None
        if move is not None:
            return _where(code_of(move), self.path, self.line(move))
        if not isinstance(body, cst.FunctionDef):
            return None
        for site in self.call_sites(body):
            parsed = (
                self.parsed
                if site.path == self.path
                else self.repo.sources.parse(site.path, self.repo.read(site.path))
            )
            spelled = caller_owners(body, site, owners)
            move = later_move(parsed, site.scope, start_line(parsed, site.call), spelled) if spelled else None
            if move is not None:
                return _where(code_of(move), site.path, start_line(parsed, move))
        return None

    def _ancestors_until(self, node: cst.CSTNode, stop: cst.CSTNode) -> list[cst.CSTNode]:
        found = []
        for ancestor in self.ancestors(node):
            if ancestor is stop:
                break
            found.append(ancestor)
        return found

    def _params_argument(self, call: cst.Call, position: int, name: str) -> cst.Arg:
        named = keyword(call, name)
        if named is not None:
            return named
        positional = [arg for arg in call.args if arg.keyword is None]
        if len(positional) > position and not any(arg.star for arg in positional[: position + 1]):
            return positional[position]
        raise _Refused("no parameters argument to check")

    def _check_is_list(self, body: cst.CSTNode, name: str) -> None:
        """``name`` must be bound only to a list (a literal, a comprehension or ``list(...)``)."""
        _reads, writes, _nested = self.reads_and_writes(body, name)
        for write in writes:
            value = write.value if isinstance(write, cst.Assign) else None
            if not (
                isinstance(value, (cst.List, cst.ListComp))
                or isinstance(value, cst.Call)
                and isinstance(value.func, cst.Name)
                and value.func.value == "list"
            ):
                raise _Refused(
                    f"`{name}` is not bound to a list here (line {self.line(write)}); it may be an iterator "
                    "that checking would use up"
                )
        if not writes:
            raise _Refused(
                f"`{name}` is not bound in this function; it may be an iterator that checking would use up"
            )

    def _fresh_name(self, body: cst.CSTNode, params: cst.BaseExpression) -> str:
        base = "optimizer_params"
        if (
            is_method_call(params, "parameters")
            and isinstance(params.func, cst.Attribute)
            and not params.args
        ):
            owner = params.func.value
            if isinstance(owner, (cst.Name, cst.Attribute)):
                last = owner.value if isinstance(owner, cst.Name) else owner.attr.value
                base = f"{last}_parameters"
        taken = {n.value for n in m.findall(body, m.Name()) if isinstance(n, cst.Name)}
        name, number = base, 2
        while name in taken:
            name, number = f"{base}_{number}", number + 1
        return name

    def _hoist(self, statement: cst.SimpleStatementLine, name: str, params: cst.BaseExpression) -> None:
        template = (
            "{name} = {params}" if isinstance(params, (cst.List, cst.ListComp)) else "{name} = list({params})"
        )
        hoisted = parse_template_statement(template, name=cst.Name(name), params=params).with_changes(
            leading_lines=statement.leading_lines
        )
        self.inserted_before.setdefault(statement, []).append(hoisted)
        self.replacements[statement] = lambda updated: updated.with_changes(leading_lines=[])

    def _reuse_in_clipping(
        self, body: cst.CSTNode, optimizer: cst.Call, params: cst.BaseExpression, name: str
    ) -> None:
        """``clip_grad_norm_(model.parameters(), ...)`` after the optimizer → ``clip_grad_norm_(<name>, ...)``."""
        if not (is_method_call(params, "parameters") and not params.args):
            return
        after = self.line(optimizer)
        for node in walk(body, NESTED_SCOPES):
            if (
                isinstance(node, cst.Call)
                and code_of(node.func).rsplit(".", 1)[-1] in CLIPPING
                and node.args
                and node.args[0].keyword is None
                and code_of(node.args[0].value) == code_of(params)
                and self.line(node) > after
            ):
                self.replacements[node.args[0]] = lambda updated: updated.with_changes(value=cst.Name(name))


def config_refusal(component: Component) -> str | None:
    """Why ``fused: True`` cannot go into ``component``'s mapping, if it cannot."""
    if "fused" in component.keywords:
        value = component.keywords["fused"]
        return f"fused is set to `{value}` at line {component.lines['fused']}"
    given = [key for key in NOT_WITH_FUSED if key in component.keywords]
    if given:
        return f"`{given[0]}` is set at line {component.lines[given[0]]}; torch rejects it with fused"
    if component.flow:
        return "the mapping is written inline; add `fused: True` to it by hand"
    parallel = component.settings.get("tensor_parallel_dim")
    if isinstance(parallel, int) and parallel > 1:
        return (
            f"tensor_parallel_dim is {parallel}: torchtune's distributed recipe rejects fused AdamW with it"
        )
    return None


def _where(code: str, path: str, line: int) -> str:
    shown = code if len(code) <= 60 else f"{code[:57]}..."
    return f"`{shown}` at {path}:{line}"
