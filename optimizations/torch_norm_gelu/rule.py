"""Hand-written layer norm and GELU → torch's own kernels, where the formula is provably the same.

- A module whose ``forward(self, x)`` returns ``(x - mean) / sqrt(var + eps) * self.w + self.b`` (any order of
  factors and terms, ``rsqrt`` or ``/ sqrt``, intermediate names) with ``mean = x.mean(-1, keepdim=True)`` and
  ``var`` the biased variance over the last dimension (``x.var(-1, keepdim=True, unbiased=False)``,
  ``correction=0``, or ``((x - mean) ** 2).mean(-1, keepdim=True)``) gets the body
  ``return F.layer_norm(x, x.shape[-1:], self.w, self.b, eps)``: normalised over the last dimension, as the
  mean and variance were (``self.w.shape`` would normalise over more dimensions if ``n`` were a tuple; this
  way a parameter of another shape raises). ``self.w``/``self.b`` must be parameters built from one size,
  set once in ``__init__`` (``nn.Parameter(torch.ones(n))``): the class, its ``__init__`` and so its
  state-dict keys stay as they were. Refused: the unbiased variance (n-1), eps added to
  the standard deviation rather than the variance (the Annotated Transformer's form), anything else in the body.
- A function or ``forward`` whose body returns the GPT-2 GELU,
  ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``, gets ``return F.gelu(x, approximate="tanh")``;
  the exact one, ``0.5 * x * (1 + erf(x / sqrt(2)))``, gets ``return F.gelu(x)``. Constants may be written as
  literals to 10 significant digits. A body that names 0.044715 or ``erf`` but is not the formula term for
  term is refused.

Callers and parameter names are untouched. The fused kernels round differently from the chain of
element-wise ops: outputs and gradients agree to float32 rounding (``tests/test_from_scratch.py``).
"""

from __future__ import annotations

import math

import libcst as cst
import libcst.matchers as m

from optimizations.edits.expressions import call_expr
from optimizations.edits.model_code import drop_unused_imports, functional
from optimizations.edits.planned import PlannedCodemod
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
from optimizations.program.shapes import ProgramShape
from optimizations.program.syntax import code_of, literal_value
from optimizations.registry import AllOf, Example, Numerics, Optimization, Word

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
GELU_CUBIC = 0.044715
RELATIVE_TOLERANCE = 1e-9
PARAMETER = ("torch.nn.Parameter", "torch.nn.parameter.Parameter")
FILLS = ("torch.ones", "torch.zeros", "torch.empty", "torch.randn", "torch.rand")


class _Refused(Exception):
    """A check failed; the message is the reason."""


def _close(value: float | None, wanted: float) -> bool:
    return value is not None and math.isclose(value, wanted, rel_tol=RELATIVE_TOLERANCE)


