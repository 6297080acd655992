"""The ``fa2`` codemod: an ``attn_implementation`` of ``"sdpa"``/``"eager"`` (or none) in a model-loading call or a
TRL ``model_init_kwargs`` dict becomes a call of the vendored ``pick_attention_implementation``."""

from __future__ import annotations

from typing import cast

import libcst as cst

from optimizations.edits.expressions import add_keywords, expr, replace_keyword
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.choices import FLASH_PATCH
from optimizations.program.hf import MODEL_CLASS, MODEL_LOADERS
from optimizations.program.model_use import READS, kept_as_data
from optimizations.program.syntax import code_of, keyword, literal_value, walk
from optimizations.program.trainer_calls import is_plain_reference
from optimizations.program.values import parameters

from .edit_decisions import PICKER, AttentionDecisions
from .edit_sites import init_kwargs_site, site_message

RUNTIME = RuntimeHelper("attention", "optimizations.fa2")
# The name a loader's first argument is bound to (with `:=`) when the picker needs it too.
BOUND_NAMES = {"from_pretrained": "checkpoint", "from_config": "model_config"}
TRL_DTYPE_DEFAULT = "TRL loads the model in float32 when model_init_kwargs sets no dtype"


def _entries(node: cst.Dict | cst.Call) -> dict[str, cst.BaseExpression] | None:
    """String key -> value of a dict display or ``dict(...)`` call; ``None`` when it unpacks ``**`` others."""
    if isinstance(node, cst.Call):
        return {a.keyword.value: a.value for a in node.args if a.keyword is not None}
    entries = {}
    for element in node.elements:
        if not isinstance(element, cst.DictElement):  # a `**` unpacking (StarredDictElement)
            return None
        key = literal_value(element.key)
        if isinstance(key, str):
            entries[key] = element.value
    return entries


