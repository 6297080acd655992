"""Recognising a hand-written attention by its math: ``softmax(q @ kᵀ * scale, masked) [→ dropout] @ v``, in one
expression or over consecutive statements, and what each step of it is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeGuard, cast

import libcst as cst
import libcst.matchers as m
from libcst.helpers import parse_template_expression

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.model_code import (
    argument,
    bare,
    factors,
    init_value,
    is_method,
    is_self_attribute,
    terms,
)
from optimizations.program.syntax import NESTED_SCOPES, code_of, literal_value, walk

SOFTMAX = ("torch.nn.functional.softmax", "torch.softmax", "torch.special.softmax")
DROPOUT_FUNCTIONS = ("torch.nn.functional.dropout", "torch.dropout")
MATMUL = ("torch.matmul",)
EINSUM = ("torch.einsum",)
DROPOUT_MODULE = "torch.nn.Dropout"
MASKED_FILL = ("masked_fill", "masked_fill_")


class Refused(Exception):
    """A check failed; the message is the reason."""


class NotAttention(Exception):
    """The softmax's input is not scores from ``q @ k``: no attention here."""


@dataclass
class Chain:
    """One hand-written attention: the statements it spans and what each step is."""

    output: cst.CSTNode  # the `weights @ v` node
    statement: cst.SimpleStatementLine  # the statement holding it
    consumed: list[cst.SimpleStatementLine] = field(default_factory=list)  # statements before, nearest first
    dropout: cst.BaseExpression | None = None  # the dropout_p expression
    # (mask, fill) of a masked_fill, (mask, None) of a mask added to the scores
    masks: list[tuple[cst.BaseExpression, cst.BaseExpression | None]] = field(default_factory=list)
    # (factor, +1) or (divisor, -1): the scores are multiplied by their product
    scales: list[tuple[cst.BaseExpression, int]] = field(default_factory=list)
    scores: Product | None = None  # q @ kᵀ
    four_dimensional: bool = False  # kᵀ is `k.transpose(2, 3)`: the last two dimensions only of a 4-D k


class Product(NamedTuple):
    """Two operands multiplied as matrices: ``form`` is ``"matmul"`` (``a @ b``, ``torch.matmul``), ``"scores"``
    (an einsum ``a @ bᵀ`` over the last two dimensions), ``"weights"`` (an einsum ``a @ b``) or ``"einsum"``
    (any other einsum of two operands)."""

    left: cst.BaseExpression
    right: cst.BaseExpression
    form: str


def matrix_product(node: cst.CSTNode, names: Callable[[cst.CSTNode], set[str]]) -> Product | None:
    """The product ``node`` computes: ``a @ b``, ``torch.matmul(a, b)`` or ``torch.einsum(equation, a, b)``."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return Product(node.left, node.right, "matmul")
    if not isinstance(node, cst.Call) or any(a.keyword or a.star for a in node.args):
        return None
    if any(n in MATMUL for n in names(node.func)) and len(node.args) == 2:
        return Product(node.args[0].value, node.args[1].value, "matmul")
    if any(n in EINSUM for n in names(node.func)) and len(node.args) == 3:
        equation = literal_value(node.args[0].value)
        form = _einsum_form(equation) if isinstance(equation, str) else "einsum"
        return Product(node.args[1].value, node.args[2].value, form)
    return None


def _einsum_form(equation: str) -> str:
    """``"scores"`` for ``"...id,...jd->...ij"`` (q @ kᵀ), ``"weights"`` for ``"...ij,...jd->...id"`` (w @ v),
    the same leading dimensions on both operands and the result; ``"einsum"`` otherwise."""
    inputs, arrow, out = equation.replace(" ", "").partition("->")
    operands = inputs.split(",")
    if not arrow or len(operands) != 2:
        return "einsum"
    a, b = operands
    if not (len(a) == len(b) == len(out) >= 2 and a[:-2] == b[:-2] == out[:-2]):
        return "einsum"
    batch = out[:-2].replace("...", "")
    letters = {*a[-2:], *b[-2:], *out[-2:]}
    if len(set(batch)) != len(batch) or letters & set(batch) or len(letters) != 3:
        return "einsum"
    if a[-1] == b[-1] and out[-2:] == a[-2] + b[-2]:
        return "scores"
    if a[-1] == b[-2] and out[-2:] == a[-2] + b[-1]:
        return "weights"
    return "einsum"


def _masks_in_place(statement: cst.BaseStatement, name: str) -> TypeGuard[cst.SimpleStatementLine]:
    """``name.masked_fill_(mask, fill)`` alone on its line."""
    return m.matches(
        statement,
        m.SimpleStatementLine(
            [m.Expr(m.Call(func=m.Attribute(value=m.Name(name), attr=m.Name("masked_fill_"))))]
        ),
    )


def _only_reads(statement: cst.BaseStatement, name: str) -> bool:
    """``statement`` reads ``name`` but neither binds it nor calls an in-place method (``name.resize_()``) on it."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    targets = [
        t
        for t in m.findall(statement, m.AssignTarget() | m.AugAssign() | m.AnnAssign())
        if isinstance(t, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign))  # what the matcher finds
    ]
    if any(m.findall(t.target, m.Name(name)) for t in targets):
        return False
    in_place = m.Call(
        func=m.Attribute(value=m.Name(name), attr=m.Name(m.MatchIfTrue(lambda a: a.endswith("_"))))
    )
    return not m.findall(statement, in_place)


