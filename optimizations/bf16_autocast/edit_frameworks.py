"""Where a framework drives training, its precision setting is the site: ``Accelerator(...)``'s
``mixed_precision``, Lightning's ``precision``, a DeepSpeed config's ``"bf16"`` section."""

from __future__ import annotations

from typing import cast

import libcst as cst
import libcst.matchers as m

from optimizations.edits.expressions import add_keywords, expr
from optimizations.edits.planned import PlannedCodemod
from optimizations.program.config_use import fills_in_for_a_parameter
from optimizations.program.frameworks import ACCELERATE, DEEPSPEED, FrameworkCall, json_config, launch_setting
from optimizations.program.repository import Site
from optimizations.program.runs.every_run import launched_in
from optimizations.program.runs.settings import cite
from optimizations.program.syntax import NESTED_SCOPES, code_of, keyword, literal_value, walk
from optimizations.program.values import assignments, dict_items, outcomes
from optimizations.runtime import PRECISION_RUNTIME

# The helpers of the vendored ``_perfbot_precision.py`` that the edits call.
CHECK = "bf16_supported"
LAUNCH_AWARE = "bf16_unless_launched_otherwise"


def _picks_bf16(function: cst.FunctionDef, bf16: tuple[object, ...]) -> bool:
    """Whether ``function`` asks the GPU for bf16 (``...is_bf16_supported()``) and may return one of ``bf16``."""
    nodes = list(walk(function.body, NESTED_SCOPES))
    asks = any(isinstance(n, cst.Call) and code_of(n.func).endswith("is_bf16_supported") for n in nodes)
    returned = [
        literal_value(v)
        for n in nodes
        if isinstance(n, cst.Return) and n.value is not None
        for v in outcomes(n.value, [function]) or []
    ]
    return asks and any(v in bf16 for v in returned)


def _with_bf16_section(config: cst.CSTNode) -> cst.CSTNode:
    """A DeepSpeed config (a dict display or a ``dict(...)`` call) with the section
    ``"bf16": {"enabled": bf16_supported()}`` at its end."""
    if isinstance(config, cst.Call):
        return add_keywords(config, [("bf16", expr(f'{{"enabled": {CHECK}()}}'))])
    display = cast(cst.Dict, config)  # dict_items reads nothing else
    return _with_element(display, _display_element(f'{{"bf16": {{"enabled": {CHECK}()}}}}'))


def _display_element(code: str) -> cst.BaseDictElement:
    """The one element of a dict display written as ``code``."""
    return cast(cst.Dict, expr(code)).elements[0]


def _with_element(config: cst.Dict, element: cst.BaseDictElement) -> cst.Dict:
    """The dict literal with one more ``key: value`` at its end, after the same separator as the others."""
    elements = list(config.elements)
    if not elements:
        return config.with_changes(elements=[element])
    separator = (
        elements[0].comma if len(elements) > 1 else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    )
    last = elements[-1]
    elements[-1] = last.with_changes(comma=separator)
    return config.with_changes(elements=[*elements, element.with_changes(comma=last.comma)])


