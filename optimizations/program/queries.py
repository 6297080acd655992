"""What the program model asks of the file being changed: its path, repository and shared parse, and the
questions put to them (qualified names, lines, nodes by type, the repository's functions).

:class:`FileQuery` is that interface as a protocol, for the facts that take the file they ask about;
:class:`FileQueries` answers it for a class that has ``path``, ``repo`` and ``parsed`` (every optimization's
codemod). Names are resolved from each file's bindings (:mod:`optimizations.program.names`, libcst's qualified
names without its full scope analysis), so ``from trl import SFTConfig as C``, ``import trl`` +
``trl.SFTConfig`` and ``from trl.trainer.sft_config import SFTConfig`` all resolve to a name ending in
``SFTConfig`` under ``trl``.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeGuard, TypeVar, overload

import libcst as cst
from libcst.metadata import QualifiedName

from optimizations.program.classes import repository_classes
from optimizations.program.names import scoped_names
from optimizations.program.positions import start_line
from optimizations.program.repository import ParsedFile, RepoContext

N = TypeVar("N", bound=cst.CSTNode)
M = TypeVar("M", bound=cst.CSTNode)


class FileQuery(Protocol):
    """One file of a repository, parsed, and what the facts ask of it."""

    path: str
    repo: RepoContext
    parsed: ParsedFile

    @overload
    def nodes(self, node_type: type[N], /) -> list[N]: ...
    @overload
    def nodes(self, first: type[N], second: type[M], /) -> list[N | M]: ...
    @overload
    def nodes(self, *types: type[cst.CSTNode]) -> list[cst.CSTNode]: ...

    def names(self, node: cst.CSTNode) -> set[str]: ...

    def qualified(self, node: cst.CSTNode) -> frozenset[QualifiedName]: ...

    def repository_function(self, func: cst.BaseExpression) -> tuple[cst.FunctionDef, str] | None: ...

    def calls(self, node: cst.BaseExpression, function: str) -> TypeGuard[cst.Call]: ...

    def line(self, node: cst.CSTNode) -> int: ...


class FileQueries:
    """:class:`FileQuery`'s questions, answered from ``path``, ``repo`` and ``parsed``."""

    path: str
    repo: RepoContext
    parsed: ParsedFile

    @overload
    def nodes(self, node_type: type[N], /) -> list[N]: ...
    @overload
    def nodes(self, first: type[N], second: type[M], /) -> list[N | M]: ...
    @overload
    def nodes(self, *types: type[cst.CSTNode]) -> list[cst.CSTNode]: ...
    def nodes(self, *types: type[Any]) -> list[Any]:
        """The file's nodes of these types, in source order, from one walk shared by every codemod."""
        return self.parsed.nodes(*types)

    def names(self, node: cst.CSTNode) -> set[str]:
        """Fully qualified names a node (a call's callee, say) may refer to; for a class of the repository, also
        the classes outside it that it derives from (``mypkg.SFTConfig`` is a ``trl.SFTConfig`` too)."""
        qualified = self.qualified(node)
        ancestors = repository_classes(self.repo).ancestors(self.path, qualified) if qualified else ()
        return {q.name for q in qualified} | set(ancestors)

    def qualified(self, node: cst.CSTNode) -> frozenset[QualifiedName]:
        """libcst's qualified names of ``node`` (with their source: import, builtin, local) in this file."""
        return scoped_names(self.parsed).of(node)

    def repository_function(self, func: cst.BaseExpression) -> tuple[cst.FunctionDef, str] | None:
        """The top-level function of the repository that ``func`` (a call's callee) names, through this file's
        imports and the re-exports of the repository's modules, and the file that defines it; ``None`` when it
        is not one of the repository's."""
        index = repository_classes(self.repo)
        found = (index.function_definition(q.name, self.path) for q in self.qualified(func))
        return next(filter(None, found), None)

    def calls(self, node: cst.BaseExpression, function: str) -> TypeGuard[cst.Call]:
        """``node`` is a call of ``function`` (a vendored helper, say), by its qualified or bare name."""
        return isinstance(node, cst.Call) and (
            any(n.rpartition(".")[2] == function for n in self.names(node.func))
            or (isinstance(node.func, cst.Name) and node.func.value == function)
        )

    def line(self, node: cst.CSTNode) -> int:
        """The line ``node`` starts on."""
        return start_line(self.parsed, node)
