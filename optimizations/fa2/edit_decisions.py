"""What ``fa2`` decides at a site: whether the picker replaces the attention it names, refuses, or finds it
already chosen; when the commit is live; which model a ``model_init_kwargs`` dict is for."""

from __future__ import annotations

from typing import cast

import libcst as cst

from optimizations.edits.expressions import call_expr, expr
from optimizations.program.choices import (
    ATTENTION_TOPICS,
    attention_weights_read,
    commented,
    custom_masks,
    eager_family,
)
from optimizations.program.syntax import code_of, literal_value, walk
from optimizations.program.values import Source

from .edit_sites import AttentionSites

PICKER = "pick_attention_implementation"
# What the picker may replace; any other string (a FlashAttention version, a kernels hub repo, flex
# attention) is a deliberate choice left alone.
REPLACEABLE = ("sdpa", "eager")
FLOAT32 = ("torch.float32", "torch.float")
HALF_PRECISION = ("bfloat16", "float16", "half")
# transformers' checks of which FlashAttention is installed (``is_flash_attn_2_available``, ``_3_``, ``_4_``).
FLASH_PROBES = ("is_flash_attn_",)


class AttentionDecisions(AttentionSites):
    """The fallback the picker gets or the reason to refuse, the caveat of a site whose weights may load in
    float32, and the picker call itself."""

    def _fallback(self, current: cst.BaseExpression | None) -> tuple[str | None, str | None]:
        """``(fallback, None)`` when the picker should replace ``current``; ``(None, reason)`` to refuse;
        ``(None, None)`` to leave it as it is."""
        if current is None or literal_value(current) is None:
            return "None", None
        if self.calls(current, PICKER):
            return None, None
        literal = literal_value(current)
        if literal in REPLACEABLE:
            return f'"{literal}"', None
        if isinstance(literal, str):
            return None, None
        if isinstance(current, (cst.Name, cst.Attribute)):
            return code_of(current), None  # read at run time: the picker keeps any choice but sdpa/eager/None
        if isinstance(current, cst.Call) and self._probes_flash_attention(current, self.links.values.here):
            return (
                None,
                None,
            )  # the program's own run-time pick (open-instruct's detect_hf_attn_implementation)
        return None, (
            f"attn_implementation is set from `{code_of(current)}` (line {self.line(current)}); perfbot does not "
            "guess what it holds: "
            "choose the implementation where that value is defined"
        )

    def _probes_flash_attention(self, call: cst.Call, source: Source, depth: int = 3) -> bool:
        """Whether the repository function ``call`` calls asks which FlashAttention is installed
        (``transformers.utils.is_flash_attn_2_available()``), itself or through the repository functions it
        calls, ``depth`` calls deep: a picker of the program's own."""
        found = self.links.values.callee(call, source)
        if found is None:
            return False
        function, defined_in = found
        for node in walk(function.body, ()):
            if not isinstance(node, cst.Call):
                continue
            if code_of(node.func).rpartition(".")[2].startswith(FLASH_PROBES):
                return True
            if depth > 0 and self._probes_flash_attention(node, defined_in, depth - 1):
                return True
        return False

    def _chosen_on_purpose(self, current: cst.BaseExpression | None, classes: list[str]) -> str | None:
        """Why an explicit ``"eager"``/``"sdpa"`` is a deliberate choice to keep, or ``None``: a comment in reach
        gives a reason for it, the file builds attention masks of its own (FlashAttention takes none), or, for
        eager, the model family trains with eager attention or the file reads attention weights."""
        literal = literal_value(current) if current is not None else None
        if current is None or literal not in REPLACEABLE:
            return None
        if (comment := commented(self.parsed, self.line(current), ATTENTION_TOPICS)) is not None:
            return comment.evidence
        if (masks := custom_masks(self.parsed)) is not None:
            return f"{masks.evidence}, which FlashAttention does not take"
        if literal != "eager":
            return None
        strings = [node for node in self.nodes(cst.SimpleString) if isinstance(literal_value(node), str)]
        named = [(name, None) for name in classes] + [(str(literal_value(s)), s) for s in strings]
        for text, node in named:
            if (why := eager_family(text)) is not None:
                where = f" (line {self.line(node)})" if node is not None else ""
                return f"the file names `{text}`{where}: {why}"
        weights = attention_weights_read(self.parsed)
        return weights.evidence if weights is not None else None

    def _already_chosen(self, node: cst.CSTNode, callee: str, current: cst.BaseExpression) -> None:
        """The call already picks attention at run time, or names a faster implementation than sdpa/eager."""
        if self.calls(current, PICKER):
            self.already(node, f"{callee}: attn_implementation picked at run time (`{PICKER}(...)`)")
        else:
            self.already(node, f"{callee}: attn_implementation={code_of(current)}")

    def _is_float32(self, dtype: cst.BaseExpression) -> bool:
        return literal_value(dtype) == "float32" or bool(self.names(dtype) & set(FLOAT32))

    def _live_when(self, dtype: cst.BaseExpression | None) -> str:
        """When the commit changes the kernel, where the code does not say the weights load in bf16/fp16: the
        picker keeps SDPA for float32 weights (transformers' default kernel already), so the commit is live
        only with half-precision weights."""
        literal = literal_value(dtype) if dtype is not None else None
        if literal in HALF_PRECISION or (
            dtype is not None and self.names(dtype) & {f"torch.{name}" for name in HALF_PRECISION}
        ):
            return ""
        if dtype is None:
            return (
                "; live only where the weights load in bf16/fp16: this call gives no dtype, so transformers 4.x "
                "loads float32 and keeps SDPA (transformers 5 loads the checkpoint's dtype)"
            )
        if literal == "auto":
            return '; live only where the checkpoint\'s weights are bf16/fp16 (`dtype="auto"`)'
        return f"; live only where `{code_of(dtype)}` is bf16/fp16: float32 weights keep SDPA"

    def _picker_call(
        self,
        positional: list[cst.BaseExpression],
        dtype: cst.BaseExpression | None,
        fallback: str,
        source: cst.BaseExpression | None = None,
    ) -> cst.Call:
        keywords = {
            "source": source,
            "dtype": dtype,
            "fallback": None if fallback == '"sdpa"' else expr(fallback),
        }
        return call_expr(PICKER, *positional, **{k: v for k, v in keywords.items() if v is not None})

    def _trained_model(
        self, node: cst.CSTNode, config: cst.Call | cst.Attribute
    ) -> tuple[cst.BaseExpression | None, str | None]:
        """The model a config's trainer loads, readable where ``node`` runs; or why not."""
        # An attribute is noted only as `<name>.model_init_kwargs = ...` (AttentionSites.visit_Module).
        trainers = self.links.trainers_receiving(
            cast(cst.Name, config.value) if isinstance(config, cst.Attribute) else config
        )
        models = {
            code_of(model): model for t in trainers if (model := self.links.model_argument(t)) is not None
        }
        if len(models) != 1:
            return None, (
                "no single trainer call in this module takes this config, so the picker cannot see which "
                "model it loads (to check it supports FlashAttention); set attn_implementation by hand"
            )
        model = next(iter(models.values()))
        scope = cast(cst.CSTNode, self.links.scope(node))  # the dict is of this module: it has a scope
        problem = self.links.unbound_at(model, self.line(node), self.line(trainers[0]), scope)
        if problem is not None:
            return (
                None,
                f"the picker needs the model this config loads where the dict is built, but {problem}",
            )
        return model, None
