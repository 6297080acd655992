"""A model compiled only behind a flag: ``if args.use_compile == 1: model = torch.compile(model)``. Where every
default of the flag in its file is off and no launch of the file turns it on, no run compiles: turning it on is
the launch's choice, not an edit (:func:`off_by_default`)."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.attribute_defaults import attribute_defaults
from optimizations.program.recipes import launches
from optimizations.program.syntax import code_of


def _flag_switch(test: cst.BaseExpression) -> cst.Attribute | None:
    """The setting an ``if`` turns on by: ``args.flag``, ``args.flag == 1``, ``args.flag is True``."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        on = isinstance(target.comparator, cst.Integer) and target.comparator.value == "1"
        on = on or (isinstance(target.comparator, cst.Name) and target.comparator.value == "True")
        if on and isinstance(target.operator, (cst.Equal, cst.Is)):
            test = test.left
    return test if isinstance(test, cst.Attribute) else None


def off_by_default(codemod: PlannedCodemod, compiled: cst.Call) -> str | None:
    """Why ``compiled`` runs in no default run: the ``if`` around it tests a flag (``args.flag``,
    ``args.flag == 1``) whose every default in the file is off, and no launch of the file turns it on (llm.c's
    ``--compile 1`` does); None otherwise."""
    tree = codemod.parsed.syntax()
    for ancestor in codemod.ancestors(compiled):
        if not isinstance(ancestor, cst.If) or tree is None:
            continue
        flag = _flag_switch(ancestor.test)
        if flag is None or codemod.within(compiled, ancestor.orelse or ancestor.test):
            continue
        defaults = attribute_defaults(tree, flag.attr.value)
        launched_on = any(
            launch.flags.get(flag.attr.value, "0").lower() not in ("0", "false", "none")
            for launch in launches(codemod.repo, codemod.path)
        )
        if defaults and all(d.value in (0, False, None) for d in defaults) and not launched_on:
            return (
                f"it compiles only where `{code_of(ancestor.test)}` (line {codemod.line(ancestor)}), off by "
                f"default (line {defaults[0].line}): turning it on is the launch's choice"
            )
    return None
