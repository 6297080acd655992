"""The defaults a setting read as ``args.name``, ``config.name`` or ``self.name`` falls back to in its own file:
the argument parser's ``add_argument("--name", default=...)``, a config attribute assigned a literal
(karpathy/minGPT's ``C.num_workers = 4``), a class field's default (``num_workers: int = 4``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Default:
    """One literal a setting may default to, and the line that gives it."""

    value: object
    line: int


def _literal(node: ast.expr | None) -> object:
    try:
        return ast.literal_eval(node) if node is not None else ...
    except ValueError:
        return ...


@dataclass(frozen=True)
class Argument:
    """One ``parser.add_argument(...)``: the strings that name the option (``--max-steps``, ``-n``), the
    keywords it is given (``dest``, ``default``...) and its line."""

    names: tuple[str, ...]
    keywords: dict[str, ast.expr]
    line: int

    @property
    def dest(self) -> object:
        """The literal ``dest=``; ``...`` where none is given or it is not literal."""
        return _literal(self.keywords.get("dest"))


def argparse_argument(call: ast.Call) -> Argument | None:
    """The :class:`Argument` a call declares, where it is an ``add_argument`` call; None otherwise."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
        return None
    names = tuple(str(a.value) for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return Argument(names, {k.arg: k.value for k in call.keywords if k.arg}, call.lineno)


def _flag_default(call: ast.Call, name: str) -> Default | None:
    argument = argparse_argument(call)
    if argument is None:
        return None
    named = {f"--{name}", f"--{name.replace('_', '-')}"} & set(argument.names) or argument.dest == name
    if not named:
        return None
    default = _literal(argument.keywords["default"]) if "default" in argument.keywords else None
    return Default(default, argument.line)


def attribute_defaults(tree: ast.Module, name: str) -> list[Default]:
    """Every default the file ``tree`` gives a setting ``name`` read as an attribute, in source order; a flag
    with no default counts as ``None``, a value not literal as ``...``."""
    found: list[Default] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            flag = _flag_default(node, name)
            found += [flag] if flag is not None else []
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == name for t in node.targets
        ):
            found.append(Default(_literal(node.value), node.lineno))
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                target = statement.target if isinstance(statement, ast.AnnAssign) else None
                if (
                    isinstance(target, ast.Name)
                    and target.id == name
                    and isinstance(statement, ast.AnnAssign)
                ):
                    default = statement.value
                    if isinstance(default, ast.Call) and getattr(default.func, "id", "") == "field":
                        default = next((k.value for k in default.keywords if k.arg == "default"), None)
                    found.append(Default(_literal(default), statement.lineno))
    return sorted(found, key=lambda d: d.line)
