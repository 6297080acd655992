"""libcst helpers for the transforms that rewrite model code (``nn.Module`` classes written by hand): what a
class sets ``self.<name>`` to, constant arithmetic (``math.sqrt(2 / math.pi)``), products and sums read as
lists of factors and terms."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TypeGuard

import libcst as cst
import libcst.matchers as m

from optimizations.program.syntax import code_of, literal_value

# Bindings of `self.<name>` other than plain assignment: `self.register_buffer("name", value)`.
REGISTERING = ("register_buffer", "register_parameter", "register_module", "add_module")
LIBRARIES = ("torch", "math", "numpy")
MATH_CONSTANTS = {"math.pi": math.pi, "math.e": math.e, "numpy.pi": math.pi, "torch.pi": math.pi}
MATH_FUNCTIONS = {"math.sqrt": math.sqrt, "numpy.sqrt": math.sqrt, "math.exp": math.exp}


def bare(node: cst.BaseExpression) -> cst.BaseExpression:
    """The node without its own parentheses."""
    return node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node


def same(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """The two expressions are written the same, parentheses and spacing aside."""
    return _normal(a) == _normal(b)


def _normal(node: cst.CSTNode) -> str:
    return "".join(code_of(node).split()).replace("(", "").replace(")", "")


def is_method(node: cst.CSTNode, *methods: str) -> TypeGuard[cst.Call]:
    """``<receiver>.<method>(...)`` for one of ``methods``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in methods
    )