def value_of(statement: cst.SimpleStatementLine) -> cst.BaseExpression:
    """What a statement of the chain computes: an assignment's value, or the in-place ``masked_fill_`` call."""
    # the chain's statements are what `_definition` finds: `name = value` or `name.masked_fill_(...)`
    return cast(cst.Assign | cst.Expr, statement.body[0]).value


def bound_name(statement: cst.SimpleStatementLine) -> str:
    """The name a statement of the chain sets: an assignment's target, or the tensor masked in place."""
    # the chain's statements are what `_definition` finds: `name = value` or `name.masked_fill_(...)`
    small = statement.body[0]
    if isinstance(small, cst.Assign):
        return cast(cst.Name, small.targets[0].target).value
    masked = cast(cst.Attribute, cast(cst.Call, cast(cst.Expr, small).value).func)
    return cast(cst.Name, masked.value).value


def normal_code(node: cst.BaseExpression) -> str:
    """``node``'s code without its parentheses and whitespace: sizes written differently compare equal."""
    return "".join(code_of(bare(node)).split())


class AttentionChain(PlannedCodemod):
    """Reading a chain back from its ``weights @ v``: the statements it spans, its dropout, softmax, masks, scales
    and scores (recorded on a :class:`Chain`), and the names set earlier in its block."""

    def _follow(self, node: cst.BaseExpression, chain: Chain) -> cst.BaseExpression:
        """A name set by the nearest earlier statement of the chain's block is that statement's value."""
        node = bare(node)
        while isinstance(node, cst.Name):
            cursor = chain.consumed[-1] if chain.consumed else chain.statement
            found = self._definition(node.value, cursor, in_place=True, reads=True)
            if found is None:
                return node
            chain.consumed.append(found)
            node = bare(value_of(found))
        return node

    def _block(self, statement: cst.BaseStatement) -> list[cst.BaseStatement]:
        block = cast(cst.IndentedBlock | cst.Module, self.parent(statement))  # a statement line's holder
        return list(block.body)

    def _definition(
        self,
        name: str,
        before: cst.BaseStatement,
        skip: Sequence[cst.BaseStatement] = (),
        in_place: bool = False,
        reads: bool = False,
    ) -> cst.SimpleStatementLine | None:
        """The statement ``name = value`` that last sets ``name`` before ``before``, in the same block (with
        ``in_place``, also ``name.masked_fill_(mask, fill)``); ``None`` when a statement in between (other than
        those in ``skip``, and with ``reads`` those that only read ``name``) mentions ``name`` any other way."""
        body = self._block(before)
        index = next(i for i, s in enumerate(body) if s is before)
        for statement in reversed(body[:index]):
            if any(statement is s for s in skip) or not m.findall(statement, m.Name(name)):
                continue
            if reads and _only_reads(statement, name):
                continue
            if (
                isinstance(statement, cst.SimpleStatementLine)
                and len(statement.body) == 1
                and isinstance(statement.body[0], cst.Assign)
                and len(statement.body[0].targets) == 1
                and m.matches(statement.body[0].targets[0].target, m.Name(name))
            ):
                return statement
            if in_place and _masks_in_place(statement, name):
                return statement
            return None
        return None

    def _dropout(self, node: cst.BaseExpression, chain: Chain) -> cst.BaseExpression:
        """Record a dropout of the weights; the node it drops out of."""
        if not isinstance(node, cst.Call):
            return node
        if is_self_attribute(node.func) and len(node.args) == 1 and not node.args[0].keyword:
            cls = self._class_of(node)
            value = init_value(cls, node.func.attr.value)
            if isinstance(value, cst.Call) and DROPOUT_MODULE in self.names(value.func):
                module = code_of(node.func)
                chain.dropout = cst.parse_expression(f"{module}.p if {module}.training else 0.0")
                return self._follow(node.args[0].value, chain)
            return node
        if any(n in DROPOUT_FUNCTIONS for n in self.names(node.func)):
            p = argument(node, 1, "p") or cst.Float("0.5")
            training = argument(
                node, 2, "training" if "torch.nn.functional.dropout" in self.names(node.func) else "train"
            )
            inner = argument(node, 0, "input")
            if inner is None:
                return node
            if training is None or literal_value(training) is True:
                chain.dropout = p
            elif literal_value(training) is not False:
                chain.dropout = parse_template_expression("{p} if {t} else 0.0", p=p, t=training)
            return self._follow(inner, chain)
        return node

    def _softmax(self, node: cst.BaseExpression) -> cst.Call | None:
        if not isinstance(node, cst.Call):
            return None
        if any(n in SOFTMAX for n in self.names(node.func)) or is_method(node, "softmax"):
            return node
        return None

    def _walk_scores(self, softmax: cst.Call, chain: Chain) -> None:
        """Check the softmax; record the masks, scales and scores under it."""
        method = is_method(softmax, "softmax") and not self.names(softmax.func) & set(SOFTMAX)
        dim = argument(softmax, 0 if method else 1, "dim")
        if dim is None or literal_value(dim) != -1:
            raise Refused(f"the softmax is not over the last dimension (`{code_of(softmax)}`)")
        if argument(softmax, 1 if method else 2, "dtype") is not None:
            raise Refused("the softmax casts (`dtype=`): SDPA keeps the input dtype")
        softmax_input = (
            softmax.func.value
            if method and isinstance(softmax.func, cst.Attribute)
            else argument(softmax, 0, "input")
        )
        if softmax_input is None:  # `F.softmax(*args, dim=-1)`: no input to read, so no q @ k seen
            raise NotAttention
        node = self._follow(softmax_input, chain)
        while True:
            scores = matrix_product(node, self.names)
            if scores is not None:
                chain.scores = scores
                return
            if is_method(node, *MASKED_FILL) and isinstance(node.func, cst.Attribute) and len(node.args) == 2:
                chain.masks.append((node.args[0].value, node.args[1].value))
                node = self._follow(node.func.value, chain)
                continue
            parts = factors(node)
            cursor = chain.consumed[-1] if chain.consumed else chain.statement
            inner = [p for p, sign in parts if sign == 1 and self._reaches_scores(p, cursor)]
            if len(parts) > 1 and len(inner) == 1:
                chain.scales += [(p, s) for p, s in parts if p is not inner[0]]
                node = self._follow(inner[0], chain)
                continue
            added = terms(node)
            inner = [p for p in added if self._reaches_scores(p, cursor)]
            if len(added) == 2 and len(inner) == 1:
                chain.masks.append((next(p for p in added if p is not inner[0]), None))
                node = self._follow(inner[0], chain)
                continue
            if self._mentions_matmul(node, cursor):
                raise Refused(f"the scores pass through `{code_of(node)}` before the softmax")
            raise NotAttention

    def _mentions_matmul(self, node: cst.CSTNode, cursor: cst.BaseStatement, depth: int = 8) -> bool:
        """Whether ``node`` holds a matmul, directly or through names set earlier in the block."""
        if depth == 0:
            return False
        for inner in (node, *walk(node, NESTED_SCOPES)):
            if matrix_product(inner, self.names) is not None:
                return True
            if isinstance(inner, cst.Name):
                found = self._definition(inner.value, cursor, in_place=True)
                if found is not None and self._mentions_matmul(value_of(found), found, depth - 1):
                    return True
        return False

    def _reaches_scores(self, node: cst.BaseExpression, cursor: cst.BaseStatement, depth: int = 8) -> bool:
        """Whether ``node`` leads, through names set earlier in the block, to ``q @ k`` (not to a scale)."""
        node = bare(node)
        if depth == 0:
            return False
        if is_method(node, *MASKED_FILL) or matrix_product(node, self.names) is not None:
            return True
        if isinstance(node, cst.Name):
            found = self._definition(node.value, cursor, in_place=True, reads=True)
            return found is not None and self._reaches_scores(value_of(found), found, depth - 1)
        parts = [p for p, _ in factors(node)]
        parts = parts if len(parts) > 1 else terms(node)
        return len(parts) > 1 and any(self._reaches_scores(p, cursor, depth - 1) for p in parts)

    def _check_bound_before(
        self, function: cst.FunctionDef, part: cst.BaseExpression, statement: cst.BaseStatement
    ) -> None:
        """The local names in a size must not be set again after the view that used it."""
        line = self.line(statement)
        for name in {n.value for n in m.findall(part, m.Name()) if isinstance(n, cst.Name)}:
            _reads, writes, _nested = self.reads_and_writes(function, name)
            later = [w for w in writes if self.line(w) >= line]
            if later:
                raise Refused(
                    f"`{name}` is set again at line {self.line(later[0])}, after the view that uses it"
                )

    def _class_of(self, node: cst.CSTNode) -> cst.ClassDef | None:
        return next((a for a in self.ancestors(node) if isinstance(a, cst.ClassDef)), None)
