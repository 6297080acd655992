"""The line each node of a module starts on, as libcst's ``PositionProvider`` gives it (``.start.line``).

A site names its line, and nothing else needs a position. libcst's provider records a start and end line and
column for every node, both with and without the whitespace around it, which costs about one and a half parses
of the file; :class:`StartLines` keeps only the start line: the syntactic start where libcst records one (after
a statement's leading comments), else where the node's code begins. It generates the code of the top-level
statements that hold a node asked about, not of the whole module: Python's own parser gives where each top-level
statement starts (its first token, where libcst's syntactic start is too), and the statement's code counts the
lines from there.
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

    # A context manager, as libcst's is, without its generator.
    def record_syntactic_position(  # type: ignore[override]
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> _Syntactic:
        return _Syntactic(self, node, start_node)


class StartLines:
    """The start line of every node of one parsed module, generated a top-level statement at a time."""

    def __init__(self, parsed: ParsedFile):
        self._parsed = parsed
        self._starts: dict[cst.CSTNode, int] = {}
        self._statement_lines: dict[cst.CSTNode, int] | None = None

    def __getitem__(self, node: cst.CSTNode) -> int:
        """``node``'s start line; ``KeyError`` for a node of another tree."""
        found = self._starts.get(node)
        if found is None:
            self._generate(self._top_level_statement(node))
            found = self._starts[node]
        return found

    def _top_level_statement(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The statement of the module's body that holds ``node``; None for the module, its header and footer
        lines, whitespace (the walk records no parent of it) and a node of another tree."""
        module, parents = self._parsed.module, self._parsed.walk().parents
        while node is not module:
            parent = parents.get(node)
            if parent is None:
                return None
            if parent is module:
                return node if node in self._lines_of_statements() else None
            node = parent
        return None

    def _generate(self, statement: cst.CSTNode | None) -> None:
        """Count the lines of ``statement``'s code from where Python's parser starts it; the whole module's
        where there is no such statement or Python's parser reads the module otherwise."""
        module = self._parsed.module
        state = _LineCountingState(
            default_indent=module.default_indent, default_newline=module.default_newline
        )
        lines = self._lines_of_statements()
        if statement is None or statement not in lines:
            module._codegen(state)
            self._starts.update(state.starts)
            return
        statement._codegen(state)
        offset = lines[statement] - state.starts[statement]
        self._starts.update((node, line + offset) for node, line in state.starts.items())

    def _lines_of_statements(self) -> dict[cst.CSTNode, int]:
        """Where each statement of the module's body starts, by Python's parser: a simple statement line holds
        as many of its statements as it has parts (``a = 1; b = 2``), a compound statement one. Empty when the
        two parsers disagree on the count (then every line comes from the whole module's code)."""
        if self._statement_lines is None:
            body = self._parsed.module.body
            syntax = self._parsed.syntax()
            parsed = syntax.body if syntax is not None else []
            lines: dict[cst.CSTNode, int] = {}
            index = 0
            for statement in body:
                if index >= len(parsed):
                    break
                lines[statement] = parsed[index].lineno
                index += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
            self._statement_lines = lines if index == len(parsed) and len(lines) == len(body) else {}
        return self._statement_lines


def start_line(parsed: ParsedFile, node: cst.CSTNode) -> int:
    """The line ``node`` of ``parsed`` starts on, every node's computed once per parse."""
    return parsed.derived(StartLines)[node]
