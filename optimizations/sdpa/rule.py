"""Hand-written causal attention → ``F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=...)``.

Recognised by its math: ``softmax(q @ kᵀ * scale, causally masked) [→ dropout] @ v``, in one expression or
over consecutive statements (a scores tensor masked in place, ``s.masked_fill_(M, -inf)``, included), the
products written ``@``, ``torch.matmul`` or ``torch.einsum("...id,...jd->...ij", q, k)`` /
``torch.einsum("...ij,...jd->...id", w, v)``, the mask and the scale in either order. It is replaced only when
every step is provably what SDPA computes, and refused with the reason otherwise:

- kᵀ is ``k.transpose(-2, -1)``, or ``k.transpose(2, 3)`` of a k shown 4-D by its ``.view(B, T, H, D)``;
- the scale is ``1/sqrt(d)`` -- a factor (``1.0 / math.sqrt(d)``, ``d ** -0.5``), a divisor (``math.sqrt(d)``,
  ``d ** 0.5``) or ``self.<name>`` set once in ``__init__`` to one of those -- where ``d`` is q's last size:
  ``q.size(-1)``, ``k.shape[-1]`` (or a local set to one), or the head size of the
  ``.view(B, T, H, d).transpose(1, 2)`` that made q and k (the view and the transpose may be two statements);
- the mask is causal over the same ``T`` as q and k: ``masked_fill(tril(ones(N, N))[..., :T, :T] == 0, -inf)``
  with the ``tril`` a buffer or attribute set once in ``__init__``, ``masked_fill(M, -inf)`` with ``M`` a
  ``triu(ones(T, T), diagonal=1)`` (built in place, local, or a buffer sliced ``[:T, :T]``, ``.bool()`` or not,
  never changed in place), or ``+ M`` with ``M`` a ``triu(full((T, T), -inf), diagonal=1)``; ``T`` is the
  sequence size of q's and k's ``.view``, the names in it bound before those views, or the rows and columns
  are ``q.size(-2)`` and ``k.size(-2)`` (a ``T`` larger than the buffer raises in both versions);
- the softmax is over the last dimension, with no ``dtype``;
- dropout, if any, is an ``nn.Dropout`` module set in ``__init__`` (``dropout_p=self.d.p if self.d.training
  else 0.0``: what the module does) or ``F.dropout(att, p, training=...)``; SDPA draws another random mask,
  of the same distribution;
- the attention weights are read nowhere else (SDPA does not return them).

A call of ``F.scaled_dot_product_attention`` is reported as already done, and a hand-written attention in the
same function (a fallback beside it) is left as it is. The mask buffer stays registered, so state dicts still
load; a local mask nothing else reads is removed, and so are imports (``math``) nothing else uses. SDPA's
kernels round differently from the hand-written chain: outputs agree to float32 rounding
(``tests/test_from_scratch.py`` and ``tests/test_sdpa_math.py`` measure it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import libcst as cst
import libcst.matchers as m
from libcst.helpers import parse_template_expression

from optimizations.edits.expressions import call_expr
from optimizations.edits.model_code import drop_unused_imports, functional
from optimizations.edits.planned import PlannedCodemod
from optimizations.program.model_code import (
    argument,
    bare,
    factors,
    init_value,
    is_method,
    is_self_attribute,
    same,
    tensor_method,
    terms,
)
from optimizations.program.shapes import ProgramShape
from optimizations.program.syntax import NESTED_SCOPES, code_of, literal_value, walk
from optimizations.registry import Example, Numerics, Optimization, Word

SDPA = ("torch.nn.functional.scaled_dot_product_attention",)
SOFTMAX = ("torch.nn.functional.softmax", "torch.softmax", "torch.special.softmax")
DROPOUT_FUNCTIONS = ("torch.nn.functional.dropout", "torch.dropout")
MATMUL = ("torch.matmul",)
EINSUM = ("torch.einsum",)
DROPOUT_MODULE = "torch.nn.Dropout"
SQRT = ("math.sqrt", "numpy.sqrt")
TRIL, TRIU = "tril", "triu"
VIEWS = ("view", "reshape")
MASKED_FILL = ("masked_fill", "masked_fill_")


class _Refused(Exception):
    """A check failed; the message is the reason."""


class _NotAttention(Exception):
    """The softmax's input is not scores from ``q @ k``: no attention here."""


