"""Which trainer receives a ``TrainingArguments``-family config, what model it trains, and where names are bound.

A transform that adds a run-time check to a config call (``use_liger_kernel=liger_kernel_usable(model)``,
an attention picker in ``model_init_kwargs``) needs the model the config will train, evaluated where the
config is built. These queries follow the module's scopes and bindings (:mod:`optimizations.program.names`):
the config's binding to the trainer call that
takes it as ``args``, the trainer's ``model`` argument, and that model's own bindings (where it is assigned,
whether it is reassigned before the trainer sees it, whether a PEFT adapter wraps it, followed through the
repository's functions by :mod:`optimizations.program.values`). Codemods that use them
list :data:`LINK_METADATA` among their metadata dependencies.

What only exists once a trainer is built is reached through the trainer instead
(:class:`~optimizations.edits.trainer_follow_up.TrainerFollowUp`).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import ParentNodeProvider

from optimizations.program.hf import PEFT_WRAPPERS, TRAINER_ARGS_POSITION, trainer_class
from optimizations.program.names import BUILTINS, scoped_names
from optimizations.program.queries import FileQuery
from optimizations.program.syntax import assigned_target, code_of, keyword, qualified_under
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
    """Scope queries over one module, asked of the file being transformed (a codemod, say)."""

    def __init__(self, codemod: FileQuery, module: cst.Module):
        self.codemod = codemod
        self.values = ProgramValues(codemod)
        self.names = scoped_names(codemod.parsed)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The node that holds ``node`` in the module being transformed."""
        return self.codemod.parsed.parents().get(node)

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
            if not isinstance(arg, cst.Arg):
                continue
            trainer = self.parent(arg)
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
        holder = self.parent(value)
        line = self.parent(holder) if holder is not None else None
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
