"""The ``sdpa`` codemod: each hand-written causal attention that passes every check becomes one
``F.scaled_dot_product_attention`` call; the statements only it read are removed."""

from __future__ import annotations

from typing import cast

import libcst as cst

from optimizations.edits.expressions import call_expr
from optimizations.edits.model_code import drop_unused_imports, functional
from optimizations.program.choices import commented, custom_masks, written_out_on_purpose
from optimizations.program.model_code import bare
from optimizations.program.syntax import NESTED_SCOPES, code_of, walk

from .edit_chain import Chain, NotAttention, Product, Refused, bound_name, matrix_product
from .edit_mask import CausalMaskRefusals
from .edit_refusals import AttentionRefusals

SDPA = ("torch.nn.functional.scaled_dot_product_attention",)


class SdpaCodemod(AttentionRefusals, CausalMaskRefusals):
    """Hand-written causal attention → ``F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=...)``;
    a call of it already there is reported as done."""

    def plan(self, module: cst.Module) -> None:
        self.tree = module
        self.prefix: str | None = None
        removed: list[cst.CSTNode] = []
        fused = [c for c in self.nodes(cst.Call) if self.names(c.func) & set(SDPA)]
        for call in fused:
            self.already(call, f"fused attention: {code_of(call.func)}(...)")
        for function in self.nodes(cst.FunctionDef):
            if any(self.within(call, function) for call in fused):
                continue  # the hand-written attention beside it is a fallback
            for statement in walk(function.body, NESTED_SCOPES):
                if isinstance(statement, cst.SimpleStatementLine):
                    for node in walk(statement, NESTED_SCOPES):
                        product = matrix_product(node, self.names)
                        if product is not None and product.form in ("matmul", "weights"):
                            removed += self._plan_site(function, statement, node, product)
        if removed:
            drop_unused_imports(self, module, removed, keep=[self._functional().split(".")[0]])

    # -- one `weights @ v` ----------------------------------------------------------------------------------
    def _plan_site(
        self,
        function: cst.FunctionDef,
        statement: cst.SimpleStatementLine,
        output: cst.CSTNode,
        operands: Product,
    ) -> list[cst.CSTNode]:
        """Plan one site; the code it removes or replaces."""
        chain = Chain(output, statement)
        node = self._follow(operands.left, chain)
        node = self._dropout(node, chain)
        softmax = self._softmax(node)
        if softmax is None:
            return []  # a matmul, not attention
        message = "hand-written causal attention → F.scaled_dot_product_attention(q, k, v, is_causal=True)"
        try:
            self._walk_scores(softmax, chain)
            q, k = self._check_scores(chain)
            self._check_weights_unread(function, chain)
            seq, head = self._views(function, chain, q, k)
            self._check_scale(chain, head)
            local_masks = self._check_mask(function, chain, q, k, seq)
            self._check_contiguous(chain, operands.right, local_masks)
        except NotAttention:
            return []
        except Refused as refusal:
            if not self._kept(function, chain):
                self.refused(self._top(chain), message, str(refusal))
            return []
        if self._kept(function, chain):
            return []
        dropped = chain.consumed + [s for s in local_masks if self._only_read_in(function, s, chain)]
        self._rewrite(chain, q, k, dropped)
        self.changed(
            self._top(chain), message + " (the mask buffer, if any, stays for state-dict compatibility)"
        )
        return [*dropped, output]

    def _kept(self, function: cst.FunctionDef, chain: Chain) -> bool:
        """Keep the hand-written attention (a site reported as kept) where it is written so on purpose: a comment
        right above or on its first line gives a reason, the docstring of its function or class says so, or
        the file builds attention masks of its own, which a causal SDPA call would drop."""
        line = self.line(self._top(chain))
        owner = self.owning_class(function)
        definitions = (function,) if owner is None else (function, owner)
        choice = (
            commented(self.parsed, line)
            or written_out_on_purpose(self.parsed, *definitions)
            or custom_masks(self.parsed)
        )
        if choice is not None:
            self.kept(line, "hand-written attention, written out on purpose", choice.evidence)
        return choice is not None

    def _top(self, chain: Chain) -> cst.BaseStatement:
        """The chain's first statement."""
        return min([chain.statement, *chain.consumed], key=self.line)

    def _only_read_in(
        self, function: cst.FunctionDef, statement: cst.SimpleStatementLine, chain: Chain
    ) -> bool:
        name = bound_name(statement)
        reads, _writes, nested = self.reads_and_writes(function, name)
        return not nested and all(any(self.within(r, s) for s in chain.consumed) for r in reads)

    # -- the edit -----------------------------------------------------------------------------------------------
    def _functional(self) -> str:
        if self.prefix is None:
            self.prefix = functional(self, self.tree)
        return self.prefix

    def _rewrite(self, chain: Chain, q: str, k: str, dropped: list[cst.SimpleStatementLine]) -> None:
        keywords: dict[str, cst.BaseExpression] = {"is_causal": cst.Name("True")}
        if chain.dropout is not None:
            keywords["dropout_p"] = chain.dropout
        prefix = self._functional()

        def attend(updated: cst.CSTNode) -> cst.CSTNode:
            # `w @ v`, else `torch.matmul(w, v)` or an einsum: v is the last argument
            values = (
                updated.right
                if isinstance(updated, cst.BinaryOperation)
                else cast(cst.Call, updated).args[-1].value
            )
            return call_expr(
                f"{prefix}.scaled_dot_product_attention", cst.Name(q), cst.Name(k), bare(values), **keywords
            )

        self.replacements[chain.output] = attend
        self.dropped.update(dropped)
        body = self._block(chain.statement)
        top = min((s for s in dropped if s in chain.consumed), key=lambda s: body.index(s), default=None)
        if top is not None:
            lines = list(top.leading_lines)

            def keep_leading_lines(updated: cst.CSTNode) -> cst.CSTNode:
                line = cast(cst.SimpleStatementLine, updated)  # the replacement of chain.statement, updated
                return line.with_changes(leading_lines=lines + list(line.leading_lines))

            self.replacements[chain.statement] = keep_leading_lines