def argument(call: cst.Call, position: int, name: str) -> cst.BaseExpression | None:
    """A call's argument given by position or by keyword."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[position].value if len(positional) > position else None


def tensor_method(node: cst.CSTNode, names: Callable[[cst.CSTNode], Iterable[str]], *methods: str) -> bool:
    """``<tensor>.<method>(...)``: a method call whose receiver is not a module (``torch``, ``math``).

    ``names(node)`` gives the qualified names a node may refer to (the codemod's ``names``).
    """
    return is_method(node, *methods) and not any(n.split(".")[0] in LIBRARIES for n in names(node.func))


def is_self_attribute(node: cst.CSTNode) -> TypeGuard[cst.Attribute]:
    """``self.<name>``."""
    return (
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Name)
        and node.value.value == "self"
        and not node.lpar
    )


def self_bindings(cls: cst.ClassDef, attribute: str) -> list[tuple[str, cst.BaseExpression | None]]:
    """Every ``(method, value)`` the class gives ``self.<attribute>``: plain assignments and
    ``register_buffer("<attribute>", value)``-style calls; ``None`` where the value cannot be read (unpacking,
    augmented assignment, ``setattr``)."""
    found: list[tuple[str, cst.BaseExpression | None]] = []
    for method in cls.body.body:
        if not isinstance(method, cst.FunctionDef):
            continue
        name = method.name.value
        for node in m.findall(method, m.Assign() | m.AugAssign() | m.AnnAssign() | m.Call()):
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    if _names_attribute(target.target, attribute):
                        found.append((name, node.value))
                    elif any(_names_attribute(t, attribute) for t in m.findall(target.target, m.Attribute())):
                        found.append((name, None))
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                if _names_attribute(node.target, attribute):
                    found.append((name, node.value if isinstance(node, cst.AnnAssign) else None))
            elif isinstance(node, cst.Call) and _registers(node, attribute):
                found.append((name, node.args[1].value if len(node.args) > 1 else None))
    return found


def init_value(cls: cst.ClassDef | None, attribute: str) -> cst.BaseExpression | None:
    """The one value ``self.<attribute>`` gets, in ``__init__`` (through a local set once there); ``None``
    when it is set anywhere else too."""
    if cls is None:
        return None
    bindings = self_bindings(cls, attribute)
    if len(bindings) != 1 or bindings[0][0] != "__init__":
        return None
    value = bindings[0][1]
    if isinstance(
        value, cst.Name
    ):  # `causal = torch.triu(...)`, then `self.register_buffer("causal", causal)`
        init = next(f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "__init__")
        local = [
            a.value
            for a in m.findall(init, m.Assign())
            if isinstance(a, cst.Assign) and any(m.matches(t.target, m.Name(value.value)) for t in a.targets)
        ]
        bound_otherwise = m.findall(
            init, m.AugAssign(target=m.Name(value.value)) | m.Param(name=m.Name(value.value))
        )
        return local[0] if len(local) == 1 and not bound_otherwise else value
    return value


def _names_attribute(node: cst.CSTNode, attribute: str) -> bool:
    return is_self_attribute(node) and node.attr.value == attribute


def _registers(call: cst.Call, attribute: str) -> bool:
    func = call.func
    if isinstance(func, cst.Name) and func.value == "setattr":
        return len(call.args) > 1 and literal_value(call.args[1].value) == attribute
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
        and func.attr.value in REGISTERING
        and bool(call.args)
        and literal_value(call.args[0].value) == attribute
    )


def factors(node: cst.BaseExpression) -> list[tuple[cst.BaseExpression, int]]:
    """A product read as ``(factor, +1)`` and, for divisors, ``(factor, -1)``: ``a * b / c`` →
    ``[(a, 1), (b, 1), (c, -1)]``. Read with a stack, not recursion: a product of a thousand factors (a
    generated expression) is read as any other."""
    found: list[tuple[cst.BaseExpression, int]] = []
    pending: list[tuple[cst.BaseExpression, int]] = [(node, 1)]
    while pending:
        current, sign = pending.pop()
        current = bare(current)
        if isinstance(current, cst.BinaryOperation) and isinstance(current.operator, cst.Multiply):
            pending += [(current.right, sign), (current.left, sign)]
        elif isinstance(current, cst.BinaryOperation) and isinstance(current.operator, cst.Divide):
            pending += [(current.right, -sign), (current.left, sign)]
        else:
            found.append((current, sign))
    return found


def terms(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """A sum read as its terms: ``a + b + c`` → ``[a, b, c]`` (subtraction is one term); read with a stack."""
    found: list[cst.BaseExpression] = []
    pending = [node]
    while pending:
        current = bare(pending.pop())
        if isinstance(current, cst.BinaryOperation) and isinstance(current.operator, cst.Add):
            pending += [current.right, current.left]
        else:
            found.append(current)
    return found


def constant(node: cst.BaseExpression, names: Callable[[cst.CSTNode], Iterable[str]]) -> float | None:
    """The value of constant arithmetic: number literals, ``math.pi``, ``math.sqrt(...)``, ``+ - * / **``.

    ``names(node)`` gives the qualified names a node may refer to (the codemod's ``names``).
    """
    node = bare(node)
    value = literal_value(node)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(node, (cst.Name, cst.Attribute)):
        known = [MATH_CONSTANTS[n] for n in names(node) if n in MATH_CONSTANTS]
        return known[0] if known else None
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = constant(node.expression, names)
        return None if inner is None else -inner
    if isinstance(node, cst.Call) and len(node.args) == 1 and not node.args[0].keyword:
        functions = [MATH_FUNCTIONS[n] for n in names(node.func) if n in MATH_FUNCTIONS]
        inner = constant(node.args[0].value, names)
        if functions and inner is not None:
            try:
                return functions[0](inner)
            except ValueError:
                return None
        return None
    if isinstance(node, cst.BinaryOperation):
        left, right = constant(node.left, names), constant(node.right, names)
        if left is None or right is None:
            return None
        operator = type(node.operator)
        try:
            if operator is cst.Add:
                return left + right
            if operator is cst.Subtract:
                return left - right
            if operator is cst.Multiply:
                return left * right
            if operator is cst.Divide:
                return left / right
            if operator is cst.Power:
                power: float = left**right
                return power
        except (ZeroDivisionError, OverflowError, ValueError):
            return None
    return None
