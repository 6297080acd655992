"""Values through the program: the keys a ``**splat`` can hold, and the calls a value comes from.

A call that takes ``**kwargs`` hides settings only when nothing says which keys that dict holds. Here the dict
is followed to where it is built: a dict literal or ``dict(...)`` in the same function, with the
``name["key"] = value`` subscript assignments, ``name.update(...)`` and ``name |= {...}`` that add to it, or the
return value of a function of this module (or of a module of the repository it imports, relative or absolute,
``src/`` layouts included) whose every ``return`` is such a dict. When every key is known the dict provably
holds no other: a keyword the keys exclude can go beside the splat. Anything else that could add a key (the
dict passed to another function, aliased, rebound in a loop, a computed subscript key) leaves the keys unknown,
and the refusal names the line.

The same walk follows a model to the calls it may come from (:meth:`ProgramValues.origins`): through local
assignments, tuple unpacking and the returns of the repository's own functions, so a model that
``get_peft_model`` wraps two helpers down is known to be a PEFT model where the trainer gets it.

:func:`outcomes` says what an expression may evaluate to: names followed to their assignments in the same
function (then the module), both arms of ``a if test else b``, and ``{...}[key]`` looked up in the dict literal,
as nanoGPT-style code picks its autocast dtype and optimizer options::

    dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    extra_args = dict(fused=True) if use_fused else dict()
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import cast

import libcst as cst

from optimizations.program.names import scoped_names
from optimizations.program.positions import start_line
from optimizations.program.queries import FileQuery
from optimizations.program.repository import TransformError, import_roots, module_paths
from optimizations.program.syntax import NESTED_SCOPES, code_of, literal_value, walk
from optimizations.program.tree import children

MAX_DEPTH = 4  # helper calls followed into helpers, at most
# How many names deep an expression is followed to its outcomes (guards against cycles such as `x = x + 1`).
OUTCOME_DEPTH = 8
# Calls that read a dict they are given and never add to it.
READING_CALLS = frozenset({"len", "print", "repr", "str", "sorted", "list", "dict", "set", "tuple", "bool"})
READING_METHODS = frozenset({"get", "keys", "items", "values", "copy", "pop", "__contains__"})
LOGGING_METHODS = frozenset({"debug", "info", "warning", "error", "exception", "log", "critical"})


@dataclass(frozen=True)
class Keys:
    """The keys a dict value may hold (``names``; ``None``: unknown), where it is built (``path:line``), and
    why the keys are unknown when they are."""

    names: frozenset[str] | None
    where: str
    why: str = ""


@dataclass(frozen=True)
class SettingsDict:
    """The dict literal a call takes all its settings from (``Config(**kwargs)``): the name, its literal."""

    name: str
    literal: cst.Dict
    function: cst.FunctionDef


@dataclass(frozen=True)
class Origin:
    """A call a value may come from: the call, its callee's qualified names, where it is."""

    call: cst.Call
    names: frozenset[str]
    where: str
    through: tuple[str, ...] = ()  # the helper calls it was returned through, outermost first


class Source:
    """One parsed module: its path, tree, and the line and qualified names of its nodes."""

    def __init__(
        self,
        path: str,
        module: cst.Module,
        line: Callable[[cst.CSTNode], int],
        names: Callable[[cst.CSTNode], set[str]],
    ):
        self.path = path
        self.module = module
        self.line = line
        self.names = names
        self.functions = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}

    def where(self, node: cst.CSTNode) -> str:
        return f"{self.path}:{self.line(node)}"


def _children(node: cst.CSTNode, parent: cst.CSTNode | None) -> Iterator[tuple[cst.CSTNode, cst.CSTNode]]:
    """Every descendant of ``node`` with its parent, in source order."""
    for child in children(node):
        yield child, node
        yield from _children(child, node)