@dataclass
class _Chain:
    """One hand-written attention: the statements it spans and what each step is."""

    output: cst.CSTNode  # the `weights @ v` node
    statement: cst.SimpleStatementLine  # the statement holding it
    consumed: list[cst.SimpleStatementLine] = field(default_factory=list)  # statements before, nearest first
    dropout: cst.BaseExpression | None = None  # the dropout_p expression
    # (mask, fill) of a masked_fill, (mask, None) of a mask added to the scores
    masks: list[tuple[cst.BaseExpression, cst.BaseExpression | None]] = field(default_factory=list)
    # (factor, +1) or (divisor, -1): the scores are multiplied by their product
    scales: list[tuple[cst.BaseExpression, int]] = field(default_factory=list)
    scores: _Product | None = None  # q @ kᵀ
    four_dimensional: bool = False  # kᵀ is `k.transpose(2, 3)`: the last two dimensions only of a 4-D k


class _Product(NamedTuple):
    """Two operands multiplied as matrices: ``form`` is ``"matmul"`` (``a @ b``, ``torch.matmul``), ``"scores"``
    (an einsum ``a @ bᵀ`` over the last two dimensions), ``"weights"`` (an einsum ``a @ b``) or ``"einsum"``
    (any other einsum of two operands)."""

    left: cst.BaseExpression
    right: cst.BaseExpression
    form: str


def _matmul(node: cst.CSTNode, names) -> _Product | None:
    """The product ``node`` computes: ``a @ b``, ``torch.matmul(a, b)`` or ``torch.einsum(equation, a, b)``."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return _Product(node.left, node.right, "matmul")
    if not isinstance(node, cst.Call) or any(a.keyword or a.star for a in node.args):
        return None
    if any(n in MATMUL for n in names(node.func)) and len(node.args) == 2:
        return _Product(node.args[0].value, node.args[1].value, "matmul")
    if any(n in EINSUM for n in names(node.func)) and len(node.args) == 3:
        equation = literal_value(node.args[0].value)
        form = _einsum_form(equation) if isinstance(equation, str) else "einsum"
        return _Product(node.args[1].value, node.args[2].value, form)
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


def _is_minus_infinity(node: cst.BaseExpression, names) -> bool:
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


def _masks_in_place(statement: cst.BaseStatement, name: str) -> bool:
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
    targets = m.findall(statement, m.AssignTarget() | m.AugAssign() | m.AnnAssign())
    if any(m.findall(t.target, m.Name(name)) for t in targets):
        return False
    in_place = m.Call(
        func=m.Attribute(value=m.Name(name), attr=m.Name(m.MatchIfTrue(lambda a: a.endswith("_"))))
    )
    return not m.findall(statement, in_place)


def _value(statement: cst.SimpleStatementLine) -> cst.BaseExpression:
    """What a statement of the chain computes: an assignment's value, or the in-place ``masked_fill_`` call."""
    return statement.body[0].value


def _bound_name(statement: cst.SimpleStatementLine) -> str:
    """The name a statement of the chain sets: an assignment's target, or the tensor masked in place."""
    small = statement.body[0]
    if isinstance(small, cst.Assign):
        return small.targets[0].target.value
    return small.value.func.value.value


