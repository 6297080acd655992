"""The refusals about a recognised attention's operands: the scores are ``q @ kᵀ``, the scale is
``1/sqrt(head size)``, and nothing else reads the weights or touches q, k and v between the steps."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import libcst as cst
import libcst.matchers as m

from optimizations.program.model_code import bare, factors, init_value, is_method, is_self_attribute, same
from optimizations.program.syntax import code_of, literal_value

from .edit_chain import AttentionChain, Chain, Product, Refused, bound_name, normal_code, value_of

SQRT = ("math.sqrt", "numpy.sqrt")
VIEWS = ("view", "reshape")


class AttentionRefusals(AttentionChain):
    """Whether a chain's scores, scale and surroundings are provably what SDPA computes; :class:`Refused`
    with the reason where not."""

    def _check_scores(self, chain: Chain) -> tuple[str, str]:
        scores = cast(Product, chain.scores)  # `_walk_scores` found them, or raised
        query, keys = bare(scores.left), bare(scores.right)
        if scores.form == "scores" and isinstance(query, cst.Name) and isinstance(keys, cst.Name):
            return query.value, keys.value
        if scores.form != "matmul":
            raise Refused(f"the scores einsum `{code_of(self._scores_node(scores))}` is not q @ kᵀ")
        swapped: set[object] = set()
        transposed: cst.BaseExpression | None = None
        if is_method(keys, "transpose") and isinstance(keys.func, cst.Attribute) and len(keys.args) == 2:
            swapped = {literal_value(a.value) for a in keys.args}
            transposed = bare(keys.func.value)
        if not (
            swapped in ({-2, -1}, {2, 3}) and isinstance(transposed, cst.Name) and isinstance(query, cst.Name)
        ):
            raise Refused(
                f"the scores are not `q @ k.transpose(-2, -1)` (`{code_of(query)} @ {code_of(keys)}`)"
            )
        chain.four_dimensional = swapped == {2, 3}
        return query.value, transposed.value

    def _scores_node(self, scores: Product) -> cst.Call:
        """The einsum call whose operands are the scores'."""
        return next(a for a in self.ancestors(scores.left) if isinstance(a, cst.Call))

    def _views(
        self, function: cst.FunctionDef, chain: Chain, q: str, k: str
    ) -> tuple[cst.BaseExpression | None, set[str]]:
        """The sequence size both q and k were viewed with (``None`` if not shown), and q's last size, as code."""
        start = chain.consumed[-1] if chain.consumed else chain.statement
        head = {f"{x}.size(-1)" for x in (q, k)} | {f"{x}.shape[-1]" for x in (q, k)}
        shapes: list[list[cst.BaseExpression] | None] = []
        for name in (q, k):
            found = self._definition(name, start, reads=True)
            viewed = self._view_shape(found) if found is not None else None
            shape = None
            if viewed is not None:
                shape, view = viewed
                for part in (shape[1], shape[3]):
                    self._check_bound_before(function, part, view)
                head.add(normal_code(shape[3]))
            shapes.append(shape)
        if chain.four_dimensional and shapes[1] is None:
            raise Refused(
                f"`{k}.transpose(2, 3)` swaps the last two dimensions only if {k} is 4-D, and no "
                f"`.view(B, T, H, D).transpose(1, 2)` shows that it is"
            )
        seq = None
        q_shape, k_shape = shapes
        if q_shape and k_shape and same(q_shape[1], k_shape[1]) and same(q_shape[3], k_shape[3]):
            seq = q_shape[1]
        return seq, head

    def _view_shape(
        self, statement: cst.SimpleStatementLine
    ) -> tuple[list[cst.BaseExpression], cst.SimpleStatementLine] | None:
        """``([B, T, H, D], view statement)`` for ``x = y.view(B, T, H, D).transpose(1, 2)`` (or ``reshape``,
        ``permute(0, 2, 1, 3)``, with ``.contiguous()`` after), or for ``x = y.transpose(1, 2)`` after
        ``y = z.view(B, T, H, D)``; ``None`` when the statement is neither."""
        node = bare(value_of(statement))
        while is_method(node, "contiguous") and isinstance(node.func, cst.Attribute) and not node.args:
            node = bare(node.func.value)
        swapped = (
            is_method(node, "transpose")
            and [literal_value(a.value) for a in node.args] in ([1, 2], [2, 1])
            or is_method(node, "permute")
            and [literal_value(a.value) for a in node.args] == [0, 2, 1, 3]
        )
        if not (swapped and isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)):
            return None
        view = bare(node.func.value)
        if isinstance(view, cst.Name):
            found = self._definition(view.value, statement)
            if found is None:
                return None
            statement, view = found, bare(value_of(found))
        if (
            is_method(view, *VIEWS)
            and len(view.args) == 4
            and not any(a.keyword or a.star for a in view.args)
        ):
            return [a.value for a in view.args], statement
        return None

    def _check_scale(self, chain: Chain, head: set[str]) -> None:
        written = (
            " * ".join(code_of(p) if sign == 1 else f"1/{code_of(p)}" for p, sign in chain.scales) or "none"
        )
        parts = self._expand(chain.scales, chain)
        if not (len(parts) == 1 and self._is_inverse_sqrt(*parts[0], head, chain)):
            raise Refused(
                f"the scale ({written}) is not provably 1/sqrt(head size), the head size reading as "
                f"{' or '.join(sorted(head))}"
            )

    def _expand(
        self, parts: Iterable[tuple[cst.BaseExpression, int]], chain: Chain, depth: int = 4
    ) -> list[tuple[cst.BaseExpression, int]]:
        """The scale's factors with literal ones dropped, and ``self.<name>`` (set once in ``__init__``) and
        local names (set earlier in the block) replaced by their values."""
        expanded: list[tuple[cst.BaseExpression, int]] = []
        for node, sign in parts:
            node = bare(node)
            value = literal_value(node)
            if value in (1, 1.0) and not isinstance(value, bool):
                continue
            found: cst.BaseExpression | None
            if depth and is_self_attribute(node):
                found = init_value(self._class_of(chain.output), node.attr.value)
            elif depth and isinstance(node, cst.Name):
                start = chain.consumed[-1] if chain.consumed else chain.statement
                definition = self._definition(node.value, start)
                found = value_of(definition) if definition is not None else None
            else:
                found = None
            if found is None:
                expanded.append((node, sign))
            else:
                expanded += [(p, s * sign) for p, s in self._expand(factors(found), chain, depth - 1)]
        return expanded

    def _is_inverse_sqrt(self, node: cst.BaseExpression, sign: int, head: set[str], chain: Chain) -> bool:
        """``node ** sign`` is ``1/sqrt(d)`` for a head size ``d`` in ``head`` (or a local set to one)."""
        if isinstance(node, cst.Call) and self.names(node.func) & set(SQRT) and len(node.args) == 1:
            return sign == -1 and self._is_head_size(node.args[0].value, head, chain)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
            exponent = literal_value(bare(node.right))
            return (
                exponent in (0.5, -0.5)
                and exponent * sign == -0.5
                and self._is_head_size(node.left, head, chain)
            )
        return False

    def _is_head_size(self, node: cst.BaseExpression, head: set[str], chain: Chain) -> bool:
        """``node`` reads as a head size in ``head``, or is a local name set to one earlier in the block."""
        node = bare(node)
        if normal_code(node) in head:
            return True
        if not isinstance(node, cst.Name):
            return False
        start = chain.consumed[-1] if chain.consumed else chain.statement
        found = self._definition(node.value, start)
        return found is not None and normal_code(value_of(found)) in head

    def _check_contiguous(
        self, chain: Chain, values: cst.BaseExpression, local_masks: list[cst.SimpleStatementLine]
    ) -> None:
        """Only statements that leave q, k and v alone may sit between the steps: SDPA reads them later."""
        if not chain.consumed:
            return
        body = self._block(chain.statement)
        first = next(i for i, s in enumerate(body) if s is chain.consumed[-1])
        last = next(i for i, s in enumerate(body) if s is chain.statement)
        scores = cast(Product, chain.scores)  # `_walk_scores` found them, or raised
        read = {
            n.value
            for node in (values, scores.left, scores.right, chain.dropout)
            if node is not None
            for n in m.findall(node, m.Name())
            if isinstance(n, cst.Name)  # what m.Name() finds
        }
        ours = {id(s) for s in chain.consumed + local_masks}
        for statement in body[first:last]:
            if id(statement) in ours:
                continue
            touched = read & {n.value for n in m.findall(statement, m.Name()) if isinstance(n, cst.Name)}
            if touched:
                raise Refused(
                    f"line {self.line(statement)}, between the steps, uses `{sorted(touched)[0]}`, which SDPA "
                    "would read after it"
                )

    def _check_weights_unread(self, function: cst.FunctionDef, chain: Chain) -> None:
        """The intermediate names are read only by the chain: nothing else needs the attention weights."""
        for statement in chain.consumed:
            name = bound_name(statement)
            reads, _writes, nested = self.reads_and_writes(function, name)
            for read in reads + nested:
                if not (self.within(read, chain.output) or any(self.within(read, s) for s in chain.consumed)):
                    raise Refused(
                        f"`{name}` is also read at line {self.line(read)}: scaled_dot_product_attention does not "
                        "return the attention weights"
                    )
