"""The program model's own names, lines and walk agree with libcst's providers, which they replace because
those cost several parses of each file (``bot scan`` must stay within twice a parse of the repository)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from git_repos import EXAMPLE
from libcst.metadata import ParentNodeProvider, PositionProvider, QualifiedNameProvider

from optimizations.program.names import scoped_names
from optimizations.program.positions import start_line
from optimizations.program.repository import SourceCache
from optimizations.program.tree import TRIVIA, children

ROOT = Path(__file__).resolve().parents[1]
# Code of many shapes: the example repository and the program model's own modules.
SAMPLES = sorted([*EXAMPLE.glob("*.py"), *(ROOT / "optimizations" / "program").glob("*.py")], key=str)


def _parsed(path: Path):
    return SourceCache().parse(path.name, path.read_text(encoding="utf-8"))


def _chain_head(node: cst.CSTNode) -> cst.CSTNode:
    while isinstance(node, (cst.Call, cst.Attribute, cst.Subscript)):
        node = node.func if isinstance(node, cst.Call) else node.value
    return node


def _where_libcst_differs(parsed) -> set[cst.CSTNode]:
    """Nodes whose names libcst's scope analysis gets wrong, so there is nothing to agree with: anything in a
    comprehension (libcst evaluates every ``for``'s iterable outside it and binds an assignment expression
    inside it), names bound by an assignment expression, and names declared ``global`` or ``nonlocal``."""
    walk = parsed.walk()
    inside = {
        node
        for comprehension in parsed.nodes(cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
        for node in walk.nodes[walk.nodes.index(comprehension) : walk.ends[comprehension]]
    }
    special = {n.target.value for n in parsed.nodes(cst.NamedExpr) if isinstance(n.target, cst.Name)}
    special |= {item.name.value for n in parsed.nodes(cst.Global, cst.Nonlocal) for item in n.names}
    return inside | {n for n in parsed.nodes(cst.Name, cst.Attribute, cst.Call) if _head_name(n) in special}


def _head_name(node: cst.CSTNode) -> str | None:
    head = _chain_head(node)
    return head.value if isinstance(head, cst.Name) else None


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_names_lines_and_walk_agree_with_libcst(path):
    parsed = _parsed(path)
    wrapper = cst.MetadataWrapper(parsed.module, unsafe_skip_copy=True)
    qualified, positions = wrapper.resolve(QualifiedNameProvider), wrapper.resolve(PositionProvider)
    parents = wrapper.resolve(ParentNodeProvider)
    names, differs = scoped_names(parsed), _where_libcst_differs(parsed)
    for node in parsed.nodes(cst.Name, cst.Attribute, cst.Call):
        theirs = qualified.get(node, set())
        theirs = frozenset(theirs() if callable(theirs) else theirs)
        # libcst's artefacts: ``f().x`` and ``"".join`` get names, ``dict.fromkeys`` is just ``builtins.dict``,
        # and a comprehension's second ``for`` iterates over names read outside the comprehension
        builtin_attribute = not isinstance(node, cst.Name) and any(q.source.name == "BUILTIN" for q in theirs)
        if isinstance(_chain_head(node), cst.Name) and not builtin_attribute and node not in differs:
            assert names.of(node) == theirs, cst.Module([]).code_for_node(node)
    # code nodes first: those are answered from their top-level statement's code alone, the rest (whitespace,
    # the module) from the whole module's
    code_first = sorted(positions.items(), key=lambda item: item[0] not in parsed.parents())
    for node, position in code_first:
        assert start_line(parsed, node) == position.start.line
    for node in parsed.walk().nodes:
        assert children(node) == [c for c in node.children if not isinstance(c, TRIVIA)]
    assert parsed.parents() == {c: p for c, p in parents.items() if not isinstance(c, TRIVIA)}


SCOPES = """\
import torch.nn as nn
from . import sibling
from .pkg import thing as renamed
from elsewhere import *

LIMIT = 3


class Model(nn.Module):
    size = LIMIT

    def forward(self, x):
        return nn.functional.relu(x) + size + len(x)


def train(model):
    global LIMIT
    LIMIT = 4
    steps = [batch.step() for batch in model.batches]
    square = lambda value: value.pow(2)
    return sibling.run(renamed, steps, square, unknown)
"""


def _named(parsed, code: str) -> set[str]:
    """The names of the last expression in the module spelled ``code`` (its read, after its bindings)."""
    spelled = [
        n for n in parsed.nodes(cst.Name, cst.Attribute, cst.Call) if parsed.module.code_for_node(n) == code
    ]
    return {q.name for q in scoped_names(parsed).of(spelled[-1])}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("nn.functional.relu", {"torch.nn.functional.relu"}),  # an aliased import, attributes appended
        ("size", set()),  # a class body's name is not seen from its methods
        ("len", {"builtins.len"}),
        ("LIMIT", {"LIMIT"}),  # declared global: the module's binding
        ("batch.step", {"train.<locals>.<comprehension>.batch.step"}),
        ("value.pow", {"train.<locals>.<locals>.value.pow"}),
        ("sibling.run", {".sibling.run"}),  # relative imports keep their dots
        ("renamed", {".pkg.thing"}),
        ("unknown", set()),  # maybe from the star import: unknown
        ("model.batches", {"train.<locals>.model.batches"}),
    ],
)
def test_each_scope_binds_names_as_python_does(code, expected):
    parsed = SourceCache().parse("train.py", SCOPES)
    assert _named(parsed, code) == expected


def test_reads_and_bindings_follow_the_scope_a_name_is_bound_in():
    parsed = SourceCache().parse("train.py", SCOPES)
    names = scoped_names(parsed)
    train = next(f for f in parsed.nodes(cst.FunctionDef) if f.name.value == "train")
    assert [type(b).__name__ for b in names.bound_in("model", train)] == ["Name"]
    assert names.enclosing_binder("LIMIT", train) is parsed.module
    assert names.bound_in("LIMIT", train) == []  # the global declaration moves the binding to the module
    assert [parsed.module.code_for_node(r) for r in names.reads("steps", train)] == ["steps"]
    assert names.reads("size", parsed.module) == []
