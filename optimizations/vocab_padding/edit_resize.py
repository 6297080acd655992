"""The codemod for a Hugging Face model whose embeddings are resized to the tokenizer:
``model.resize_token_embeddings(len(tokenizer))`` gets ``pad_to_multiple_of=64``, so the embedding and LM head
keep a size tensor cores tile evenly (Pythia's 50304 rows, not the tokenizer's 50280)."""

from __future__ import annotations

from typing import cast

import libcst as cst

from optimizations.edits.expressions import add_keywords
from optimizations.edits.planned import PlannedCodemod
from optimizations.program.requirements import excludes
from optimizations.program.syntax import code_of, keyword, walk
from optimizations.program.training_loops import is_method_call

RESIZE = "resize_token_embeddings"
PAD = "pad_to_multiple_of"
# The first transformers release whose resize_token_embeddings takes pad_to_multiple_of.
PAD_SINCE = "4.32"
MULTIPLE = 64


def _last_rows(node: cst.CSTNode) -> bool:
    """``x[-n:]``: a slice of the last rows, which padding would move off the new tokens."""
    return isinstance(node, cst.Subscript) and any(
        isinstance(element.slice, cst.Slice)
        and isinstance(element.slice.lower, cst.UnaryOperation)
        and isinstance(element.slice.lower.operator, cst.Minus)
        and element.slice.upper is None
        for element in node.slice
    )


class PadResizedEmbeddings(PlannedCodemod):
    """Plans ``pad_to_multiple_of=64`` on each ``resize_token_embeddings`` call that has none; refused where the
    requirements keep transformers too old for it or the repository defines the method itself, proposed where
    the new tokens' rows are then initialised as the last rows (``[-num_new_tokens:]``)."""

    def plan_resizes(self) -> None:
        """Plans each resize call of the file."""
        for call in self.nodes(cst.Call):
            if is_method_call(call, RESIZE) and call.args:
                self._plan_resize(call)

    def _plan_resize(self, original_node: cst.Call) -> None:
        message = f"`{code_of(original_node.func)}(...)`: {PAD}={MULTIPLE}"
        given = keyword(original_node, PAD)
        if given is not None:
            self.already(original_node, f"`{code_of(original_node.func)}(...)`: {PAD}={code_of(given.value)}")
            return
        if (pinned := excludes(self.repo, "transformers", PAD_SINCE)) is not None:
            self.refused(original_node, message, f"{pinned} keeps transformers below {PAD_SINCE}: no {PAD}")
            return
        if (own := self._own_definition()) is not None:
            self.refused(original_node, message, f"the repository defines {RESIZE} itself ({own})")
            return
        owner = self.enclosing_body(original_node)
        line = self.line(original_node)
        last = next(
            (n for n in walk(owner, ()) if _last_rows(n) and self.line(n) > line),
            None,
        )
        if last is not None:
            self.proposed(
                original_node,
                message,
                f"line {self.line(last)} initialises the new tokens as the last rows (`{code_of(last)}`), which "
                "would be padding rows once padded: index the new token ids instead",
            )
            return
        self.changed(original_node, message)
        self.replacements[original_node] = lambda updated: add_keywords(
            cast(cst.Call, updated), [(PAD, cst.Integer(str(MULTIPLE)))]
        )

    def _own_definition(self) -> str | None:
        """``file:line`` of a ``def resize_token_embeddings`` of the repository (a wrapper whose signature may not
        take the keyword); None where it has none."""
        for path in self.repo.python_files():
            text = self.repo.read(path)
            if f"def {RESIZE}(" not in text:
                continue
            for number, content in enumerate(text.splitlines(), start=1):
                if f"def {RESIZE}(" in content:
                    return f"{path}:{number}"
        return None
