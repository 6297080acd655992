"""The qualified names of a module's expressions, as libcst's ``QualifiedNameProvider`` gives them, from the
module's bindings alone.

libcst's provider first runs its full scope analysis (every access of every name, with positions), which costs
about five parses of the file; a transform only asks what a few callees and classes are. :class:`ScopedNames`
collects each scope's bindings (imports, definitions, assignment and loop targets, parameters, ``global`` and
``nonlocal`` declarations) in one pass over the file's shared node list and answers the same question:

- ``from trl import SFTConfig as C``: ``C(...)`` is ``trl.SFTConfig`` (source ``IMPORT``);
- ``import torch.nn as nn``: ``nn.functional.relu`` is ``torch.nn.functional.relu``;
- a relative import keeps its dots (``from .pkg import x``: ``.pkg.x``);
- a name the module binds is ``LOCAL``, under the scopes around it (``train.<locals>.model.step``,
  ``Model.forward.<locals>.self.proj``; a class body's names are ``Model.attr``, unseen from its methods);
- a builtin is ``builtins.<name>`` (``BUILTIN``), and its attributes are named too (``builtins.dict.fromkeys``,
  where libcst stops at ``builtins.dict``); a name bound nowhere (a star import's) has none.

A name bound more than once in a scope has each binding's name, as libcst gives them. Only chains that start
at a name (through subscripts: ``rows[0].append`` is ``rows.append``) are resolved; ``f().x`` and
``"".join`` have none.
"""

from __future__ import annotations

import builtins
from collections import defaultdict
from collections.abc import Mapping
from typing import cast

import libcst as cst
from libcst.metadata import QualifiedName, QualifiedNameSource

from optimizations.program.repository import ParsedFile
from optimizations.program.tree import CODE_TYPES

COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
SCOPES = (cst.Module, cst.FunctionDef, cst.ClassDef, cst.Lambda, *COMPREHENSIONS)
BUILTINS = frozenset(dir(builtins))
STATEMENTS = frozenset(
    t for t in CODE_TYPES if issubclass(t, (cst.BaseSmallStatement, cst.BaseCompoundStatement))
)

Names = frozenset[QualifiedName]


