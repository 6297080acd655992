"""The codemod: each function or ``forward`` whose body is a hand-written GELU or layer norm gets one ``return`` of
torch's kernel (``F.gelu``/``F.layer_norm``); the formulas are read in ``gelu_formula.py`` and
``layer_norm_formula.py``."""

from __future__ import annotations

from typing import cast

import libcst as cst
import libcst.matchers as m

from optimizations.edits.expressions import call_expr
from optimizations.edits.model_code import drop_unused_imports, functional
from optimizations.edits.planned import PlannedCodemod
from optimizations.program.choices import written_out_on_purpose
from optimizations.program.syntax import code_of

from .gelu_formula import gelu_kind
from .layer_norm_formula import LayerNormForward, Refused, parameter_size

# The torch kernels a hand-written body becomes: a body that already returns one of them is already done.
FUNCTIONAL_KERNELS = ("layer_norm", "gelu")


def _body(function: cst.FunctionDef) -> tuple[list[cst.BaseStatement], list[cst.BaseStatement]]:
    """``(docstring statements, the rest)`` of a function's body; none for a body on the ``def`` line."""
    if not isinstance(function.body, cst.IndentedBlock):
        return [], []
    statements = list(function.body.body)
    if (
        statements
        and isinstance(statements[0], cst.SimpleStatementLine)
        and isinstance(statements[0].body[0], cst.Expr)
        and isinstance(statements[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    ):
        return statements[:1], statements[1:]
    return [], statements


def _returned(statement: cst.BaseStatement) -> cst.BaseExpression | None:
    """The value of a line that is one ``return <value>``; ``None`` for any other statement."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Return):
            return small.value
    return None


def _named(statement: cst.BaseStatement) -> tuple[str, cst.BaseExpression] | None:
    """``(name, value)`` of a line that is one ``name = value``; ``None`` for any other statement."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
            if isinstance(target, cst.Name):
                return target.value, small.value
    return None


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


class NormGelu(PlannedCodemod):
    """Hand-written GELU bodies → ``F.gelu``, hand-written layer-norm ``forward`` bodies → ``F.layer_norm``."""

    def plan(self, module: cst.Module) -> None:
        self.prefix: str | None = None
        self.tree = module
        removed: list[cst.CSTNode] = []
        for function in self.nodes(cst.FunctionDef):
            cls = self.owning_class(function)
            if cls is not None and function.name.value != "forward":
                continue
            x = _input(function, cls is not None)
            if x is None:
                continue
            docstring, rest = _body(function)
            if self._already_functional(function, rest):
                continue
            removed += self._plan_gelu(function, x, docstring, rest)
            if cls is not None:
                removed += self._plan_layer_norm(function, cls, x, docstring, rest)
        if removed:
            drop_unused_imports(self, module, removed, keep=[self._functional().split(".")[0]])

    def _already_functional(self, function: cst.FunctionDef, rest: list[cst.BaseStatement]) -> bool:
        """The body is already one ``return`` of torch's own kernel (``F.layer_norm``/``F.gelu``): say so."""
        call = _returned(rest[0]) if len(rest) == 1 else None
        if not isinstance(call, cst.Call):
            return False
        kernel = next(
            (k for k in FUNCTIONAL_KERNELS if f"torch.nn.functional.{k}" in self.names(call.func)), None
        )
        if kernel is not None:
            self.already(
                function, f"{self._qualified(function)}(): torch's {kernel} (`{code_of(call.func)}(...)`)"
            )
        return kernel is not None

    def _kept(self, function: cst.FunctionDef) -> bool:
        """Keep a hand-written formula (a site reported as kept) whose function's or class's docstring says it is
        written out so on purpose (``Careful ... this one is the exact one used by OpenAI``)."""
        cls = self.owning_class(function)
        choice = written_out_on_purpose(self.parsed, *((function,) if cls is None else (function, cls)))
        if choice is not None:
            self.kept(
                self.line(function),
                f"{self._qualified(function)}(): written out by hand on purpose",
                choice.evidence,
            )
        return choice is not None

    def _qualified(self, function: cst.FunctionDef) -> str:
        """``Class.method`` or ``function``."""
        owner = self.owning_class(function)
        prefix = f"{owner.name.value}." if owner is not None else ""
        return prefix + function.name.value

    def _replace_body(
        self, function: cst.FunctionDef, docstring: list[cst.BaseStatement], call: cst.BaseExpression
    ) -> None:
        statement = cst.SimpleStatementLine([cst.Return(call)])

        def with_body(updated: cst.CSTNode) -> cst.CSTNode:
            definition = cast(cst.FunctionDef, updated)  # the replacement of a def gets that def, updated
            return definition.with_changes(body=definition.body.with_changes(body=[*docstring, statement]))

        self.replacements[function] = with_body

    def _functional(self) -> str:
        if self.prefix is None:
            self.prefix = functional(self, self.tree)
        return self.prefix

    def _plan_gelu(
        self,
        function: cst.FunctionDef,
        x: str,
        docstring: list[cst.BaseStatement],
        rest: list[cst.BaseStatement],
    ) -> list[cst.BaseStatement]:
        value = _returned(rest[0]) if len(rest) == 1 else None
        if value is None:
            return []
        kind = gelu_kind(value, x, self.names)
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
        if self._kept(function):
            return []
        keywords = {"approximate": cst.SimpleString('"tanh"')} if kind == "tanh" else {}
        self._replace_body(
            function, docstring, call_expr(f"{self._functional()}.gelu", cst.Name(x), **keywords)
        )
        formula = 'F.gelu(x, approximate="tanh")' if kind == "tanh" else "F.gelu(x)"
        self.changed(function, f"{self._qualified(function)}(): hand-written {kind} GELU → {formula}")
        return rest

    def _plan_layer_norm(
        self,
        function: cst.FunctionDef,
        cls: cst.ClassDef,
        x: str,
        docstring: list[cst.BaseStatement],
        rest: list[cst.BaseStatement],
    ) -> list[cst.BaseStatement]:
        result = _returned(rest[-1]) if rest else None
        if result is None:
            return []
        intermediates: dict[str, cst.BaseExpression] = {}
        simple = True
        for statement in rest[:-1]:
            named = _named(statement)
            if named is not None:
                name, value = named
                simple = simple and name not in intermediates and name != x
                intermediates[name] = value
            else:
                simple = False
        forward = LayerNormForward(self.names, intermediates)
        if not forward.centres(result, x):
            return []  # not a normalisation
        if self._kept(function):
            return []
        message = f"{cls.name.value}.forward(): hand-written layer norm → F.layer_norm (parameters unchanged)"
        try:
            if not simple:
                raise Refused("the forward does more than name intermediate values and return the result")
            read = {
                n.value
                for node in [result, *intermediates.values()]
                for n in m.findall(node, m.Name())
                if isinstance(n, cst.Name)  # what m.Name() finds
            }
            unused = sorted(set(intermediates) - read)
            if unused:
                raise Refused(f"`{unused[0]}` is set but the result does not use it")
            weight, bias, eps = forward.layer_norm(result, x)
            size = parameter_size(cls, weight, None, self.names)
            parameter_size(cls, bias, size, self.names)
        except Refused as refusal:
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
