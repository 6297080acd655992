"""Attention picked at run time: FlashAttention 4/3/2, FlexAttention or SDPA instead of a fixed ``"sdpa"``.

Targets ``from_pretrained``/``from_config`` of transformers model classes (``AutoModel*`` and concrete ones)
and the ``model_init_kwargs`` dicts of TRL configs (which TRL hands to ``from_pretrained``), given to the config
call or assigned to a parsed one (``training_args.model_init_kwargs = dict(...)`` in TrlParser scripts). An
``attn_implementation`` of ``"sdpa"``/``"eager"``, or none at all, becomes a call of
``pick_attention_implementation`` from a vendored helper (``optimizations/fa2/helper.py``, copied
beside the file as ``_perfbot_attention.py``). On a CUDA GPU that helper returns the first of FlashAttention
4, 3 and 2, FlexAttention (block-sparse masks for packed and padded batches; the usual pick where
``flash-attn`` is not installed) and SDPA that the installed packages, transformers, the GPU, the weights'
dtype and the model class accept (FlexAttention after a one-time probe on the GPU), else what the call asked
for before; without a GPU it returns what the call asked for, so CPU runs are unchanged.
``PERFBOT_ATTENTION=<name>`` forces a choice. Float32 weights keep SDPA (transformers' default kernel), so
a site whose call may load them (no dtype, ``"auto"``, a value read at run time) says in its message that the
commit is live only where the weights load in bf16/fp16.

The helper needs the model class and the checkpoint to check support (``Auto*`` classes map to a concrete
class through the checkpoint's config): the call's own class and first argument are passed, and a first
argument that is not a plain name is bound once with ``:=`` so that it is not evaluated twice. An
``attn_implementation`` read from a name or attribute (``model_args.attn_implementation``, as TRL's scripts
pass it) becomes the picker's fallback: the picker keeps it at run time unless it is sdpa, eager or None.
Refused: an ``attn_implementation`` set from another expression (perfbot does not guess what it holds), calls with
``**kwargs`` that may carry one, weights loaded in float32 (FlashAttention and FlexAttention are picked for
half precision only), and ``model_init_kwargs`` whose model is not visible where the config is built or whose
dtype is TRL's float32 default.
"""

from __future__ import annotations

import libcst as cst

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.edits.expressions import add_keywords, call_expr, expr, replace_keyword
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.hf import HF_CONFIGS, MODEL_CLASS, MODEL_LOADERS, is_training_config
from optimizations.program.model_use import READS, kept_as_data
from optimizations.program.repository import RepoContext
from optimizations.program.shapes import ProgramShape
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.program.trainer_calls import LINK_METADATA, TrainerLinks, is_plain_reference
from optimizations.registry import Example, Numerics, Optimization

PICKER = "pick_attention_implementation"
RUNTIME = RuntimeHelper("attention", "optimizations.fa2")
# The name a loader's first argument is bound to (with `:=`) when the picker needs it too.
BOUND_NAMES = {"from_pretrained": "checkpoint", "from_config": "model_config"}
# What the picker may replace; any other string (a FlashAttention version, a kernels hub repo, flex
# attention) is a deliberate choice left alone.
REPLACEABLE = ("sdpa", "eager")
FLOAT32 = ("torch.float32", "torch.float")
HALF_PRECISION = ("bfloat16", "float16", "half")
TRL_DTYPE_DEFAULT = "TRL loads the model in float32 when model_init_kwargs sets no dtype"