def _append_element(node: cst.Dict, key: cst.BaseExpression, value: cst.BaseExpression) -> cst.Dict:
    """The dict with ``key: value`` appended, in its own layout (one entry per line, comments kept)."""
    new = cst.DictElement(
        key=key,
        value=value,
        whitespace_before_colon=cst.SimpleWhitespace(""),
        whitespace_after_colon=cst.SimpleWhitespace(" "),
    )
    elements = list(node.elements)
    if not elements:
        return node.with_changes(elements=[new])
    last = elements[-1]
    # Every element but the last is followed by a comma.
    indent = (
        node.lbrace.whitespace_after
        if len(elements) == 1
        else cast(cst.Comma, elements[-2].comma).whitespace_after
    )
    had_comma = isinstance(last.comma, cst.Comma)
    if not isinstance(indent, cst.ParenthesizedWhitespace):
        elements[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        elements.append(new.with_changes(comma=last.comma))
        return node.with_changes(elements=elements)
    closing = node.rbrace.whitespace_before
    first_line = (
        closing.first_line if isinstance(closing, cst.ParenthesizedWhitespace) else cst.TrailingWhitespace()
    )
    elements[-1] = last.with_changes(
        comma=cst.Comma(whitespace_after=indent.with_changes(first_line=first_line, empty_lines=[]))
    )
    elements.append(new.with_changes(comma=cst.Comma() if had_comma else cst.MaybeSentinel.DEFAULT))
    if isinstance(closing, cst.ParenthesizedWhitespace):
        closing = closing.with_changes(first_line=cst.TrailingWhitespace())
    return node.with_changes(elements=elements, rbrace=node.rbrace.with_changes(whitespace_before=closing))


class PickAttention(AttentionDecisions):
    """``attn_implementation`` picked at run time in ``from_pretrained``/``from_config`` calls of transformers
    model classes and in TRL configs' ``model_init_kwargs``; the helper imported where one was written."""

    def _fresh_name(self, base: str) -> str:
        name, counter = base, 2
        while name in self.used_names:
            name, counter = f"{base}_{counter}", counter + 1
        return name

    # -- model loading calls ----------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if original_node in self.init_kwargs:
            return self._edit_init_kwargs(original_node, updated_node)
        func = original_node.func
        if self._patches_in_flash_attention(original_node):
            self.already(
                original_node,
                f"`{code_of(original_node)}` patches the model's attention to FlashAttention before it is loaded",
            )
            return updated_node
        if not (isinstance(func, cst.Attribute) and func.attr.value in MODEL_LOADERS):
            return updated_node
        classes = [
            n.rpartition(".")[2]
            for n in self.names(func.value)
            if n.startswith("transformers.") and MODEL_CLASS.match(n.rpartition(".")[2])
        ]
        if not classes:
            self._class_from_a_parameter(original_node)
            return updated_node
        # Decide on the original node (its metadata resolves names); edit the updated one, argument by index.
        current = keyword(original_node, "attn_implementation")
        fallback, reason = self._fallback(current.value if current else None)
        if reason is None and fallback is None and current is not None:  # no setting falls back to "None"
            self._already_chosen(original_node, code_of(func), current.value)
            return updated_node
        chosen = self._chosen_on_purpose(current.value if current else None, classes)
        if current is not None and chosen is not None:
            self.kept(
                self.line(current), f"{code_of(func)}: attn_implementation={code_of(current.value)}", chosen
            )
            return updated_node
        message = site_message(code_of(func), fallback)
        function = self.links.values.function_of(original_node)
        parents = self.parsed.parents()
        if isinstance(parents.get(original_node), cst.Expr):
            self.refused(
                original_node,
                message,
                "the loaded model is thrown away (the call is a statement of its own): it is loaded for what "
                "loading does (a remote module imported), never trained or run",
            )
            return updated_node
        kept = kept_as_data(function or self.parsed.module, original_node, self.parsed)
        if kept is not None:
            how = "to copy from" if kept.attr.value in READS else "to be converted and saved"
            self.refused(
                original_node,
                message,
                f"the model is loaded only {how} (`{code_of(kept)}` at line {self.line(kept)}); "
                "it is never trained or run, so its attention does not matter",
            )
            return updated_node
        if reason is None:
            reason = self.links.values.hidden(original_node, ["attn_implementation"])
        if reason is None:
            reason = self._own_flash_switch(original_node)
        dtype_arg = keyword(original_node, "dtype") or keyword(original_node, "torch_dtype")
        dtype = dtype_arg.value if dtype_arg else None
        if reason is None and dtype is not None and self._is_float32(dtype):
            reason = (
                f"the model is loaded in float32 (`{code_of(dtype)}`): "
                "FlashAttention and FlexAttention need bf16/fp16; load it in torch.bfloat16 (and train with bf16) "
                "to use them"
            )
        if reason is not None:
            self.refused(original_node, message, reason)
            return updated_node

        call = updated_node
        source_keyword, walrus_name = MODEL_LOADERS[func.attr.value], BOUND_NAMES[func.attr.value]
        positional = [func.value]
        needs_source = classes[0].startswith("Auto") or dtype is None or literal_value(dtype) == "auto"
        args = list(original_node.args)
        source_arg = keyword(original_node, source_keyword) or (
            args[0] if args and args[0].keyword is None and not args[0].star else None
        )
        if needs_source and source_arg is not None:
            if is_plain_reference(source_arg.value):
                positional.append(source_arg.value)
            elif current is not None and args.index(current) < args.index(source_arg):
                self.refused(
                    original_node,
                    message,
                    f"attn_implementation comes before `{source_keyword}=`, which the picker needs to "
                    "read the model's config: move it after",
                )
                return updated_node
            else:
                name = self._fresh_name(walrus_name)
                self.used_names.add(name)
                index = args.index(source_arg)
                bound = cst.NamedExpr(
                    target=cst.Name(name),
                    value=call.args[index].value,
                    lpar=[cst.LeftParen()],
                    rpar=[cst.RightParen()],
                )
                edited_args = list(call.args)
                edited_args[index] = edited_args[index].with_changes(value=bound)
                call = call.with_changes(args=edited_args)
                positional.append(cst.Name(name))
        # _fallback gives a fallback wherever it gives no reason and the site is not left as it is (above).
        picker = self._picker_call(positional, dtype, cast(str, fallback))
        if current is not None:
            call = replace_keyword(call, "attn_implementation", picker)
        else:
            call = add_keywords(call, [("attn_implementation", picker)])
        self.changed(original_node, message + self._live_when(dtype))
        self.edited = True
        return call

    def _class_from_a_parameter(self, call: cst.Call) -> None:
        """Refuses ``model_class.from_pretrained(...)`` where the class is a parameter of the function named for a
        model (DeepSpeed-Chat's ``create_hf_model(model_class, ...)``): which transformers class its callers pass,
        and so what the picker could read, is not known here."""
        func = cast(cst.Attribute, call.func)
        function = self.links.values.function_of(call)
        if not (
            isinstance(func.value, cst.Name) and function is not None and "model" in func.value.value.lower()
        ):
            return
        if func.value.value not in parameters(function):
            return
        dtype = keyword(call, "dtype") or keyword(call, "torch_dtype")
        loads = (
            ""
            if dtype is not None
            else "; it also loads the weights in float32 (no dtype), where the picker keeps SDPA"
        )
        self.refused(
            call,
            site_message(code_of(func), None),
            f"the model class is `{func.value.value}`, a parameter of {function.name.value}() (line "
            f"{self.line(function)}): which class its callers pass is not known here{loads}. Choosing the attention "
            "there means threading the run's dtype and attention through its callers, a change for a person",
        )

    def _own_flash_switch(self, call: cst.Call) -> str | None:
        """Why the loader ``call`` keeps its attention: its function (or module) patches attention to
        FlashAttention itself under a condition (``if training_args.flash_attn: replace_llama_attn_with_flash_attn()``),
        a switch of the program's own that an ``attn_implementation`` would fight; None where none does."""
        scope = self.links.values.function_of(call) or self.parsed.module
        parents = self.parsed.parents()
        for node in walk(scope, ()):
            if not (isinstance(node, cst.Call) and FLASH_PATCH.match(code_of(node.func).rpartition(".")[2])):
                continue
            holder = parents.get(node)
            while holder is not None and holder is not scope and not isinstance(holder, cst.If):
                holder = parents.get(holder)
            if isinstance(holder, cst.If):
                return (
                    f"the program patches attention to FlashAttention itself under `if {code_of(holder.test)}` "
                    f"(line {self.line(holder)}): turn that switch on in the launch; an attn_implementation here "
                    "would fight the patch"
                )
        return None

    def _patches_in_flash_attention(self, call: cst.Call) -> bool:
        """A statement of the module's own that calls a FlashAttention monkeypatch (:data:`FLASH_PATCH`)."""
        name = (
            call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", "")
        )
        parents = self.parsed.parents()
        statement = parents.get(call)
        line = parents.get(statement) if statement is not None else None
        return (
            isinstance(name, str)
            and FLASH_PATCH.match(name) is not None
            and isinstance(statement, cst.Expr)
            and line is not None
            and parents.get(line) is self.parsed.module
        )

    # -- TRL model_init_kwargs --------------------------------------------------------------------------
    def leave_Dict(self, original_node: cst.Dict, updated_node: cst.Dict) -> cst.BaseExpression:
        if original_node not in self.init_kwargs:
            return updated_node
        return self._edit_init_kwargs(original_node, updated_node)

    def _edit_init_kwargs(
        self, original: cst.Dict | cst.Call, updated: cst.Dict | cst.Call
    ) -> cst.BaseExpression:
        config = self.init_kwargs[original]
        callee = init_kwargs_site(config)
        entries = _entries(original)
        if entries is None:
            self.refused(
                original,
                site_message(callee, None),
                "the dict unpacks `**` other settings that may set attn_implementation",
            )
            return updated
        current = entries.get("attn_implementation")
        fallback, reason = self._fallback(current)
        if reason is None and fallback is None and current is not None:  # no setting falls back to "None"
            self._already_chosen(original, callee, current)
            return updated
        chosen = self._chosen_on_purpose(current, [])
        if current is not None and chosen is not None:
            self.kept(self.line(current), f"{callee}: attn_implementation={code_of(current)}", chosen)
            return updated
        message = site_message(callee, fallback)
        dtype = entries.get("dtype", entries.get("torch_dtype"))
        if reason is None and dtype is None:
            reason = (
                f"{TRL_DTYPE_DEFAULT}, and FlashAttention and FlexAttention need bf16/fp16: "
                'add "dtype": "bfloat16"'
            )
        if reason is None and dtype is not None and self._is_float32(dtype):  # no dtype: refused above
            reason = (
                f"the model is loaded in float32 (`{code_of(dtype)}`): "
                "FlashAttention and FlexAttention need bf16/fp16"
            )
        source = None
        if reason is None:
            source, reason = self._trained_model(original, config)
        if reason is not None:
            self.refused(original, message, reason)
            return updated
        picker = self._picker_call([], dtype, cast(str, fallback), source=source)  # as in leave_Call
        message += self._live_when(dtype)
        edited: cst.BaseExpression
        if isinstance(updated, cst.Call):
            edited = (
                replace_keyword(updated, "attn_implementation", picker)
                if current is not None
                else add_keywords(updated, [("attn_implementation", picker)])
            )
        elif current is not None:
            # The original of a dict display is one.
            position = [e.value for e in cast(cst.Dict, original).elements].index(current)
            elements = list(updated.elements)
            elements[position] = elements[position].with_changes(value=picker)
            edited = updated.with_changes(elements=elements)
        else:
            edited = _append_element(updated, expr('"attn_implementation"'), picker)
        self.changed(original, message)
        self.edited = True
        return edited

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.edited:
            self.import_runtime(RUNTIME, PICKER)
        return updated_node
