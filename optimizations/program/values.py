"""What an expression may evaluate to, read from the code around it: names followed to their assignments in
the same function (then the module), both arms of ``a if test else b``, and ``{...}[key]`` looked up in the dict
literal. nanoGPT-style code picks its autocast dtype and optimizer options this way::

    dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    extra_args = dict(fused=True) if use_fused else dict()

:func:`outcomes` returns the expressions a value may come from (``torch.bfloat16``, ``torch.float16``), or
``None`` when one of them cannot be followed (a parameter, an attribute of a parsed config). :func:`dict_items`
reads the keys of each outcome that builds a dict.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from optimizations.program.codemod import NESTED_SCOPES, literal_value, walk

# How many names deep a value is followed before giving up (guards against cycles such as `x = x + 1`).
DEPTH = 8


def assignments(scope: cst.CSTNode, name: str) -> list[cst.Assign]:
    """The plain ``name = value`` statements of a function body or module (nested scopes skipped)."""
    body = scope.body if isinstance(scope, cst.FunctionDef) else scope
    return [
        node
        for node in walk(body, NESTED_SCOPES)
        if isinstance(node, cst.Assign)
        and any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets)
    ]


def parameters(function: cst.FunctionDef) -> set[str]:
    """The names a function's parameters bind."""
    params = function.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return {p.name.value for p in every}


def outcomes(
    node: cst.BaseExpression, scopes: list[cst.CSTNode], depth: int = DEPTH
) -> list[cst.BaseExpression] | None:
    """The expressions ``node`` may take its value from, innermost ``scopes`` first (a function, then the
    module); ``None`` when a name has no assignment there or the chain runs deeper than ``DEPTH``."""
    if depth == 0:
        return None
    if isinstance(node, cst.IfExp):
        body, orelse = outcomes(node.body, scopes, depth - 1), outcomes(node.orelse, scopes, depth - 1)
        return None if body is None or orelse is None else body + orelse
    if isinstance(node, cst.Name) and literal_value(node) is ...:
        for scope in scopes:
            if isinstance(scope, cst.FunctionDef) and node.value in parameters(scope):
                return None
            found = assignments(scope, node.value)
            if found:
                values = [outcomes(a.value, scopes, depth - 1) for a in found]
                return None if any(v is None for v in values) else [e for v in values for e in v]
        return None
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        table = outcomes(node.value, scopes, depth - 1)
        if table and all(isinstance(t, cst.Dict) for t in table) and isinstance(index, cst.Index):
            keys = outcomes(index.value, scopes, depth - 1)
            wanted = None if keys is None else {literal_value(k) for k in keys}
            picked = [
                element.value
                for t in table
                for element in t.elements
                if isinstance(element, cst.DictElement)
                and (wanted is None or literal_value(element.key) in wanted)
            ]
            values = [outcomes(v, scopes, depth - 1) for v in picked]
            return None if not picked or any(v is None for v in values) else [e for v in values for e in v]
    return [node]


def dict_items(node: cst.BaseExpression) -> dict[str, cst.BaseExpression] | None:
    """The ``key: value`` pairs of a dict literal with string keys, or of ``dict(key=value, ...)``; ``None``
    when the expression builds no dict or some keys cannot be read (a ``**`` inside, a computed key)."""
    if isinstance(node, cst.Dict):
        items = {}
        for element in node.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(literal_value(element.key), str):
                return None
            items[literal_value(element.key)] = element.value
        return items
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "dict":
        if any(arg.keyword is None for arg in node.args):
            return None
        return {arg.keyword.value: arg.value for arg in node.args}
    return None


def described(values: list[cst.BaseExpression], name_of: Callable[[cst.BaseExpression], str]) -> str:
    """``a or b``: the distinct names of the outcomes, in source order."""
    names = list(dict.fromkeys(name_of(v) for v in values))
    return " or ".join(names)
