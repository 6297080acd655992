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
from typing import TypeGuard, TypeVar

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


# The nodes a docstring opens the body of.
DocumentedT = TypeVar("DocumentedT", cst.Module, cst.ClassDef, cst.FunctionDef)


def _comment_text(comment: cst.Comment) -> str:
    return comment.value[1:].strip()


def _comment_of(line: cst.EmptyLine) -> cst.Comment:
    """The comment of a line of a comment paragraph (every such line has one)."""
    assert line.comment is not None
    return line.comment


class _Rewrap(cst.CSTTransformer):
    """Re-fills over-long comment paragraphs and docstrings, and lifts over-long trailing comments."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, limit: int, doc_limit: int):
        super().__init__()
        self.limit = limit
        self.doc_limit = doc_limit
        self._lefts: set[cst.CSTNode] = set()

    # -- comments on lines of their own ---------------------------------------------------------------
    def on_leave(
        self, original_node: cst.CSTNodeT, updated_node: cst.CSTNodeT
    ) -> cst.CSTNodeT | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNodeT]:
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
                comment is None
                or not text
                or not comment.value.startswith("# ")
                or bool(_PRAGMA.match(text))
                or comment.value.startswith("#  ")
            )
            if verbatim or _BULLET.match(text) or (paragraph and line.indent != lines[paragraph[0]].indent):
                flush()
            if verbatim:
                result.append(line)
            else:
                paragraph.append(index)
        flush()
        return result

    def _refill(self, original: list[cst.EmptyLine], lines: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
        column = self._column(_comment_of(original[0]))
        width = min(self.limit, self.doc_limit)
        comments = [_comment_of(line) for line in lines]
        if all(column + len(comment.value) <= width for comment in comments):
            return lines
        text = " ".join(_comment_text(comment) for comment in comments)
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
        first = updated_node.body[0] if updated_node.body else None
        if not self._movable(comment) or not isinstance(
            first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)
        ):
            return updated_node
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

    def _movable(self, comment: cst.Comment | None) -> TypeGuard[cst.Comment]:
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
        chosen: tuple[int, str, int] | None = None
        for index, part in enumerate(parts):
            if column >= room:
                break
            if isinstance(part, cst.FormattedStringText):
                cut = _space_before(part.value, room - column)
                if cut is not None and (index < len(parts) - 1 or cut < len(part.value)):
                    chosen = (index, part.value, cut)
            column += len(_code(part))
        if chosen is None:
            return None
        index, text, cut = chosen
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
        self, original: DocumentedT, updated: DocumentedT, body: Sequence[cst.CSTNode]
    ) -> DocumentedT:
        """``updated`` with its docstring re-filled where a line of it is over the limit."""
        found = _docstring_of(body)
        if found is None:
            return updated
        line, first, string = found
        if string.quote not in ('"""', "'''") or "\\\n" in string.value:
            return updated
        located = _docstring_of(original.body if isinstance(original, cst.Module) else original.body.body)
        if located is None:  # never: the original opens with the docstring it was given
            return updated
        column = self._column(located[2])
        value = self._refill_docstring(string, column)
        if value == string.value:
            return updated
        statement = line.with_changes(body=[first.with_changes(value=string.with_changes(value=value))])
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


def _fstring(
    template: cst.FormattedString, parts: list[cst.BaseFormattedStringContent]
) -> cst.SimpleString | cst.FormattedString:
    """``parts`` as an f-string like ``template``, or as a plain string when they hold no placeholder."""
    texts = [part for part in parts if isinstance(part, cst.FormattedStringText)]
    if len(texts) < len(parts):  # a placeholder (FormattedStringExpression) among them
        return template.with_changes(parts=parts)
    text = "".join(part.value for part in texts).replace("{{", "{").replace("}}", "}")
    prefix = template.start[: -len(template.end)].replace("f", "").replace("F", "")
    return cst.SimpleString(f"{prefix}{template.end}{text}{template.end}")


def _docstring_of(
    body: Sequence[cst.CSTNode],
) -> tuple[cst.SimpleStatementLine, cst.Expr, cst.SimpleString] | None:
    """The line, expression and string of the docstring ``body`` opens with, if it opens with one."""
    if not body or not isinstance(body[0], cst.SimpleStatementLine):
        return None
    first = body[0].body[0] if body[0].body else None
    if not isinstance(first, cst.Expr) or not isinstance(first.value, cst.SimpleString):
        return None
    return body[0], first, first.value


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def rewrap(source: str, limit: int, doc_limit: int | None = None) -> str:
    """``source`` with its comments and docstrings fitted under ``limit`` columns (``doc_limit``, when
    given, for comments and docstrings alone)."""
    module = cst.MetadataWrapper(cst.parse_module(source))
    return module.visit(_Rewrap(limit, doc_limit or limit)).code