class _PickAttention(OptimizationCodemod):
    METADATA_DEPENDENCIES = OptimizationCodemod.METADATA_DEPENDENCIES + LINK_METADATA

    def __init__(self, context, optimization: Optimization, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.edited = False
        self.links: TrainerLinks | None = None
        self.used_names: set[str] = set()
        # model_init_kwargs dict node -> its config: the config call, or the `config.model_init_kwargs` target
        self.init_kwargs: dict[cst.CSTNode, cst.Call | cst.Attribute] = {}

    # -- pre-pass ---------------------------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        self.links = TrainerLinks(self, node)
        self.used_names = {name.value for name in self.nodes(cst.Name)}
        for call in self.nodes(cst.Call):
            if not is_training_config(self.names(call.func)):
                continue
            argument = keyword(call, "model_init_kwargs")
            if argument is None or literal_value(argument.value) is None:
                continue
            self._note_init_kwargs(argument.value, call)
        for assign in self.nodes(cst.Assign):
            target = assign.targets[0].target
            if (
                len(assign.targets) == 1
                and isinstance(target, cst.Attribute)
                and target.attr.value == "model_init_kwargs"
                and isinstance(target.value, cst.Name)
                and literal_value(assign.value) is not None
            ):
                self._note_init_kwargs(assign.value, target)

    def _note_init_kwargs(self, value: cst.BaseExpression, config: cst.Call | cst.Attribute) -> None:
        """Remember the dict a config's ``model_init_kwargs`` is set to, or refuse one that is not visible."""
        target = self._dict_behind(value, config)
        if target is not None:
            self.init_kwargs[target] = config
        else:
            self.refused(
                config,
                _message(_init_kwargs_site(config), None),
                f"model_init_kwargs comes from `{code_of(value)}`; set attn_implementation where "
                "that dict is built",
            )

    def _dict_behind(self, value: cst.BaseExpression, site: cst.CSTNode) -> cst.CSTNode | None:
        """The dict literal (or ``dict(...)`` call) that ``model_init_kwargs`` is set to, if it is visible."""
        if _is_dict(value, self.names):
            return value
        scope = self.links.scope(site)
        if not isinstance(value, cst.Name) or scope is None:
            return None
        local, _ = self.links.bindings(value.value, scope)
        if len(local) == 1 and local[0].value is not None and _is_dict(local[0].value, self.names):
            return local[0].value
        return None

    # -- decisions --------------------------------------------------------------------------------------
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
        return None, (
            f"attn_implementation is set from `{code_of(current)}`; perfbot does not guess what it holds: "
            "choose the implementation where that value is defined"
        )

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
        if literal in HALF_PRECISION or self.names(dtype) & {f"torch.{name}" for name in HALF_PRECISION}:
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
        if not (isinstance(func, cst.Attribute) and func.attr.value in MODEL_LOADERS):
            return updated_node
        classes = [
            n.rpartition(".")[2]
            for n in self.names(func.value)
            if n.startswith("transformers.") and MODEL_CLASS.match(n.rpartition(".")[2])
        ]
        if not classes:
            return updated_node
        # Decide on the original node (its metadata resolves names); edit the updated one, argument by index.
        current = keyword(original_node, "attn_implementation")
        fallback, reason = self._fallback(current.value if current else None)
        if reason is None and fallback is None:
            self._already_chosen(original_node, code_of(func), current.value)
            return updated_node
        message = _message(code_of(func), fallback)
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
        picker = self._picker_call(positional, dtype, fallback)
        if current is not None:
            call = replace_keyword(call, "attn_implementation", picker)
        else:
            call = add_keywords(call, [("attn_implementation", picker)])
        self.changed(original_node, message + self._live_when(dtype))
        self.edited = True
        return call

    # -- TRL model_init_kwargs --------------------------------------------------------------------------
    def leave_Dict(self, original_node: cst.Dict, updated_node: cst.Dict) -> cst.BaseExpression:
        if original_node not in self.init_kwargs:
            return updated_node
        return self._edit_init_kwargs(original_node, updated_node)

    def _edit_init_kwargs(self, original: cst.CSTNode, updated: cst.Dict | cst.Call) -> cst.BaseExpression:
        config = self.init_kwargs[original]
        callee = _init_kwargs_site(config)
        entries = _entries(original)
        if entries is None:
            reason = "the dict unpacks `**` other settings that may set attn_implementation"
            self.refused(original, _message(callee, None), reason)
            return updated
        current = entries.get("attn_implementation")
        fallback, reason = self._fallback(current)
        if reason is None and fallback is None:
            self._already_chosen(original, callee, current)
            return updated
        message = _message(callee, fallback)
        dtype = entries.get("dtype", entries.get("torch_dtype"))
        if reason is None and dtype is None:
            reason = (
                f"{TRL_DTYPE_DEFAULT}, and FlashAttention and FlexAttention need bf16/fp16: "
                'add "dtype": "bfloat16"'
            )
        if reason is None and self._is_float32(dtype):
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
        picker = self._picker_call([], dtype, fallback, source=source)
        message += self._live_when(dtype)
        if isinstance(updated, cst.Call):
            edited = (
                replace_keyword(updated, "attn_implementation", picker)
                if current is not None
                else add_keywords(updated, [("attn_implementation", picker)])
            )
        elif current is not None:
            position = [e.value for e in original.elements].index(current)
            elements = list(updated.elements)
            elements[position] = elements[position].with_changes(value=picker)
            edited = updated.with_changes(elements=elements)
        else:
            edited = _append_element(updated, expr('"attn_implementation"'), picker)
        self.changed(original, message)
        self.edited = True
        return edited

    def _trained_model(
        self, node: cst.CSTNode, config: cst.Call | cst.Attribute
    ) -> tuple[cst.BaseExpression | None, str | None]:
        """The model a config's trainer loads, readable where ``node`` runs; or why not."""
        trainers = self.links.trainers_receiving(
            config.value if isinstance(config, cst.Attribute) else config
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
        scope = self.links.scope(node)
        problem = self.links.unbound_at(model, self.line(node), self.line(trainers[0]), scope)
        if problem is not None:
            return (
                None,
                f"the picker needs the model this config loads where the dict is built, but {problem}",
            )
        return model, None

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.edited:
            self.import_runtime(RUNTIME, PICKER)
        return updated_node


def _init_kwargs_site(config: cst.Call | cst.Attribute) -> str:
    """How a message names where model_init_kwargs is set: ``SFTConfig(model_init_kwargs=...)`` or
    ``training_args.model_init_kwargs = ...``."""
    if isinstance(config, cst.Attribute):
        return f"{code_of(config)} = ..."
    return f"{code_of(config.func)}(model_init_kwargs=...)"


def _message(callee: str, fallback: str | None) -> str:
    otherwise = {None: "", "None": ", else transformers' default"}.get(fallback, f", else {fallback}")
    picked = "FlashAttention 4/3/2, FlexAttention or SDPA where it runs"
    return f"{callee}: attn_implementation picked at run time ({picked}{otherwise})"


def _is_dict(node: cst.BaseExpression, names) -> bool:
    """A dict display, or a call of the builtin ``dict`` with keywords."""
    return isinstance(node, cst.Dict) or (
        isinstance(node, cst.Call)
        and "builtins.dict" in names(node.func)
        and all(a.keyword for a in node.args)
    )


def _entries(node: cst.Dict | cst.Call) -> dict[str, cst.BaseExpression] | None:
    """String key -> value of a dict display or ``dict(...)`` call; ``None`` when it unpacks ``**`` others."""
    if isinstance(node, cst.Call):
        return {a.keyword.value: a.value for a in node.args if a.keyword is not None}
    entries = {}
    for element in node.elements:
        if isinstance(element, cst.StarredDictElement):
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
    indent = node.lbrace.whitespace_after if len(elements) == 1 else elements[-2].comma.whitespace_after
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


class FlashAttention(Optimization):
    """FlashAttention 4/3/2, FlexAttention or SDPA picked at run time; the call's own choice without a GPU."""

    id = "fa2"
    title = "attention picked at run time: FlashAttention 4/3/2, FlexAttention or SDPA"
    tier = 1
    expected = "+5-50% SFT tokens/s, most on packed batches"
    summary = "attn_implementation picked at run time: FlashAttention 4/3/2, else FlexAttention, else SDPA"
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "another attention kernel (Flash, Flex or SDPA): the same softmax(QK^T)V summed in another order"
    )
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = (
        "flash_attention_2",
        "flash-attn",
        "fa2",
        "attn_implementation",
        "flex attention",
        "flexattention",
    )
    capabilities = ("fused attention", "flash attention", "flashattention", "efficient attention")
    codemods = (_PickAttention,)
    needs = (*HF_CONFIGS, *MODEL_LOADERS, "model_init_kwargs")

    examples = (
        Example(
            "model_loaded_only_to_copy_its_weights",
            before="""\
import torch
from transformers import GPT2LMHeadModel

from mymodel import TinyGPT


def pretrained_tiny_gpt(name):
    model = TinyGPT()
    ours = model.state_dict()
    source = GPT2LMHeadModel.from_pretrained(name)
    theirs = source.state_dict()
    with torch.no_grad():
        for key, value in theirs.items():
            ours[key].copy_(value)
    del source
    return model
""",
            refusal="the model is loaded only to copy from (`source.state_dict` at line 11)",
        ),
        Example(
            "model_loaded_to_put_adapters_on_and_save",
            before="""\
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM


def initialise_adapters(name, out, head):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="auto")
    if not isinstance(model, AutoModelForCausalLM) or not hasattr(model, "lm_head"):
        raise TypeError(name)
    model.lm_head = head
    peft_model = get_peft_model(model, LoraConfig(r=8, init_lora_weights="pissa"))
    peft_model.save_pretrained(f"{out}/adapter")
    base = peft_model.unload()
    base.save_pretrained(out)
""",
            refusal="the model is loaded only to be converted and saved (`peft_model.save_pretrained` at line 11)",
        ),
        Example(
            "model_loaded_to_merge_adapters_into_a_part",
            before="""\
from peft import PeftModel
from transformers import AutoModelForCausalLM


def merge(name, adapter, out):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="auto")
    part = getattr(model, "model")
    with_adapter = PeftModel.from_pretrained(part, adapter)
    merged = with_adapter.merge_and_unload()
    setattr(model, "model", merged)
    model.save_pretrained(out)
""",
            refusal="the model is loaded only to be converted and saved (`model.save_pretrained` at line 11)",
        ),
        Example(
            "model_loaded_to_merge_an_adapter_checked_by_its_weights",
            before="""\
import torch
from peft import PeftModel
from transformers import LlamaForCausalLM

base_model = LlamaForCausalLM.from_pretrained("base", torch_dtype=torch.float16)
first_weight = base_model.model.layers[0].self_attn.q_proj.weight
before = first_weight.clone()
lora_model = PeftModel.from_pretrained(base_model, "adapter")
lora_weight = lora_model.base_model.model.model.layers[0].self_attn.q_proj.weight
lora_model = lora_model.merge_and_unload()
lora_model.train(False)
assert not torch.allclose(before, first_weight)
state = {k: v for k, v in lora_model.state_dict().items() if "lora" not in k}
LlamaForCausalLM.save_pretrained(base_model, "./hf_ckpt", state_dict=state)
""",
            refusal="loaded only to be converted and saved (`LlamaForCausalLM.save_pretrained` at line 14)",
        ),
        Example(
            "adapter_merged_by_flags_on_each_layer_then_exported",
            before="""\
import torch
from peft import PeftModel
from transformers import LlamaForCausalLM

base_model = LlamaForCausalLM.from_pretrained("base", torch_dtype=torch.float16, device_map={"": "cpu"})
lora_model = PeftModel.from_pretrained(base_model, "adapter")
for layer in lora_model.base_model.model.model.layers:
    layer.self_attn.q_proj.merge_weights = True
lora_model.train(False)


def renamed(key):
    layer = key.split(".")[2]  # another variable: this function's own
    return f"layers.{layer}"


torch.save({renamed(k): v for k, v in lora_model.state_dict().items()}, "consolidated.pth")
""",
            refusal="the model is loaded only to copy from (`lora_model.state_dict` at line 17)",
        ),
        Example(
            "parts_iterated_and_run_is_a_run",
            before="""\
import torch
from transformers import LlamaForCausalLM

model = LlamaForCausalLM.from_pretrained("base", torch_dtype=torch.bfloat16)
hidden = torch.zeros(1, 4, 64)
for layer in model.model.layers:
    hidden = layer(hidden)[0]
""",
            after="""\
import torch
from transformers import LlamaForCausalLM
from _perfbot_attention import pick_attention_implementation

model = LlamaForCausalLM.from_pretrained("base", torch_dtype=torch.bfloat16, attn_implementation=pick_attention_implementation(LlamaForCausalLM, dtype=torch.bfloat16, fallback=None))
hidden = torch.zeros(1, 4, 64)
for layer in model.model.layers:
    hidden = layer(hidden)[0]
""",
        ),
        Example(
            "model_looked_at_then_run",
            before="""\
from transformers import AutoModelForCausalLM


def sample(name, prompts):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="bfloat16")
    print(model.lm_head.weight.dtype, model.config.vocab_size)
    model.eval()
    return [model.generate(prompt) for prompt in prompts]
""",
            after="""\
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def sample(name, prompts):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="bfloat16", attn_implementation=pick_attention_implementation(AutoModelForCausalLM, name, dtype="bfloat16", fallback=None))
    print(model.lm_head.weight.dtype, model.config.vocab_size)
    model.eval()
    return [model.generate(prompt) for prompt in prompts]
""",
        ),
        Example(
            "model_loaded_for_its_remote_code_and_thrown_away",
            before="""\
import importlib

from transformers import AutoConfig, AutoModelForCausalLM


def patch_remote_attention(name, attention):
    config = AutoConfig.from_pretrained(name, trust_remote_code=True)
    AutoModelForCausalLM.from_pretrained(name, trust_remote_code=True)
    modeling = importlib.import_module(config.__class__.__module__.replace("configuration_", "modeling_"))
    modeling.Attention.forward = attention
""",
            refusal="the loaded model is thrown away (the call is a statement of its own)",
        ),
        Example(
            "model_converted_and_then_evaluated_is_run",
            before="""\
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM


def initialise_and_check(name, out, batch):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="auto")
    peft_model = get_peft_model(model, LoraConfig(r=8))
    peft_model.save_pretrained(out)
    merged = peft_model.merge_and_unload()
    return merged(**batch).loss
""",
            after="""\
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def initialise_and_check(name, out, batch):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="auto", attn_implementation=pick_attention_implementation(AutoModelForCausalLM, name, dtype="auto", fallback=None))
    peft_model = get_peft_model(model, LoraConfig(r=8))
    peft_model.save_pretrained(out)
    merged = peft_model.merge_and_unload()
    return merged(**batch).loss
""",
        ),
        Example(
            "a_loaded_model_that_is_returned_is_trained",
            before="""\
from transformers import GPT2LMHeadModel


def load(name):
    model = GPT2LMHeadModel.from_pretrained(name)
    print(model.config)
    return model
""",
            after="""\
from transformers import GPT2LMHeadModel
from _perfbot_attention import pick_attention_implementation


def load(name):
    model = GPT2LMHeadModel.from_pretrained(name, attn_implementation=pick_attention_implementation(GPT2LMHeadModel, name, fallback=None))
    print(model.config)
    return model
""",
        ),
        Example(
            "sdpa_to_picker",
            before="""\
import torch
from transformers import AutoModelForCausalLM


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", dtype=torch.bfloat16)
""",
            after="""\
import torch
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=pick_attention_implementation(AutoModelForCausalLM, path, dtype=torch.bfloat16), dtype=torch.bfloat16)
""",
        ),
        Example(
            "aliased_auto_class_without_attn_implementation",
            before="""\
from transformers import AutoModelForCausalLM as AM


def load(cfg):
    return AM.from_pretrained(cfg.model_path, dtype="auto")
""",
            after="""\
from transformers import AutoModelForCausalLM as AM
from _perfbot_attention import pick_attention_implementation


def load(cfg):
    return AM.from_pretrained(cfg.model_path, dtype="auto", attn_implementation=pick_attention_implementation(AM, cfg.model_path, dtype="auto", fallback=None))
""",
        ),
        Example(
            "module_import_multiline_eager_with_comments",
            before="""\
import torch
import transformers


def load(size):
    model = transformers.Qwen2ForCausalLM.from_pretrained(
        download(size),  # fetched once, cached
        attn_implementation="eager",  # was needed for output_attentions
        torch_dtype=torch.bfloat16,
    )
    return model
""",
            after="""\
import torch
import transformers
from _perfbot_attention import pick_attention_implementation


def load(size):
    model = transformers.Qwen2ForCausalLM.from_pretrained(
        download(size),  # fetched once, cached
        attn_implementation=pick_attention_implementation(transformers.Qwen2ForCausalLM, dtype=torch.bfloat16, fallback="eager"),  # was needed for output_attentions
        torch_dtype=torch.bfloat16,
    )
    return model
""",
        ),
        Example(
            "auto_class_checkpoint_from_a_call_is_bound_once",
            before="""\
import torch
from transformers import AutoModelForCausalLM


def load_model(size, dtype=None):
    model = AutoModelForCausalLM.from_pretrained(
        ensure_model(size),
        attn_implementation="sdpa",
        dtype=dtype or torch.bfloat16,
    )
    return model
""",
            after="""\
import torch
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def load_model(size, dtype=None):
    model = AutoModelForCausalLM.from_pretrained(
        (checkpoint := ensure_model(size)),
        attn_implementation=pick_attention_implementation(AutoModelForCausalLM, checkpoint, dtype=dtype or torch.bfloat16),
        dtype=dtype or torch.bfloat16,
    )
    return model
""",
        ),
        Example(
            "from_config_in_a_package",
            path="pkg/encoder.py",
            files={"pkg/__init__.py": ""},
            before="""\
from transformers import AutoModel


def encoder(config):
    return AutoModel.from_config(config)
""",
            after="""\
from transformers import AutoModel
from ._perfbot_attention import pick_attention_implementation


def encoder(config):
    return AutoModel.from_config(config, attn_implementation=pick_attention_implementation(AutoModel, config, fallback=None))
""",
        ),
        Example(
            "trl_model_init_kwargs_dict",
            before="""\
import torch
import trl


def train(data):
    model_init_kwargs = {
        "dtype": torch.bfloat16,  # half precision
    }
    args = trl.SFTConfig(output_dir="out", model_init_kwargs=model_init_kwargs)
    trainer = trl.SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=args, train_dataset=data)
    trainer.train()
""",
            after="""\
import torch
import trl
from _perfbot_attention import pick_attention_implementation


def train(data):
    model_init_kwargs = {
        "dtype": torch.bfloat16,  # half precision
        "attn_implementation": pick_attention_implementation(source="Qwen/Qwen2.5-0.5B", dtype=torch.bfloat16, fallback=None),
    }
    args = trl.SFTConfig(output_dir="out", model_init_kwargs=model_init_kwargs)
    trainer = trl.SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=args, train_dataset=data)
    trainer.train()
""",
        ),
        Example(
            "trl_model_init_kwargs_dict_call",
            before="""\
from trl import DPOConfig, DPOTrainer


def train(model_id, data):
    args = DPOConfig(output_dir="out", model_init_kwargs=dict(dtype="bfloat16", attn_implementation="sdpa"))
    DPOTrainer(model=model_id, args=args, train_dataset=data).train()
""",
            after="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_attention import pick_attention_implementation


def train(model_id, data):
    args = DPOConfig(output_dir="out", model_init_kwargs=dict(dtype="bfloat16", attn_implementation=pick_attention_implementation(source=model_id, dtype="bfloat16")))
    DPOTrainer(model=model_id, args=args, train_dataset=data).train()
""",
        ),
        Example(
            "trlparser_script_sets_model_init_kwargs",
            before="""\
from trl import SFTConfig, SFTTrainer, TrlParser


def main(script_args, training_args, model_args, dataset):
    training_args.model_init_kwargs = dict(
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    trainer = SFTTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset)
    trainer.train()
""",
            after="""\
from trl import SFTConfig, SFTTrainer, TrlParser
from _perfbot_attention import pick_attention_implementation


def main(script_args, training_args, model_args, dataset):
    training_args.model_init_kwargs = dict(
        attn_implementation=pick_attention_implementation(source=model_args.model_name_or_path, dtype=model_args.dtype, fallback=model_args.attn_implementation),
        dtype=model_args.dtype,
    )
    trainer = SFTTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset)
    trainer.train()
""",
        ),
        Example(
            "already_flash_attention",
            before="""\
import torch
from transformers import AutoModelForCausalLM


def load(path, small):
    if small:
        return AutoModelForCausalLM.from_pretrained(path, attn_implementation="flash_attention_2", dtype=torch.bfloat16)
    return AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="kernels-community/vllm-flash-attn3", dtype=torch.bfloat16
    )
""",
        ),
        Example(
            "tokenizers_and_configs_untouched",
            before="""\
from transformers import AutoConfig, AutoTokenizer


def load(path):
    return AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path)
