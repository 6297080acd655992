"""What one commit of an apply changed: its files, their text before and after, the lines of the pinned
snapshot it touched, and the import statements it added."""

from __future__ import annotations

import ast
import difflib
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

import git


@dataclass(frozen=True)
class Import:
    """One imported module as an import statement names it: `level` dots, then `module` (`from . import x`:
    module "", names ("x",)); `names` are what a from-import takes from it."""

    module: str
    level: int
    names: tuple[str, ...]
    line: int
    guarded: bool = False  # inside a `try` that catches its ImportError

    @property
    def key(self) -> tuple[str, int, tuple[str, ...]]:
        """What makes two imports the same statement, wherever they are."""
        return (self.module, self.level, self.names)

    def __str__(self) -> str:
        dotted = "." * self.level + self.module
        return f"from {dotted} import {', '.join(self.names)}" if self.names else f"import {dotted}"


def imports_of(source: str) -> list[Import]:
    """Every import statement of `source` (nested ones too); [] when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    guarded = {id(inner) for node in ast.walk(tree) if _catches_import_error(node) for inner in _body(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(a.name, 0, (), node.lineno, id(node) in guarded) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            found.append(Import(node.module or "", node.level, names, node.lineno, id(node) in guarded))
    return sorted(found, key=lambda i: i.line)


_CATCHES = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _catches_import_error(node: ast.AST) -> bool:
    """A `try` with a handler that catches a failed import."""
    if not isinstance(node, ast.Try):
        return False
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if handler.type is None or any(isinstance(k, ast.Name) and k.id in _CATCHES for k in kinds):
            return True
    return False


def _body(node: ast.AST) -> list[ast.AST]:
    """Every node of a `try`'s body."""
    assert isinstance(node, ast.Try)
    return [inner for statement in node.body for inner in ast.walk(statement)]


def added_imports(before: str | None, after: str) -> list[Import]:
    """The import statements of `after` that `before` does not have (as many times as they are new)."""
    old = Counter(i.key for i in imports_of(before or ""))
    added = []
    for item in imports_of(after):
        if old[item.key] > 0:
            old[item.key] -= 1
        else:
            added.append(item)
    return added


def compile_error(source: str, path: str) -> str:
    """Why `source` does not byte-compile, or "" when it does."""
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        return f"{path}: {error}"
    return ""


def _equal_blocks(old: list[str], new: list[str]) -> dict[int, int]:
    """Lines of `new` (1-based) that are unchanged lines of `old`, mapped to their `old` line."""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return {b + k + 1: a + k + 1 for a, b, size in matcher.get_matching_blocks() for k in range(size)}


def touched_lines(old: str, new: str, neighbours: bool = True) -> set[int]:
    """The lines of `old` (1-based) that `new` replaced or deleted, and (with `neighbours`) both neighbours
    of an insertion."""
    a, b = old.splitlines(), new.splitlines()
    touched: set[int] = set()
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            touched.update(range(i1 + 1, i2 + 1))
        elif tag == "insert" and neighbours:
            touched.update(line for line in (i1, i1 + 1) if 1 <= line <= len(a))
    return touched


class CommitFacts:
    """A commit of `repo` against its parent and the snapshot's `base` commit."""

    def __init__(self, repo: git.Repo, sha: str, base: str) -> None:
        self.repo = repo
        self.sha = sha
        self.base = base

    @cached_property
    def commit(self) -> git.Commit:
        """The commit itself."""
        return self.repo.commit(self.sha)

    @cached_property
    def parent(self) -> str:
        """Its first parent's sha (the base when it has none)."""
        return self.commit.parents[0].hexsha if self.commit.parents else self.base

    @cached_property
    def changed(self) -> list[str]:
        """The paths it added, changed or deleted."""
        return [
            p
            for p in self.repo.git.diff("--name-only", "--no-renames", self.parent, self.sha).splitlines()
            if p
        ]

    @cached_property
    def added(self) -> set[str]:
        """The paths it added."""
        out = self.repo.git.diff("--name-only", "--no-renames", "--diff-filter=A", self.parent, self.sha)
        return set(out.splitlines())

    def text(self, path: str, at: str | None = None) -> str | None:
        """`path` at this commit (or at `at`); None where it does not exist."""
        try:
            blob = self.repo.commit(at or self.sha).tree / path
        except KeyError:
            return None
        return bytes(blob.data_stream.read()).decode("utf-8", errors="replace")

    def tree(self, at: str | None = None) -> frozenset[str]:
        """Every file path at this commit (or at `at`)."""
        return frozenset(self.repo.git.ls_tree("-r", "--name-only", at or self.sha).splitlines())

    def base_lines_touched(self, path: str, neighbours: bool = True) -> set[int]:
        """The lines of `path` as pinned (the base commit) that this commit replaced, deleted or (with
        `neighbours`) inserted next to; lines earlier commits added are not the snapshot's and are left out."""
        base, parent, new = (self.text(path, at) for at in (self.base, self.parent, self.sha))
        if base is None or parent is None or new is None:
            return set()
        in_base = _equal_blocks(base.splitlines(), parent.splitlines())
        return {in_base[line] for line in touched_lines(parent, new, neighbours) if line in in_base}
