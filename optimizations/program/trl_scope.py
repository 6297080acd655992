"""What one module says about its TRL training setup, gathered before a transform edits anything.

The TRL transforms decide per config call from facts that may sit anywhere in the module (a vision-language
model loaded after the config is built, the trainer that receives a collator, a streaming dataset load), so a
pre-pass records every call with the function it is in, the module's classes, and the evidence of a
vision-language model or an iterable dataset, with the code that shows it (for refusal reasons).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import libcst as cst

from optimizations.program.hf import is_vision_class
from optimizations.program.repository import ParsedFile
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under


@dataclass(frozen=True)
class CallSite:
    """A call, its qualified callee names and the function it is in (``None`` at module level)."""

    call: cst.Call
    names: frozenset[str]
    function: cst.FunctionDef | None


def _mentions(names: Iterable[str], package: str, wanted: Callable[[str], bool]) -> bool:
    """True when a name under ``package`` has a dotted part that ``wanted`` accepts."""
    return any(
        (n == package or n.startswith(package + ".")) and any(wanted(part) for part in n.split("."))
        for n in names
    )


class TrainingScope:
    """The calls and classes of a parsed module, read in source order from its shared walk; ``names`` resolves a
    node to its qualified names (the codemod's)."""

    def __init__(
        self,
        parsed: ParsedFile,
        names: Callable[[cst.CSTNode], set[str]],
        known_off: Callable[[cst.BaseExpression], bool] = lambda value: False,
    ):
        self._names = names
        self._known_off = known_off  # a flag value the program model knows is false (a parsed default)
        self.calls: list[CallSite] = []
        self.classes: dict[str, cst.ClassDef] = {}
        self.vision_model: str | None = None  # code that loads a vision-language model or processor
        self.iterable_dataset: str | None = None  # code that makes an iterable (streaming) dataset
        parents = parsed.parents()
        for node in parsed.nodes(cst.ClassDef, cst.Call):
            function = parents.get(node)
            while function is not None and not isinstance(function, cst.FunctionDef):
                function = parents.get(function)
            if isinstance(node, cst.ClassDef):
                self._class(node, function)
            else:
                self._call(node, function)

    def _class(self, node: cst.ClassDef, function: cst.FunctionDef | None) -> None:
        if function is None:
            self.classes[node.name.value] = node
        for base in node.bases:
            if self.iterable_dataset is None and _mentions(
                self._names(base.value), "torch", lambda p: p == "IterableDataset"
            ):
                self.iterable_dataset = f"class {node.name.value}({code_of(base.value)})"

    def _call(self, node: cst.Call, function: cst.FunctionDef | None) -> None:
        names = frozenset(self._names(node.func))
        self.calls.append(CallSite(node, names, function))
        if self.vision_model is None and _mentions(names, "transformers", is_vision_class):
            self.vision_model = code_of(node.func)
        if self.iterable_dataset is None:
            self.iterable_dataset = self._iterable_evidence(node, names)

    def _iterable_evidence(self, node: cst.Call, names: frozenset[str]) -> str | None:
        callee = code_of(node.func)
        streaming = keyword(node, "streaming")
        if (
            streaming is not None
            and literal_value(streaming.value) is not False
            and not self._known_off(streaming.value)
        ):
            return f"{callee}(..., streaming={code_of(streaming.value)})"
        if _mentions(names, "datasets", lambda p: p == "IterableDataset"):
            return f"{callee}(...)"
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "to_iterable_dataset":
            return f"{callee}()"
        return None

    # -- queries ------------------------------------------------------------------------------------
    def calls_to(self, attrs: Iterable[str], packages: tuple[str, ...] = ("trl",)) -> list[CallSite]:
        """Calls whose callee is ``<package>.….<attr>``."""
        attrs = tuple(attrs)
        return [site for site in self.calls if qualified_under(site.names, packages, attrs)]

    def near(self, sites: list[CallSite], function: cst.FunctionDef | None) -> list[CallSite]:
        """The sites in ``function`` when it has any, else all of them: the calls that go together."""
        local = [s for s in sites if s.function is function]
        return local or sites