""",
        ),
        Example(
            "refuses_float32",
            before="""\
import torch
from transformers import AutoModelForCausalLM


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", dtype=torch.float32)
""",
            refusal="FlashAttention and FlexAttention need bf16/fp16",
        ),
        Example(
            "run_time_choice_becomes_the_fallback",
            before="""\
import torch
from transformers import AutoModelForCausalLM


def load(model_args):
    return AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path,
        attn_implementation=model_args.attn_implementation,
        dtype=torch.bfloat16,
    )
""",
            after="""\
import torch
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def load(model_args):
    return AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path,
        attn_implementation=pick_attention_implementation(AutoModelForCausalLM, model_args.model_name_or_path, dtype=torch.bfloat16, fallback=model_args.attn_implementation),
        dtype=torch.bfloat16,
    )
""",
        ),
        Example(
            "refuses_attn_implementation_expression",
            before="""\
from transformers import AutoModelForCausalLM


def load(path, cfg):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=cfg["attention"])
""",
            refusal='set from `cfg["attention"]`',
        ),
        Example(
            "refuses_hidden_kwargs",
            before="""\
from transformers import AutoModelForCausalLM


def load(path, **loading):
    return AutoModelForCausalLM.from_pretrained(path, **loading)
""",
            refusal="settings are passed through `**loading` (train.py:4), whose keys are unknown: `loading` is a parameter",
        ),
        Example(
            "beside_a_splat_that_cannot_hold_it",
            before="""\
