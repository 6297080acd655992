"""The line each node of a module starts on, as libcst's ``PositionProvider`` gives it (``.start.line``).

A site names its line, and nothing else needs a position. libcst's provider records a start and end line and
column for every node, both with and without the whitespace around it, which costs about one and a half parses
of the file; :class:`StartLines` generates the code once and keeps only the start line: the syntactic start
where libcst records one (after a statement's leading comments), else where the node's code begins.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import libcst as cst
from libcst._nodes.internal import CodegenState

from optimizations.program.repository import ParsedFile

NEWLINES = ("\r\n", "\r", "\n")


@dataclass(frozen=False)
class _LineCountingState(CodegenState):
    """Code generation that counts lines and records where each node starts."""

    starts: dict[cst.CSTNode, int] = field(default_factory=dict)
    line: int = 1
    _stack: list[int] = field(default_factory=list)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if "\n" in value or "\r" in value:
            self.line += value.count("\n") + value.count("\r") - value.count("\r\n")

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append(self.line)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._stack.pop()
        self.starts.setdefault(node, start)

    @contextmanager
    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> Iterator[None]:
        start = self.line
        try:
            yield
        finally:
            self.starts[node] = self.starts[start_node] if start_node is not None else start


class StartLines:
    """The start line of every node of one parsed module."""

    def __init__(self, parsed: ParsedFile):
        module = parsed.module
        state = _LineCountingState(
            default_indent=module.default_indent, default_newline=module.default_newline
        )
        module._codegen(state)
        self._starts = state.starts

    def __getitem__(self, node: cst.CSTNode) -> int:
        """``node``'s start line; ``KeyError`` for a node of another tree."""
        return self._starts[node]


def start_line(parsed: ParsedFile, node: cst.CSTNode) -> int:
    """The line ``node`` of ``parsed`` starts on, every node's computed once per parse."""
    return parsed.derived(StartLines)[node]
