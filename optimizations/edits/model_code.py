"""Imports for the transforms that rewrite model code (``nn.Module`` classes written by hand): the name
``torch.nn.functional`` goes by in the file (imported as ``F`` when free), and the imports that code a transform
removed was the last to use, dropped."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import cast

import libcst as cst
import libcst.matchers as m
from libcst.codemod.visitors import AddImportsVisitor

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.edits.planned import PlannedCodemod
from optimizations.program.syntax import code_of, defines
from optimizations.program.tree import children

FUNCTIONAL = "torch.nn.functional"


def functional(codemod: OptimizationCodemod, module: cst.Module) -> str:
    """What to write before ``.layer_norm(...)`` to reach ``torch.nn.functional``: the file's own name for it,
    else ``F`` (imported) when ``F`` is free, else the full path."""
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if code_of(alias.name) == FUNCTIONAL and alias.asname is not None:
                        return code_of(alias.asname.name)
            elif (
                isinstance(small, cst.ImportFrom)
                and small.module is not None
                and not small.relative
                and code_of(small.module) == "torch.nn"
                and not isinstance(small.names, cst.ImportStar)
            ):
                for alias in small.names:
                    if code_of(alias.name) == "functional":
                        return code_of(alias.asname.name) if alias.asname else "functional"
    if not defines(module, "F") and not m.findall(module, m.Name("F")):
        AddImportsVisitor.add_needed_import(codemod.context, FUNCTIONAL, asname="F")
        return "F"
    codemod.need_module("torch")
    return FUNCTIONAL


def drop_unused_imports(
    codemod: PlannedCodemod, module: cst.Module, removed: Iterable[cst.CSTNode], keep: Iterable[str] = ()
) -> None:
    """Drop the module-level imports that only the ``removed`` code used (a name-based count, so a local of
    the same name keeps the import), except those binding a name in ``keep`` (what the new code uses).
    ``codemod`` is a ``PlannedCodemod``: the edits go into its plan."""
    imports = [
        s
        for s in module.body
        if isinstance(s, cst.SimpleStatementLine) and m.matches(s.body[0], m.Import() | m.ImportFrom())
    ]
    gone = {id(node) for top in [*removed, *imports] for node in _subtree(top)}
    used_after = {cast(cst.Name, n).value for n in m.findall(module, m.Name()) if id(n) not in gone}
    used_before = {cast(cst.Name, n).value for top in removed for n in m.findall(top, m.Name())} - set(keep)
    body = list(module.body)
    for index, statement in enumerate(body):
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            continue
        small = statement.body[0]
        if not isinstance(small, (cst.Import, cst.ImportFrom)) or isinstance(small.names, cst.ImportStar):
            continue
        if isinstance(small, cst.ImportFrom) and (small.relative or small.module is None):
            continue
        bound = [_bound(alias, isinstance(small, cst.Import)) for alias in small.names]
        unused = [
            b in used_before and sum(_binds(s, b) for s in body) == 1 and b not in used_after for b in bound
        ]
        if not any(unused):
            continue
        if all(unused):
            codemod.dropped.add(statement)
            if index + 1 < len(body):
                following = body[index + 1]
                lines = (
                    statement.leading_lines
                    if index == 0
                    else max(statement.leading_lines, following.leading_lines, key=len)
                )
                codemod.replacements[following] = _with_changes(leading_lines=lines)
        else:
            kept = [alias for alias, drop in zip(small.names, unused, strict=True) if not drop]
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            codemod.replacements[small] = _with_changes(names=kept)


def _with_changes(**changes: object) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A planned replacement: the updated node with ``changes``."""
    return lambda updated: updated.with_changes(**changes)


def _subtree(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in children(node):
        yield from _subtree(child)


def _bound(alias: cst.ImportAlias, plain: bool) -> str:
    """The name an import alias binds: ``import a.b`` binds ``a``."""
    if alias.asname is not None:
        return code_of(alias.asname.name)
    return code_of(alias.name).split(".")[0] if plain else code_of(alias.name)


def _binds(statement: cst.BaseStatement, name: str) -> int:
    """How many top-level imports of ``statement`` bind ``name`` (``import torch`` and ``import torch.nn``
    both bind ``torch``: dropping one of two would keep it bound)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return 0
    return sum(
        _bound(alias, isinstance(small, cst.Import)) == name
        for small in statement.body
        if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar)
        for alias in small.names
    )