import torch
from transformers import AutoModelForCausalLM


def load(path, revision):
    loading = dict(revision=revision, dtype=torch.bfloat16)
    return AutoModelForCausalLM.from_pretrained(path, **loading)
""",
            after="""\
import torch
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def load(path, revision):
    loading = dict(revision=revision, dtype=torch.bfloat16)
    return AutoModelForCausalLM.from_pretrained(path, **loading, attn_implementation=pick_attention_implementation(AutoModelForCausalLM, path, fallback=None))
""",
        ),
        Example(
            "refuses_model_init_kwargs_without_dtype",
            before="""\
from trl import DPOConfig, DPOTrainer


def train(model_id, data):
    args = DPOConfig(output_dir="out", model_init_kwargs={"attn_implementation": "sdpa"})
    DPOTrainer(model=model_id, args=args, train_dataset=data).train()
""",
            refusal="TRL loads the model in float32",
        ),
        Example(
            "trlparser_script_merges_the_configs_own_kwargs",
            before="""\
from trl import DPOTrainer


def main(training_args, model_args, dataset):
    init_kwargs = dict(dtype=model_args.dtype, attn_implementation=model_args.attn_implementation)
    if training_args.model_init_kwargs is not None:
        init_kwargs.update(training_args.model_init_kwargs)  # the recipe's own kwargs win
    training_args.model_init_kwargs = init_kwargs
    DPOTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset).train()
