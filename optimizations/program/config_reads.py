"""What a config call reads its settings from: a config object (``cfg["lr"]``, ``cfg.get("lr")``,
``config.lr``), a dataclass of the module and its fields' defaults, the dict literal it takes them all from, its
function's parameters, or an argument parser that fills the dataclass from flags. :class:`ConfigCallReads` asks
these questions for one setting of the file a codemod transforms
(:class:`~optimizations.edits.config_switch.SettingSwitch`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, cast

import libcst as cst
import libcst.matchers as m
from libcst.metadata import QualifiedNameSource

from optimizations.program.hf import ARGUMENT_PARSERS
from optimizations.program.queries import FileQueries
from optimizations.program.recipes import parser_types
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under
from optimizations.program.trl_scope import TrainingScope
from optimizations.program.values import ProgramValues


@dataclass(frozen=True)
class ConfigReads:
    """The config object a call reads most of its settings from, how it reads it, and the keys it reads."""

    base: cst.BaseExpression
    mapping: bool  # cfg["key"] / cfg.get("key") rather than cfg.key
    keys: frozenset[str]


@dataclass(frozen=True)
class DataclassField:
    """A dataclass field: its statement, the node holding its default (``None``: no default), the value."""

    statement: cst.SimpleStatementLine
    default: cst.BaseExpression | None
    value: object


def _read_of(value: cst.BaseExpression) -> tuple[cst.BaseExpression, bool, str] | None:
    """``(config, is_mapping, key)`` for ``config["key"]``, ``config.get("key", …)`` and ``config.key``."""
    if (
        isinstance(value, cst.Subscript)
        and len(value.slice) == 1
        and isinstance(value.slice[0].slice, cst.Index)
    ):
        key = literal_value(value.slice[0].slice.value)
        return (value.value, True, key) if isinstance(key, str) else None
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value == "get"
        and value.args
        and value.args[0].keyword is None
    ):
        key = literal_value(value.args[0].value)
        return (value.func.value, True, key) if isinstance(key, str) else None
    if isinstance(value, cst.Attribute):
        return value.value, False, value.attr.value
    return None


def default_read(value: cst.BaseExpression, name: str) -> tuple[cst.BaseExpression, object] | None:
    """``(node holding the default, its value)`` for ``x.get("<name>", D)`` and ``getattr(x, "<name>", D)``."""
    if not isinstance(value, cst.Call):
        return None
    args = [a for a in value.args if a.keyword is None]
    is_get = isinstance(value.func, cst.Attribute) and value.func.attr.value == "get" and len(args) == 2
    is_getattr = isinstance(value.func, cst.Name) and value.func.value == "getattr" and len(args) == 3
    if (is_get or is_getattr) and literal_value(args[-2].value) == name:
        return args[-1].value, literal_value(args[-1].value)
    return None


def dataclass_field(cls: cst.ClassDef, name: str) -> DataclassField | None:
    """The annotated class attribute ``name`` (``name: T = default`` or ``= field(default=…)``), if any."""
    for statement in cls.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if (
                isinstance(small, cst.AnnAssign)
                and isinstance(small.target, cst.Name)
                and small.target.value == name
            ):
                default = small.value
                given = keyword(default, "default") if isinstance(default, cst.Call) else None
                if given is not None:
                    default = given.value
                return DataclassField(statement, default, ... if default is None else literal_value(default))
    return None


def _assigned_class(function: cst.FunctionDef, name: str) -> str | None:
    """The class ``name`` is built from in ``function`` (``name = Class(...)``), if it is."""
    built = m.Assign(
        targets=[m.ZeroOrMore(), m.AssignTarget(target=m.Name(name)), m.ZeroOrMore()],
        value=m.Call(func=m.SaveMatchedNode(m.Name(), "cls")),
    )
    found = m.extractall(function, built)
    return cast(cst.Name, found[0]["cls"]).value if found else None


class ConfigCallReads(FileQueries):
    """The config calls of a file, as one setting (``setting``) sees them: what each reads its other settings
    from, through ``values`` (the file's :class:`~optimizations.program.values.ProgramValues`) and ``scope`` (its
    :class:`~optimizations.program.trl_scope.TrainingScope`)."""

    setting: ClassVar[str]
    values: ProgramValues
    scope: TrainingScope  # set as the module is visited

    # -- a call's settings -----------------------------------------------------------------------------------------------
    def _imported(self, node: cst.CSTNode) -> bool:
        return any(
            q.source in (QualifiedNameSource.IMPORT, QualifiedNameSource.BUILTIN)
            for q in self.qualified(node)
        )

    def _settings(self, call: cst.Call) -> list[tuple[str, cst.BaseExpression]]:
        """The call's keyword settings, with those of the dict literal it takes them all from."""
        given = [(a.keyword.value, a.value) for a in call.args if a.keyword is not None]
        literal = self.values.settings_dict(call)
        if literal is not None:
            # the literal's keys are strings (``settings_dict``)
            given += [
                (cast(str, literal_value(cast(cst.DictElement, e).key)), e.value)
                for e in literal.literal.elements
            ]
        return given

    def _config_reads(self, call: cst.Call) -> ConfigReads | None:
        """The config object the call reads two or more of its settings from (the one it reads most)."""
        groups: dict[str, tuple[cst.BaseExpression, bool, set[str]]] = {}
        for name, value in self._settings(call):
            if name == self.setting:
                continue
            read = _read_of(value)
            if read is None or self._imported(read[0]):
                continue
            base, mapping, key = read
            _, seen_mapping, keys = groups.get(code_of(base), (base, False, set()))
            groups[code_of(base)] = (base, seen_mapping or mapping, keys | {key})
        if not groups:
            return None
        base, mapping, keys = max(groups.values(), key=lambda g: len(g[2]))
        return ConfigReads(base, mapping, frozenset(keys)) if len(keys) >= 2 else None

    def _is_dataclass(self, cls: cst.ClassDef) -> bool:
        for decorator in cls.decorators:
            target = decorator.decorator
            target = target.func if isinstance(target, cst.Call) else target
            if qualified_under(self.names(target), ("dataclasses",), ("dataclass",)):
                return True
        return False

    def _dataclass_of(
        self, base: cst.BaseExpression, function: cst.FunctionDef | None
    ) -> cst.ClassDef | None:
        """The module's dataclass ``base`` (a name) is an instance of: by annotation or assignment in the
        function, else the only dataclass of the module that has the setting as a field."""
        if not isinstance(base, cst.Name):
            return None
        named = None
        if function is not None:
            params = function.params
            for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                if param.name.value == base.value and param.annotation is not None:
                    annotation = param.annotation.annotation
                    if isinstance(annotation, cst.Name):
                        named = annotation.value
                    elif isinstance(annotation, cst.SimpleString):
                        named = str(annotation.evaluated_value)
            named = named or _assigned_class(function, base.value)
        dataclasses = {n: c for n, c in self.scope.classes.items() if self._is_dataclass(c)}
        if named is not None:
            return dataclasses.get(named)
        with_field = [c for c in dataclasses.values() if dataclass_field(c, self.setting) is not None]
        return with_field[0] if len(with_field) == 1 else None

    def _parameter_in_dict(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """The dict literal the call takes its settings from sets the setting from the function's parameter."""
        value = dict(self._settings(call)).get(self.setting)
        return (
            function is not None
            and isinstance(value, cst.Name)
            and value.value
            in {p.name.value for p in (*function.params.params, *function.params.kwonly_params)}
        )

    def _parameter_driven(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """The call takes two or more of its settings straight from its function's parameters."""
        if function is None:
            return False
        params = {p.name.value for p in (*function.params.params, *function.params.kwonly_params)}
        return (
            sum(isinstance(v, cst.Name) and v.value in params for _, v in self._settings(call)) >= 2
            and self.setting not in params
        )

    def _parsed_from_flags(self, cls: cst.ClassDef) -> bool:
        """An argument parser of this module fills the dataclass ``cls`` from flags (its default is a flag's)."""
        return any(
            isinstance(element, cst.Name) and element.value == cls.name.value
            for package, parser in ARGUMENT_PARSERS
            for site in self.scope.calls_to((parser,), (package,))
            for element in parser_types(site.call, self.nodes(cst.Assign))
        )