class ScopedNames:
    """The bindings of every scope of one parsed module, and the qualified names they give its expressions."""

    def __init__(self, parsed: ParsedFile):
        self.parsed = parsed
        self._parents = parsed.parents()
        self._prefixes: dict[cst.CSTNode, str] = {parsed.module: ""}
        self._bindings: dict[cst.CSTNode, dict[str, set[QualifiedName]]] = defaultdict(
            lambda: defaultdict(set)
        )
        self._declared: dict[cst.CSTNode, dict[str, cst.CSTNode]] = defaultdict(dict)
        # The node that makes each binding (a target name, a parameter's name, an import, a def), and the
        # names that are targets rather than reads.
        self._binders: dict[cst.CSTNode, dict[str, list[cst.CSTNode]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self._targets: set[cst.CSTNode] = set()
        self._reads: dict[tuple[cst.CSTNode, str], list[cst.Name]] | None = None
        self._cache: dict[cst.CSTNode, Names] = {}
        self._statement_scopes: dict[cst.CSTNode, cst.CSTNode] = {}
        nodes = parsed.nodes(
            cst.Global,
            cst.Nonlocal,
            cst.Import,
            cst.ImportFrom,
            cst.FunctionDef,
            cst.ClassDef,
            cst.Param,
            cst.Assign,
            cst.AnnAssign,
            cst.AugAssign,
            cst.For,
            cst.CompFor,
            cst.WithItem,
            cst.ExceptHandler,
            cst.NamedExpr,
        )
        for node in nodes:
            if isinstance(node, (cst.Global, cst.Nonlocal)):
                self._declare(node)
        for node in nodes:
            self._bind_statement(node)

    # -- queries ---------------------------------------------------------------------------------------------
    def of(self, node: cst.CSTNode) -> Names:
        """The qualified names ``node`` may refer to: a name, an attribute chain on a name, or a call of one.
        No names for a node of another tree (a transformer's ``updated_node``): libcst has no metadata for it."""
        if node not in self._parents:
            return frozenset()
        if node not in self._cache:
            self._cache[node] = self._resolve(node)
        return self._cache[node]

    def _resolve(self, node: cst.CSTNode) -> Names:
        if isinstance(node, cst.Call):
            return self.of(_unsubscripted(node.func))
        if isinstance(node, cst.Attribute):
            return frozenset(
                QualifiedName(f"{q.name}.{node.attr.value}", q.source)
                for q in self.of(_unsubscripted(node.value))
            )
        if not isinstance(node, cst.Name) or not self._is_reference(node):
            return frozenset()
        scope = self.scope_of(node)
        while True:
            bound = self._bindings.get(scope, {}).get(node.value)
            if bound:
                return frozenset(bound)
            if isinstance(scope, cst.Module):
                break
            scope = self._visible_outer(scope)
        if node.value in BUILTINS:
            return frozenset({QualifiedName(f"builtins.{node.value}", QualifiedNameSource.BUILTIN)})
        return frozenset()

    # -- bindings and reads, for following a value -------------------------------------------------------
    def bound_in(self, name: str, scope: cst.CSTNode) -> list[cst.CSTNode]:
        """The nodes that bind ``name`` in ``scope`` itself, in source order: a target name (``x`` of ``x =
        ...``, of ``for x in``, of ``with ... as x``), a parameter's name, an import statement, a def."""
        return list(self._binders.get(scope, {}).get(name, ()))

    def enclosing_binder(self, name: str, scope: cst.CSTNode) -> cst.CSTNode | None:
        """The nearest scope around ``scope`` (class bodies skipped) that binds ``name``; ``None`` when none does
        (a builtin, a star import's name)."""
        while not isinstance(scope, cst.Module):
            scope = self._visible_outer(scope)
            if self._binders.get(scope, {}).get(name):
                return scope
        return None

    def reads(self, name: str, scope: cst.CSTNode) -> list[cst.Name]:
        """The reads of ``name`` that resolve to its bindings in ``scope``, in source order."""
        if self._reads is None:
            self._reads = defaultdict(list)
            for node in self.parsed.nodes(cst.Name):
                if node not in self._targets and self._is_reference(node):
                    here = self.scope_of(node)
                    binder = (
                        here
                        if self._binders.get(here, {}).get(node.value)
                        else self.enclosing_binder(node.value, here)
                    )
                    if binder is not None:
                        self._reads[(binder, node.value)].append(node)
        return list(self._reads.get((scope, name), ()))

    def _is_reference(self, name: cst.Name) -> bool:
        return is_reference(name, self._parents)

    # -- scopes ----------------------------------------------------------------------------------------------
    def scope_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The scope ``node`` is evaluated in: the module, a function, class, lambda or comprehension.

        A function's or class's name, decorators, annotations, bases and parameter defaults are evaluated in the
        scope around it, its parameters and body in its own; a comprehension's first iterable around it too."""
        child, parent = node, self._parents.get(node)
        outside = False  # under a parameter's default or annotation, or a comprehension's first iterable
        while parent is not None:
            if isinstance(parent, cst.Param) and child is not parent.name:
                outside = True
            elif isinstance(parent, cst.CompFor) and child is parent.iter:
                outside = isinstance(self._parents.get(parent), COMPREHENSIONS)
            elif isinstance(parent, (cst.FunctionDef, cst.Lambda)) and (
                child is parent.body or child is parent.params
            ):
                if not outside:
                    return parent
                outside = False
            elif isinstance(parent, cst.ClassDef) and child is parent.body:
                return parent
            elif isinstance(parent, COMPREHENSIONS):
                if not outside:
                    return parent
                outside = False
            elif not outside and type(parent) in STATEMENTS:
                return self._statement_scope(parent)  # every node of a statement's own code shares its scope
            child, parent = parent, self._parents.get(parent)
        return self.parsed.module

    def _statement_scope(self, statement: cst.CSTNode) -> cst.CSTNode:
        if statement not in self._statement_scopes:
            self._statement_scopes[statement] = self.scope_of(statement)
        return self._statement_scopes[statement]

    def _visible_outer(self, scope: cst.CSTNode) -> cst.CSTNode:
        """The next scope whose names ``scope`` sees: class bodies are skipped from inside their methods."""
        outer = self.scope_of(scope)
        while isinstance(outer, cst.ClassDef):
            outer = self.scope_of(outer)
        return outer

    def _prefix(self, scope: cst.CSTNode) -> str:
        """How libcst names the bindings of ``scope``: ``f.<locals>.``, ``Model.``, ``<comprehension>.``."""
        if scope not in self._prefixes:
            outer = self._prefix(self.scope_of(scope))
            if isinstance(scope, cst.FunctionDef):
                own = f"{scope.name.value}.<locals>."
            elif isinstance(scope, cst.ClassDef):
                own = f"{scope.name.value}."
            elif isinstance(scope, cst.Lambda):
                own = "<locals>."
            else:
                own = "<comprehension>."
            self._prefixes[scope] = outer + own
        return self._prefixes[scope]

    # -- bindings ----------------------------------------------------------------------------------------------
    def _declare(self, statement: cst.Global | cst.Nonlocal) -> None:
        """``global x`` binds ``x`` in the module; ``nonlocal x`` in the nearest function around that binds it."""
        scope = self.scope_of(statement)
        for item in statement.names:
            target: cst.CSTNode
            if isinstance(statement, cst.Global):
                target = self.parsed.module
            else:
                target = self._visible_outer(scope)
            self._declared[scope][item.name.value] = target

    def _bind(
        self, name: str, scope: cst.CSTNode, binder: cst.CSTNode, qualified: QualifiedName | None = None
    ) -> None:
        scope = self._declared.get(scope, {}).get(name, scope)
        if qualified is None:
            qualified = QualifiedName(self._prefix(scope) + name, QualifiedNameSource.LOCAL)
        self._bindings[scope][name].add(qualified)
        self._binders[scope][name].append(binder)

    def _bind_target(self, target: cst.CSTNode, scope: cst.CSTNode) -> None:
        """The names an assignment target binds: a name, or the names in a tuple/list/starred of targets."""
        if isinstance(target, cst.Name):
            self._targets.add(target)
            self._bind(target.value, scope, target)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind_target(element.value, scope)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value, scope)

    def _bind_statement(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Import):
            scope = self.scope_of(node)
            for alias in node.names:
                full = _dotted(alias.name)
                if alias.asname is not None:
                    self._bind(_as_name(alias), scope, node, QualifiedName(full, QualifiedNameSource.IMPORT))
                else:
                    head = full.split(".")[0]
                    self._bind(head, scope, node, QualifiedName(head, QualifiedNameSource.IMPORT))
        elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            scope = self.scope_of(node)
            base = "." * len(node.relative) + (_dotted(node.module) if node.module is not None else "")
            for alias in node.names:
                name = _dotted(alias.name)
                full = f"{base}.{name}" if base and not base.endswith(".") else f"{base}{name}"
                bound = _as_name(alias) if alias.asname is not None else name
                self._bind(bound, scope, node, QualifiedName(full, QualifiedNameSource.IMPORT))
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self._targets.add(node.name)
            self._bind(node.name.value, self.scope_of(node), node)
        elif isinstance(node, cst.Param):
            self._targets.add(node.name)
            self._bind(node.name.value, self.scope_of(node.name), node.name)
        elif isinstance(node, cst.Assign):
            for target in node.targets:
                self._bind_target(target.target, self.scope_of(node))
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor)):
            self._bind_target(node.target, self.scope_of(node.target))
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            self._bind_target(node.asname.name, self.scope_of(node))
        elif isinstance(node, cst.ExceptHandler) and node.name is not None:
            self._bind_target(node.name.name, self.scope_of(node))
        elif isinstance(node, cst.NamedExpr):
            scope = self.scope_of(node)
            while isinstance(scope, COMPREHENSIONS):
                scope = self.scope_of(scope)
            self._bind_target(node.target, scope)


def _unsubscripted(node: cst.BaseExpression) -> cst.BaseExpression:
    """``rows["a"]`` is read as ``rows``: a subscript's qualified names are its container's."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return node


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return node.value if isinstance(node, cst.Name) else ""


def _as_name(alias: cst.ImportAlias) -> str:
    """The name ``import x as <name>`` binds (``alias`` has an ``as``)."""
    asname = cast(cst.AsName, alias.asname)
    return asname.name.value if isinstance(asname.name, cst.Name) else ""


def is_reference(name: cst.Name, parents: Mapping[cst.CSTNode, cst.CSTNode]) -> bool:
    """Whether ``name`` refers to a variable: not the attribute part of ``x.name``, a keyword's label, nor a
    name inside an import statement."""
    parent = parents.get(name)
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is name:
        return False
    while isinstance(parent, (cst.Attribute, cst.AsName)):
        parent = parents.get(parent)
    return not isinstance(parent, (cst.ImportAlias, cst.ImportFrom))


def scoped_names(parsed: ParsedFile) -> ScopedNames:
    """The names of ``parsed``, built once per parse and shared by every codemod that reads it."""
    return parsed.derived(ScopedNames)