""",
            after="""\
from trl import DPOTrainer
from _perfbot_attention import pick_attention_implementation


def main(training_args, model_args, dataset):
    init_kwargs = dict(dtype=model_args.dtype, attn_implementation=pick_attention_implementation(source=model_args.model_name_or_path, dtype=model_args.dtype, fallback=model_args.attn_implementation))
    if training_args.model_init_kwargs is not None:
        init_kwargs.update(training_args.model_init_kwargs)  # the recipe's own kwargs win
    training_args.model_init_kwargs = init_kwargs
    DPOTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset).train()
""",
        ),
        Example(
            "refuses_a_parsed_config_whose_init_kwargs_come_from_elsewhere",
            before="""\
from trl import SFTTrainer


def main(training_args, model_args, dataset, load_kwargs):
    training_args.model_init_kwargs = load_kwargs(model_args)
    SFTTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset).train()
""",
            refusal="model_init_kwargs comes from `load_kwargs(model_args)`",
        ),
        Example(
            "refuses_model_init_kwargs_model_bound_later",
            before="""\
import trl


def train(cfg, data):
    args = trl.SFTConfig(output_dir="out", model_init_kwargs={"dtype": "bfloat16"})
    model_id = cfg.model
    trl.SFTTrainer(model=model_id, args=args, train_dataset=data).train()
""",
            refusal="`model_id` is assigned after this line",
        ),
    )
