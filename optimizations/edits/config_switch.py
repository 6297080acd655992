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

from typing import cast

import libcst as cst
from libcst.helpers import parse_template_expression, parse_template_statement

from optimizations.edits.expressions import add_keywords, expr, replace_keyword
from optimizations.edits.parser_switch import ParserSettingSwitch
from optimizations.edits.settings_placement import SettingsPlacement
from optimizations.program.config_reads import ConfigReads, dataclass_field, default_read
from optimizations.program.config_use import not_a_run_config
from optimizations.program.hf import ARGUMENT_PARSERS
from optimizations.program.recipes import parsed_flag_off
from optimizations.program.repository import Site
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.program.trl_scope import CallSite, TrainingScope


def _caveat(blocked: str | None) -> str:
    """What to mind before turning a setting on, said after where it is turned on."""
    return "" if blocked is None else f"; before turning it on: {blocked}"


def _turned_on(node: cst.BaseExpression | None) -> cst.BaseExpression:
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


class SettingSwitch(SettingsPlacement, ParserSettingSwitch):
    """Turns ``setting`` on in calls to ``configs`` (TRL classes) and where the repository defines its default.

    With ``default_as_found``, a call that reads its settings from a config object or from its function's
    parameters gets the setting read from there with the default the file has (off), and only recipe YAMLs that
    the call reads and that set it off are switched on: a setting that changes what training does (packing) stays
    the repository's choice, and the site says which key turns it on."""

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
                f" (config-driven: on where a caller passes {cast(cst.FunctionDef, site.function).name.value}"
                f"({self.setting}=True))"
            )
            self.already(call, self._described_as_given(call, note))
            return
        if current is ...:
            self._decide_expression(site, cast(cst.Arg, given).value)
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
        value: cst.BaseExpression = expr("True")
        how, yaml_sites = "", list[Site]()
        if reads is not None:
            value, how, yaml_sites = self._config_driven(reads, site, blocked)
        elif parameters:
            function = cast(cst.FunctionDef, site.function)  # the call takes its settings from its parameters
            name = function.name.value
            self.add_parameter(function, self.setting, "bool", "False")
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
        field = dataclass_field(cls, name)
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
        default = default_read(value, self.setting)
        cls = self._dataclass_of(value.value, site.function) if isinstance(value, cst.Attribute) else None
        field = (
            dataclass_field(cls, self.setting)
            if cls is not None and isinstance(value, cst.Attribute) and value.attr.value == self.setting
            else None
        )
        if default is not None and default[1] is True:
            self.already(call, self._described_as_given(call, " (on by default)"))
            return
        if cls is not None and field is not None and field.value is True:
            self.already(
                call, self._described_as_given(call, f" ({cls.name.value}.{self.setting} defaults to True)")
            )
            return
        message = self._describe(callee, code_of(value), [])
        if self.default_as_found and default is not None:
            self._keep_default(site, message, companions)
            return
        if (
            self.default_as_found
            and cls is not None
            and field is not None
            and not self._parsed_from_flags(cls)
        ):
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
            assert cls is not None  # a dataclass field's default, False: refused above otherwise
            self.class_edits[cls] = "on"
            note = f" ({cls.name.value}.{self.setting} now defaults to True)"
        self.call_edits[call] = (None, companions)
        self.changed(call, self._describe(callee, code_of(value) + note, companions))
        reads = self._config_reads(call)
        if default is not None and reads is not None:
            self.sites.extend(self._turn_on_yaml(lambda siblings: reads.keys <= siblings.keys())[0])

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
