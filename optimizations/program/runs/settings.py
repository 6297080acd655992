"""What a run configuration holds: one value per setting, each with where it comes from.

The settings are the ones that decide which optimizations are left to make (:data:`SETTINGS`). Each is set
under several names across libraries and launchers -- ``bf16`` of ``TrainingArguments``, ``mixed_precision``
of Accelerate, ``precision`` of Lightning, ``dtype`` of a torchtune recipe -- and :data:`NAMES` says which
setting a name sets and how its value reads (:func:`reading`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

# The settings of a run, in the order they are shown.
SETTINGS = (
    "mixed_precision",
    "weights_dtype",
    "tf32",
    "attention",
    "optimizer",
    "packing",
    "loader_workers",
    "pin_memory",
    "compile",
    "gradient_checkpointing",
    "distribution",
    "peft",
    "quantization",
)
BF16 = "bf16"
FP16 = "fp16"
FP32 = "fp32"


@dataclass(frozen=True)
class Setting:
    """A setting's value in one run and where it comes from: ``path:line`` and what is written there, or the
    library default it falls back to."""

    name: str
    value: str
    source: str  # ``path:line``, or ``default of <what>``
    written: str = ""  # the text that sets it there (``--bf16 True``, ``bf16: {enabled: true}``)
    option_default: bool = False  # the default of a command-line option or config field, in Python

    @property
    def cited(self) -> str:
        """``path:line `written```: where a reason says the value is set."""
        return f"{self.source} `{self.written}`" if self.written else self.source


def cite(settings: Iterable[Setting]) -> str:
    """Where each of ``settings`` is set, once per place, ``; ``-separated, for a reason."""
    return "; ".join(dict.fromkeys(setting.cited for setting in settings))


def _on_off(value: object) -> str | None:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return "on" if value.lower() in ("true", "yes", "1") else "off"
    return None


def _bf16_flag(value: object) -> str | None:
    if str(value).lower() == "auto":  # axolotl's default: bf16 wherever the GPU has it
        return f"{BF16} (auto: where the GPU has it)"
    flag = _on_off(value)  # off says fp32 where bf16 is the default (TRL's configs), unless fp16 is on too
    return {"on": BF16, "off": FP32}.get(flag or "")


def _flash(value: object) -> str | None:
    """axolotl's ``flash_attention: true``, LLaMA-Factory's ``flash_attn: fa2``/``auto``/``sdpa``/``disabled``."""
    text = str(value).lower()
    if _on_off(value) == "on" or text in ("fa2", "fa3"):
        return "flash_attention_2" if text != "fa3" else "flash_attention_3"
    return {
        "auto": "auto (FlashAttention 2 where installed, else SDPA)",
        "sdpa": "sdpa",
        "disabled": "eager",
    }.get(text)


def _fp16_flag(value: object) -> str | None:
    flag = _on_off(value)
    return FP16 if flag == "on" else None


def _precision(value: object) -> str | None:
    """Accelerate's ``mixed_precision``, Lightning's ``precision``, a recipe's ``dtype``/``precision``."""
    text = str(value).lower().replace("torch.", "")
    if text in ("bf16", "bfloat16", "bf16-mixed", "bf16-true", "bf16_mixed"):
        return BF16
    if text in ("fp16", "float16", "16", "16-mixed", "16-true", "half"):
        return FP16
    if text in ("no", "fp32", "float32", "32", "32-true", "full"):
        return FP32
    return None


BF16_WEIGHTS = f"{BF16} (bf16 weights)"
"""Mixed precision that casts the weights themselves to bf16 (DeepSpeed's ``bf16``, a ``param_dtype``): every
matmul of the run is a bf16 one."""


def _param_dtype(value: object) -> str | None:
    """``param_dtype`` (FSDP's mixed-precision policy, a DeepSpeed strategy's flag): the dtype the weights compute
    in."""
    precision = _precision(value)
    return BF16_WEIGHTS if precision == BF16 else precision


def _dtype(value: object) -> str | None:
    text = str(value).lower().replace("torch.", "")
    return {"bfloat16": BF16, "bf16": BF16, "float16": FP16, "fp16": FP16, "half": FP16}.get(
        text, FP32 if text in ("float32", "fp32", "float") else ("auto" if text == "auto" else None)
    )


def _text(value: object) -> str | None:
    return None if value is None or isinstance(value, bool) else str(value)


def _count(value: object) -> str | None:
    text = str(value)
    return text if text.isdigit() else None


def _peft(value: object) -> str | None:
    return _on_off(value)


def _fsdp(value: object) -> str | None:
    if value in (None, "", False) or _on_off(value) == "off":
        return None
    return f"FSDP ({value})" if isinstance(value, str) and _on_off(value) is None else "FSDP"


def _bits(value: object) -> str | None:
    """A base model loaded in 4 or 8 bits (``--bits 4``, ``load_in_4bit: true``); full precision reads as off."""
    text = str(value)
    return f"{text}-bit" if text in ("4", "8") else ("off" if text in ("16", "32") else None)


