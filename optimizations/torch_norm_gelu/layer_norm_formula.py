"""Reading a hand-written layer norm term for term against torch's: ``(x - mean) / sqrt(var + eps) * w + b`` with
the mean and the biased variance over the last dimension, and ``w``/``b`` one-dimensional parameters of one size."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
import libcst.matchers as m

from optimizations.program.model_code import (
    argument,
    bare,
    constant,
    factors,
    init_value,
    is_method,
    is_self_attribute,
    same,
    tensor_method,
    terms,
)
from optimizations.program.syntax import code_of, literal_value

PARAMETER = ("torch.nn.Parameter", "torch.nn.parameter.Parameter")
FILLS = ("torch.ones", "torch.zeros", "torch.empty", "torch.randn", "torch.rand")


class Refused(Exception):
    """A check failed; the message is the reason."""


class LayerNormForward:
    """One ``forward``'s returned expression, read through its intermediate names (``intermediates``: name → value)
    as torch's layer norm of ``x``, or refused with the first difference."""

    def __init__(
        self, names: Callable[[cst.CSTNode], set[str]], intermediates: dict[str, cst.BaseExpression]
    ) -> None:
        self.names = names
        self.intermediates = intermediates

    def centres(self, node: cst.BaseExpression, x: str) -> bool:
        """Whether a term of ``node`` has a factor ``x - <mean of x>``."""
        return any(self._is_centred(p, x) for t in terms(self._resolve(node)) for p, _ in self._flat(t))

    def layer_norm(
        self, node: cst.BaseExpression, x: str
    ) -> tuple[cst.Attribute | None, cst.Attribute | None, cst.BaseExpression]:
        """``(weight, bias, eps)`` of a hand-written layer norm; refuses what differs from torch's."""
        summands = terms(self._resolve(node))
        biases = [t for t in summands if is_self_attribute(t)]
        main = [t for t in summands if not is_self_attribute(t)]
        if len(main) != 1 or len(biases) > 1:
            raise Refused(f"`{code_of(node)}` is not normalised·weight + bias")
        weight: cst.Attribute | None = None
        centred = 0
        root: tuple[cst.BaseExpression, int] | None = None
        for part, sign in self._flat(main[0]):
            if is_self_attribute(part) and sign == 1 and weight is None:
                weight = part
            elif self._is_centred(part, x) and sign == 1:
                centred += 1
            elif root is None:
                root = (part, sign)
            else:
                raise Refused(f"an extra factor `{code_of(part)}` in the normalisation")
        if centred != 1 or root is None:
            raise Refused("not (x - mean) times one inverse square root")
        eps = self._variance_plus_eps(*root, x)
        return weight, biases[0] if biases else None, eps

    def _resolve(self, node: cst.BaseExpression) -> cst.BaseExpression:
        node = bare(node)
        seen = 0
        while isinstance(node, cst.Name) and node.value in self.intermediates and seen < 16:
            node, seen = bare(self.intermediates[node.value]), seen + 1
        return node

    def _flat(
        self, node: cst.BaseExpression, expanded: frozenset[int] = frozenset()
    ) -> list[tuple[cst.BaseExpression, int]]:
        """:func:`factors`, through the forward's intermediate names; a product already being expanded is a
        factor of its own (``x = x * scale`` names itself: GaLore's ``torchrun_main.py``)."""
        out: list[tuple[cst.BaseExpression, int]] = []
        for part, sign in factors(self._resolve(node)):
            part = self._resolve(part)
            if len(factors(part)) > 1 and id(part) not in expanded:
                out += [(p, s * sign) for p, s in self._flat(part, expanded | {id(part)})]
            else:
                out.append((part, sign))
        return out

    def _is_centred(self, node: cst.BaseExpression, x: str) -> bool:
        node = self._resolve(node)
        return (
            isinstance(node, cst.BinaryOperation)
            and isinstance(node.operator, cst.Subtract)
            and m.matches(self._resolve(node.left), m.Name(x))
            and self._mean_of(node.right, x) is not None
        )

    def _mean_of(self, node: cst.BaseExpression, x: str | None) -> cst.BaseExpression | None:
        """What ``node`` averages over the last dimension, keeping it (``x.mean(-1, keepdim=True)``)."""
        node = self._resolve(node)
        if not isinstance(node, cst.Call):
            return None
        source: cst.BaseExpression | None
        if tensor_method(node, self.names, "mean") and isinstance(node.func, cst.Attribute):
            source, dim, keep = node.func.value, argument(node, 0, "dim"), argument(node, 1, "keepdim")
        elif "torch.mean" in self.names(node.func):
            source, dim, keep = (
                argument(node, 0, "input"),
                argument(node, 1, "dim"),
                argument(node, 2, "keepdim"),
            )
        else:
            return None
        if (
            source is None
            or dim is None
            or not _last_dim(dim)
            or literal_value(keep or cst.Name("False")) is not True
        ):
            return None
        source = self._resolve(source)
        return source if x is None or m.matches(source, m.Name(x)) else None

    def _variance_plus_eps(self, node: cst.BaseExpression, sign: int, x: str) -> cst.BaseExpression:
        node = self._resolve(node)
        if isinstance(node, cst.Call) and (
            "torch.rsqrt" in self.names(node.func) or (tensor_method(node, self.names, "rsqrt"))
        ):
            inner, wanted = (
                (
                    node.func.value
                    if tensor_method(node, self.names, "rsqrt") and isinstance(node.func, cst.Attribute)
                    else argument(node, 0, "input")
                ),
                1,
            )
        elif isinstance(node, cst.Call) and (
            "torch.sqrt" in self.names(node.func) or (tensor_method(node, self.names, "sqrt"))
        ):
            inner, wanted = (
                (
                    node.func.value
                    if tensor_method(node, self.names, "sqrt") and isinstance(node.func, cst.Attribute)
                    else argument(node, 0, "input")
                ),
                -1,
            )
        elif (
            isinstance(node, cst.BinaryOperation)
            and isinstance(node.operator, cst.Power)
            and literal_value(bare(node.right)) in (0.5, -0.5)
        ):
            inner, wanted = node.left, -1 if literal_value(bare(node.right)) == 0.5 else 1
        else:
            if any(self._is_std(t) for t in terms(node)):
                raise Refused(
                    "eps is added to the standard deviation, not to the variance under the square root"
                )
            raise Refused(f"`{code_of(node)}` is not the square root of variance + eps")
        if sign != wanted:
            raise Refused(f"`{code_of(node)}` multiplies where it should divide")
        if inner is None:  # `torch.sqrt(*args)`: no argument to read
            raise Refused(f"`{code_of(node)}` is not the square root of variance + eps")
        summands = terms(self._resolve(inner))
        if len(summands) != 2:
            raise Refused(f"`{code_of(inner)}` is not variance + eps")
        for variance, eps in (summands, summands[::-1]):
            if self._is_variance(variance, x):
                if not (constant(eps, self.names) is not None or is_self_attribute(bare(eps))):
                    raise Refused(f"eps `{code_of(eps)}` is not a number or a `self.` setting")
                return bare(eps)
        raise Refused(f"`{code_of(inner)}` is not the biased variance over the last dimension plus eps")

    def _is_std(self, node: cst.BaseExpression) -> bool:
        node = self._resolve(node)
        return isinstance(node, cst.Call) and (is_method(node, "std") or "torch.std" in self.names(node.func))

    def _is_variance(self, node: cst.BaseExpression, x: str) -> bool:
        node = self._resolve(node)
        if not isinstance(node, cst.Call):
            return False
        source: cst.BaseExpression | None
        if tensor_method(node, self.names, "var") and isinstance(node.func, cst.Attribute):
            source, dim, offset = node.func.value, argument(node, 0, "dim"), 0
        elif "torch.var" in self.names(node.func):
            source, dim, offset = argument(node, 0, "input"), argument(node, 1, "dim"), 1
        else:
            averaged = self._mean_of(node, None)
            return averaged is not None and self._is_square_of_centred(averaged, x)
        unbiased = argument(node, offset + 1, "unbiased")
        correction = argument(node, 99, "correction")
        keep = argument(node, offset + 2, "keepdim")
        if not (
            source is not None
            and m.matches(self._resolve(source), m.Name(x))
            and dim is not None
            and _last_dim(dim)
        ):
            return False
        if literal_value(keep or cst.Name("False")) is not True:
            return False
        if not (
            (unbiased is not None and literal_value(unbiased) is False)
            or (correction is not None and literal_value(correction) == 0)
        ):
            raise Refused("the variance is unbiased (divides by n - 1); torch's layer norm divides by n")
        return True

    def _is_square_of_centred(self, node: cst.BaseExpression, x: str) -> bool:
        node = self._resolve(node)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
            return literal_value(bare(node.right)) == 2 and self._is_centred(node.left, x)
        if is_method(node, "pow") and isinstance(node.func, cst.Attribute) and len(node.args) == 1:
            return literal_value(node.args[0].value) == 2 and self._is_centred(node.func.value, x)
        if isinstance(node, cst.Call) and "torch.square" in self.names(node.func) and node.args:
            return self._is_centred(node.args[0].value, x)
        parts = factors(node)
        return (
            len(parts) == 2
            and all(s == 1 and self._is_centred(p, x) for p, s in parts)
            and same(self._resolve(parts[0][0]), self._resolve(parts[1][0]))
        )


