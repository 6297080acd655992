"""What a piece of libcst syntax is: its source text, the Python value of a literal, a call's keyword arguments,
the target it is assigned to, whether qualified names fall under a package, and the nodes of a scope in source
order (nested functions and classes left out)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import libcst as cst

from optimizations.program.repository import ParsedFile
from optimizations.program.tree import children

NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def walk(node: cst.CSTNode, stop: tuple[type, ...] = NESTED_SCOPES) -> Iterator[cst.CSTNode]:
    """``node``'s descendants in source order, whitespace and punctuation left out (:func:`children`); nodes of
    a ``stop`` type are yielded but not entered."""
    for child in children(node):
        yield child
        if not isinstance(child, stop):
            yield from walk(child, stop)


def imported_modules(parsed: ParsedFile) -> frozenset[str]:
    """Modules the file imports plainly (``import x.y``, not aliased) outside functions and classes; read once
    per parse through ``parsed.derived``."""
    return frozenset(
        code_of(alias.name)
        for node in walk(parsed.module)
        if isinstance(node, cst.Import)
        for alias in node.names
        if alias.asname is None
    )


def code_of(node: cst.CSTNode) -> str:
    """The source text of a node."""
    return cst.Module(body=[]).code_for_node(node)


def qualified_under(names: Iterable[str], packages: Sequence[str], attrs: Iterable[str]) -> bool:
    """True when one of ``names`` is ``<package>.….<attr>`` for a package and attr given."""
    wanted = set(attrs)
    for name in names:
        head, _, last = name.rpartition(".")
        if last in wanted and any(head == p or head.startswith(p + ".") for p in packages):
            return True
    return False


# Data-loader classes that take torch's DataLoader arguments (num_workers, pin_memory, persistent_workers,
# prefetch_factor, collate_fn), as (package, class): torch's own, and torchdata's StatefulDataLoader, a subclass
# that can save its position mid-epoch (torchtune's recipes build one).
DATA_LOADERS = (("torch.utils.data", "DataLoader"), ("torchdata.stateful_dataloader", "StatefulDataLoader"))


def is_data_loader(names: Iterable[str]) -> bool:
    """True when one of ``names`` (a callee's qualified names) is a class of :data:`DATA_LOADERS`."""
    names = set(names)
    return any(qualified_under(names, (package,), (loader,)) for package, loader in DATA_LOADERS)


def assigned_target(
    parent: Callable[[cst.CSTNode], cst.CSTNode | None], value: cst.CSTNode
) -> cst.BaseAssignTargetExpression | None:
    """The target of ``target = value`` (or ``target: T = value``), where ``value`` is the whole right side;
    ``parent`` gives a node's holder."""
    holder = parent(value)
    if isinstance(holder, cst.Assign) and len(holder.targets) == 1:
        return holder.targets[0].target
    if isinstance(holder, cst.AnnAssign) and holder.value is value:
        return holder.target
    return None


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    """The keyword argument ``name=`` of a call, if given."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def star_kwargs(call: cst.Call) -> cst.Arg | None:
    """The ``**kwargs`` argument of a call, if any: settings hidden there cannot be seen."""
    for arg in call.args:
        if arg.star == "**":
            return arg
    return None


def literal_value(node: cst.BaseExpression) -> object:
    """The Python value of a simple literal (numbers, strings, True/False/None); ``...`` when not one."""
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        return node.evaluated_value
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal_value(node.expression)
        return -inner if isinstance(inner, (int, float)) else ...
    return ...


def defines(module: cst.Module, name: str) -> bool:
    """True when the module's top level assigns or defines ``name``."""
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and statement.name.value == name:
            return True
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                targets = []
                if isinstance(small, cst.Assign):
                    targets = [t.target for t in small.targets]
                elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                    targets = [small.target]
                elif isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(
                    small.names, cst.ImportStar
                ):
                    targets = [a.asname.name if a.asname else a.name for a in small.names]
                if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                    return True
    return False


def local_callee(call: cst.Call) -> str | None:
    """The name a call reaches in the same module or class: ``f`` of ``f(...)``, ``m`` of ``self.m(...)``."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        return func.attr.value
    return None
