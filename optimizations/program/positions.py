"""The line each node of a module starts on, as libcst's ``PositionProvider`` gives it (``.start.line``).

A site names its line, and nothing else needs a position. libcst's provider records a start and end line and
column for every node, both with and without the whitespace around it, which costs about one and a half parses
of the file; :class:`StartLines` generates the code once and keeps only the start line: the syntactic start
where libcst records one (after a statement's leading comments), else where the node's code begins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst._nodes.internal import CodegenState

from optimizations.program.repository import ParsedFile


class _Syntactic:
    """Records where ``node`` starts syntactically: at the line the code generation is on when entered, or
    where ``start_node`` started (libcst's ``record_syntactic_position`` without end positions)."""

    __slots__ = ("state", "node", "start_node", "line")

    def __init__(self, state: _LineCountingState, node: cst.CSTNode, start_node: cst.CSTNode | None):
        self.state, self.node, self.start_node = state, node, start_node

    def __enter__(self) -> None:
        self.line = self.state.line

    def __exit__(self, *exc_info: object) -> None:
        starts = self.state.starts
        starts[self.node] = starts[self.start_node] if self.start_node is not None else self.line


@dataclass(frozen=False)
class _LineCountingState(CodegenState):
    """Code generation that counts lines and records where each node starts; the code itself is not kept."""

    starts: dict[cst.CSTNode, int] = field(default_factory=dict)
    line: int = 1
    _stack: list[int] = field(default_factory=list)

    def add_indent_tokens(self) -> None:
        pass  # indentation holds no line break

    def add_token(self, value: str) -> None:
        if "\n" in value or "\r" in value:
            self.line += value.count("\n") + value.count("\r") - value.count("\r\n")

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append(self.line)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._stack.pop()
        self.starts.setdefault(node, start)

    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> _Syntactic:
        return _Syntactic(self, node, start_node)


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
