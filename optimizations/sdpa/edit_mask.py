"""The refusals about a recognised attention's mask: it is causal over the same sequence as q and k."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
import libcst.matchers as m

from optimizations.program.model_code import (
    argument,
    bare,
    init_value,
    is_method,
    is_self_attribute,
    same,
    tensor_method,
)
from optimizations.program.syntax import code_of, literal_value

from .edit_chain import AttentionChain, Chain, Refused, normal_code, value_of

TRIL, TRIU = "tril", "triu"


def _is_minus_infinity(node: cst.BaseExpression, names: Callable[[cst.CSTNode], set[str]]) -> bool:
    """``float("-inf")``, ``-float("inf")``, ``-math.inf``, ``-torch.inf`` or ``torch.finfo(...).min``."""
    node = bare(node)
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "float":
        return len(node.args) == 1 and str(literal_value(node.args[0].value)).lower() in ("-inf", "-infinity")
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = bare(node.expression)
        if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Name) and inner.func.value == "float":
            return len(inner.args) == 1 and str(literal_value(inner.args[0].value)).lower() in (
                "inf",
                "infinity",
            )
        return bool(names(inner) & {"math.inf", "torch.inf", "numpy.inf"})
    return (
        isinstance(node, cst.Attribute)
        and node.attr.value == "min"
        and isinstance(node.value, cst.Call)
        and "torch.finfo" in names(node.value.func)
    )


def _without_bool(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` without trailing ``.bool()`` calls."""
    while is_method(node, "bool") and isinstance(node.func, cst.Attribute) and not node.args:
        node = bare(node.func.value)
    return node


