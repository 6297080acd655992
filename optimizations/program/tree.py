"""Walking a libcst tree fast: a node's children in source order, whitespace and punctuation left out.

libcst's ``node.children`` runs a visitor over the node's fields to collect them, about as costly per node as a
pass of a transformer. The transforms look at code, never at the whitespace, commas, brackets and operator tokens
between it (they read an operator as ``node.operator``), so :func:`children` reads the node's fields directly and
keeps only code nodes, in the order they appear in the source: field order, except for the few node types whose
fields are declared in another order (:data:`SOURCE_ORDER`).
"""

from __future__ import annotations

import dataclasses
import functools

import libcst as cst

# Whitespace, comments and tokens: never a child that :func:`children` yields.
TRIVIA: tuple[type[cst.CSTNode], ...] = (
    cst.BaseParenthesizableWhitespace,
    cst.EmptyLine,
    cst.TrailingWhitespace,
    cst.Newline,
    cst.Comment,
    cst.Comma,
    cst.Colon,
    cst.Dot,
    cst.Semicolon,
    cst.AssignEqual,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.BaseBinaryOp,
    cst.BaseUnaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseAugOp,
    cst.Asynchronous,
    cst.ParamSlash,
    cst.ParamStar,
    cst.ImportStar,
)

# The node types whose code fields come in the source in another order than libcst declares them.
SOURCE_ORDER: dict[type[cst.CSTNode], tuple[str, ...]] = {
    cst.Arg: ("keyword", "value"),
    cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.IfExp: ("body", "test", "orelse"),
}


# Fields that only ever hold whitespace, comments or tokens (besides every ``whitespace*`` field): not read.
TRIVIA_FIELDS = frozenset(
    {
        "asynchronous", "colon", "comma", "comment", "dot", "empty_lines", "equal", "first_colon", "footer",
        "header", "lbrace", "lbracket", "leading_lines", "lines_after_decorators", "lpar", "newline", "operator",
        "posonly_ind", "rbrace", "rbracket", "relative", "rpar", "second_colon", "semicolon",
        "trailing_whitespace",
    }
)  # fmt: skip


@functools.cache
def _fields(node_type: type[cst.CSTNode]) -> tuple[str, ...]:
    if node_type in SOURCE_ORDER:
        return SOURCE_ORDER[node_type]
    return tuple(
        field.name
        for field in dataclasses.fields(node_type)
        if field.name not in TRIVIA_FIELDS and not field.name.startswith("whitespace")
    )


def _code_types() -> frozenset[type]:
    """Every concrete libcst node type that is code, not trivia: a set lookup is much cheaper than
    ``isinstance`` against libcst's abstract node classes."""
    found, pending = set(), [cst.CSTNode]
    while pending:
        node_type = pending.pop()
        pending.extend(node_type.__subclasses__())
        if not issubclass(node_type, TRIVIA) and not getattr(node_type, "__abstractmethods__", None):
            found.add(node_type)
    return frozenset(found)


CODE_TYPES = _code_types()
SEQUENCES = (list, tuple)


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``node``'s code children in source order: ``node.children`` without whitespace and punctuation."""
    found: list[cst.CSTNode] = []
    for name in _fields(type(node)):
        value = getattr(node, name)
        if type(value) in CODE_TYPES:
            found.append(value)
        elif type(value) in SEQUENCES:
            found.extend(v for v in value if type(v) in CODE_TYPES)
    return found


class Walk:
    """One pre-order walk of a module: ``nodes`` in source order, ``ends[node]`` the position just past its
    subtree, each node's parent, and the positions of the nodes of each type."""

    def __init__(self, module: cst.CSTNode):
        self.nodes: list[cst.CSTNode] = []
        self.ends: dict[cst.CSTNode, int] = {}
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.by_type: dict[type, list[int]] = {}
        stack: list[cst.CSTNode | tuple[cst.CSTNode]] = [module]
        while stack:
            item = stack.pop()
            if isinstance(item, tuple):  # the subtree of item[0] is done
                self.ends[item[0]] = len(self.nodes)
                continue
            node = item
            self.by_type.setdefault(type(node), []).append(len(self.nodes))
            self.nodes.append(node)
            below = children(node)
            self.parents.update(dict.fromkeys(below, node))
            stack.append((node,))
            stack.extend(reversed(below))

    def positions(self, *types: type) -> list[int]:
        """The positions, in source order, of the nodes that are instances of ``types``."""
        found = [self.by_type[t] for t in self.by_type if issubclass(t, types)]
        return list(found[0]) if len(found) == 1 else sorted(i for positions in found for i in positions)