def parameter_size(
    cls: cst.ClassDef,
    attribute: cst.Attribute | None,
    size: cst.BaseExpression | None,
    names: Callable[[cst.CSTNode], set[str]],
) -> cst.BaseExpression | None:
    """The size of a one-dimensional ``nn.Parameter(torch.ones(n))`` set once in ``__init__``."""
    if attribute is None:
        return size
    value = init_value(cls, attribute.attr.value)
    fill = (
        value.args[0].value
        if isinstance(value, cst.Call) and names(value.func) & set(PARAMETER) and value.args
        else None
    )
    fill = bare(fill) if fill is not None else None
    sizes = (
        [a.value for a in fill.args if a.keyword is None]
        if isinstance(fill, cst.Call) and names(fill.func) & set(FILLS)
        else []
    )
    if len(sizes) != 1 or isinstance(bare(sizes[0]), (cst.Tuple, cst.List)):
        raise Refused(f"`{code_of(attribute)}` is not seen to be a one-dimensional parameter set in __init__")
    if size is not None and not same(size, sizes[0]):
        raise Refused(f"`{code_of(attribute)}` does not have the weight's size")
    return sizes[0]


def _last_dim(node: cst.BaseExpression) -> bool:
    node = bare(node)
    if isinstance(node, (cst.Tuple, cst.List)) and len(node.elements) == 1:
        node = bare(node.elements[0].value)
    return literal_value(node) == -1