Reading = Callable[[object], str | None]


def _loaded_in(bits: str) -> Reading:
    """How a switch that loads the base model quantized (``load_in_4bit``, ``--use_qlora``) reads: ``bits`` when
    on, off when off."""
    return lambda value: {"on": bits, "off": "off"}.get(_on_off(value) or "")


# An argument, flag or YAML key's name -> the setting it sets and how its value reads (None: it sets nothing).
NAMES: dict[str, tuple[str, Reading]] = {
    "bf16": ("mixed_precision", _bf16_flag),
    "fp16": ("mixed_precision", _fp16_flag),
    "mixed_precision": ("mixed_precision", _precision),
    "precision": ("mixed_precision", _precision),
    "param_dtype": ("mixed_precision", _param_dtype),
    "mixed_precision_param": ("mixed_precision", _param_dtype),  # torchtitan's FSDP parameter dtype
    "torch_dtype": ("weights_dtype", _dtype),
    "dtype": ("weights_dtype", _dtype),
    "model_dtype": ("weights_dtype", _dtype),
    "tf32": ("tf32", _on_off),
    "allow_tf32": ("tf32", _on_off),
    "attn_implementation": ("attention", _text),
    "flash_attention": ("attention", _flash),
    "flash_attn": ("attention", _flash),
    "sample_packing": ("packing", _on_off),
    "optimizer": ("optimizer", _text),
    "optim": ("optimizer", _text),
    "packing": ("packing", _on_off),
    # llama-cookbook's train_config: "packing" or "padding"
    "batching_strategy": ("packing", lambda v: {"packing": "on", "padding": "off"}.get(str(v))),
    # torchtitan's optimizer config: "fused", "foreach" or "for-loop"
    "implementation": (
        "optimizer",
        lambda v: f"{v} implementation" if v in ("fused", "foreach", "for-loop") else None,
    ),
    "packed": ("packing", _on_off),
    "padding_free": ("packing", lambda v: "padding-free" if _on_off(v) == "on" else None),
    "dataloader_num_workers": ("loader_workers", _count),
    "num_workers": ("loader_workers", _count),
    "dataloader_pin_memory": ("pin_memory", _on_off),
    "pin_memory": ("pin_memory", _on_off),
    "torch_compile": ("compile", _on_off),
    "dynamo_backend": ("compile", lambda v: "off" if str(v).lower() in ("no", "none") else "on"),
    "compile": ("compile", _on_off),
    "gradient_checkpointing": ("gradient_checkpointing", _on_off),
    "enable_activation_checkpointing": ("gradient_checkpointing", _on_off),
    "activation_checkpointing": ("gradient_checkpointing", _on_off),
    "use_peft": ("peft", _peft),
    "use_lora": ("peft", _peft),
    "fsdp": ("distribution", _fsdp),
    "load_in_4bit": ("quantization", _loaded_in("4-bit")),
    "load_in_8bit": ("quantization", _loaded_in("8-bit")),
    "bits": ("quantization", _bits),
    "use_qlora": ("quantization", _loaded_in("4-bit")),
    "q_lora": ("quantization", _loaded_in("4-bit")),
}


def reading(name: str, value: object) -> tuple[str, str] | None:
    """``(setting, value as shown)`` that ``name = value`` sets, or ``None``. A dotted name (``ds.param_dtype``
    of a nested-config CLI) reads as its last part."""
    known = NAMES.get(name.rpartition(".")[2])
    if known is None:
        return None
    shown = known[1](value)
    return None if shown is None else (known[0], shown)


# Optimizers chosen to save memory (8-bit and paged states, factored moments): a fused AdamW would give that up.
MEMORY_SAVERS = ("8bit", "paged", "adafactor", "galore", "lomo", "apollo")


def memory_saving(optim: str) -> bool:
    """``paged_adamw_32bit``, ``adamw_bnb_8bit``, ``adafactor``, ``galore_adamw``...: chosen for memory."""
    return any(word in optim.lower() for word in MEMORY_SAVERS)


# What a setting's value must be for an optimization to be done already, by name (an optimization's
# ``done_by_settings``), or chosen otherwise by a launch (``chosen_by_launches``): the run configuration's sites.
DONE: dict[str, Callable[[str], bool]] = {
    "on": lambda value: value == "on",
    "off": lambda value: value == "off",
    "memory_saving": memory_saving,
    "positive": lambda value: value.isdigit() and int(value) > 0,
    "bf16": lambda value: value.startswith(BF16),
    "bf16_weights": lambda value: value == BF16_WEIGHTS,
    "fp16": lambda value: value.startswith(FP16),
    "fused": lambda value: "fused" in value.lower(),
    "adam": lambda value: value.lower() in ("adam", "adamw"),
    "flash": lambda value: value.startswith("flash") or "flash-attn" in value or "flash_attn" in value,
}
