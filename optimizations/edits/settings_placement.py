"""Settings placed where a maintainer would write them: keywords for a call that takes all its settings from a
dict literal of the same function (``SFTConfig(**sft_kwargs)``) go into that literal, and parameters added to a
function go in after its last one, each in the layout the code already has."""

from __future__ import annotations

import libcst as cst

from optimizations.program.queries import FileQueries
from optimizations.program.values import ProgramValues


# -- edits: settings that go into the dict literal a call takes them all from ------------------------------
def _separator(
    commas: list[cst.Comma | cst.MaybeSentinel], opening: cst.BaseParenthesizableWhitespace
) -> cst.Comma:
    """The comma that separates items in a layout: the one before the last item's, or one after the opening."""
    if len(commas) >= 2 and isinstance(commas[-2], cst.Comma):
        return commas[-2]
    return cst.Comma(whitespace_after=opening)


def with_entries(literal: cst.Dict, items: list[tuple[str, cst.BaseExpression]]) -> cst.Dict:
    """``literal`` with ``"key": value`` entries appended, in its own layout (one per line when it is)."""
    if not items:
        return literal
    new = [cst.DictElement(cst.SimpleString(f'"{key}"'), value) for key, value in items]
    elements = list(literal.elements)
    if not elements:
        return literal.with_changes(elements=new)
    separator = _separator([e.comma for e in elements], literal.lbrace.whitespace_after)
    trailing = elements[-1].comma
    elements[-1] = elements[-1].with_changes(comma=separator)
    elements += [e.with_changes(comma=separator) for e in new[:-1]]
    elements.append(new[-1].with_changes(comma=trailing))
    return literal.with_changes(elements=elements)


def with_keyword_parameter(
    function: cst.FunctionDef, name: str, annotation: str, default: str
) -> cst.FunctionDef:
    """``function`` with a ``name: annotation = default`` parameter after its last one (keyword-only when it
    has keyword-only parameters), in its own layout."""
    parameter = cst.ensure_type(
        cst.parse_statement(f"def f(*, {name}: {annotation} = {default}): pass"), cst.FunctionDef
    ).params.kwonly_params[0]
    params = function.params
    kwonly = bool(params.kwonly_params) or params.star_arg is not cst.MaybeSentinel.DEFAULT
    group = list(params.kwonly_params if kwonly else params.params)
    if group and isinstance(group[-1].comma, cst.Comma):
        separator = _separator([p.comma for p in group], cst.SimpleWhitespace(" "))
        parameter = parameter.with_changes(comma=group[-1].comma)
        group[-1] = group[-1].with_changes(comma=separator)
    group.append(parameter)
    changed = params.with_changes(**{"kwonly_params" if kwonly else "params": group})
    return function.with_changes(params=changed)


class _DictEntries(cst.CSTTransformer):
    """Appends entries to the dict literal ``name`` is assigned."""

    def __init__(self, name: str, items: list[tuple[str, cst.BaseExpression]]):
        super().__init__()
        self.name = name
        self.items = items

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        targets = [t.target for t in original_node.targets]
        if isinstance(updated_node.value, cst.Dict) and any(
            isinstance(t, cst.Name) and t.value == self.name for t in targets
        ):
            return updated_node.with_changes(value=with_entries(updated_node.value, self.items))
        return updated_node


class SettingsPlacement(FileQueries):
    """Mixin for an :class:`OptimizationCodemod`: keywords it adds to a call that takes all its settings from a
    dict literal of the same function (``SFTConfig(**sft_kwargs)``) go into that literal instead, as a
    maintainer would write them; parameters it adds to a function are added as that function is left.

    Call :meth:`start_placement` in ``visit_Module``; a subclass that defines ``leave_FunctionDef`` calls this
    one's."""

    def start_placement(self) -> None:
        self.values = ProgramValues(self)
        self._entries: dict[cst.FunctionDef, tuple[str, list[tuple[str, cst.BaseExpression]]]] = {}
        self._parameters: dict[cst.FunctionDef, list[tuple[str, str, str]]] = {}

    def placed(self, original: cst.Call, updated: cst.Call, edited: cst.Call) -> cst.Call:
        """``edited`` (``updated`` with keywords appended), or ``updated`` with those keywords queued for the dict
        literal the call takes its settings from."""
        target = self.values.settings_dict(original)
        if target is None:
            return edited
        added = [
            (a.keyword.value, a.value) for a in edited.args[len(updated.args) :] if a.keyword is not None
        ]
        self._entries.setdefault(target.function, (target.name, []))[1].extend(added)
        return updated

    def add_parameter(self, function: cst.FunctionDef, name: str, annotation: str, default: str) -> None:
        """Add ``name: annotation = default`` to ``function`` (unless queued already)."""
        queued = self._parameters.setdefault(function, [])
        if all(p[0] != name for p in queued):
            queued.append((name, annotation, default))

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        for name, annotation, default in self._parameters.pop(original_node, []):
            updated_node = with_keyword_parameter(updated_node, name, annotation, default)
        if original_node in self._entries:
            name, items = self._entries.pop(original_node)
            updated_node = updated_node.with_changes(body=updated_node.body.visit(_DictEntries(name, items)))
        return updated_node