def parameters(function: cst.FunctionDef) -> set[str]:
    """The names a function's parameters bind."""
    params = function.params
    named = (*params.posonly_params, *params.params, *params.kwonly_params)
    stars = [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return {p.name.value for p in (*named, *stars)}


class RepositoryFunctions:
    """The module a codemod transforms and the repository's modules its helper calls lead into, each parsed once:
    the function that holds a node, the repository function a call calls, what a function returns."""

    def __init__(self, codemod: FileQuery):
        self.codemod = codemod
        self.here = Source(codemod.path, codemod.parsed.module, codemod.line, codemod.names)
        self._sources: dict[str, Source | None] = {codemod.path: self.here}

    # -- where a node is -----------------------------------------------------------------------------
    def function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The innermost function of this module that holds ``node``."""
        parents = self.codemod.parsed.parents()
        holder = parents.get(node)
        while holder is not None and not isinstance(holder, cst.FunctionDef):
            holder = parents.get(holder)
        return holder

    # -- functions of the repository --------------------------------------------------------------------
    def callee(self, call: cst.Call, source: Source) -> tuple[cst.FunctionDef, Source] | None:
        """The repository function ``call`` calls by a bare name (defined in ``source``, or imported from a module
        of the repository), or as ``module.function`` of a repository module ``source`` imports."""
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            module = self._module_named(func.value.value, source)
            function = module.functions.get(func.attr.value) if module is not None else None
            return (function, cast(Source, module)) if function is not None else None
        if not isinstance(call.func, cst.Name):
            return None
        name = call.func.value
        if name in source.functions:
            return source.functions[name], source
        for statement in source.module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                    continue
                for alias in small.names:
                    bound = cast(cst.Name, alias.asname.name).value if alias.asname else code_of(alias.name)
                    if bound != name:
                        continue
                    imported = self._module_source(small, source)
                    original = code_of(alias.name)
                    if imported is not None and original in imported.functions:
                        return imported.functions[original], imported
        return None

    def _module_named(self, name: str, source: Source) -> Source | None:
        """The repository module ``source`` binds to ``name`` (``from pkg import mod``, ``import pkg.mod as
        mod``), parsed; ``None`` for anything else."""
        for statement in source.module.body:
            for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
                if not isinstance(small, (cst.Import, cst.ImportFrom)) or isinstance(
                    small.names, cst.ImportStar
                ):
                    continue
                for alias in small.names:
                    bound = cast(cst.Name, alias.asname.name).value if alias.asname else code_of(alias.name)
                    if bound == name and isinstance(small, cst.ImportFrom):
                        return self._module_source(small, source, code_of(alias.name))
                    if bound == name:
                        return self._first_module(code_of(alias.name), import_roots(source.path))
        return None

    def _first_module(self, module: str, roots: Iterable[str]) -> Source | None:
        """The repository module ``module`` (dotted), looked up under ``roots``, parsed."""
        for path in module_paths(module, roots):
            if (self.codemod.repo.root / path).is_file():
                return self._parsed(path)
        return None

    def _module_source(self, statement: cst.ImportFrom, source: Source, submodule: str = "") -> Source | None:
        """The repository module ``from <module> import ...`` reads (or its ``submodule``), parsed; ``None``
        outside the repository."""
        module = code_of(statement.module) if statement.module is not None else ""
        dots = len(statement.relative)
        roots = [posixpath.join(source.path, *[".."] * dots)] if dots else import_roots(source.path)
        return self._first_module(".".join(filter(None, (module, submodule))), roots)

    def _parsed(self, path: str) -> Source | None:
        if path not in self._sources:
            try:
                parsed = self.codemod.repo.sources.parse(path, self.codemod.repo.read(path))
            except (TransformError, OSError, UnicodeDecodeError):
                self._sources[path] = None
                return None
            names = scoped_names(parsed)
            self._sources[path] = Source(
                path,
                parsed.module,
                lambda node: start_line(parsed, node),
                lambda node: {q.name for q in names.of(node)},
            )
        return self._sources[path]

    @staticmethod
    def _returns(function: cst.FunctionDef) -> list[cst.BaseExpression]:
        """What ``function`` returns (an empty list when it yields, or returns nothing)."""
        returned = []
        for node, _ in _children(function.body, None):
            if isinstance(node, (cst.Yield, cst.Await)):
                return []
            if isinstance(node, cst.Return) and node.value is not None:
                returned.append(node.value)
        nested = [
            n for n, _ in _children(function.body, None) if isinstance(n, (cst.FunctionDef, cst.Lambda))
        ]
        return [] if nested else returned


class ProgramValues(RepositoryFunctions):
    """Value queries over the module a codemod transforms, following helpers into the repository's modules."""

    # -- splats ----------------------------------------------------------------------------------------
    def hidden(self, call: cst.Call, wanted: Iterable[str]) -> str | None:
        """Why a ``**splat`` of ``call`` may hold one of the ``wanted`` keywords; ``None`` when none can.

        A keyword the call also passes explicitly cannot be in a splat (Python would raise), so it is no reason.
        """
        wanted = set(wanted) - {a.keyword.value for a in call.args if a.keyword is not None}
        if not wanted:
            return None
        function = self.function_of(call)
        for arg in call.args:
            if arg.star != "**":
                continue
            keys = self.keys(arg.value, function, self.here)
            splat = f"`**{code_of(arg.value)}`"
            if keys.names is None:
                return (
                    f"settings are passed through {splat} ({keys.where}), whose keys are unknown: {keys.why}"
                )
            clash = sorted(wanted & keys.names)
            if clash:
                return f"{splat} ({keys.where}) may set {', '.join(clash)}; set it where that dict is built"
        return None

    def settings_dict(self, call: cst.Call) -> SettingsDict | None:
        """The dict literal ``call`` takes all its settings from: ``Config(**name)`` alone, ``name`` bound once, in
        the same function, to a dict literal with string keys."""
        if len(call.args) != 1 or call.args[0].star != "**" or not isinstance(call.args[0].value, cst.Name):
            return None
        name = call.args[0].value.value
        function = self.function_of(call)
        if function is None or name in parameters(function):
            return None
        bindings, _ = self._uses(name, function.body, self.here)
        if len(bindings) != 1 or not isinstance(bindings[0], cst.Dict) or dict_items(bindings[0]) is None:
            return None
        if self.keys(call.args[0].value, function, self.here).names is None:
            return None
        return SettingsDict(name, bindings[0], function)

    def keys(
        self, value: cst.BaseExpression, function: cst.FunctionDef | None, source: Source, depth: int = 0
    ) -> Keys:
        """The keys the dict ``value`` (evaluated in ``function`` of ``source``) may hold."""
        where = source.where(value)
        if isinstance(value, cst.Dict):
            keys: set[str] = set()
            for element in value.elements:
                if isinstance(element, cst.StarredDictElement):
                    inner = self.keys(element.value, function, source, depth)
                    if inner.names is None:
                        return inner
                    keys |= inner.names
                else:
                    key = cast(cst.DictElement, element).key
                    named = literal_value(key)
                    if not isinstance(named, str):
                        return Keys(None, where, f"the key `{code_of(key)}` is computed")
                    keys.add(named)
            return Keys(frozenset(keys), where)
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.BitOr):
            left = self.keys(value.left, function, source, depth)
            right = self.keys(value.right, function, source, depth)
            if left.names is None or right.names is None:
                return left if left.names is None else right
            return Keys(left.names | right.names, where)
        if isinstance(value, cst.Name):
            return self._name_keys(value.value, function, source, depth)
        if isinstance(value, cst.Call):
            return self._call_keys(value, source, depth)
        return Keys(None, where, f"`{code_of(value)}` is not a dict built here")

    def _name_keys(self, name: str, function: cst.FunctionDef | None, source: Source, depth: int) -> Keys:
        if function is not None and name in parameters(function):
            return Keys(None, source.where(function), f"`{name}` is a parameter of {function.name.value}()")
        scope = function.body if function is not None else source.module
        bindings, additions = self._uses(name, scope, source)
        if not bindings and function is not None:
            return self._name_keys(name, None, source, depth)
        if not bindings:
            return Keys(None, source.path, f"`{name}` is not bound in this module")
        keys: set[str] = set()
        for item in (*bindings, *additions):
            if isinstance(item, str):
                keys.add(item)
                continue
            if isinstance(item, Keys):
                return item
            found = self.keys(item, function, source, depth)
            if found.names is None:
                return found
            keys |= found.names
        return Keys(frozenset(keys), source.where(bindings[0]))

    def _uses(
        self, name: str, scope: cst.CSTNode, source: Source
    ) -> tuple[list[cst.BaseExpression], list[str | cst.BaseExpression | Keys]]:
        """The values ``name`` is bound to in ``scope``, and what its other uses add: keys, dicts merged in, or
        a :class:`Keys` saying why its keys cannot be known."""
        bindings: list[cst.BaseExpression] = []
        additions: list[str | cst.BaseExpression | Keys] = []
        parents: dict[cst.CSTNode, cst.CSTNode] = {}
        for node, parent in _children(scope, None):
            parents[node] = parent
            if not (isinstance(node, cst.Name) and node.value == name):
                continue
            grand = parents.get(parent)

            def unknown(why: str, node: cst.CSTNode = node) -> Keys:
                return Keys(None, source.where(node), why)

            if isinstance(parent, cst.Attribute) and parent.attr is node:
                continue
            if isinstance(parent, cst.Arg) and parent.keyword is node:
                continue
            if isinstance(parent, cst.Param):
                continue  # a nested function's own parameter
            if isinstance(parent, cst.AssignTarget) and parent.target is node:
                bindings.append(cast(cst.Assign, grand).value)
            elif isinstance(parent, cst.AnnAssign) and parent.target is node:
                if parent.value is not None:
                    bindings.append(parent.value)
            elif isinstance(parent, cst.AugAssign) and parent.target is node:
                if isinstance(parent.operator, cst.BitOrAssign):
                    additions.append(parent.value)
                else:
                    additions.append(unknown(f"`{code_of(parent)}` changes it"))
            elif isinstance(parent, cst.Subscript) and parent.value is node:
                stored = isinstance(grand, cst.AssignTarget) or (
                    isinstance(grand, cst.AugAssign) and grand.target is parent
                )
                if stored:
                    key = self._subscript_key(parent)
                    additions.append(
                        key if key is not None else unknown(f"`{code_of(parent)}` sets a computed key")
                    )
            elif isinstance(parent, cst.Attribute) and parent.value is node:
                call = parents.get(parent)
                method = parent.attr.value
                if method in READING_METHODS:
                    continue
                if method in ("update", "setdefault") and isinstance(call, cst.Call):
                    additions.extend(
                        self._method_additions(method, call) or [unknown(f"`{code_of(call)}` adds keys")]
                    )
                else:
                    additions.append(unknown(f"`{code_of(parent)}` may change it"))
            elif isinstance(parent, cst.Arg) and parent.star == "":
                call = parents.get(parent)
                if not (isinstance(call, cst.Call) and self._reads_only(call)):
                    additions.append(
                        unknown(
                            f"it is passed to `{code_of(cast(cst.Call, call).func)}(...)`, which may add keys"
                        )
                    )
            elif isinstance(parent, (cst.AssignTarget, cst.Element, cst.StarredElement)) or (
                isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is node
            ):
                additions.append(unknown("it is aliased or unpacked here"))
            elif isinstance(parent, (cst.AsName, cst.For, cst.CompFor, cst.NamedExpr, cst.ImportAlias)):
                additions.append(unknown("it is rebound here"))
            elif isinstance(parent, (cst.Global, cst.Nonlocal, cst.NameItem)):
                additions.append(unknown("it is declared global or nonlocal here"))
        return bindings, additions

    @staticmethod
    def _subscript_key(subscript: cst.Subscript) -> str | None:
        if len(subscript.slice) == 1 and isinstance(subscript.slice[0].slice, cst.Index):
            key = literal_value(subscript.slice[0].slice.value)
            return key if isinstance(key, str) else None
        return None

    @staticmethod
    def _method_additions(method: str, call: cst.Call) -> list[str | cst.BaseExpression] | None:
        """The keys ``name.update(...)``/``name.setdefault(...)`` may add; ``None`` when they cannot be known."""
        if method == "setdefault":
            key = literal_value(call.args[0].value) if call.args else None
            return [key] if isinstance(key, str) else None
        added: list[str | cst.BaseExpression] = []
        for arg in call.args:
            if arg.keyword is not None:
                added.append(arg.keyword.value)
            elif arg.star == "" and isinstance(arg.value, (cst.Dict, cst.Name, cst.Call)):
                added.append(arg.value)
            else:
                return None
        return added

    def _reads_only(self, call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Name):
            return func.value in READING_CALLS
        return isinstance(func, cst.Attribute) and func.attr.value in LOGGING_METHODS

    def _call_keys(self, call: cst.Call, source: Source, depth: int) -> Keys:
        where = source.where(call)
        if isinstance(call.func, cst.Name) and call.func.value == "dict":
            keys: set[str] = set()
            for arg in call.args:
                if arg.keyword is not None:
                    keys.add(arg.keyword.value)
                    continue
                inner = self.keys(arg.value, None, source, depth) if arg.star != "*" else None
                if inner is None or inner.names is None:
                    return inner or Keys(None, where, f"`{code_of(call)}` unpacks pairs")
                keys |= inner.names
            return Keys(frozenset(keys), where)
        found = self.callee(call, source)
        if found is None or depth >= MAX_DEPTH:
            return Keys(
                None, where, f"`{code_of(call.func)}` is not a function of this repository perfbot can read"
            )
        helper, helper_source = found
        returns = self._returns(helper)
        if not returns:
            return Keys(None, helper_source.where(helper), f"{helper.name.value}() returns no dict")
        keys = set()
        for returned in returns:
            inner = self.keys(returned, helper, helper_source, depth + 1)
            if inner.names is None:
                return inner
            keys |= inner.names
        return Keys(frozenset(keys), helper_source.where(helper))

    # -- where a value comes from --------------------------------------------------------------------
    def origins(self, value: cst.BaseExpression, at: cst.CSTNode) -> list[Origin]:
        """The calls ``value`` (read at ``at`` in this module) may come from, through assignments, tuple
        unpacking and the returns of the repository's functions."""
        return self._origins(value, self.function_of(at), self.here, (), 0)

    def _origins(
        self,
        value: cst.BaseExpression,
        function: cst.FunctionDef | None,
        source: Source,
        index: tuple[int, ...],
        depth: int,
    ) -> list[Origin]:
        if index and isinstance(value, (cst.Tuple, cst.List)):
            elements = value.elements
            if index[0] < len(elements) and not isinstance(elements[index[0]], cst.StarredElement):
                return self._origins(elements[index[0]].value, function, source, index[1:], depth)
            return []
        if isinstance(value, cst.Name):
            scope = function.body if function is not None else source.module
            found = []
            for bound, position in self._bindings(value.value, scope):
                found += self._origins(bound, function, source, position + index, depth)
            return found
        if not isinstance(value, cst.Call):
            return []
        found = [] if index else [Origin(value, frozenset(source.names(value.func)), source.where(value))]
        helper = self.callee(value, source) if depth < MAX_DEPTH else None
        if helper is not None:
            function_def, helper_source = helper
            through = f"`{code_of(value.func)}(...)` ({source.where(value)})"
            for returned in self._returns(function_def):
                for origin in self._origins(returned, function_def, helper_source, index, depth + 1):
                    found.append(Origin(origin.call, origin.names, origin.where, (through, *origin.through)))
        return found

    @staticmethod
    def _bindings(name: str, scope: cst.CSTNode) -> list[tuple[cst.BaseExpression, tuple[int, ...]]]:
        """The values ``name`` is assigned in ``scope``, with its position when it is unpacked from a tuple."""
        found = []
        for node, _ in _children(scope, None):
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    position = _position_of(name, target.target)
                    if position is not None:
                        found.append((node.value, position))
            elif isinstance(node, cst.AnnAssign) and node.value is not None:
                position = _position_of(name, node.target)
                if position is not None:
                    found.append((node.value, position))
        return found


