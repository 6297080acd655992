"""Turning one boolean setting of a TRL config call on, in the repository's own config style.

``SFTConfig(packing=False)`` could simply become ``packing=True``; but when the call reads its other settings
from a config object, the setting becomes a read of that object with a default that turns it on, so the
repository keeps one place to change it:

- a mapping (``cfg["lr"]``, ``cfg.get("lr")``): ``cfg.get("<setting>", True)``, and a ``<setting>: false`` in a
  YAML file holding every key the call reads is switched to ``true`` (comments kept);
- a dataclass of the module (``config.lr``, ``config: RunConfig``): a ``<setting>: bool = True`` field, or its
  ``False`` default turned to ``True``;
- any other object (an argparse namespace, an OmegaConf node): ``getattr(args, "<setting>", True)``.

When the repository already controls the setting (``<setting>=<expression>``), the default is turned on where
the repository defines it (``.get("<setting>", False)``, ``getattr(…, False)``, a dataclass field default) or the
site is refused for a human. Argument parsers (``HfArgumentParser``, ``TrlParser``) that fill the config from
flags get their dataclass field defaults and their recipe YAMLs (mappings with two or more TrainingArguments
keys) switched on, or are reported as needing a human; where a shell script launches the parser's script, the
launch flag or the ``--config`` recipe it passes is switched instead (:mod:`optimizations.program.recipes`). Settings
hidden behind ``**kwargs`` are refused.

Subclasses name the setting and the config classes, the keywords that go with it, and their refusals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import libcst as cst
import libcst.matchers as m
from libcst.helpers import parse_template_expression, parse_template_statement
from libcst.metadata import QualifiedNameSource

from optimizations.program.codemod import (
    Identified,
    OptimizationCodemod,
    add_keywords,
    code_of,
    expr,
    keyword,
    literal_value,
    qualified_under,
    replace_keyword,
)
from optimizations.program.config_use import not_a_run_config
from optimizations.program.hf import ARGUMENT_PARSERS, RECIPE_FIELDS
from optimizations.program.recipes import RecipeSetting, parsed_flag_off, parser_types, switch
from optimizations.program.repository import RepoContext, Site
from optimizations.program.trl_scope import CallSite, TrainingScope
from optimizations.program.values import SettingsPlacement
from optimizations.program.yaml_settings import settings, turn_on


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


def _default_read(value: cst.BaseExpression, name: str) -> tuple[cst.BaseExpression, object] | None:
    """``(node holding the default, its value)`` for ``x.get("<name>", D)`` and ``getattr(x, "<name>", D)``."""
    if not isinstance(value, cst.Call):
        return None
    args = [a for a in value.args if a.keyword is None]
    is_get = isinstance(value.func, cst.Attribute) and value.func.attr.value == "get" and len(args) == 2
    is_getattr = isinstance(value.func, cst.Name) and value.func.value == "getattr" and len(args) == 3
    if (is_get or is_getattr) and literal_value(args[-2].value) == name:
        return args[-1].value, literal_value(args[-1].value)
    return None


def _field(cls: cst.ClassDef, name: str) -> DataclassField | None:
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
                if isinstance(default, cst.Call) and keyword(default, "default") is not None:
                    default = keyword(default, "default").value
                return DataclassField(statement, default, ... if default is None else literal_value(default))
    return None


def _caveat(blocked: str | None) -> str:
    """What to mind before turning a setting on, said after where it is turned on."""
    return "" if blocked is None else f"; before turning it on: {blocked}"


def _turned_on(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(value="True") if isinstance(node, cst.Name) else expr("True")


def _with_field(cls: cst.ClassDef, name: str, comment: str, value: bool) -> cst.ClassDef:
    """``cls`` with ``<name>: bool = <value>`` after its last annotated field."""
    body = list(cls.body.body)
    last_field = max(
        (
            i
            for i, s in enumerate(body)
            if isinstance(s, cst.SimpleStatementLine) and any(isinstance(x, cst.AnnAssign) for x in s.body)
        ),
        default=len(body) - 1,
    )
    field = parse_template_statement(f"{{name}}: bool = {value}", name=cst.Name(name)).with_changes(
        leading_lines=[cst.EmptyLine(comment=cst.Comment(comment))]
    )
    body.insert(last_field + 1, field)
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _with_default_on(cls: cst.ClassDef, name: str) -> cst.ClassDef:
    """``cls`` with the default of its field ``name`` set to True."""
    body = []
    for statement in cls.body.body:
        if isinstance(statement, cst.SimpleStatementLine):
            small = []
            for item in statement.body:
                if (
                    isinstance(item, cst.AnnAssign)
                    and isinstance(item.target, cst.Name)
                    and item.target.value == name
                ):
                    if isinstance(item.value, cst.Call):
                        item = item.with_changes(value=replace_keyword(item.value, "default", expr("True")))
                    else:
                        item = item.with_changes(value=_turned_on(item.value))
                small.append(item)
            statement = statement.with_changes(body=small)
        body.append(statement)
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _assigned_class(function: cst.FunctionDef, name: str) -> str | None:
    """The class ``name`` is built from in ``function`` (``name = Class(...)``), if it is."""
    built = m.Assign(
        targets=[m.ZeroOrMore(), m.AssignTarget(target=m.Name(name)), m.ZeroOrMore()],
        value=m.Call(func=m.SaveMatchedNode(m.Name(), "cls")),
    )
    found = m.extractall(function, built)
    return found[0]["cls"].value if found else None


class SettingSwitch(SettingsPlacement, OptimizationCodemod):
    """Turns ``setting`` on in calls to ``configs`` (TRL classes) and where the repository defines its default.

    With ``default_as_found``, a call that reads its settings from a config object or from its function's
    parameters gets the setting read from there with the default the file has (off), and only recipe YAMLs that
    the call reads and that set it off are switched on: a setting that changes what training does (packing) stays
    the repository's choice, and the site says which key turns it on."""

    default_as_found: ClassVar[bool] = False
    setting: ClassVar[str]
    configs: ClassVar[tuple[str, ...]]
    field_comment: ClassVar[str]  # the comment above a dataclass field this codemod adds
    flag_hint: ClassVar[str]  # the command-line flags a human adds when nothing in the repository sets it
    recipe_companions: ClassVar[dict[str, str]] = {}  # flags and recipe keys set together with the setting

    @classmethod
    def needs(cls) -> tuple[str, ...]:
        """Names a file must mention for this codemod to find a site: its config classes, the argument parsers."""
        return (*cls.configs, *(parser for _, parser in ARGUMENT_PARSERS))

    def __init__(self, context, optimization: Identified, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.scope: TrainingScope | None = None
        # call -> (new value of the setting, None to keep it; keywords added with it)
        self.call_edits: dict[
            cst.Call, tuple[cst.BaseExpression | None, list[tuple[str, cst.BaseExpression]]]
        ] = {}
        self.class_edits: dict[cst.ClassDef, str] = {}  # "add" the field, or turn its default "on"
        self.default_edits: set[cst.BaseExpression] = set()  # `.get("<setting>", False)` defaults to turn on

    # -- what subclasses decide ----------------------------------------------------------------------------
    def companions(self, call: cst.Call) -> list[tuple[str, cst.BaseExpression]]:
        """Keywords added to the call together with the setting (only those it does not set)."""
        return []

    def blocked(self, call: cst.Call | None, function: cst.FunctionDef | None) -> str | None:
        """Why the setting must stay off for this call (``None``: a config an argument parser builds)."""
        return None

    def yaml_blocked(self, siblings: dict[str, object]) -> str | None:
        """Why the setting must stay off in a YAML mapping with these keys and values."""
        return None

    def recipe_setting(self) -> RecipeSetting:
        """The setting as launch flags and recipe YAMLs spell it."""
        return RecipeSetting(
            self.setting,
            "true",
            lambda value: value is True,
            self.recipe_companions,
            self.field_comment,
            self.yaml_blocked,
        )

    # -- facts -----------------------------------------------------------------------------------------------
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
            given += [(literal_value(e.key), e.value) for e in literal.literal.elements]
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
        with_field = [c for c in dataclasses.values() if _field(c, self.setting) is not None]
        return with_field[0] if len(with_field) == 1 else None

    def _refusal(self, call: cst.Call, function: cst.FunctionDef | None) -> str | None:
        return self._hidden(call) or self.blocked(call, function)

    def _hidden(self, call: cst.Call) -> str | None:
        """Why a ``**splat`` of the call may already hold the setting or its companions."""
        hidden = self.values.hidden(call, [self.setting, *(k for k, _ in self.companions(call))])
        if hidden is None:
            return None
        wanted = ", ".join(
            f"{k}={code_of(v)}" for k, v in [(self.setting, expr("True")), *self.companions(call)]
        )
        return f"{hidden} (wanted: {wanted})"

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

    # -- YAML configs ----------------------------------------------------------------------------------------
    def _turn_on_yaml(self, belongs: Callable[[dict[str, object]], bool]) -> tuple[list[Site], int]:
        """Switch ``<setting>: false`` to true in the YAML mappings whose keys ``belongs`` accepts.

        Returns the sites (switched, refused, or already on) and how many of those mappings have it on already.
        """
        sites: list[Site] = []
        already = 0
        for path in self.repo.files("*.yaml", "*.yml"):
            try:
                text = original = self.repo.read(path)
            except (OSError, UnicodeDecodeError):
                continue
            for setting in reversed(settings(path, text, self.setting)):
                if not belongs(setting.siblings):
                    continue
                if setting.value is True:
                    already += 1
                    message = f"{setting.key}: {setting.text}"
                    sites.append(Site(path, setting.line, self.optimization.id, message, False, already=True))
                    continue
                message = f"{setting.key}: {setting.text} -> true"
                reason = self.yaml_blocked(setting.siblings)
                edited = turn_on(text, setting) if reason is None else None
                if reason is not None:
                    sites.append(Site(path, setting.line, self.optimization.id, message, False, reason))
                elif edited is not None:
                    text = edited
                    sites.append(Site(path, setting.line, self.optimization.id, message))
            if text != original:
                self.repo.edit(path, text)
        return sites, already

    # -- decisions, all made before anything is edited -----------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        self.start_placement()
        self.scope = TrainingScope(self.parsed, self.names, lambda value: parsed_flag_off(self, value))
        for site in self.scope.calls_to(self.configs):
            self._decide_config(site)
        for package, parser in ARGUMENT_PARSERS:
            for site in self.scope.calls_to((parser,), (package,)):
                self._decide_parser(site)

    def _described_as_given(self, call: cst.Call, note: str) -> str:
        """``callee(...): <setting>=<as written>`` with the companions the call already sets, and ``note``."""
        settings = dict(self._settings(call))
        given = [(k, settings[k]) for k in (self.setting, *self.recipe_companions) if k in settings]
        return self._describe(code_of(call.func), code_of(given[0][1]), given[1:]) + note

    def _describe(self, callee: str, value: str, companions: list[tuple[str, cst.BaseExpression]]) -> str:
        return f"{callee}(...): {self.setting}={value}" + "".join(
            f", {k}={code_of(v)}" for k, v in companions
        )

    def _decide_config(self, site: CallSite) -> None:
        call = site.call
        if not_a_run_config(self, call):
            return
        callee = code_of(call.func)
        given = keyword(call, self.setting)
        current = False if given is None else literal_value(given.value)
        if current is True:
            self.already(call, self._described_as_given(call, ""))
            return
        if (
            given is None
            and literal_value(dict(self._settings(call)).get(self.setting, cst.Name("None"))) is True
        ):
            self.already(call, self._described_as_given(call, ""))
            return
        if given is None and self._parameter_in_dict(call, site.function):
            note = (
                f" (config-driven: on where a caller passes {site.function.name.value}({self.setting}=True))"
            )
            self.already(call, self._described_as_given(call, note))
            return
        if current is ...:
            self._decide_expression(site, given.value)
            return
        companions = self.companions(call)
        reads = self._config_reads(call)
        parameters = reads is None and self.default_as_found and self._parameter_driven(call, site.function)
        # Read from the repository's config with the default off, the setting changes nothing until someone
        # turns it on: a reason to keep it off is said there instead of refusing the read.
        blocked = self.blocked(call, site.function)
        reason = self._hidden(call)
        if reason is None and not (self.default_as_found and (reads is not None or parameters)):
            reason = blocked
        if reason is not None:
            self.refused(call, self._describe(callee, "True", companions), reason)
            return
        value, how, yaml_sites = expr("True"), "", []
        if reads is not None:
            value, how, yaml_sites = self._config_driven(reads, site, blocked)
        elif parameters:
            name = site.function.name.value
            self.add_parameter(site.function, self.setting, "bool", "False")
            value = cst.Name(self.setting)
            how = (
                f" (new parameter {name}({self.setting}: bool = False); it stays off until a caller passes "
                f"{self.setting}=True{_caveat(blocked)})"
            )
        self.call_edits[call] = (value, companions)
        self.changed(call, self._describe(callee, code_of(value) + how, companions))
        self.sites.extend(yaml_sites)

    def _config_driven(
        self, reads: ConfigReads, site: CallSite, blocked: str | None = None
    ) -> tuple[cst.BaseExpression, str, list[Site]]:
        """The setting read from the call's config object, a note on what else changes, and the YAML sites.

        ``blocked``: why the setting should stay off (``default_as_found`` only): no YAML is switched on then."""
        name = self.setting
        default = "False" if self.default_as_found else "True"
        cls = None if reads.mapping else self._dataclass_of(reads.base, site.function)
        if cls is None:
            yaml_sites, already = (
                ([], 0) if blocked else self._turn_on_yaml(lambda siblings: reads.keys <= siblings.keys())
            )
            template = (
                "{base}.get({key}, {default})" if reads.mapping else "getattr({base}, {key}, {default})"
            )
            read = parse_template_expression(
                template, base=reads.base, key=cst.SimpleString(f'"{name}"'), default=cst.Name(default)
            )
            how = ""
            if self.default_as_found and not already and not any(s.applicable for s in yaml_sites):
                unset = "" if blocked else f"; no recipe YAML with the keys this call reads sets {name}"
                how = (
                    f" (default off as the file has it{unset}: it stays off until `{name}: true` is set in the "
                    f"config `{code_of(reads.base)}` reads{_caveat(blocked)})"
                )
            return read, how, yaml_sites
        attribute = parse_template_expression("{base}.{name}", base=reads.base, name=cst.Name(name))
        field = _field(cls, name)
        if self.default_as_found:
            if field is None:
                self.class_edits[cls] = "add"
            how = (
                f" (it stays off until {cls.name.value}.{name} is set to True{_caveat(blocked)})"
                if field is None or field.value is not True
                else ""
            )
            return (
                attribute,
                (f" (new field {cls.name.value}.{name} = False)" if field is None else "") + how,
                [],
            )
        if field is None:
            self.class_edits[cls] = "add"
            return attribute, f" (new field {cls.name.value}.{name} = True)", []
        if field.value is False:
            self.class_edits[cls] = "on"
            return attribute, f" ({cls.name.value}.{name} now defaults to True)", []
        return attribute, "", []

    def _decide_expression(self, site: CallSite, value: cst.BaseExpression) -> None:
        """``<setting>=<expression>``: the repository controls it; turn on the default it defines."""
        call = site.call
        callee = code_of(call.func)
        companions = self.companions(call)
        default = _default_read(value, self.setting)
        cls = self._dataclass_of(value.value, site.function) if isinstance(value, cst.Attribute) else None
        field = _field(cls, self.setting) if cls is not None and value.attr.value == self.setting else None
        if default is not None and default[1] is True:
            self.already(call, self._described_as_given(call, " (on by default)"))
            return
        if field is not None and field.value is True:
            self.already(
                call, self._described_as_given(call, f" ({cls.name.value}.{self.setting} defaults to True)")
            )
            return
        message = self._describe(callee, code_of(value), [])
        if self.default_as_found and default is not None:
            self._keep_default(site, message, companions)
            return
        if self.default_as_found and field is not None and not self._parsed_from_flags(cls):
            # A dataclass default the file has: the repository turns it on where it sets the field.
            note = f" (config-driven: on where {cls.name.value}.{self.setting} is set to True)"
            self.already(call, self._described_as_given(call, note))
            return
        if default is None and (field is None or field.value is not False):
            self.refused(
                call,
                message,
                f"{self.setting} comes from `{code_of(value)}`, which the repository already controls: turn it on "
                "where that value is defined",
            )
            return
        reason = self._refusal(call, site.function)
        if reason is not None:
            self.refused(call, message, reason)
            return
        if default is not None:
            self.default_edits.add(default[0])
            note = " (its default turned to True)"
        else:
            self.class_edits[cls] = "on"
            note = f" ({cls.name.value}.{self.setting} now defaults to True)"
        self.call_edits[call] = (None, companions)
        self.changed(call, self._describe(callee, code_of(value) + note, companions))
        reads = self._config_reads(call)
        if default is not None and reads is not None:
            self.sites.extend(self._turn_on_yaml(lambda siblings: reads.keys <= siblings.keys())[0])

    def _parsed_from_flags(self, cls: cst.ClassDef) -> bool:
        """An argument parser of this module fills the dataclass ``cls`` from flags (its default is a flag's)."""
        return any(
            isinstance(element, cst.Name) and element.value == cls.name.value
            for package, parser in ARGUMENT_PARSERS
            for site in self.scope.calls_to((parser,), (package,))
            for element in parser_types(site.call, self.nodes(cst.Assign))
        )

    def _keep_default(
        self, site: CallSite, message: str, companions: list[tuple[str, cst.BaseExpression]]
    ) -> None:
        """``default_as_found``: a read with the default off (``.get("<setting>", False)``) keeps it; the recipe
        YAMLs the call reads that set it off are switched on, with the companions beside the read."""
        reads = self._config_reads(site.call)
        if reads is None or self._refusal(site.call, site.function) is not None:
            return
        yaml_sites, already = self._turn_on_yaml(lambda siblings: reads.keys <= siblings.keys())
        self.sites.extend(yaml_sites)
        if any(s.applicable for s in yaml_sites):
            self.call_edits[site.call] = (None, companions)
            self.changed(site.call, message + " (its default kept; on where its config sets it)")
        elif not any(s.refused for s in yaml_sites):
            where = "on in its config" if already else f"off until its config sets `{self.setting}: true`"
            self.already(site.call, self._described_as_given(site.call, f" (config-driven: {where})"))

    def _decide_parser(self, site: CallSite) -> None:
        """An argument parser filling one of ``configs`` (or a dataclass with the setting) from flags."""
        parser = code_of(site.call.func)
        parses_config = None
        for element in parser_types(site.call, self.nodes(cst.Assign)):
            cls = self.scope.classes.get(element.value) if isinstance(element, cst.Name) else None
            bases = [b.value for b in cls.bases] if cls is not None else []
            if any(qualified_under(self.names(e), ("trl",), self.configs) for e in (element, *bases)):
                parses_config = code_of(element)
            field = _field(cls, self.setting) if cls is not None and self._is_dataclass(cls) else None
            if field is not None and field.value is True and cls not in self.class_edits:
                self.already(
                    field.statement,
                    f"{cls.name.value}.{self.setting} defaults to True (parsed by `{parser}`)",
                )
                continue
            if field is None or cls in self.class_edits:
                continue
            message = f"{cls.name.value}.{self.setting} defaults to True (parsed by `{parser}`)"
            reason = self.blocked(None, site.function)
            if field.value is not False:
                reason = (
                    f"the default of {cls.name.value}.{self.setting} is not False or True; set it by hand"
                )
            if reason is not None:
                self.refused(field.statement, message, reason)
                continue
            self.class_edits[cls] = "on"
            self.changed(field.statement, message)
        if parses_config is None:
            return
        message = f"`{parser}` fills {parses_config} from flags: {self.setting} in its recipe YAMLs"
        reason = self.blocked(None, site.function)
        launched = (
            None if reason else switch(self.repo, self.path, self.recipe_setting(), self.optimization.id)
        )
        if launched is not None:
            self.sites.extend(launched)
            return
        if reason is None:
            yaml_sites, already = self._turn_on_yaml(
                lambda siblings: len(RECIPE_FIELDS & siblings.keys()) >= 2
            )
            self.sites.extend(yaml_sites)
            if already or any(s.applicable for s in yaml_sites):
                return
            reason = (
                f"no recipe YAML in the repository sets {self.setting}: pass `{self.flag_hint}` where the run is "
                f"launched, or set `{self.setting}: true` in the recipe it reads"
            )
        self.refused(site.call, message, reason)

    # -- edits -----------------------------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if original_node not in self.call_edits:
            return updated_node
        value, companions = self.call_edits[original_node]
        call = updated_node
        missing = list(companions)
        if value is not None:
            if keyword(call, self.setting) is not None:
                call = replace_keyword(call, self.setting, value)
            else:
                missing.insert(0, (self.setting, value))
        return self.placed(original_node, updated_node, add_keywords(call, missing))

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if original_node.value in self.default_edits:
            return updated_node.with_changes(value=_turned_on(updated_node.value))
        return updated_node

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        edit = self.class_edits.get(original_node)
        if edit == "add":
            return _with_field(updated_node, self.setting, self.field_comment, not self.default_as_found)
        if edit == "on":
            return _with_default_on(updated_node, self.setting)
        return updated_node
