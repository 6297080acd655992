"""New expressions and calls for an edit: parsed snippets, libcst templates, and keyword arguments added in the
call's own layout (one per line with the same indent and trailing-comma style in a multi-line call, ``, ``
separated on one line otherwise; comments stay where they were)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import libcst as cst
from libcst.helpers import parse_template_expression

from optimizations.program.syntax import keyword


def expr(code: str) -> cst.BaseExpression:
    """Parse one Python expression."""
    return cst.parse_expression(code)


def call_expr(func: str, *args: cst.BaseExpression, **keywords: cst.BaseExpression) -> cst.Call:
    """``func(arg, ..., name=value, ...)`` on one line, the argument nodes filled into a libcst template."""
    slots = {f"arg{i}": arg for i, arg in enumerate(args)} | {f"kw_{k}": v for k, v in keywords.items()}
    code = [f"{{arg{i}}}" for i in range(len(args))] + [f"{k}={{kw_{k}}}" for k in keywords]
    return cast(
        cst.Call, parse_template_expression(f"{func}({', '.join(code)})", cst.PartialParserConfig(), **slots)
    )


def parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    """``(node)``: an operand that would otherwise bind differently inside a larger expression."""
    return node.with_changes(lpar=[cst.LeftParen(), *node.lpar], rpar=[*node.rpar, cst.RightParen()])


def replace_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """The call with the value of ``name=`` replaced, layout and comments kept."""
    return call.with_changes(
        args=[arg.with_changes(value=value) if arg is keyword(call, name) else arg for arg in call.args]
    )


def _indent_before(call: cst.Call, index: int) -> cst.BaseParenthesizableWhitespace:
    """The whitespace that precedes argument ``index``: the previous comma's, or the one after ``(``."""
    if index == 0:
        return call.whitespace_before_args
    comma = call.args[index - 1].comma
    return comma.whitespace_after if isinstance(comma, cst.Comma) else cst.SimpleWhitespace(" ")


def add_keywords(call: cst.Call, items: Sequence[tuple[str, cst.BaseExpression]]) -> cst.Call:
    """Append ``name=value`` keyword arguments, in the layout the call already uses."""
    if not items:
        return call
    new_args = [
        cst.Arg(
            value=value,
            keyword=cst.Name(name),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
            ),
        )
        for name, value in items
    ]
    args = list(call.args)
    if not args:
        return call.with_changes(args=new_args)

    last = args[-1]
    arg_indent = _indent_before(call, len(args) - 1)
    multiline = isinstance(arg_indent, cst.ParenthesizedWhitespace)
    if not multiline:
        separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        # The last argument's trailing comma and the layout before ``)`` move to the new last argument.
        args[-1] = last.with_changes(comma=separator, whitespace_after_arg=cst.SimpleWhitespace(""))
        for arg in new_args[:-1]:
            args.append(arg.with_changes(comma=separator))
        args.append(
            new_args[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
        )
        return call.with_changes(args=args)

    # Multi-line: each new argument on its own line, indented like the others.
    fresh_line = arg_indent.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
    if isinstance(last.comma, cst.Comma):
        # `a=1,  # note\n)`: keep the note on a's line; the closing layout moves to the new last argument.
        closing = last.comma.whitespace_after
        args[-1] = last.with_changes(
            comma=last.comma.with_changes(whitespace_after=_with_indent(closing, fresh_line))
        )
        for arg in new_args[:-1]:
            args.append(arg.with_changes(comma=cst.Comma(whitespace_after=fresh_line)))
        new_last_comma = cst.Comma(
            whitespace_after=_with_indent(fresh_line, closing).with_changes(
                first_line=cst.TrailingWhitespace()
            )
        )
        args.append(new_args[-1].with_changes(comma=new_last_comma))
    else:
        # `a=1\n)`: no trailing comma; the closing whitespace sits after the last argument.
        closing = last.whitespace_after_arg
        args[-1] = last.with_changes(
            comma=cst.Comma(whitespace_after=fresh_line), whitespace_after_arg=cst.SimpleWhitespace("")
        )
        for arg in new_args[:-1]:
            args.append(arg.with_changes(comma=cst.Comma(whitespace_after=fresh_line)))
        args.append(new_args[-1].with_changes(whitespace_after_arg=closing))
    return call.with_changes(args=args)


def _with_indent(
    whitespace: cst.BaseParenthesizableWhitespace, indent_from: cst.BaseParenthesizableWhitespace
) -> cst.BaseParenthesizableWhitespace:
    """``whitespace`` with the indentation (``indent``/``last_line``) of ``indent_from``."""
    if isinstance(whitespace, cst.ParenthesizedWhitespace) and isinstance(
        indent_from, cst.ParenthesizedWhitespace
    ):
        return whitespace.with_changes(indent=indent_from.indent, last_line=indent_from.last_line)
    return whitespace


def float_of(node: cst.BaseExpression) -> cst.Call:
    """``float(<node>)``."""
    return cst.Call(func=cst.Name("float"), args=[cst.Arg(node)])