def _position_of(name: str, target: cst.BaseExpression) -> tuple[int, ...] | None:
    """Where ``name`` sits in an assignment target: ``()`` for the whole of it, ``(i, …)`` inside tuples."""
    if isinstance(target, cst.Name):
        return () if target.value == name else None
    if isinstance(target, (cst.Tuple, cst.List)):
        for i, element in enumerate(target.elements):
            if isinstance(element, cst.StarredElement):
                return None
            inner = _position_of(name, element.value)
            if inner is not None:
                return (i, *inner)
    return None


# -- what an expression may evaluate to ---------------------------------------------------------------
def assignments(scope: cst.CSTNode, name: str) -> list[cst.Assign]:
    """The plain ``name = value`` statements of a function body or module (nested scopes skipped)."""
    body = scope.body if isinstance(scope, cst.FunctionDef) else scope
    return [
        node
        for node in walk(body, NESTED_SCOPES)
        if isinstance(node, cst.Assign)
        and any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets)
    ]


def outcomes(
    node: cst.BaseExpression, scopes: list[cst.CSTNode], depth: int = OUTCOME_DEPTH
) -> list[cst.BaseExpression] | None:
    """The expressions ``node`` may take its value from, innermost ``scopes`` first (a function, then the
    module); ``None`` when a name has no assignment there or the chain runs deeper than ``OUTCOME_DEPTH``."""
    if depth == 0:
        return None
    if isinstance(node, cst.IfExp):
        body, orelse = outcomes(node.body, scopes, depth - 1), outcomes(node.orelse, scopes, depth - 1)
        return None if body is None or orelse is None else body + orelse
    if isinstance(node, cst.Name) and literal_value(node) is ...:
        for scope in scopes:
            if isinstance(scope, cst.FunctionDef) and node.value in parameters(scope):
                return None
            found = assignments(scope, node.value)
            if found:
                return _joined([outcomes(a.value, scopes, depth - 1) for a in found])
        return None
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        table = outcomes(node.value, scopes, depth - 1)
        if table and all(isinstance(t, cst.Dict) for t in table) and isinstance(index, cst.Index):
            keys = outcomes(index.value, scopes, depth - 1)
            wanted = None if keys is None else {literal_value(k) for k in keys}
            picked = [
                element.value
                for t in table
                for element in cast(cst.Dict, t).elements
                if isinstance(element, cst.DictElement)
                and (wanted is None or literal_value(element.key) in wanted)
            ]
            return _joined([outcomes(v, scopes, depth - 1) for v in picked]) if picked else None
    return [node]


def _joined(values: list[list[cst.BaseExpression] | None]) -> list[cst.BaseExpression] | None:
    """The outcomes of every one of ``values``, in order; ``None`` when one of them is unknown."""
    joined: list[cst.BaseExpression] = []
    for value in values:
        if value is None:
            return None
        joined += value
    return joined


def dict_items(node: cst.BaseExpression) -> dict[str, cst.BaseExpression] | None:
    """The ``key: value`` pairs of a dict literal with string keys, or of ``dict(key=value, ...)``; ``None``
    when the expression builds no dict or some keys cannot be read (a ``**`` inside, a computed key)."""
    if isinstance(node, cst.Dict):
        items: dict[str, cst.BaseExpression] = {}
        for element in node.elements:
            key = literal_value(element.key) if isinstance(element, cst.DictElement) else None
            if not isinstance(key, str):
                return None
            items[key] = element.value
        return items
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "dict":
        if any(arg.keyword is None for arg in node.args):
            return None
        return {arg.keyword.value: arg.value for arg in node.args if arg.keyword is not None}
    return None