class _Sdpa(PlannedCodemod):
    def plan(self, module: cst.Module) -> None:
        self.tree = module
        self.prefix: str | None = None
        removed: list[cst.CSTNode] = []
        fused = [c for c in self.nodes(cst.Call) if self.names(c.func) & set(SDPA)]
        for call in fused:
            self.already(call, f"fused attention: {code_of(call.func)}(...)")
        for function in self.nodes(cst.FunctionDef):
            if any(self.within(call, function) for call in fused):
                continue  # the hand-written attention beside it is a fallback
            for statement in walk(function.body, NESTED_SCOPES):
                if isinstance(statement, cst.SimpleStatementLine):
                    for node in walk(statement, NESTED_SCOPES):
                        product = _matmul(node, self.names)
                        if product is not None and product.form in ("matmul", "weights"):
                            removed += self._plan_site(function, statement, node, product)
        if removed:
            drop_unused_imports(self, module, removed, keep=[self.prefix.split(".")[0]])

    # -- one `weights @ v` ----------------------------------------------------------------------------------
    def _plan_site(self, function, statement, output, operands) -> list[cst.CSTNode]:
        """Plan one site; the code it removes or replaces."""
        chain = _Chain(output, statement)
        node = self._follow(operands.left, chain)
        node = self._dropout(node, chain)
        softmax = self._softmax(node)
        if softmax is None:
            return []  # a matmul, not attention
        message = "hand-written causal attention → F.scaled_dot_product_attention(q, k, v, is_causal=True)"
        try:
            self._walk_scores(softmax, chain)
            q, k = self._check_scores(chain)
            self._check_weights_unread(function, chain)
            seq, head = self._views(function, chain, q, k)
            self._check_scale(chain, head)
            local_masks = self._check_mask(function, chain, q, k, seq)
            self._check_contiguous(chain, operands.right, local_masks)
        except _NotAttention:
            return []
        except _Refused as refusal:
            self.refused(self._top(chain), message, str(refusal))
            return []
        dropped = chain.consumed + [s for s in local_masks if self._only_read_in(function, s, chain)]
        self._rewrite(chain, q, k, dropped)
        self.changed(
            self._top(chain), message + " (the mask buffer, if any, stays for state-dict compatibility)"
        )
        return [*dropped, output]

    def _top(self, chain: _Chain) -> cst.BaseStatement:
        """The chain's first statement."""
        return min([chain.statement, *chain.consumed], key=self.line)

    def _follow(self, node: cst.BaseExpression, chain: _Chain) -> cst.BaseExpression:
        """A name set by the nearest earlier statement of the chain's block is that statement's value."""
        node = bare(node)
        while isinstance(node, cst.Name):
            cursor = chain.consumed[-1] if chain.consumed else chain.statement
            found = self._definition(node.value, cursor, in_place=True, reads=True)
            if found is None:
                return node
            chain.consumed.append(found)
            node = bare(_value(found))
        return node

    def _block(self, statement: cst.BaseStatement) -> list[cst.BaseStatement]:
        return list(self.parent(statement).body)

    def _definition(
        self, name: str, before: cst.BaseStatement, skip=(), in_place: bool = False, reads: bool = False
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

    def _dropout(self, node: cst.BaseExpression, chain: _Chain) -> cst.BaseExpression:
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

    def _walk_scores(self, softmax: cst.Call, chain: _Chain) -> None:
        """Check the softmax; record the masks, scales and scores under it."""
        method = is_method(softmax, "softmax") and not self.names(softmax.func) & set(SOFTMAX)
        dim = argument(softmax, 0 if method else 1, "dim")
        if dim is None or literal_value(dim) != -1:
            raise _Refused(f"the softmax is not over the last dimension (`{code_of(softmax)}`)")
        if argument(softmax, 1 if method else 2, "dtype") is not None:
            raise _Refused("the softmax casts (`dtype=`): SDPA keeps the input dtype")
        node = self._follow(softmax.func.value if method else argument(softmax, 0, "input"), chain)
        while True:
            scores = _matmul(node, self.names)
            if scores is not None:
                chain.scores = scores
                return
            if is_method(node, *MASKED_FILL) and len(node.args) == 2:
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
                raise _Refused(f"the scores pass through `{code_of(node)}` before the softmax")
            raise _NotAttention

    def _mentions_matmul(self, node: cst.CSTNode, cursor: cst.BaseStatement, depth: int = 8) -> bool:
        """Whether ``node`` holds a matmul, directly or through names set earlier in the block."""
        if depth == 0:
            return False
        for inner in (node, *walk(node, NESTED_SCOPES)):
            if _matmul(inner, self.names) is not None:
                return True
            if isinstance(inner, cst.Name):
                found = self._definition(inner.value, cursor, in_place=True)
                if found is not None and self._mentions_matmul(_value(found), found, depth - 1):
                    return True
        return False

    def _reaches_scores(self, node: cst.BaseExpression, cursor: cst.BaseStatement, depth: int = 8) -> bool:
        """Whether ``node`` leads, through names set earlier in the block, to ``q @ k`` (not to a scale)."""
        node = bare(node)
        if depth == 0:
            return False
        if is_method(node, *MASKED_FILL) or _matmul(node, self.names) is not None:
            return True
        if isinstance(node, cst.Name):
            found = self._definition(node.value, cursor, in_place=True, reads=True)
            return found is not None and self._reaches_scores(_value(found), found, depth - 1)
        parts = [p for p, _ in factors(node)]
        parts = parts if len(parts) > 1 else terms(node)
        return len(parts) > 1 and any(self._reaches_scores(p, cursor, depth - 1) for p in parts)

    # -- the checks ---------------------------------------------------------------------------------------------
    def _check_scores(self, chain: _Chain) -> tuple[str, str]:
        query, keys = bare(chain.scores.left), bare(chain.scores.right)
        if chain.scores.form == "scores" and isinstance(query, cst.Name) and isinstance(keys, cst.Name):
            return query.value, keys.value
        if chain.scores.form != "matmul":
            raise _Refused(f"the scores einsum `{code_of(self._scores_node(chain))}` is not q @ kᵀ")
        swapped = (
            {literal_value(a.value) for a in keys.args}
            if is_method(keys, "transpose") and len(keys.args) == 2
            else set()
        )
        if not (
            swapped in ({-2, -1}, {2, 3})
            and isinstance(bare(keys.func.value), cst.Name)
            and isinstance(query, cst.Name)
        ):
            raise _Refused(
                f"the scores are not `q @ k.transpose(-2, -1)` (`{code_of(query)} @ {code_of(keys)}`)"
            )
        chain.four_dimensional = swapped == {2, 3}
        return query.value, bare(keys.func.value).value

    def _scores_node(self, chain: _Chain) -> cst.CSTNode:
        """The einsum call whose operands are the scores'."""
        return self.parent(self.parent(chain.scores.left))

    def _views(self, function, chain: _Chain, q: str, k: str) -> tuple[cst.BaseExpression | None, set[str]]:
        """The sequence size both q and k were viewed with (``None`` if not shown), and q's last size, as code."""
        start = chain.consumed[-1] if chain.consumed else chain.statement
        head = {f"{x}.size(-1)" for x in (q, k)} | {f"{x}.shape[-1]" for x in (q, k)}
        shapes = []
        for name in (q, k):
            found = self._definition(name, start, reads=True)
            shape, view = self._view_shape(found) if found is not None else (None, None)
            if shape is not None:
                for part in (shape[1], shape[3]):
                    self._check_bound_before(function, part, view)
                head.add(_normal_code(shape[3]))
            shapes.append(shape)
        if chain.four_dimensional and shapes[1] is None:
            raise _Refused(
                f"`{k}.transpose(2, 3)` swaps the last two dimensions only if {k} is 4-D, and no "
                f"`.view(B, T, H, D).transpose(1, 2)` shows that it is"
            )
        seq = None
        if all(shapes) and same(shapes[0][1], shapes[1][1]) and same(shapes[0][3], shapes[1][3]):
            seq = shapes[0][1]
        return seq, head

    def _view_shape(self, statement: cst.SimpleStatementLine):
        """``([B, T, H, D], view statement)`` for ``x = y.view(B, T, H, D).transpose(1, 2)`` (or ``reshape``,
        ``permute(0, 2, 1, 3)``, with ``.contiguous()`` after), or for ``x = y.transpose(1, 2)`` after
        ``y = z.view(B, T, H, D)``; ``(None, None)`` when the statement is neither."""
        node = bare(_value(statement))
        while is_method(node, "contiguous") and not node.args:
            node = bare(node.func.value)
        swapped = (
            is_method(node, "transpose")
            and [literal_value(a.value) for a in node.args] in ([1, 2], [2, 1])
            or is_method(node, "permute")
            and [literal_value(a.value) for a in node.args] == [0, 2, 1, 3]
        )
        if not swapped:
            return None, None
        view = bare(node.func.value)
        if isinstance(view, cst.Name):
            statement = self._definition(view.value, statement)
            view = bare(_value(statement)) if statement is not None else view
        if (
            is_method(view, *VIEWS)
            and len(view.args) == 4
            and not any(a.keyword or a.star for a in view.args)
        ):
            return [a.value for a in view.args], statement
        return None, None

    def _check_bound_before(self, function, part: cst.BaseExpression, statement) -> None:
        """The local names in a size must not be set again after the view that used it."""
        line = self.line(statement)
        for name in {n.value for n in m.findall(part, m.Name())}:
            _reads, writes, _nested = self.reads_and_writes(function, name)
            later = [w for w in writes if self.line(w) >= line]
            if later:
                raise _Refused(
                    f"`{name}` is set again at line {self.line(later[0])}, after the view that uses it"
                )

    def _check_scale(self, chain: _Chain, head: set[str]) -> None:
        written = (
            " * ".join(code_of(p) if sign == 1 else f"1/{code_of(p)}" for p, sign in chain.scales) or "none"
        )
        parts = self._expand(chain.scales, chain)
        if not (len(parts) == 1 and self._is_inverse_sqrt(*parts[0], head, chain)):
            raise _Refused(
                f"the scale ({written}) is not provably 1/sqrt(head size), the head size reading as "
                f"{' or '.join(sorted(head))}"
            )

    def _expand(self, parts, chain: _Chain, depth: int = 4) -> list[tuple[cst.BaseExpression, int]]:
        """The scale's factors with literal ones dropped, and ``self.<name>`` (set once in ``__init__``) and
        local names (set earlier in the block) replaced by their values."""
        expanded = []
        for node, sign in parts:
            node = bare(node)
            value = literal_value(node)
            if value in (1, 1.0) and not isinstance(value, bool):
                continue
            if depth and is_self_attribute(node):
                found = init_value(self._class_of(chain.output), node.attr.value)
            elif depth and isinstance(node, cst.Name):
                start = chain.consumed[-1] if chain.consumed else chain.statement
                definition = self._definition(node.value, start)
                found = definition.body[0].value if definition is not None else None
            else:
                found = None
            if found is None:
                expanded.append((node, sign))
            else:
                expanded += [(p, s * sign) for p, s in self._expand(factors(found), chain, depth - 1)]
        return expanded

    def _is_inverse_sqrt(self, node: cst.BaseExpression, sign: int, head: set[str], chain: _Chain) -> bool:
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

    def _is_head_size(self, node: cst.BaseExpression, head: set[str], chain: _Chain) -> bool:
        """``node`` reads as a head size in ``head``, or is a local name set to one earlier in the block."""
        node = bare(node)
        if _normal_code(node) in head:
            return True
        if not isinstance(node, cst.Name):
            return False
        start = chain.consumed[-1] if chain.consumed else chain.statement
        found = self._definition(node.value, start)
        return found is not None and _normal_code(_value(found)) in head

    def _check_mask(self, function, chain: _Chain, q: str, k: str, seq) -> list[cst.SimpleStatementLine]:
        """The mask is causal over q's and k's sequence; the local statements that build it."""
        if len(chain.masks) != 1:
            raise _Refused("the scores are not masked (exactly once): not a causal attention")
        mask, fill = chain.masks[0]
        mask, additive = bare(mask), fill is None
        if not additive and not _is_minus_infinity(bare(fill), self.names):
            raise _Refused(f"masked positions are filled with `{code_of(fill)}`, not -inf")
        wanted = TRIU
        if isinstance(mask, cst.Comparison) and not additive:
            if (
                len(mask.comparisons) != 1
                or not isinstance(mask.comparisons[0].operator, cst.Equal)
                or literal_value(bare(mask.comparisons[0].comparator)) not in (0, 0.0)
            ):
                raise _Refused(f"the mask `{code_of(mask)}` is not `tril(...) == 0` or a triu bool mask")
            mask, wanted = bare(mask.left), TRIL
        local: list[cst.SimpleStatementLine] = []
        mask = _without_bool(mask)
        if isinstance(mask, cst.Name):
            found = self._definition(mask.value, chain.statement, skip=chain.consumed)
            if found is None:
                raise _Refused(f"the mask `{mask.value}` is not set in this block")
            local.append(found)
            mask = _without_bool(bare(_value(found)))
        buffer = _without_bool(bare(mask.value)) if isinstance(mask, cst.Subscript) else None
        if buffer is not None and is_self_attribute(buffer):
            cls = self._class_of(chain.output)
            value = init_value(cls, buffer.attr.value)
            if value is None:
                raise _Refused(f"`{code_of(buffer)}` is not set once, in __init__")
            self._check_not_mutated(cls, buffer)
            rows, cols = self._triangle(bare(value), wanted, sliced=mask, additive=additive)
        elif isinstance(mask, cst.Call):
            rows, cols = self._triangle(mask, wanted, sliced=None, additive=additive)
        else:
            raise _Refused(f"the mask `{code_of(mask)}` is not a buffer slice or a tensor built here")
        for size in (rows, cols) if local else ():
            self._check_bound_before(function, size, local[0])
        queries, keys = ({f"{x}.size(-2)", f"{x}.shape[-2]"} for x in (q, k))
        if seq is not None:
            queries.add(_normal_code(seq))
            keys.add(_normal_code(seq))
        if not (_normal_code(rows) in queries and _normal_code(cols) in keys):
            raise _Refused(
                f"the mask spans {code_of(rows)}×{code_of(cols)}, not provably the sequence length of q and k "
                "(their `.view(B, T, H, D)` names it)"
            )
        return local

    def _check_not_mutated(self, cls: cst.ClassDef, buffer: cst.Attribute) -> None:
        """No method changes the mask buffer in place (``self.bias.fill_(...)``, ``self.bias[...] = ...``)."""
        for node in m.findall(cls, m.Call() | m.AssignTarget() | m.AugAssign()):
            if isinstance(node, cst.Call):
                in_place = isinstance(node.func, cst.Attribute) and node.func.attr.value.endswith("_")
                target = node.func.value if in_place else None
            else:
                target = node.target.value if isinstance(node.target, cst.Subscript) else None
            if target is not None and same(target, buffer):
                raise _Refused(f"`{code_of(buffer)}` is changed in place at line {self.line(node)}")

    def _triangle(self, value: cst.BaseExpression, wanted: str, sliced: cst.Subscript | None, additive: bool):
        """``(rows, cols)`` the causal mask spans: a ``tril``/``triu`` of ``ones(rows, cols)``, or (``additive``)
        a ``triu`` of ``full((rows, cols), -inf)`` (sliced to ``[..., :rows, :cols]`` when ``sliced``)."""
        node, view = value, None
        if is_method(node, "view", "reshape") and len(node.args) == 4:
            if [literal_value(a.value) for a in node.args[:2]] != [1, 1]:
                raise _Refused(f"the mask buffer is viewed as `{code_of(node)}`")
            view, node = [a.value for a in node.args], bare(node.func.value)
        while is_method(node, "bool") and not node.args:
            node = bare(node.func.value)
        if tensor_method(node, self.names, TRIL, TRIU):
            kind, ones, diagonal = node.func.attr.value, bare(node.func.value), argument(node, 0, "diagonal")
        elif isinstance(node, cst.Call) and self.names(node.func) & {"torch.tril", "torch.triu"}:
            kind = TRIL if "torch.tril" in self.names(node.func) else TRIU
            ones, diagonal = bare(argument(node, 0, "input")), argument(node, 1, "diagonal")
        else:
            raise _Refused(f"the mask is not a tril/triu of ones (`{code_of(value)}`)")
        while is_method(ones, "bool") and not ones.args:
            ones = bare(ones.func.value)
        expected_diagonal = 0 if kind == TRIL else 1
        if kind != wanted or (literal_value(diagonal) if diagonal is not None else 0) != expected_diagonal:
            usage = "`== 0`" if wanted == TRIL else "as is"
            raise _Refused(
                f"a {kind} mask with diagonal={code_of(diagonal) if diagonal else 0} used {usage} is not causal"
            )
        sizes = self._additive_sizes(ones) if additive else self._ones_sizes(ones)
        if len(sizes) != 2:
            raise _Refused(f"the mask is not square over two sizes (`{code_of(ones)}`)")
        if view is not None and not (same(view[2], sizes[0]) and same(view[3], sizes[1])):
            raise _Refused("the mask buffer's view does not keep its two sizes last")
        dims = 2 if view is None else 4
        if sliced is None:
            return sizes
        if not same(sizes[0], sizes[1]):
            raise _Refused("the mask buffer is not square")
        if len(sliced.slice) != dims:
            raise _Refused(f"`{code_of(sliced)}` does not index every dimension of the mask buffer")
        bounds = []
        for position, element in enumerate(sliced.slice):
            part = element.slice
            if not isinstance(part, cst.Slice) or part.lower is not None or part.step is not None:
                raise _Refused(f"`{code_of(sliced)}` is not a `[:, :, :T, :T]` slice")
            if position < dims - 2 and part.upper is not None:
                raise _Refused(f"`{code_of(sliced)}` is not a `[:, :, :T, :T]` slice")
            if position >= dims - 2:
                if part.upper is None:
                    raise _Refused(f"`{code_of(sliced)}` does not cut the mask to the sequence length")
                bounds.append(part.upper)
        return bounds

    def _ones_sizes(self, ones: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The sizes of ``torch.ones(N, M)`` or ``torch.ones((N, M))``."""
        if not (isinstance(ones, cst.Call) and "torch.ones" in self.names(ones.func)):
            raise _Refused(f"the mask is not built from torch.ones (`{code_of(ones)}`)")
        sizes = [a.value for a in ones.args if a.keyword is None and not a.star]
        if len(sizes) == 1 and isinstance(bare(sizes[0]), (cst.Tuple, cst.List)):
            sizes = [e.value for e in bare(sizes[0]).elements]
        return sizes

    def _additive_sizes(self, full: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The sizes of ``torch.full((N, M), -inf)``: a mask added to the scores, -inf where it masks."""
        if not (isinstance(full, cst.Call) and "torch.full" in self.names(full.func)):
            raise _Refused(
                f"the mask added to the scores is not a triu of torch.full(..., -inf) (`{code_of(full)}`)"
            )
        size, fill = argument(full, 0, "size"), argument(full, 1, "fill_value")
        if fill is None or not _is_minus_infinity(fill, self.names):
            raise _Refused(f"the mask added to the scores is not -inf where it masks (`{code_of(full)}`)")
        if not isinstance(bare(size), (cst.Tuple, cst.List)):
            raise _Refused(f"the mask is not square over two sizes (`{code_of(full)}`)")
        return [e.value for e in bare(size).elements]

    def _check_contiguous(self, chain: _Chain, values: cst.BaseExpression, local_masks) -> None:
        """Only statements that leave q, k and v alone may sit between the steps: SDPA reads them later."""
        if not chain.consumed:
            return
        body = self._block(chain.statement)
        first = next(i for i, s in enumerate(body) if s is chain.consumed[-1])
        last = next(i for i, s in enumerate(body) if s is chain.statement)
        read = {
            n.value
            for node in (values, chain.scores.left, chain.scores.right, chain.dropout)
            if node is not None
            for n in m.findall(node, m.Name())
        }
        ours = {id(s) for s in chain.consumed + local_masks}
        for statement in body[first:last]:
            if id(statement) in ours:
                continue
            touched = read & {n.value for n in m.findall(statement, m.Name())}
            if touched:
                raise _Refused(
                    f"line {self.line(statement)}, between the steps, uses `{sorted(touched)[0]}`, which SDPA "
                    "would read after it"
                )

    def _check_weights_unread(self, function, chain: _Chain) -> None:
        """The intermediate names are read only by the chain: nothing else needs the attention weights."""
        for statement in chain.consumed:
            name = _bound_name(statement)
            reads, _writes, nested = self.reads_and_writes(function, name)
            for read in reads + nested:
                if not (self.within(read, chain.output) or any(self.within(read, s) for s in chain.consumed)):
                    raise _Refused(
                        f"`{name}` is also read at line {self.line(read)}: scaled_dot_product_attention does not "
                        "return the attention weights"
                    )

    def _only_read_in(self, function, statement, chain: _Chain) -> bool:
        name = statement.body[0].targets[0].target.value
        reads, _writes, nested = self.reads_and_writes(function, name)
        return not nested and all(any(self.within(r, s) for s in chain.consumed) for r in reads)

    # -- the edit -----------------------------------------------------------------------------------------------
    def _rewrite(self, chain: _Chain, q: str, k: str, dropped: list[cst.SimpleStatementLine]) -> None:
        if self.prefix is None:
            self.prefix = functional(self, self.tree)
        keywords = {"is_causal": cst.Name("True")}
        if chain.dropout is not None:
            keywords["dropout_p"] = chain.dropout
        prefix = self.prefix

        def attend(updated: cst.CSTNode) -> cst.CSTNode:
            values = updated.right if isinstance(updated, cst.BinaryOperation) else updated.args[-1].value
            return call_expr(
                f"{prefix}.scaled_dot_product_attention", cst.Name(q), cst.Name(k), bare(values), **keywords
            )

        self.replacements[chain.output] = attend
        self.dropped.update(dropped)
        body = self._block(chain.statement)
        top = min((s for s in dropped if s in chain.consumed), key=lambda s: body.index(s), default=None)
        if top is not None:
            lines = list(top.leading_lines)
            self.replacements[chain.statement] = lambda updated: updated.with_changes(
                leading_lines=lines + list(updated.leading_lines)
            )

    def _class_of(self, node: cst.CSTNode) -> cst.ClassDef | None:
        return next((a for a in self.ancestors(node) if isinstance(a, cst.ClassDef)), None)


def _without_bool(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` without trailing ``.bool()`` calls."""
    while is_method(node, "bool") and not node.args:
        node = bare(node.func.value)
    return node


def _normal_code(node: cst.CSTNode) -> str:
    return "".join(code_of(bare(node)).split())


class Sdpa(Optimization):
    """Hand-written masked-softmax causal attention → torch's fused scaled_dot_product_attention."""

    id = "sdpa"
    title = "scaled_dot_product_attention for hand-written causal attention"
    tier = 1
    expected = (
        "+60% tokens/s on a from-scratch GPT in bf16 (example GPT, H100: x1.59); no T×T matrix in memory"
    )
    summary = "softmax(q @ k.T * 1/sqrt(d), causal mask) [dropout] @ v → F.scaled_dot_product_attention(is_causal=True)"
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "F.scaled_dot_product_attention computes the same causal attention in a fused kernel's order"
    )
    measured_on = (ProgramShape.LOOP,)
    keywords = (
        "scaled_dot_product_attention",
        "scaled dot product attention",
        "hand-written attention",
        "masked softmax",
    )
    capabilities = ("fused attention", "flash attention", "flashattention", "efficient attention")
    codemods = (_Sdpa,)
    needs = (Word("softmax"), Word("scaled_dot_product_attention"))

    examples = (
        Example(
            "nanogpt_attention",
            before="""\
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.register_buffer(
            "bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size)
        )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

        # causal self-attention
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)
""",
            after="""\
import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.register_buffer(
            "bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size)
        )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

        # causal self-attention
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.attn_dropout.p if self.attn_dropout.training else 0.0)
        return y.transpose(1, 2).contiguous().view(B, T, C)
""",
        ),
        Example(
            "reshape_matmul_local_triu_mask_self_scale",
            before="""\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = v.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        weights = torch.softmax(scores.masked_fill(mask, -torch.inf), dim=-1)
        weights = torch.nn.functional.dropout(weights, p=self.dropout, training=self.training)
        out = torch.matmul(weights, v)
        return out.transpose(1, 2).reshape(b, t, -1)
""",
            after="""\
from torch import nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = v.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return out.transpose(1, 2).reshape(b, t, -1)
""",
        ),
        Example(
            "softmax_of_other_scores",
            before="""\
import torch


def mix(scores, values):
    return torch.softmax(scores, dim=-1) @ values
""",
        ),
        Example(
            "refuses_returned_attention_weights",
            before="""\
import math

import torch
import torch.nn.functional as F


def attend(q, k, v):
    T = q.size(-2)
    mask = torch.ones(T, T).tril()
    att = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))
    att = att.masked_fill(mask == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    return att @ v, att
""",
            refusal="does not return the attention weights",
        ),
        Example(
            "refuses_temperature_scale",
            before="""\
import torch
import torch.nn.functional as F


def attend(q, k, v, temperature):
    T = q.size(-2)
    mask = torch.ones(T, T).tril()
    att = (q @ k.transpose(-2, -1)) / temperature
    att = att.masked_fill(mask == 0, float("-inf"))
    return F.softmax(att, dim=-1) @ v
""",
            refusal="not provably 1/sqrt(head size)",
        ),
        Example(
            "already_fused",
            before="""\
import torch.nn.functional as F


def attend(q, k, v, p):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
""",
        ),
    )
