"""The setting a :class:`~optimizations.edits.config_switch.SettingSwitch` turns on, its subclasses' hooks, and
where argument parsers (``HfArgumentParser``, ``TrlParser``) and recipe YAMLs set it: the dataclass field
defaults a parser fills from flags, the launch flag or ``--config`` recipe a shell script passes
(:mod:`optimizations.edits.recipe_switch`), and the YAML mappings holding the setting."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import libcst as cst

from optimizations.edits.codemod import Identified, OptimizationCodemod
from optimizations.edits.recipe_switch import RecipeSetting, switch
from optimizations.edits.yaml_text import turn_on
from optimizations.program.config_reads import ConfigCallReads, dataclass_field
from optimizations.program.hf import ARGUMENT_PARSERS, RECIPE_FIELDS
from optimizations.program.recipes import parser_types
from optimizations.program.repository import RepoContext, Site
from optimizations.program.syntax import code_of, qualified_under
from optimizations.program.trl_scope import CallSite
from optimizations.program.yaml_settings import settings


class ParserSettingSwitch(ConfigCallReads, OptimizationCodemod):
    """The setting a :class:`SettingSwitch` turns on, and where argument parsers and recipe YAMLs set it: a
    dataclass an argument parser fills from flags gets its field default turned on, a launch of the parser's
    script gets its flag or recipe switched (:mod:`optimizations.edits.recipe_switch`), and YAML mappings that
    set the setting off are switched on (:meth:`_turn_on_yaml`)."""

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

    def _decide_parser(self, site: CallSite) -> None:
        """An argument parser filling one of ``configs`` (or a dataclass with the setting) from flags."""
        parser = code_of(site.call.func)
        parses_config = None
        for element in parser_types(site.call, self.nodes(cst.Assign)):
            cls = self.scope.classes.get(element.value) if isinstance(element, cst.Name) else None
            bases = [b.value for b in cls.bases] if cls is not None else []
            if any(qualified_under(self.names(e), ("trl",), self.configs) for e in (element, *bases)):
                parses_config = code_of(element)
            field = (
                dataclass_field(cls, self.setting) if cls is not None and self._is_dataclass(cls) else None
            )
            if cls is not None and field is not None and field.value is True and cls not in self.class_edits:
                self.already(
                    field.statement,
                    f"{cls.name.value}.{self.setting} defaults to True (parsed by `{parser}`)",
                )
                continue
            if cls is None or field is None or cls in self.class_edits:
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
                f"no recipe YAML in the repository sets {self.setting} for the parser at line "
                f"{self.line(site.call)}: pass `{self.flag_hint}` where the run is launched, or set "
                f"`{self.setting}: true` in the recipe it reads"
            )
        self.refused(site.call, message, reason)
