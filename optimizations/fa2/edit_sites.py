"""The pre-pass of ``fa2``: the module's trainer links and names in use, and the ``model_init_kwargs`` dicts of
TRL configs (given to the config call or assigned to a parsed one); and how a message names a site."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

import libcst as cst

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.program.hf import is_training_config
from optimizations.program.repository import RepoContext
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.program.trainer_calls import LINK_METADATA, TrainerLinks
from optimizations.registry import Optimization


def init_kwargs_site(config: cst.Call | cst.Attribute) -> str:
    """How a message names where model_init_kwargs is set: ``SFTConfig(model_init_kwargs=...)`` or
    ``training_args.model_init_kwargs = ...``."""
    if isinstance(config, cst.Attribute):
        return f"{code_of(config)} = ..."
    return f"{code_of(config.func)}(model_init_kwargs=...)"


def site_message(callee: str, fallback: str | None) -> str:
    """The message of a site at ``callee``: attention picked at run time, else ``fallback``."""
    otherwise = {None: "", "None": ", else transformers' default"}.get(fallback, f", else {fallback}")
    picked = "FlashAttention 4/3/2, FlexAttention or SDPA where it runs"
    return f"{callee}: attn_implementation picked at run time ({picked}{otherwise})"


def _is_dict(
    node: cst.BaseExpression, names: Callable[[cst.CSTNode], set[str]]
) -> TypeGuard[cst.Dict | cst.Call]:
    """A dict display, or a call of the builtin ``dict`` with keywords."""
    return isinstance(node, cst.Dict) or (
        isinstance(node, cst.Call)
        and "builtins.dict" in names(node.func)
        and all(a.keyword for a in node.args)
    )


class AttentionSites(OptimizationCodemod):
    """The module's trainer links and names in use, and the ``model_init_kwargs`` dict of each config (refused
    where it is not visible)."""

    METADATA_DEPENDENCIES = OptimizationCodemod.METADATA_DEPENDENCIES + LINK_METADATA
    links: TrainerLinks  # the module's, set on entering it (visit_Module)

    def __init__(self, context, optimization: Optimization, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.edited = False
        self.used_names: set[str] = set()
        # model_init_kwargs dict node -> its config: the config call, or the `config.model_init_kwargs` target
        self.init_kwargs: dict[cst.Dict | cst.Call, cst.Call | cst.Attribute] = {}

    def visit_Module(self, node: cst.Module) -> None:
        self.links = TrainerLinks(self, node)
        self.used_names = {name.value for name in self.nodes(cst.Name)}
        for call in self.nodes(cst.Call):
            if not is_training_config(self.names(call.func)):
                continue
            argument = keyword(call, "model_init_kwargs")
            if argument is None or literal_value(argument.value) is None:
                continue
            self._note_init_kwargs(argument.value, call)
        for assign in self.nodes(cst.Assign):
            target = assign.targets[0].target
            if (
                len(assign.targets) == 1
                and isinstance(target, cst.Attribute)
                and target.attr.value == "model_init_kwargs"
                and isinstance(target.value, cst.Name)
                and literal_value(assign.value) is not None
            ):
                self._note_init_kwargs(assign.value, target)

    def _note_init_kwargs(self, value: cst.BaseExpression, config: cst.Call | cst.Attribute) -> None:
        """Remember the dict a config's ``model_init_kwargs`` is set to, or refuse one that is not visible."""
        target = self._dict_behind(value, config)
        if target is not None:
            self.init_kwargs[target] = config
        else:
            self.refused(
                config,
                site_message(init_kwargs_site(config), None),
                f"model_init_kwargs comes from `{code_of(value)}`; set attn_implementation where "
                "that dict is built",
            )

    def _dict_behind(self, value: cst.BaseExpression, site: cst.CSTNode) -> cst.Dict | cst.Call | None:
        """The dict literal (or ``dict(...)`` call) that ``model_init_kwargs`` is set to, if it is visible."""
        if _is_dict(value, self.names):
            return value
        scope = self.links.scope(site)
        if not isinstance(value, cst.Name) or scope is None:
            return None
        local, _ = self.links.bindings(value.value, scope)
        if len(local) == 1 and local[0].value is not None and _is_dict(local[0].value, self.names):
            return local[0].value
        return None
