"""Which trainer receives a ``TrainingArguments``-family config, what model it trains, and where names are bound.

A transform that adds a run-time check to a config call (``use_liger_kernel=liger_kernel_usable(model)``,
an attention picker in ``model_init_kwargs``) needs the model the config will train, evaluated where the
config is built. These queries follow the module's scopes and bindings (:mod:`optimizations.program.names`):
the config's binding to the trainer call that
takes it as ``args``, the trainer's ``model`` argument, and that model's own bindings (where it is assigned,
whether it is reassigned before the trainer sees it, whether a PEFT adapter wraps it, followed through the
repository's functions by :mod:`optimizations.program.values`). Codemods that use them
list :data:`LINK_METADATA` among their metadata dependencies.

What only exists once a trainer is built (the model a TRL trainer loads from a checkpoint name, the adapters it
makes from ``peft_config``) is reached through the trainer instead: :class:`TrainerFollowUp` codemods add
``helper(trainer.model)`` on the line after ``trainer = SFTTrainer(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import ParentNodeProvider

from optimizations.program.codemod import (
    OptimizationCodemod,
    add_keywords,
    assigned_target,
    call_expr,
    code_of,
    expr,
    keyword,
    qualified_under,
)
from optimizations.program.hf import PEFT_WRAPPERS, TRAINER_ARGS_POSITION, trainer_class
from optimizations.program.names import BUILTINS, scoped_names
from optimizations.program.repository import RuntimeHelper
from optimizations.program.values import ProgramValues

LINK_METADATA = (ParentNodeProvider,)


@dataclass(frozen=True)
class Binding:
    """Where a name is bound: the line, and the assigned value (``None`` for a parameter, import, loop target)."""

    line: int
    value: cst.BaseExpression | None


def root_name(node: cst.BaseExpression) -> cst.Name | None:
    """The name an attribute/subscript chain starts from (``cfg`` in ``cfg.model["path"]``)."""
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return node if isinstance(node, cst.Name) else None


def is_plain_reference(node: cst.BaseExpression) -> bool:
    """A string, a name, or attributes/literal subscripts of one: safe to evaluate a second time."""
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    if isinstance(node, cst.Subscript):
        return is_plain_reference(node.value) and all(
            isinstance(element.slice, cst.Index)
            and isinstance(element.slice.value, (cst.SimpleString, cst.Integer, cst.Name))
            for element in node.slice
        )
    if isinstance(node, cst.Attribute):
        return is_plain_reference(node.value)
    return isinstance(node, cst.Name)


class TrainerLinks:
    """Scope queries over one module, through the metadata of the codemod that is transforming it."""

    def __init__(self, codemod: OptimizationCodemod, module: cst.Module):
        self.codemod = codemod
        self.values = ProgramValues(codemod)
        self.names = scoped_names(codemod.parsed)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The node that holds ``node`` in the module being transformed."""
        return self.codemod.get_metadata(ParentNodeProvider, node, None)

    def scope(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The scope (module, function, class, lambda, comprehension) ``node`` is evaluated in; ``None`` for a
        node of another tree."""
        return self.names.scope_of(node) if node in self.codemod.parsed.parents() else None

    # -- config -> trainer ------------------------------------------------------------------------------
    def trainers_receiving(self, config: cst.Call | cst.Name) -> list[cst.Call]:
        """The trainer calls that take a config as ``args``: ``config`` is the config call (passed inline, or
        through the variable it is assigned to), or a name read where the config is used
        (``training_args`` in ``training_args.model_init_kwargs = ...``, a TrlParser script's config)."""
        if isinstance(config, cst.Name):
            scope = self.scope(config)
            if scope is None:
                return []
            binder = scope if self.names.bound_in(config.value, scope) else None
            binder = binder or self.names.enclosing_binder(config.value, scope)
            return self._trainers_reading(config.value, binder) if binder is not None else []
        parent = self.parent(config)
        if isinstance(parent, cst.Arg):
            trainer = self.parent(parent)
            return [trainer] if isinstance(trainer, cst.Call) and self._takes_as_args(trainer, parent) else []
        target = self.assigned_name(config)
        scope = self.scope(config)
        if target is None or scope is None:
            return []
        return self._trainers_reading(target.value, self.names.scope_of(target))

    def _trainers_reading(self, name: str, scope: cst.CSTNode) -> list[cst.Call]:
        """The trainer calls that take a read of ``name``, as bound in ``scope``, as ``args``."""
        trainers = []
        for read in self.names.reads(name, scope):
            arg = self.parent(read)
            trainer = self.parent(arg) if isinstance(arg, cst.Arg) else None
            if isinstance(trainer, cst.Call) and self._takes_as_args(trainer, arg):
                trainers.append(trainer)
        return trainers

    def assigned_name(self, value: cst.BaseExpression) -> cst.Name | None:
        """``name`` when ``value`` is the whole right-hand side of ``name = value`` (or ``name: T = value``)."""
        target = assigned_target(self.parent, value)
        return target if isinstance(target, cst.Name) else None

    def assigned_line(
        self, value: cst.BaseExpression
    ) -> tuple[cst.Name | cst.Attribute, cst.SimpleStatementLine] | None:
        """The name or attribute (``trainer``, ``self.trainer``) that ``value`` is the whole right-hand side of,
        with the line, when that assignment is the only statement on it."""
        target = assigned_target(self.parent, value)
        line = self.parent(self.parent(value))
        if isinstance(target, cst.Name | cst.Attribute) and isinstance(line, cst.SimpleStatementLine):
            return (target, line) if len(line.body) == 1 else None
        return None

    def _takes_as_args(self, call: cst.Call, arg: cst.Arg) -> bool:
        trainer = trainer_class(self.codemod.names(call.func))
        if trainer is None or arg.star:
            return False
        if arg.keyword is not None:
            return arg.keyword.value == "args"
        positional = [a for a in call.args if a.keyword is None and not a.star]
        return TRAINER_ARGS_POSITION.get(trainer) == positional.index(arg)

    @staticmethod
    def model_argument(trainer: cst.Call) -> cst.BaseExpression | None:
        """The trainer's ``model`` argument (keyword or first positional)."""
        model = keyword(trainer, "model")
        if model is not None:
            return model.value
        first = trainer.args[0] if trainer.args else None
        return first.value if first is not None and first.keyword is None and not first.star else None

    def args_argument(self, trainer: cst.Call) -> cst.BaseExpression | None:
        """The trainer's ``args`` argument (keyword, or positional where its class takes it)."""
        given = keyword(trainer, "args")
        if given is not None:
            return given.value
        positional = [a for a in trainer.args if a.keyword is None and not a.star]
        at = TRAINER_ARGS_POSITION.get(trainer_class(self.codemod.names(trainer.func)) or "")
        return positional[at].value if at is not None and len(positional) > at else None

    # -- bindings ---------------------------------------------------------------------------------------
    def bindings(self, name: str, scope: cst.CSTNode) -> tuple[list[Binding], bool]:
        """The bindings of ``name`` in ``scope`` itself, and whether an enclosing scope (or the builtins) binds
        it instead."""
        local = self._bound_in(name, scope)
        enclosing = self.names.enclosing_binder(name, scope) is not None or name in BUILTINS
        return local, not local and enclosing

    def visible_bindings(self, name: str, scope: cst.CSTNode) -> list[Binding]:
        """The bindings a read of ``name`` in ``scope`` sees: ``scope``'s own, else those of the nearest enclosing
        scope that binds it (none for a builtin or a name this module never binds, a star import's, say)."""
        local = self._bound_in(name, scope)
        binder = None if local else self.names.enclosing_binder(name, scope)
        return local if binder is None else self._bound_in(name, binder)

    def bound_values(self, node: cst.BaseExpression) -> list[cst.BaseExpression | None]:
        """The values every binding of ``node`` that a read here sees was assigned (None for a binding that is
        no assignment: a parameter, an import, a loop target); ``[]`` when ``node`` is not a name or has none."""
        scope = self.scope(node)
        if not isinstance(node, cst.Name) or scope is None:
            return []
        return [binding.value for binding in self.visible_bindings(node.value, scope)]

    def _bound_in(self, name: str, scope: cst.CSTNode) -> list[Binding]:
        return [
            Binding(self.codemod.line(node), self._assigned_value(node))
            for node in self.names.bound_in(name, scope)
        ]

    def _assigned_value(self, node: cst.CSTNode) -> cst.BaseExpression | None:
        """The right-hand side that binds ``node`` (a target name), through tuple unpacking."""
        current = self.parent(node)
        while isinstance(current, (cst.Element, cst.Tuple, cst.List, cst.AssignTarget, cst.StarredElement)):
            current = self.parent(current)
        if isinstance(current, (cst.Assign, cst.AnnAssign)):
            return current.value
        return None

    def unbound_at(
        self, expression: cst.BaseExpression, line: int, until: int, scope: cst.CSTNode
    ) -> str | None:
        """Why ``expression`` cannot be evaluated at ``line`` to the value it has at ``until``; ``None`` if it can.

        It can when it is a string, or its root name is bound in an enclosing scope, or bound in ``scope``
        before ``line`` and not rebound from ``line`` to ``until``.
        """
        if isinstance(expression, (cst.SimpleString, cst.ConcatenatedString)):
            return None
        name = root_name(expression)
        if name is None or not is_plain_reference(expression):
            return f"`{code_of(expression)}` is built inside the trainer call"
        local, enclosing = self.bindings(name.value, scope)
        if not local:
            return None if enclosing else f"`{name.value}` is not bound in this module"
        if not any(b.line < line for b in local):
            return f"`{name.value}` is assigned after this line (line {min(b.line for b in local)})"
        rebound = [b.line for b in local if line <= b.line <= until]
        if rebound:
            return f"`{name.value}` is reassigned at line {rebound[0]}, after this line"
        return None

    # -- PEFT ---------------------------------------------------------------------------------------------
    def peft_wrap(self, model: cst.BaseExpression) -> str | None:
        """How the model ``model`` names comes from a PEFT adapter wrapper, followed through assignments and the
        returns of the repository's functions (``_init_phase(...)`` returns ``apply_lora(...)``, which returns
        ``get_peft_model(...)``); ``None`` when no origin is one."""
        for origin in self.values.origins(model, model):
            if qualified_under(origin.names, ("peft",), PEFT_WRAPPERS):
                wrapper = f"`{code_of(origin.call.func)}(...)` ({origin.where})"
                return ", which returns ".join((*origin.through, wrapper))
        return None


class TrainerFollowUp(OptimizationCodemod):
    """A codemod that also acts on built trainers: ``helper(trainer.model)`` on the line after
    ``trainer = SFTTrainer(...)``, for what only exists once the trainer has loaded (and PEFT-wrapped) its model.

    Subclasses that define ``visit_Module`` call this one's first; ``links`` holds the module's
    :class:`TrainerLinks`.
    """

    METADATA_DEPENDENCIES = OptimizationCodemod.METADATA_DEPENDENCIES + LINK_METADATA

    def visit_Module(self, node: cst.Module) -> None:
        self.links = TrainerLinks(self, node)
        self.follow_ups: dict[cst.SimpleStatementLine, list[cst.SimpleStatementLine]] = {}
        self.helper_keywords: dict[cst.Call, list[tuple[str, cst.BaseExpression]]] = {}

    def follow_trainer(
        self, trainer: cst.Call, runtime: RuntimeHelper, helper: str, message: str, why: str
    ) -> None:
        """Plan ``helper(<target>.model)`` (vendored from ``runtime``) after the line that assigns
        ``trainer`` to ``<target>``, unless the file calls it so already (then that call is reported as already done); refuse the site, saying ``why`` the
        model is only there once the trainer is built, when the trainer is not assigned on a line of its own."""
        assigned = self.links.assigned_line(trainer)
        if assigned is None:
            self.refused(
                trainer,
                message,
                f"{why}, and the trainer is not assigned on a line of its own: assign it (`trainer = ...`) so "
                "its model can be reached",
            )
            return
        target, line = assigned
        model = f"{code_of(target)}.model"
        done = self.follow_up_call(trainer, helper)
        if done is not None:
            self.already(done, f"`{helper}({model})` once the trainer is built")
            return
        self.import_runtime(runtime, helper)
        self.changed(trainer, f"{message}: `{helper}({model})` once the trainer is built ({why})")
        statement = cst.SimpleStatementLine([cst.Expr(call_expr(helper, expr(model)))])
        self.follow_ups.setdefault(line, []).append(statement)

    def follow_up_call(self, trainer: cst.Call, helper: str) -> cst.Call | None:
        """The ``helper(<target>.model, ...)`` call for ``trainer``, assigned to ``<target>``: in its scope, after
        it."""
        assigned = self.links.assigned_line(trainer)
        if assigned is None:
            return None
        model, scope, line = f"{code_of(assigned[0])}.model", self.links.scope(trainer), self.line(trainer)
        return next(
            (
                c
                for c in self.nodes(cst.Call)
                if self.calls(c, helper)
                and c.args
                and code_of(c.args[0].value) == model
                and self.links.scope(c) is scope
                and self.line(c) > line
            ),
            None,
        )

    def helper_call(self, trainer: cst.Call, helper: str) -> cst.Call | None:
        """The ``helper`` call that has ``trainer``'s model: the model argument it wraps, or the line after a
        trainer that loads its checkpoint itself (:meth:`follow_up_call`)."""
        model = self.links.model_argument(trainer)
        if model is None:
            return None
        return model if self.calls(model, helper) else self.follow_up_call(trainer, helper)

    def add_helper_keywords(
        self,
        original: cst.Call,
        updated: cst.Call,
        helper_call: cst.Call,
        keywords: list[tuple[str, cst.BaseExpression]],
    ) -> cst.Call:
        """``updated`` (the trainer call) with ``keywords`` added to its :meth:`helper_call`: in place where the
        helper wraps the model argument, else on the follow-up line when the walk reaches it
        (:meth:`pending_keywords`)."""
        if helper_call is not self.links.model_argument(original):
            self.helper_keywords[helper_call] = keywords
            return updated
        wrapped = self.links.model_argument(updated)
        return updated.deep_replace(wrapped, add_keywords(wrapped, keywords))

    def pending_keywords(self, original: cst.Call, updated: cst.Call) -> cst.Call | None:
        """``updated`` with the keywords :meth:`add_helper_keywords` left for this follow-up call, if any.
        Subclasses' ``leave_Call`` returns it first."""
        keywords = self.helper_keywords.pop(original, None)
        return None if keywords is None else add_keywords(updated, keywords)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.BaseStatement]:
        follow_ups = self.follow_ups.pop(original_node, [])
        return cst.FlattenSentinel([updated_node, *follow_ups]) if follow_ups else updated_node