def _body(function: cst.FunctionDef) -> tuple[list[cst.BaseStatement], list[cst.BaseStatement]]:
    """``(docstring statements, the rest)`` of a function's body."""
    statements = list(function.body.body)
    if (
        statements
        and isinstance(statements[0], cst.SimpleStatementLine)
        and isinstance(statements[0].body[0], cst.Expr)
        and isinstance(statements[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    ):
        return statements[:1], statements[1:]
    return [], statements


def _input(function: cst.FunctionDef, method: bool) -> str | None:
    """The one tensor parameter (after ``self`` for a method), without a default."""
    params = function.params
    if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.kwonly_params or params.star_kwarg:
        return None
    names = [p.name.value for p in params.params] if not params.posonly_params else []
    if any(p.default for p in params.params):
        return None
    if method:
        return names[1] if len(names) == 2 and names[0] == "self" else None
    return names[0] if len(names) == 1 else None


# The torch kernels a hand-written body becomes: a body that already returns one of them is already done.
FUNCTIONAL_KERNELS = ("layer_norm", "gelu")


class _NormGelu(PlannedCodemod):
    def plan(self, module: cst.Module) -> None:
        self.prefix: str | None = None
        self.tree = module
        removed: list[cst.CSTNode] = []
        for function in self.nodes(cst.FunctionDef):
            cls = self.parent(self.parent(function))
            in_class = isinstance(cls, cst.ClassDef)
            if in_class and function.name.value != "forward":
                continue
            x = _input(function, in_class)
            if x is None:
                continue
            docstring, rest = _body(function)
            if self._already_functional(function, rest):
                continue
            removed += self._plan_gelu(function, x, docstring, rest)
            if in_class:
                removed += self._plan_layer_norm(function, cls, x, docstring, rest)
        if removed:
            drop_unused_imports(self, module, removed, keep=[self.prefix.split(".")[0]])

    def _already_functional(self, function: cst.FunctionDef, rest: list[cst.BaseStatement]) -> bool:
        """The body is already one ``return`` of torch's own kernel (``F.layer_norm``/``F.gelu``): say so."""
        if len(rest) != 1 or not m.matches(rest[0], m.SimpleStatementLine([m.Return(value=m.Call())])):
            return False
        call = rest[0].body[0].value
        kernel = next(
            (k for k in FUNCTIONAL_KERNELS if f"torch.nn.functional.{k}" in self.names(call.func)), None
        )
        if kernel is not None:
            self.already(
                function, f"{self._qualified(function)}(): torch's {kernel} (`{code_of(call.func)}(...)`)"
            )
        return kernel is not None

    def _qualified(self, function: cst.FunctionDef) -> str:
        """``Class.method`` or ``function``."""
        owner = self.parent(self.parent(function))
        prefix = f"{owner.name.value}." if isinstance(owner, cst.ClassDef) else ""
        return prefix + function.name.value

    def _replace_body(self, function, docstring, call: cst.BaseExpression) -> None:
        statement = cst.SimpleStatementLine([cst.Return(call)])
        self.replacements[function] = lambda updated: updated.with_changes(
            body=updated.body.with_changes(body=[*docstring, statement])
        )

    def _functional(self) -> str:
        if self.prefix is None:
            self.prefix = functional(self, self.tree)
        return self.prefix

    # -- GELU ---------------------------------------------------------------------------------------------
    def _plan_gelu(self, function, x: str, docstring, rest) -> list[cst.CSTNode]:
        if len(rest) != 1 or not m.matches(rest[0], m.SimpleStatementLine([m.Return()])):
            return []
        value = rest[0].body[0].value
        if value is None:
            return []
        kind = self._gelu(value, x)
        if kind is None:
            text = code_of(value)
            if "0.044715" in text or "erf" in text:
                self.refused(
                    function,
                    f"{self._qualified(function)}(): hand-written GELU → F.gelu",
                    "not the GELU formula term for term (0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) or "
                    "0.5·x·(1 + erf(x/√2)))",
                )
            return []
        keywords = {"approximate": cst.SimpleString('"tanh"')} if kind == "tanh" else {}
        self._replace_body(
            function, docstring, call_expr(f"{self._functional()}.gelu", cst.Name(x), **keywords)
        )
        formula = 'F.gelu(x, approximate="tanh")' if kind == "tanh" else "F.gelu(x)"
        self.changed(function, f"{self._qualified(function)}(): hand-written {kind} GELU → {formula}")
        return rest

    def _gelu(self, node: cst.BaseExpression, x: str) -> str | None:
        """``"tanh"`` or ``"erf"`` when ``node`` is that GELU of ``x``."""
        parts = factors(node)
        if any(sign != 1 for _, sign in parts):
            return None
        halves = [p for p, _ in parts if _close(constant(p, self.names), 0.5)]
        inputs = [p for p, _ in parts if m.matches(p, m.Name(x))]
        others = [p for p, _ in parts if p not in halves and p not in inputs]
        if len(halves) != 1 or len(inputs) != 1 or len(others) != 1:
            return None
        summands = terms(others[0])
        ones = [t for t in summands if _close(constant(t, self.names), 1.0)]
        calls = [t for t in summands if t not in ones]
        if len(summands) != 2 or len(ones) != 1 or not isinstance(calls[0], cst.Call):
            return None
        call = calls[0]
        names = self.names(call.func)
        if names & {"torch.tanh", "torch.nn.functional.tanh"} or (tensor_method(call, self.names, "tanh")):
            kind = "tanh"
        elif names & {"torch.erf", "torch.special.erf"} or (tensor_method(call, self.names, "erf")):
            kind = "erf"
        else:
            return None
        inner = call.func.value if tensor_method(call, self.names, kind) else argument(call, 0, "input")
        if inner is None:
            return None
        scale, rest = self._split_constant(inner)
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
        coefficient, powers = self._split_constant(cubic[0])
        degree = sum(self._power_of(p, x) or 99 for p in powers)
        return kind if _close(coefficient, GELU_CUBIC) and degree == 3 else None

    def _split_constant(self, node: cst.BaseExpression) -> tuple[float | None, list[cst.BaseExpression]]:
        """``(product of the constant factors, the other factors)``; ``None`` when a non-constant divides."""
        value, rest = 1.0, []
        for part, sign in factors(node):
            number = constant(part, self.names)
            if number is not None and number != 0:
                value *= number**sign
            elif sign == 1:
                rest.append(part)
            else:
                return None, rest
        return value, rest

    def _power_of(self, node: cst.BaseExpression, x: str) -> int | None:
        """``n`` for ``x``, ``x ** n``, ``torch.pow(x, n)``, ``x.pow(n)``."""
        node = bare(node)
        if m.matches(node, m.Name(x)):
            return 1
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
            base, exponent = node.left, node.right
        elif isinstance(node, cst.Call) and "torch.pow" in self.names(node.func) and len(node.args) == 2:
            base, exponent = node.args[0].value, node.args[1].value
        elif is_method(node, "pow") and len(node.args) == 1:
            base, exponent = node.func.value, node.args[0].value
        else:
            return None
        value = literal_value(bare(exponent))
        if m.matches(bare(base), m.Name(x)) and isinstance(value, (int, float)) and float(value).is_integer():
            return int(value)
        return None

    # -- layer norm ---------------------------------------------------------------------------------------
    def _plan_layer_norm(self, function, cls: cst.ClassDef, x: str, docstring, rest) -> list[cst.CSTNode]:
        if (
            not rest
            or not m.matches(rest[-1], m.SimpleStatementLine([m.Return()]))
            or rest[-1].body[0].value is None
        ):
            return []
        self.locals: dict[str, cst.BaseExpression] = {}
        simple = True
        for statement in rest[:-1]:
            if m.matches(statement, m.SimpleStatementLine([m.Assign(targets=[m.AssignTarget(m.Name())])])):
                name = statement.body[0].targets[0].target.value
                simple = simple and name not in self.locals and name != x
                self.locals[name] = statement.body[0].value
            else:
                simple = False
        result = rest[-1].body[0].value
        if not self._centres(result, x):
            return []  # not a normalisation
        message = f"{cls.name.value}.forward(): hand-written layer norm → F.layer_norm (parameters unchanged)"
        try:
            if not simple:
                raise _Refused("the forward does more than name intermediate values and return the result")
            read = {n.value for node in [result, *self.locals.values()] for n in m.findall(node, m.Name())}
            unused = sorted(set(self.locals) - read)
            if unused:
                raise _Refused(f"`{unused[0]}` is set but the result does not use it")
            weight, bias, eps = self._layer_norm(result, x)
            size = self._parameter_size(cls, weight, None)
            self._parameter_size(cls, bias, size)
        except _Refused as refusal:
            self.refused(function, message, str(refusal))
            return []
        none = cst.Name("None")
        shape = cst.parse_expression(f"{x}.shape[-1:]")
        call = call_expr(
            f"{self._functional()}.layer_norm", cst.Name(x), shape, weight or none, bias or none, eps
        )
        self._replace_body(function, docstring, call)
        self.changed(function, message)
        return rest

    def _resolve(self, node: cst.BaseExpression) -> cst.BaseExpression:
        node = bare(node)
        seen = 0
        while isinstance(node, cst.Name) and node.value in self.locals and seen < 16:
            node, seen = bare(self.locals[node.value]), seen + 1
        return node

    def _flat(self, node: cst.BaseExpression) -> list[tuple[cst.BaseExpression, int]]:
        """:func:`factors`, through the forward's intermediate names."""
        out = []
        for part, sign in factors(self._resolve(node)):
            part = self._resolve(part)
            inner = factors(part)
            if len(inner) > 1:
                out += [(p, s * sign) for p, s in self._flat(part)]
            else:
                out.append((part, sign))
        return out

    def _centres(self, node: cst.BaseExpression, x: str) -> bool:
        """Whether a term of ``node`` has a factor ``x - <mean of x>``."""
        return any(self._is_centred(p, x) for t in terms(self._resolve(node)) for p, _ in self._flat(t))

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
        if tensor_method(node, self.names, "mean"):
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

    def _layer_norm(self, node: cst.BaseExpression, x: str):
        """``(weight, bias, eps)`` of a hand-written layer norm; refuses what differs from torch's."""
        summands = terms(self._resolve(node))
        biases = [t for t in summands if is_self_attribute(t)]
        main = [t for t in summands if not is_self_attribute(t)]
        if len(main) != 1 or len(biases) > 1:
            raise _Refused(f"`{code_of(node)}` is not normalised·weight + bias")
        weight, centred, root = None, 0, None
        for part, sign in self._flat(main[0]):
            if is_self_attribute(part) and sign == 1 and weight is None:
                weight = part
            elif self._is_centred(part, x) and sign == 1:
                centred += 1
            elif root is None:
                root = (part, sign)
            else:
                raise _Refused(f"an extra factor `{code_of(part)}` in the normalisation")
        if centred != 1 or root is None:
            raise _Refused("not (x - mean) times one inverse square root")
        eps = self._variance_plus_eps(*root, x)
        return weight, biases[0] if biases else None, eps

    def _variance_plus_eps(self, node: cst.BaseExpression, sign: int, x: str) -> cst.BaseExpression:
        node = self._resolve(node)
        if isinstance(node, cst.Call) and (
            "torch.rsqrt" in self.names(node.func) or (tensor_method(node, self.names, "rsqrt"))
        ):
            inner, wanted = (
                (node.func.value if tensor_method(node, self.names, "rsqrt") else argument(node, 0, "input")),
                1,
            )
        elif isinstance(node, cst.Call) and (
            "torch.sqrt" in self.names(node.func) or (tensor_method(node, self.names, "sqrt"))
        ):
            inner, wanted = (
                (node.func.value if tensor_method(node, self.names, "sqrt") else argument(node, 0, "input")),
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
                raise _Refused(
                    "eps is added to the standard deviation, not to the variance under the square root"
                )
            raise _Refused(f"`{code_of(node)}` is not the square root of variance + eps")
        if sign != wanted:
            raise _Refused(f"`{code_of(node)}` multiplies where it should divide")
        summands = terms(self._resolve(inner))
        if len(summands) != 2:
            raise _Refused(f"`{code_of(inner)}` is not variance + eps")
        for variance, eps in (summands, summands[::-1]):
            if self._is_variance(variance, x):
                if not (constant(eps, self.names) is not None or is_self_attribute(bare(eps))):
                    raise _Refused(f"eps `{code_of(eps)}` is not a number or a `self.` setting")
                return bare(eps)
        raise _Refused(f"`{code_of(inner)}` is not the biased variance over the last dimension plus eps")

    def _is_std(self, node: cst.BaseExpression) -> bool:
        node = self._resolve(node)
        return isinstance(node, cst.Call) and (is_method(node, "std") or "torch.std" in self.names(node.func))

    def _is_variance(self, node: cst.BaseExpression, x: str) -> bool:
        node = self._resolve(node)
        if not isinstance(node, cst.Call):
            return False
        if tensor_method(node, self.names, "var"):
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
            raise _Refused("the variance is unbiased (divides by n - 1); torch's layer norm divides by n")
        return True

    def _is_square_of_centred(self, node: cst.BaseExpression, x: str) -> bool:
        node = self._resolve(node)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
            return literal_value(bare(node.right)) == 2 and self._is_centred(node.left, x)
        if is_method(node, "pow") and len(node.args) == 1:
            return literal_value(node.args[0].value) == 2 and self._is_centred(node.func.value, x)
        if isinstance(node, cst.Call) and "torch.square" in self.names(node.func) and node.args:
            return self._is_centred(node.args[0].value, x)
        parts = factors(node)
        return (
            len(parts) == 2
            and all(s == 1 and self._is_centred(p, x) for p, s in parts)
            and same(self._resolve(parts[0][0]), self._resolve(parts[1][0]))
        )

    def _parameter_size(self, cls, attribute, size):
        """The size of a one-dimensional ``nn.Parameter(torch.ones(n))`` set once in ``__init__``."""
        if attribute is None:
            return size
        value = init_value(cls, attribute.attr.value)
        fill = (
            value.args[0].value
            if isinstance(value, cst.Call) and self.names(value.func) & set(PARAMETER) and value.args
            else None
        )
        fill = bare(fill) if fill is not None else None
        sizes = (
            [a.value for a in fill.args if a.keyword is None]
            if isinstance(fill, cst.Call) and self.names(fill.func) & set(FILLS)
            else []
        )
        if len(sizes) != 1 or isinstance(bare(sizes[0]), (cst.Tuple, cst.List)):
            raise _Refused(
                f"`{code_of(attribute)}` is not seen to be a one-dimensional parameter set in __init__"
            )
        if size is not None and not same(size, sizes[0]):
            raise _Refused(f"`{code_of(attribute)}` does not have the weight's size")
        return sizes[0]


def _last_dim(node: cst.BaseExpression) -> bool:
    node = bare(node)
    if isinstance(node, (cst.Tuple, cst.List)) and len(node.elements) == 1:
        node = bare(node.elements[0].value)
    return literal_value(node) == -1


class TorchNormGelu(Optimization):
    """Hand-written layer norm and GELU → F.layer_norm / F.gelu, parameters and callers unchanged."""

    id = "torch_norm_gelu"
    title = "torch's own layer norm and GELU kernels for hand-written ones"
    tier = 1
    expected = "+20-75% tokens/s on a from-scratch GPT (example GPT in bf16 with SDPA, H100: x1.76)"
    summary = "hand-written layer norm → F.layer_norm(x, x.shape[-1:], w, b, eps); tanh/erf GELU → F.gelu"
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = "torch's layer-norm and GELU kernels compute the same functions in another order"
    measured_on = (ProgramShape.LOOP,)
    keywords = (
        "layernorm",
        "layer norm",
        "gelu",
        "nn.layernorm",
        "f.layer_norm",
        "hand-written layer norm",
    )
    codemods = (_NormGelu,)
    # GELU's erf or tanh constant anywhere; a norm, in a module's forward, divides by a root or a std
    needs = (
        Word("erf"),
        "0.044715",
        *(AllOf((Word("forward"), root)) for root in (Word("sqrt"), Word("rsqrt"), ".std(")),
    )

    examples = (
        Example(
            "nanogpt_layer_norm_and_gelu",
            before="""\
import math

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    \"\"\"Layer normalisation over the last dimension, with a learned scale and shift.\"\"\"

    def __init__(self, ndim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def new_gelu(x):
    \"\"\"The GELU of the GPT-2 paper (tanh approximation).\"\"\"
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
""",
            after="""\
import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.Module):
    \"\"\"Layer normalisation over the last dimension, with a learned scale and shift.\"\"\"

    def __init__(self, ndim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


def new_gelu(x):
    \"\"\"The GELU of the GPT-2 paper (tanh approximation).\"\"\"
    return F.gelu(x, approximate="tanh")
""",
        ),
        Example(
            "rsqrt_norm_without_bias_gelu_module_and_erf",
            before="""\
import math

import torch
from torch import nn
from torch.nn import functional as F


class Norm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))

    def forward(self, h):
        centred = h - h.mean(-1, keepdim=True)
        return self.gain * centred * torch.rsqrt((centred**2).mean(-1, keepdim=True) + 1e-6)


class NewGELU(nn.Module):
    def forward(self, x):
        return x * 0.5 * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))


def exact_gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def mlp(x, w):
    return F.linear(exact_gelu(x), w)
""",
            after="""\
import torch
from torch import nn
from torch.nn import functional as F


class Norm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))

    def forward(self, h):
        return F.layer_norm(h, h.shape[-1:], self.gain, None, 1e-6)


class NewGELU(nn.Module):
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


def exact_gelu(x):
    return F.gelu(x)


def mlp(x, w):
    return F.linear(exact_gelu(x), w)
""",
        ),
        Example(
            "already_functional",
            before="""\
import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)
""",
        ),
        Example(
            "refuses_eps_on_standard_deviation",
            before="""\
import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    "Construct a layernorm module (See citation for details)."

    def __init__(self, features, eps=1e-6):
        super(LayerNorm, self).__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2
""",
            refusal="eps is added to the standard deviation",
        ),
    )
