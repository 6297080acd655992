"""Fitting the prose of a file perfbot wrote (a vendored helper) under a repository's line limit.

``ruff format`` wraps code to the target's ``line-length`` but leaves comments and docstrings as they are, so
a helper written at perfbot's own width breaks a target's ``E501`` (or ``W505``, its ``max-doc-length``).
Here, through libcst, every comment paragraph and docstring paragraph with a line over the limit is re-filled
to fit, and a trailing comment that makes its line too long moves above its statement. Code and lines that
already fit are left as they are.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections.abc import Sequence

import libcst as cst
from libcst.metadata import PositionProvider

# A docstring line that is not prose to re-fill: doctest, reST directive, or a literal block.
_VERBATIM = re.compile(r">>>|\.\.\.|\.\. ")
# A comment a tool reads: never re-filled.
_PRAGMA = re.compile(r"(noqa|type:|fmt:|isort:|ruff:|pragma|pyright:|mypy:)")
# A comment or docstring line that opens a paragraph of its own: a list item.
_BULLET = re.compile(r"([-*+]|\d+[.)])\s")


def _fill(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """``text`` re-filled to ``width`` columns, words never split; at least one line."""
    lines = textwrap.wrap(
        text,
        width=max(width, 20),
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines or [first.rstrip()]


def _comment_text(comment: cst.Comment) -> str:
    return comment.value[1:].strip()


class _Rewrap(cst.CSTTransformer):
    """Re-fills over-long comment paragraphs and docstrings, and lifts over-long trailing comments."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, limit: int, doc_limit: int):
        super().__init__()
        self.limit = limit
        self.doc_limit = doc_limit
        self._lefts: set[cst.CSTNode] = set()

    # -- comments on lines of their own ---------------------------------------------------------------
    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:
        updated = super().on_leave(original_node, updated_node)
        if not isinstance(updated, cst.CSTNode):
            return updated
        changes = {}
        for spec in dataclasses.fields(updated):
            value = getattr(updated, spec.name)
            old = getattr(original_node, spec.name, None)
            if (
                isinstance(value, Sequence)
                and value
                and all(isinstance(line, cst.EmptyLine) for line in value)
                and isinstance(old, Sequence)
                and len(old) <= len(value)
            ):  # lines past the original ones are comments this pass lifted, already fitted
                lines = self._comment_lines(list(old), list(value[: len(old)])) + list(value[len(old) :])
                if lines != list(value):
                    changes[spec.name] = lines
        return updated.with_changes(**changes) if changes else updated

    def _column(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.column

    def _comment_lines(
        self, original: list[cst.EmptyLine], lines: list[cst.EmptyLine]
    ) -> list[cst.EmptyLine]:
        """``lines`` with every comment paragraph that has a line over the limit re-filled."""
        result: list[cst.EmptyLine] = []
        paragraph: list[int] = []

        def flush() -> None:
            if paragraph:
                result.extend(self._refill([original[i] for i in paragraph], [lines[i] for i in paragraph]))
                paragraph.clear()

        for index, line in enumerate(lines):
            comment = line.comment
            text = _comment_text(comment) if comment else ""
            verbatim = (
                comment is None or not text or not comment.value.startswith("# ") or _PRAGMA.match(text)
            )
            verbatim = verbatim or comment.value.startswith("#  ")
            if verbatim or _BULLET.match(text) or (paragraph and line.indent != lines[paragraph[0]].indent):
                flush()
            if verbatim:
                result.append(line)
            else:
                paragraph.append(index)
        flush()
        return result

    def _refill(self, original: list[cst.EmptyLine], lines: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
        column = self._column(original[0].comment)
        width = min(self.limit, self.doc_limit)
        if all(column + len(line.comment.value) <= width for line in lines):
            return lines
        text = " ".join(_comment_text(line.comment) for line in lines)
        bullet = _BULLET.match(text)
        hanging = " " * (bullet.end() if bullet else 0)
        filled = _fill(text, width - column - 2, rest=hanging)
        return [lines[0].with_changes(comment=cst.Comment(f"# {part}".rstrip())) for part in filled]

    # -- trailing comments ----------------------------------------------------------------------------
    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        comment = original_node.trailing_whitespace.comment
        if not self._movable(comment):
            return updated_node
        column = self._column(original_node)
        above = [
            cst.EmptyLine(comment=cst.Comment(f"# {part}"))
            for part in _fill(_comment_text(comment), min(self.limit, self.doc_limit) - column - 2)
        ]
        return updated_node.with_changes(
            leading_lines=[*updated_node.leading_lines, *above],
            trailing_whitespace=cst.TrailingWhitespace(newline=updated_node.trailing_whitespace.newline),
        )

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        """A block header's comment (``else:  # why``) that makes its line too long opens the block instead."""
        comment = original_node.header.comment
        if not self._movable(comment) or not updated_node.body:
            return updated_node
        first = updated_node.body[0]
        column = self._column(original_node.body[0])
        above = [
            cst.EmptyLine(comment=cst.Comment(f"# {part}"))
            for part in _fill(_comment_text(comment), min(self.limit, self.doc_limit) - column - 2)
        ]
        first = first.with_changes(leading_lines=[*above, *first.leading_lines])
        return updated_node.with_changes(
            header=cst.TrailingWhitespace(newline=updated_node.header.newline),
            body=[first, *updated_node.body[1:]],
        )

    def _movable(self, comment: cst.Comment | None) -> bool:
        """A trailing comment over the limit that may move: a tool's pragma (``# noqa: BLE001``) only works on
        its own line, so it stays there, long or not."""
        if comment is None or self._column(comment) + len(comment.value) <= self.limit:
            return False
        return not _PRAGMA.match(_comment_text(comment))

    # -- string literals ------------------------------------------------------------------------------
    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> None:
        self._lefts.add(node.left)

    def leave_ConcatenatedString(
        self, original_node: cst.ConcatenatedString, updated_node: cst.ConcatenatedString
    ) -> cst.ConcatenatedString:
        pieces = self._split(original_node.left, updated_node.left)
        if pieces is None:
            return updated_node
        rest = updated_node.with_changes(left=pieces[1])
        return cst.ConcatenatedString(
            left=pieces[0], right=rest, whitespace_between=cst.SimpleWhitespace(" ")
        )

    def leave_SimpleString(
        self, original_node: cst.SimpleString, updated_node: cst.SimpleString
    ) -> cst.BaseExpression:
        return self._split_alone(original_node, updated_node)

    def leave_FormattedString(
        self, original_node: cst.FormattedString, updated_node: cst.FormattedString
    ) -> cst.BaseExpression:
        return self._split_alone(original_node, updated_node)

    def _split_alone(self, original: cst.BaseString, updated: cst.BaseString) -> cst.BaseExpression:
        """A string past the limit as two concatenated pieces (the left of a concatenation is split by it)."""
        pieces = None if original in self._lefts else self._split(original, updated)
        if pieces is None:
            return updated
        return cst.ConcatenatedString(
            left=pieces[0], right=pieces[1], whitespace_between=cst.SimpleWhitespace(" ")
        )

    def _split(
        self, original: cst.BaseString, updated: cst.BaseString
    ) -> tuple[cst.SimpleString | cst.FormattedString, cst.SimpleString | cst.FormattedString] | None:
        """A one-line string literal that runs past the limit cut after its last space that fits; None when
        it fits or has no such space."""
        end = self._end(original)
        if end is None:
            return None
        if isinstance(updated, cst.SimpleString) and updated.quote in ('"', "'"):
            text = updated.raw_value
            cut = _space_before(text, len(text) - (end - self._string_limit))
            if cut is None or cut >= len(text):
                return None
            prefix, quote = updated.prefix, updated.quote
            return (
                cst.SimpleString(f"{prefix}{quote}{text[:cut]}{quote}"),
                cst.SimpleString(f"{prefix}{quote}{text[cut:]}{quote}"),
            )
        if isinstance(updated, cst.FormattedString) and updated.end in ('"', "'"):
            return self._split_fstring(updated, end)
        return None

    def _split_fstring(
        self, string: cst.FormattedString, end: int
    ) -> tuple[cst.SimpleString | cst.FormattedString, cst.SimpleString | cst.FormattedString] | None:
        parts = list(string.parts)
        room = self._string_limit - len(string.end)
        column = end - len(_code(string)) + len(string.start)  # where the first part starts
        chosen = None
        for index, part in enumerate(parts):
            if column >= room:
                break
            if isinstance(part, cst.FormattedStringText):
                cut = _space_before(part.value, room - column)
                if cut is not None and (index < len(parts) - 1 or cut < len(part.value)):
                    chosen = (index, cut)
            column += len(_code(part))
        if chosen is None:
            return None
        index, cut = chosen
        text = parts[index].value
        left = [*parts[:index], cst.FormattedStringText(text[:cut])]
        right = parts[index + 1 :]
        if cut < len(text):
            right = [cst.FormattedStringText(text[cut:]), *right]
        return _fstring(string, left), _fstring(string, right)

    @property
    def _string_limit(self) -> int:
        """The last column a split string may reach: one short of the limit, for the comma or bracket after it."""
        return self.limit - 1

    def _end(self, node: cst.CSTNode) -> int | None:
        """The column a one-line literal ends at, when that is past the limit; else None."""
        position = self.get_metadata(PositionProvider, node)
        if position.start.line != position.end.line or position.end.column <= self._string_limit:
            return None
        return position.end.column

    # -- docstrings -----------------------------------------------------------------------------------
    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return self._docstring(original_node, updated_node, updated_node.body)

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        return self._docstring(original_node, updated_node, updated_node.body.body)

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        return self._docstring(original_node, updated_node, updated_node.body.body)

    def _docstring(
        self, original: cst.CSTNode, updated: cst.CSTNode, body: Sequence[cst.CSTNode]
    ) -> cst.CSTNode:
        """``updated`` with its docstring re-filled where a line of it is over the limit."""
        if not body or not isinstance(body[0], cst.SimpleStatementLine):
            return updated
        first = body[0].body[0] if body[0].body else None
        if not isinstance(first, cst.Expr) or not isinstance(first.value, cst.SimpleString):
            return updated
        string = first.value
        if string.quote not in ('"""', "'''") or "\\\n" in string.value:
            return updated
        located = original.body if isinstance(original, cst.Module) else original.body.body
        column = self._column(located[0].body[0].value)
        value = self._refill_docstring(string, column)
        if value == string.value:
            return updated
        statement = body[0].with_changes(body=[first.with_changes(value=string.with_changes(value=value))])
        if isinstance(updated, cst.Module):
            return updated.with_changes(body=[statement, *body[1:]])
        return updated.with_changes(body=updated.body.with_changes(body=[statement, *body[1:]]))

    def _refill_docstring(self, string: cst.SimpleString, column: int) -> str:
        """The docstring's source with each paragraph that has a line over the limit re-filled; the quotes
        stay glued to the first and last words, so they count towards their lines."""
        width = min(self.limit, self.doc_limit)
        lines = f"{' ' * column}{string.value}".split("\n")
        if all(len(line) <= width for line in lines):
            return string.value
        result: list[str] = []
        paragraph: list[str] = []

        def flush() -> None:
            if paragraph and any(len(line) > width for line in paragraph):
                lead = " " * _indent(paragraph[0])
                bullet = _BULLET.match(paragraph[0].lstrip())
                hanging = lead + " " * (bullet.end() if bullet else 0)
                text = " ".join(line.strip() for line in paragraph)
                result.extend(_fill(text, width, first=lead, rest=hanging))
            else:
                result.extend(paragraph)
            paragraph.clear()

        for line in lines:
            stripped = line.strip()
            prose = stripped not in ("", string.quote) and not _VERBATIM.match(stripped)
            if not prose or _BULLET.match(stripped) or (paragraph and _indent(line) != _indent(paragraph[0])):
                flush()
            if prose:
                paragraph.append(line.rstrip())
            else:
                result.append(line.rstrip() if stripped else "")
        flush()
        return "\n".join(result)[column:]


def _space_before(text: str, room: int) -> int | None:
    """Where to cut ``text`` so its first piece ends with a space and has at most ``room`` characters; None
    when no space fits."""
    cut = text.rfind(" ", 0, max(room, 0))
    while cut > 0 and text[cut - 1] == "\\":
        cut = text.rfind(" ", 0, cut)
    return cut + 1 if cut > 0 else None


def _fstring(template: cst.FormattedString, parts: list[cst.BaseFormattedStringContent]) -> cst.BaseString:
    """``parts`` as an f-string like ``template``, or as a plain string when they hold no placeholder."""
    if any(isinstance(part, cst.FormattedStringExpression) for part in parts):
        return template.with_changes(parts=parts)
    text = "".join(part.value for part in parts).replace("{{", "{").replace("}}", "}")
    prefix = template.start[: -len(template.end)].replace("f", "").replace("F", "")
    return cst.SimpleString(f"{prefix}{template.end}{text}{template.end}")


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def rewrap(source: str, limit: int, doc_limit: int | None = None) -> str:
    """``source`` with its comments and docstrings fitted under ``limit`` columns (``doc_limit``, when
    given, for comments and docstrings alone)."""
    module = cst.MetadataWrapper(cst.parse_module(source))
    return module.visit(_Rewrap(limit, doc_limit or limit)).code
