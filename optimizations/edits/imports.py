"""Where new statements and imports go in a module: after its import block, and a vendored helper's import below
the file's ``sys.path`` setup and below an environment set before imports (``os.environ[...] = ...``)."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from optimizations.program.repository import VENDORED_PREFIX
from optimizations.program.syntax import code_of


def import_end(module: cst.Module) -> int:
    """Index in ``module.body`` just past the docstring and the last import before the first definition.

    Imports may follow other statements (``sys.path.insert(...)`` first, say): code placed here must come
    after all of them, or the names it uses would not be bound yet.
    """
    index = 0
    for position, statement in enumerate(module.body):
        if isinstance(statement, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom))
            or (isinstance(s, cst.Expr) and isinstance(s.value, cst.SimpleString) and position == 0)
            for s in statement.body
        ):
            index = position + 1
        elif isinstance(statement, cst.Try) and _only_imports(statement.body):
            index = position + 1
        elif isinstance(statement, cst.If) and _only_imports(statement.body):
            index = position + 1
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            break
    return index


def _only_imports(block: cst.BaseSuite) -> bool:
    return isinstance(block, cst.IndentedBlock) and all(
        isinstance(s, cst.SimpleStatementLine)
        and all(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)
        for s in block.body
    )


def insert_after_imports(
    module: cst.Module, statements: Sequence[cst.SimpleStatementLine | cst.BaseCompoundStatement]
) -> cst.Module:
    """The module with ``statements`` placed after its import block, set off by blank lines."""
    index = import_end(module)
    body = list(module.body)
    placed = list(statements)
    placed[0] = placed[0].with_changes(leading_lines=[cst.EmptyLine(), *placed[0].leading_lines])
    if index < len(body):
        following = body[index]
        if not following.leading_lines:
            body[index] = following.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    return module.with_changes(body=body[:index] + placed + body[index:])


def _is_import_line(statement: cst.BaseStatement) -> bool:
    """One ``import``/``from ... import`` alone on a line: what ``AddImportsVisitor`` counts as the import block."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], (cst.Import, cst.ImportFrom))
    )


def add_imports(context: CodemodContext, module: cst.Module) -> cst.Module:
    """The imports ``context`` asks for, added by libcst's ``AddImportsVisitor`` over the module's leading
    import block alone. The visitor reads and edits only that block (after a docstring) and the blank lines
    before the next statement, so that statement stands in as ``pass`` and the rest of the file is spliced
    back untouched instead of being traversed twice per codemod. An added import of a vendored helper moves
    below the file's ``sys.path`` setup, if it has one (:func:`_import_path_setup`), after the imports that
    follow it: the helper's package may be importable only from there. Not when the leading block imports that
    package already (Lightning-AI/litgpt's thunder script imports ``litgpt`` above its setup, and an import
    below it fails ruff's E402)."""
    body = module.body
    end = next((i for i in range(1, len(body)) if not _is_import_line(body[i])), len(body))
    if end == len(body):
        return AddImportsVisitor(context).transform_module(module)
    follower = body[end]
    stand_in = cst.SimpleStatementLine([cst.Pass()], leading_lines=follower.leading_lines)
    *head, moved = (
        AddImportsVisitor(context).transform_module(module.with_changes(body=[*body[:end], stand_in])).body
    )
    before = {id(statement) for statement in body[:end]}
    added = [statement for statement in head if id(statement) not in before]
    path_setup = _import_path_setup(body, end)
    importable = _top_level_packages(body[:end])  # the helper's package imported before the setup needs none
    # Every helper imports torch: below the environment an import of torch further down would read.
    environment = None if "torch" in importable else _environment_setup(body, end)
    vendored = [
        statement
        for statement in added
        if _imports_vendored(statement)
        and (
            environment is not None
            or path_setup is not None
            and _imported_package(statement) not in importable
        )
    ]
    setup = max((i for i in (path_setup, environment) if i is not None), default=None)
    if not vendored or setup is None:  # no vendored import to move without a setup
        return module.with_changes(
            body=[*head, follower.with_changes(leading_lines=moved.leading_lines), *body[end + 1 :]]
        )
    # A vendored helper is imported where the file's own first-party imports are: after the sys.path setup.
    head = [statement for statement in head if all(statement is not v for v in vendored)]
    after = setup + 1
    while after < len(body) and _is_import_line(body[after]):
        after += 1
    kept = moved.leading_lines if len(head) > end else follower.leading_lines
    vendored = [statement.with_changes(leading_lines=[]) for statement in vendored]
    return module.with_changes(
        body=[
            *head,
            follower.with_changes(leading_lines=kept),
            *body[end + 1 : after],
            *vendored,
            *body[after:],
        ]
    )


def _import_path_setup(body: Sequence[cst.BaseStatement], start: int) -> int | None:
    """The index of the last top-level ``sys.path`` change (``sys.path.append(...)``, ``.insert``, ``.extend``,
    an assignment) from ``start`` to the first definition: imports after it may need it."""
    found = None
    for index in range(start, len(body)):
        statement = body[index]
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(statement, cst.SimpleStatementLine) and any(
            code_of(small)
            .replace(" ", "")
            .startswith(("sys.path.append(", "sys.path.insert(", "sys.path.extend("))
            or isinstance(small, (cst.Assign, cst.AugAssign))
            and code_of(small).replace(" ", "").startswith(("sys.path=", "sys.path+="))
            for small in statement.body
        ):
            found = index
    return found


ENVIRONMENT_SETUP = ("os.environ[", "os.environ.setdefault(", "os.environ.update(", "os.putenv(")


def _environment_setup(body: Sequence[cst.BaseStatement], start: int) -> int | None:
    """The index of the last top-level environment change (``os.environ["CUDA_VISIBLE_DEVICES"] = ...``,
    ``os.environ.setdefault(...)``) from ``start`` that an import after it, before the first definition, may
    read: a helper imported above it would import torch before the variable is set."""
    found, imports_after = None, False
    for index in range(start, len(body)):
        statement = body[index]
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            break
        if _is_import_line(statement) and found is not None:
            imports_after = True
        if isinstance(statement, cst.SimpleStatementLine) and any(
            code_of(small).replace(" ", "").startswith(ENVIRONMENT_SETUP) for small in statement.body
        ):
            found, imports_after = index, False
    if found is not None and not imports_after:
        return _environment_setup(body[:found], start) if found > start else None
    return found


def _imported_package(statement: cst.BaseStatement) -> str:
    """The top-level package a ``from package.module import ...`` line imports from ("" for a relative one)."""
    imported = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
    if not isinstance(imported, cst.ImportFrom) or imported.relative or imported.module is None:
        return ""
    return code_of(imported.module).partition(".")[0]


def _top_level_packages(statements: Sequence[cst.BaseStatement]) -> set[str]:
    """The top-level packages the import lines ``statements`` import absolutely."""
    found = set()
    for statement in statements:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Import):
                found |= {code_of(alias.name).partition(".")[0] for alias in small.names}
            elif isinstance(small, cst.ImportFrom):
                found.add(_imported_package(statement))
    return found - {""}


def _imports_vendored(statement: cst.BaseStatement) -> bool:
    """``from [package.]_perfbot_<helper> import ...``: the import of a helper perfbot vendored."""
    imported = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
    module = code_of(imported.module) if isinstance(imported, cst.ImportFrom) and imported.module else ""
    return module.rpartition(".")[2].startswith(VENDORED_PREFIX)
