"""Reading a hand-written GELU term for term: the GPT-2 tanh form or the exact erf form of ``x``."""

from __future__ import annotations

import math
from collections.abc import Callable

import libcst as cst
import libcst.matchers as m

from optimizations.program.model_code import (
    argument,
    bare,
    constant,
    factors,
    is_method,
    tensor_method,
    terms,
)
from optimizations.program.syntax import literal_value

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
GELU_CUBIC = 0.044715
RELATIVE_TOLERANCE = 1e-9


def _close(value: float | None, wanted: float) -> bool:
    return value is not None and math.isclose(value, wanted, rel_tol=RELATIVE_TOLERANCE)


def gelu_kind(node: cst.BaseExpression, x: str, names: Callable[[cst.CSTNode], set[str]]) -> str | None:
    """``"tanh"`` or ``"erf"`` when ``node`` is that GELU of ``x``."""
    parts = factors(node)
    if any(sign != 1 for _, sign in parts):
        return None
    halves = [p for p, _ in parts if _close(constant(p, names), 0.5)]
    inputs = [p for p, _ in parts if m.matches(p, m.Name(x))]
    others = [p for p, _ in parts if p not in halves and p not in inputs]
    if len(halves) != 1 or len(inputs) != 1 or len(others) != 1:
        return None
    summands = terms(others[0])
    ones = [t for t in summands if _close(constant(t, names), 1.0)]
    calls = [t for t in summands if t not in ones]
    if len(summands) != 2 or len(ones) != 1 or not isinstance(calls[0], cst.Call):
        return None
    call = calls[0]
    called = names(call.func)
    if called & {"torch.tanh", "torch.nn.functional.tanh"} or (tensor_method(call, names, "tanh")):
        kind = "tanh"
    elif called & {"torch.erf", "torch.special.erf"} or (tensor_method(call, names, "erf")):
        kind = "erf"
    else:
        return None
    inner = (
        call.func.value
        if tensor_method(call, names, kind) and isinstance(call.func, cst.Attribute)
        else argument(call, 0, "input")
    )
    if inner is None:
        return None
    scale, rest = _split_constant(inner, names)
    if kind == "erf":
        return (
            kind
            if _close(scale, 1 / math.sqrt(2)) and len(rest) == 1 and m.matches(rest[0], m.Name(x))
            else None
        )
    if not _close(scale, SQRT_2_OVER_PI) or len(rest) != 1:
        return None
    summands = terms(rest[0])
    cubic = [t for t in summands if not m.matches(t, m.Name(x))]
    if len(summands) != 2 or len(cubic) != 1:
        return None
    coefficient, powers = _split_constant(cubic[0], names)
    degree = sum(_power_of(p, x, names) or 99 for p in powers)
    return kind if _close(coefficient, GELU_CUBIC) and degree == 3 else None


def _split_constant(
    node: cst.BaseExpression, names: Callable[[cst.CSTNode], set[str]]
) -> tuple[float | None, list[cst.BaseExpression]]:
    """``(product of the constant factors, the other factors)``; ``None`` when a non-constant divides."""
    value = 1.0
    rest: list[cst.BaseExpression] = []
    for part, sign in factors(node):
        number = constant(part, names)
        if number is not None and number != 0:
            value *= number**sign
        elif sign == 1:
            rest.append(part)
        else:
            return None, rest
    return value, rest


def _power_of(node: cst.BaseExpression, x: str, names: Callable[[cst.CSTNode], set[str]]) -> int | None:
    """``n`` for ``x``, ``x ** n``, ``torch.pow(x, n)``, ``x.pow(n)``."""
    node = bare(node)
    if m.matches(node, m.Name(x)):
        return 1
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
        base, exponent = node.left, node.right
    elif isinstance(node, cst.Call) and "torch.pow" in names(node.func) and len(node.args) == 2:
        base, exponent = node.args[0].value, node.args[1].value
    elif is_method(node, "pow") and isinstance(node.func, cst.Attribute) and len(node.args) == 1:
        base, exponent = node.func.value, node.args[0].value
    else:
        return None
    value = literal_value(bare(exponent))
    if m.matches(bare(base), m.Name(x)) and isinstance(value, (int, float)) and float(value).is_integer():
        return int(value)
    return None