class CausalMaskRefusals(AttentionChain):
    """Whether a chain's one mask is causal over q's and k's sequence; :class:`Refused` with the reason where not."""

    def _check_mask(
        self, function: cst.FunctionDef, chain: Chain, q: str, k: str, seq: cst.BaseExpression | None
    ) -> list[cst.SimpleStatementLine]:
        """The mask is causal over q's and k's sequence; the local statements that build it."""
        if len(chain.masks) != 1:
            raise Refused("the scores are not masked (exactly once): not a causal attention")
        mask, fill = chain.masks[0]
        mask, additive = bare(mask), fill is None
        if fill is not None and not _is_minus_infinity(bare(fill), self.names):
            raise Refused(f"masked positions are filled with `{code_of(fill)}`, not -inf")
        wanted = TRIU
        if isinstance(mask, cst.Comparison) and not additive:
            if (
                len(mask.comparisons) != 1
                or not isinstance(mask.comparisons[0].operator, cst.Equal)
                or literal_value(bare(mask.comparisons[0].comparator)) not in (0, 0.0)
            ):
                raise Refused(f"the mask `{code_of(mask)}` is not `tril(...) == 0` or a triu bool mask")
            mask, wanted = bare(mask.left), TRIL
        local: list[cst.SimpleStatementLine] = []
        mask = _without_bool(mask)
        if isinstance(mask, cst.Name):
            found = self._definition(mask.value, chain.statement, skip=chain.consumed)
            if found is None:
                raise Refused(f"the mask `{mask.value}` is not set in this block")
            local.append(found)
            mask = _without_bool(bare(value_of(found)))
        if isinstance(mask, cst.Subscript) and is_self_attribute(buffer := _without_bool(bare(mask.value))):
            cls = self._class_of(chain.output)
            value = init_value(cls, buffer.attr.value)
            if cls is None or value is None:  # no class: init_value gave None
                raise Refused(f"`{code_of(buffer)}` is not set once, in __init__")
            self._check_not_mutated(cls, buffer)
            rows, cols = self._triangle(bare(value), wanted, sliced=mask, additive=additive)
        elif isinstance(mask, cst.Call):
            rows, cols = self._triangle(mask, wanted, sliced=None, additive=additive)
        else:
            raise Refused(f"the mask `{code_of(mask)}` is not a buffer slice or a tensor built here")
        for size in (rows, cols) if local else ():
            self._check_bound_before(function, size, local[0])
        queries, keys = ({f"{x}.size(-2)", f"{x}.shape[-2]"} for x in (q, k))
        if seq is not None:
            queries.add(normal_code(seq))
            keys.add(normal_code(seq))
        if not (normal_code(rows) in queries and normal_code(cols) in keys):
            raise Refused(
                f"the mask spans {code_of(rows)}×{code_of(cols)}, not provably the sequence length of q and k "
                "(their `.view(B, T, H, D)` names it)"
            )
        return local

    def _check_not_mutated(self, cls: cst.ClassDef, buffer: cst.Attribute) -> None:
        """No method changes the mask buffer in place (``self.bias.fill_(...)``, ``self.bias[...] = ...``)."""
        for node in m.findall(cls, m.Call() | m.AssignTarget() | m.AugAssign()):
            target: cst.BaseExpression | None = None
            if isinstance(node, cst.Call):
                if isinstance(node.func, cst.Attribute) and node.func.attr.value.endswith("_"):  # in place
                    target = node.func.value
            elif isinstance(node, (cst.AssignTarget, cst.AugAssign)) and isinstance(
                node.target, cst.Subscript
            ):
                target = node.target.value
            if target is not None and same(target, buffer):
                raise Refused(f"`{code_of(buffer)}` is changed in place at line {self.line(node)}")

    def _triangle(
        self, value: cst.BaseExpression, wanted: str, sliced: cst.Subscript | None, additive: bool
    ) -> list[cst.BaseExpression]:
        """``(rows, cols)`` the causal mask spans: a ``tril``/``triu`` of ``ones(rows, cols)``, or (``additive``)
        a ``triu`` of ``full((rows, cols), -inf)`` (sliced to ``[..., :rows, :cols]`` when ``sliced``)."""
        node = value
        view: list[cst.BaseExpression] | None = None
        if (
            is_method(node, "view", "reshape")
            and isinstance(node.func, cst.Attribute)
            and len(node.args) == 4
        ):
            if [literal_value(a.value) for a in node.args[:2]] != [1, 1]:
                raise Refused(f"the mask buffer is viewed as `{code_of(node)}`")
            view, node = [a.value for a in node.args], bare(node.func.value)
        node = _without_bool(node)
        ones: cst.BaseExpression | None
        if (
            tensor_method(node, self.names, TRIL, TRIU)
            and isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
        ):
            kind, ones, diagonal = node.func.attr.value, bare(node.func.value), argument(node, 0, "diagonal")
        elif isinstance(node, cst.Call) and self.names(node.func) & {"torch.tril", "torch.triu"}:
            kind = TRIL if "torch.tril" in self.names(node.func) else TRIU
            source, diagonal = argument(node, 0, "input"), argument(node, 1, "diagonal")
            ones = bare(source) if source is not None else None
        else:
            raise Refused(f"the mask is not a tril/triu of ones (`{code_of(value)}`)")
        expected_diagonal = 0 if kind == TRIL else 1
        if kind != wanted or (literal_value(diagonal) if diagonal is not None else 0) != expected_diagonal:
            usage = "`== 0`" if wanted == TRIL else "as is"
            raise Refused(
                f"a {kind} mask with diagonal={code_of(diagonal) if diagonal else 0} used {usage} is not causal"
            )
        if ones is None:  # `torch.tril(*args)`: no input to read
            raise Refused(f"the mask is not a tril/triu of ones (`{code_of(value)}`)")
        ones = _without_bool(ones)
        sizes = self._additive_sizes(ones) if additive else self._ones_sizes(ones)
        if len(sizes) != 2:
            raise Refused(f"the mask is not square over two sizes (`{code_of(ones)}`)")
        if view is not None and not (same(view[2], sizes[0]) and same(view[3], sizes[1])):
            raise Refused("the mask buffer's view does not keep its two sizes last")
        dims = 2 if view is None else 4
        if sliced is None:
            return sizes
        if not same(sizes[0], sizes[1]):
            raise Refused("the mask buffer is not square")
        if len(sliced.slice) != dims:
            raise Refused(f"`{code_of(sliced)}` does not index every dimension of the mask buffer")
        bounds: list[cst.BaseExpression] = []
        for position, element in enumerate(sliced.slice):
            part = element.slice
            if not isinstance(part, cst.Slice) or part.lower is not None or part.step is not None:
                raise Refused(f"`{code_of(sliced)}` is not a `[:, :, :T, :T]` slice")
            if position < dims - 2 and part.upper is not None:
                raise Refused(f"`{code_of(sliced)}` is not a `[:, :, :T, :T]` slice")
            if position >= dims - 2:
                if part.upper is None:
                    raise Refused(f"`{code_of(sliced)}` does not cut the mask to the sequence length")
                bounds.append(part.upper)
        return bounds

    def _ones_sizes(self, ones: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The sizes of ``torch.ones(N, M)`` or ``torch.ones((N, M))``."""
        if not (isinstance(ones, cst.Call) and "torch.ones" in self.names(ones.func)):
            raise Refused(f"the mask is not built from torch.ones (`{code_of(ones)}`)")
        sizes = [a.value for a in ones.args if a.keyword is None and not a.star]
        only = bare(sizes[0]) if len(sizes) == 1 else None
        if isinstance(only, (cst.Tuple, cst.List)):
            sizes = [e.value for e in only.elements]
        return sizes

    def _additive_sizes(self, full: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The sizes of ``torch.full((N, M), -inf)``: a mask added to the scores, -inf where it masks."""
        if not (isinstance(full, cst.Call) and "torch.full" in self.names(full.func)):
            raise Refused(
                f"the mask added to the scores is not a triu of torch.full(..., -inf) (`{code_of(full)}`)"
            )
        size, fill = argument(full, 0, "size"), argument(full, 1, "fill_value")
        if fill is None or not _is_minus_infinity(fill, self.names):
            raise Refused(f"the mask added to the scores is not -inf where it masks (`{code_of(full)}`)")
        sizes = bare(size) if size is not None else None
        if not isinstance(sizes, (cst.Tuple, cst.List)):
            raise Refused(f"the mask is not square over two sizes (`{code_of(full)}`)")
        return [e.value for e in sizes.elements]