class FrameworkPrecision(PlannedCodemod):
    """The precision setting of an Accelerate, Lightning or DeepSpeed call: set to bf16 where the GPU has it,
    already bf16, or refused with the line that decides it."""

    framework_calls: list[FrameworkCall]

    def _scopes(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """Where the names ``node`` reads are bound: its function, then the module."""
        owner = self.enclosing_body(node)
        return [owner] if owner is self.parsed.module else [owner, self.parsed.module]

    def _plan_framework(self, found: FrameworkCall) -> None:
        framework, call = found.framework, found.call
        if framework is DEEPSPEED:
            self._plan_deepspeed(found)
            return
        bf16 = framework.bf16[0]
        message = (
            f"{code_of(call.func)}(...): {framework.precision}={bf16!r} where the GPU has bf16 tensor cores"
        )
        parent = self.parent(call)
        read = parent if isinstance(parent, cst.Attribute) and parent.value is call else None
        if isinstance(parent, cst.Expr) or read is not None:
            how = (
                f"only `{code_of(read)}` is read from it"
                if read is not None
                else "the call is a statement of its own"
            )
            self.refused(
                call,
                message,
                f"the `{code_of(call.func)}(...)` built here is thrown away ({how}): it sets up shared state, and "
                "the one that drives training is built elsewhere",
            )
            return
        setting = found.setting
        if setting is not None:
            self._judge_setting(found, message, setting.value)
            return
        if fills_in_for_a_parameter(self, call):
            self.refused(
                call,
                message,
                "it is built only when the caller passes none (`if ... is None:`): a default for every caller, "
                "who chooses the precision with the one it passes",
            )
            return
        reference = self._compared_with(found)
        if reference is not None:
            self.refused(
                call,
                message,
                f"the file builds another one with {reference}: this one is the reference that one is compared "
                "with, and keeps its precision",
            )
            return
        plugin = keyword(call, "deepspeed_plugin") or keyword(call, "deepspeed_plugins")
        if framework is ACCELERATE and plugin is not None:
            self.refused(
                call,
                message,
                f"its DeepSpeed plugin (`{code_of(plugin.value)}`) takes the precision from the DeepSpeed config; "
                'set "bf16": {"enabled": true} there',
            )
            return
        launched = launched_in(self.repo, self.path, "bf16") if framework is ACCELERATE else []
        if launched:
            self.already(call, f"{framework.name} mixed precision bf16 in every launch ({cite(launched)})")
            return
        launch = (
            launch_setting(self.repo, framework.precision, self.path) if framework is ACCELERATE else None
        )
        if launch is not None:
            self.refused(call, message, launch)
            return
        if framework is ACCELERATE:  # the argument overrides `accelerate launch`: only where it chose nothing
            value, helper = expr(f"{LAUNCH_AWARE}()"), LAUNCH_AWARE
        else:
            value, helper = expr(f'("{bf16}" if {CHECK}() else "32-true")'), CHECK
        # The call's updated node is a call: the pass changes its arguments only.
        self.replacements[call] = lambda updated: add_keywords(
            cast(cst.Call, updated), [(framework.precision, value)]
        )
        self.runtime_imports.add((PRECISION_RUNTIME, helper))
        self.changed(call, message)

    def _compared_with(self, found: FrameworkCall) -> str | None:
        """``precision=value at line N`` of another call to the same framework in this file that sets its
        precision to a literal other than bf16 (huggingface/accelerate's FP8 benchmarks build a plain
        ``Accelerator()`` for the baseline and ``Accelerator(mixed_precision="fp8")`` beside it); None otherwise."""
        framework = found.framework
        for other in self.framework_calls:
            given = other.setting
            if other.framework is not framework or other.call is found.call or given is None:
                continue
            value = literal_value(given.value)
            if isinstance(value, str) and value not in framework.bf16:
                return f"`{framework.precision}={code_of(given.value)}` at line {self.line(other.call)}"
        return None

    def _judge_setting(self, found: FrameworkCall, message: str, value: cst.BaseExpression) -> None:
        framework, call = found.framework, found.call
        values = outcomes(value, self._scopes(call))
        literals = None if values is None else [literal_value(v) for v in values]
        written = f"{framework.precision}={code_of(value)}"
        if self.calls(value, LAUNCH_AWARE):
            self.already(
                call, f"{framework.name} mixed precision bf16 unless the launch chose one (`{written}`)"
            )
        elif literals is not None and any(v in framework.bf16 for v in literals):
            self.already(call, f"{framework.name} mixed precision bf16 (`{written}`)")
        elif literals is not None and any(v in framework.float16 for v in literals):
            self.refused(
                call,
                message,
                f"`{written}` at line {self.line(value)}: float16 mixed precision; moving it "
                "to bf16 is a separate change",
            )
        elif (picker := self._bf16_picker(value, call, framework.bf16)) is not None:
            self.already(
                call,
                f"{framework.name} mixed precision bf16 where the GPU has it (`{written}`: "
                f"`{code_of(picker.func)}(...)` at line {self.line(picker)} picks {framework.bf16[0]!r} there)",
            )
        elif (default := self._bf16_default(value, call, framework.bf16)) is not None:
            self.already(
                call,
                f"{framework.name} mixed precision bf16 unless the run asks otherwise (`{written}`: the parameter "
                f"defaults to {literal_value(default)!r} at line {self.line(default)})",
            )
        elif literals is None or ... in literals:
            self.refused(
                call,
                message,
                f"`{written}` at line {self.line(value)} comes from the run's arguments: choose "
                f"{framework.bf16[0]!r} where they are given",
            )
        else:
            self.refused(call, message, f"`{written}` is set explicitly at line {self.line(value)}")

    def _bf16_default(
        self, value: cst.BaseExpression, at: cst.Call, bf16: tuple[object, ...]
    ) -> cst.BaseExpression | None:
        """The default of the parameter ``value`` names, where it is one of ``bf16`` and the function never
        assigns the parameter (Lightning-AI/litgpt's XLA scripts: ``precision: str = "bf16-true"``)."""
        function = self.enclosing_body(at)
        if not isinstance(value, cst.Name) or not isinstance(function, cst.FunctionDef):
            return None
        parameters = (*function.params.params, *function.params.kwonly_params)
        parameter = next((p for p in parameters if p.name.value == value.value), None)
        if parameter is None or parameter.default is None or assignments(function, value.value):
            return None
        return parameter.default if literal_value(parameter.default) in bf16 else None

    def _bf16_picker(
        self, value: cst.BaseExpression, at: cst.Call, bf16: tuple[object, ...]
    ) -> cst.Call | None:
        """The call of a repository function that picks the framework's bf16 value where the GPU supports bf16
        (it calls ``is_bf16_supported()`` and can return one of ``bf16``), where ``value`` is that call, or a
        parameter the function defaults with it (``precision = precision or pick(...)``, litgpt's
        ``get_default_supported_precision``)."""
        candidates = [value]
        if isinstance(value, cst.Name):
            for assign in assignments(self.enclosing_body(at), value.value):
                default = assign.value
                if isinstance(default, cst.BooleanOperation) and m.matches(
                    default, m.BooleanOperation(left=m.Name(value.value), operator=m.Or())
                ):
                    default = default.right
                candidates.append(default)
        for candidate in candidates:
            if not isinstance(candidate, cst.Call):
                continue
            found = self.repository_function(candidate.func)
            if found is not None and _picks_bf16(found[0], bf16):
                return candidate
        return None

    def _plan_deepspeed(self, found: FrameworkCall) -> None:
        call = found.call
        message = 'deepspeed.initialize(...): the config\'s "bf16": {"enabled": true} where the GPU has it'
        setting = found.setting
        if setting is None:
            self.refused(
                call, message, f"the DeepSpeed config comes from the command line (`{code_of(call)}`)"
            )
            return
        values = outcomes(setting.value, self._scopes(call))
        configs = [dict_items(v) for v in values or []]
        if values is None or not values:
            self.refused(call, message, f"the config `{code_of(setting.value)}` is not written in this file")
            return
        if all(isinstance(literal_value(v), str) for v in values):
            for value in values:
                self._judge_json(call, message, cast(str, literal_value(value)))  # all strings: checked above
            return
        if any(items is None for items in configs):
            self.refused(
                call,
                message,
                f"the config `{code_of(setting.value)}` (line {self.line(setting)}) is not a dict literal here",
            )
            return
        readable = cast(list[dict[str, cst.BaseExpression]], configs)  # none is None: checked above
        for value, items in zip(values, readable, strict=True):
            section = {name: dict_items(items[name]) for name in ("bf16", "fp16") if name in items}
            enabled = {
                name: literal_value(part["enabled"]) if part and "enabled" in part else ...
                for name, part in section.items()
            }
            if enabled.get("bf16") is True:
                self.already(value, 'DeepSpeed bf16 (`"bf16": {"enabled": True}`)')
            elif enabled.get("fp16") is True:
                self.refused(value, message, f"the config enables fp16 at line {self.line(items['fp16'])}")
            elif section:
                self.refused(
                    value, message, f"the config sets precision at line {self.line(value)}: decide there"
                )
            else:
                self.replacements[value] = _with_bf16_section
                self.runtime_imports.add((PRECISION_RUNTIME, CHECK))
                self.changed(value, message)

    def _judge_json(self, call: cst.Call, message: str, path: str) -> None:
        """A DeepSpeed config given as a JSON file of the repository."""
        found = json_config(self.repo, self.path, path)
        if found is None:
            self.refused(call, message, f"the config file `{path}` is not in the repository")
            return
        where, config = found
        if (config.get("bf16") or {}).get("enabled") is True:
            self.sites.append(
                Site(where, 1, self.optimization.id, "DeepSpeed bf16 in its config", False, already=True)
            )
        elif (config.get("fp16") or {}).get("enabled") is True:
            self.refused(call, message, f"{where} enables fp16: moving it to bf16 is a separate change")
        else:
            self.refused(
                call,
                message,
                f"{where} is JSON, which cannot ask whether the GPU has bf16: add the section "
                "where every GPU that runs it does",
            )
