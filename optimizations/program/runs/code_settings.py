"""Settings the Python code of a run sets: literal keywords of the calls that take them, dataclass field
defaults, and the statements that turn a setting on (``torch.compile(model)``, an autocast, TF32 flags).

Files are read with :mod:`ast`. A keyword counts only where its value is a literal (``bf16=True``,
``attn_implementation="sdpa"``, ``torch_dtype=torch.bfloat16``): ``bf16=args.bf16`` takes the value of a
parsed flag, which the launch gives. A keyword (or kwargs-dict entry) that reads a config key
(``torch_dtype=getattr(torch, config.model.policy_dtype)``) is kept as a :class:`ConfigRead`, which the run's
recipe or flags resolve. A dataclass field's default (``optim: str = field(default="adamw_torch")`` in a
``TrainingArguments`` subclass) counts below every launch flag and recipe.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from optimizations.program.runs.settings import BF16, FP16, FP32, Setting, reading

# Calls whose keywords of these names are settings: loaders' ``num_workers``/``pin_memory`` only in loaders.
LOADER_CALLS = ("DataLoader", "StatefulDataLoader")
LOADER_NAMES = ("num_workers", "pin_memory")
# Method calls that turn a setting on, by the attribute called.
TURNED_ON = {
    "gradient_checkpointing_enable": ("gradient_checkpointing", "on"),
    "compile": ("compile", "on"),
    "get_peft_model": ("peft", "on"),
    "prepare_model_for_kbit_training": ("peft", "on"),
}
DISTRIBUTED = {
    "DistributedDataParallel": "DDP",
    "FullyShardedDataParallel": "FSDP",
    "fully_shard": "FSDP2",
    "initialize": "DeepSpeed",
}


# Words in the name of an object that holds a run's configuration (``config.model``, ``cfg``, ``script_args``,
# ``self.hparams``): a setting read from one of its keys is the config's to give.
CONFIG_WORDS = ("config", "cfg", "conf", "args", "hparams", "settings", "params", "opt")
# Models a run loads only to score or compare with (``config.model.reference_dtype``, ``reward_model.dtype``):
# their settings are not those of the model it trains.
FROZEN_MODELS = ("reference", "ref_model", "reward", "teacher", "judge")
# Settings a literal keyword sets only where the call runs whatever the flags: QLoRA scripts build
# ``BitsAndBytesConfig(load_in_4bit=True)`` only ``if args.q_lora``.
BRANCH_ONLY = frozenset({"quantization"})


@dataclass(frozen=True)
class ConfigRead:
    """A setting the code takes from a config key (``torch_dtype=getattr(torch, config.model.policy_dtype)``,
    ``"attn_implementation": cfg["attn"]``): the argument it sets, the key it reads, and where."""

    argument: str  # ``torch_dtype``: what the key's value is read as (:func:`reading`)
    key: str  # ``policy_dtype``: the last part of what the code reads
    source: str  # ``path:line``
    written: str


@dataclass(frozen=True)
class CodeSettings:
    """The settings one file's code sets, split by strength: its literal keywords and statements (``code``),
    and its dataclass defaults (``defaults``), each in source order; and the settings it reads from config keys
    (``reads``), which a run's recipe or flags give."""

    code: tuple[Setting, ...]
    defaults: tuple[Setting, ...]
    reads: tuple[ConfigRead, ...] = ()


def code_settings(path: str, tree: ast.Module) -> CodeSettings:
    """What the file ``path`` (parsed: ``tree``) sets."""
    code: list[Setting] = []
    defaults: list[Setting] = []
    reads: list[ConfigRead | None] = []
    branched = _in_branches(tree)
    decorators = {
        id(d) for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for d in node.decorator_list
    }
    for node in ast.walk(tree):
        # a decorator call (``@torch.compile(dynamic=True)``) sets up a function, not the run's model
        if isinstance(node, ast.Call) and id(node) not in decorators:
            code += [
                setting
                for setting in _call_settings(path, node)
                if not (setting.name in BRANCH_ONLY and id(node) in branched)
            ]
            defaults += _argument_default(path, node)
            reads += [_read(path, k.arg, k.value) for k in node.keywords if k.arg is not None]
        elif isinstance(node, ast.Dict):
            named = [
                (k.value, v)
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant)
            ]
            reads += [_read(path, key, value) for key, value in named if isinstance(key, str)]
        elif isinstance(node, ast.Assign):
            code += _assigned(path, node)
        elif isinstance(node, ast.ClassDef) and _dataclass_like(node):
            defaults += _field_defaults(path, node)
    order = lambda s: int(s.source.rpartition(":")[2])  # noqa: E731 - a sort key
    known = sorted((r for r in reads if r is not None), key=order)
    return CodeSettings(tuple(sorted(code, key=order)), tuple(sorted(defaults, key=order)), tuple(known))


def _read(path: str, argument: str, value: ast.expr) -> ConfigRead | None:
    """The config key a setting's value reads: ``cfg.model.dtype``, ``cfg["dtype"]``, ``getattr(torch,
    cfg.dtype)``; None for a literal, a plain name, or an argument that is no setting."""
    if reading(argument, "bfloat16") is None and reading(argument, True) is None:
        return None
    if isinstance(value, ast.Call) and _dotted(value.func) == "getattr" and len(value.args) == 2:
        if _dotted(value.args[0]) != "torch":
            return None
        value = value.args[1]
    if isinstance(value, ast.Attribute):
        key, holder = value.attr, value.value
    elif isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant):
        key, holder = str(value.slice.value), value.value
    else:
        return None
    parts = _dotted(holder).replace('"', "").replace("'", "").split(".")
    if not any(word in part.lower() for part in parts[:2] for word in CONFIG_WORDS):
        return None  # ``tensor.dtype``: not a config
    if any(word in f"{_dotted(holder)}.{key}".lower() for word in FROZEN_MODELS):
        return None  # the reference or reward model's dtype is not the trained model's
    return ConfigRead(argument, key, f"{path}:{value.lineno}", f"{argument}={_dotted(value)}")


def _in_branches(tree: ast.Module) -> set[int]:
    """The ids of the calls under an ``if`` or a conditional expression (``x if flag else None``)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)):
            branches = [node.body, node.orelse] if isinstance(node, ast.IfExp) else [*node.body, *node.orelse]
            for branch in branches:
                found.update(id(n) for n in ast.walk(branch) if isinstance(n, ast.Call))
    return found


def _name(node: ast.expr) -> str:
    """The last name of a callee (``torch.optim.AdamW`` -> ``AdamW``)."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _dotted(node: ast.expr) -> str:
    try:
        return ast.unparse(node)
    except (ValueError, AttributeError):
        return ""


def _literal(node: ast.expr) -> object:
    """The value of a literal keyword (``torch.bfloat16`` read as ``"torch.bfloat16"``), else ``...``."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute) and _dotted(node).startswith("torch."):
        return _dotted(node)
    return ...


def _call_settings(path: str, call: ast.Call) -> list[Setting]:
    found: list[Setting] = []
    callee = _name(call.func)
    where = f"{path}:{call.lineno}"
    for keyword in call.keywords:
        if keyword.arg is None or (keyword.arg in LOADER_NAMES and callee not in LOADER_CALLS):
            continue
        value = _literal(keyword.value)
        if value is ...:
            continue
        if keyword.arg == "dtype" and callee in ("autocast",):
            read = _autocast(value)
        elif keyword.arg == "dtype" and not _builds_model(callee):
            read = None  # ``torch.arange(..., dtype=torch.float32)``: a tensor's dtype, not the weights'.
        elif keyword.arg == "fused" and callee in ("AdamW", "Adam"):
            read = ("optimizer", f"torch.optim.{callee} (fused)" if value else f"torch.optim.{callee}")
        else:
            read = reading(keyword.arg, value)
        if read is not None:
            found.append(Setting(read[0], read[1], where, _written(keyword)))
    if any(s.name == "mixed_precision" and s.value == FP16 for s in found):  # bf16=False beside fp16=True
        found = [s for s in found if not (s.name == "mixed_precision" and s.value == FP32)]
    if callee in ("AdamW", "Adam", "SGD", "Adafactor", "Lion") and not any(
        k.arg == "fused" for k in call.keywords
    ):
        module = _dotted(call.func).rpartition(".")[0] or "torch.optim"
        found.append(Setting("optimizer", f"{module}.{callee}", where, _dotted(call.func)))
    if callee in ("DeepSpeedCPUAdam",):
        found.append(Setting("optimizer", "DeepSpeedCPUAdam (CPU)", where, callee))
    if isinstance(call.func, ast.Attribute) and callee in TURNED_ON:
        if callee != "compile" or not call.args or _dotted(call.func) == "torch.compile":
            name, value = TURNED_ON[callee]
            found.append(Setting(name, value, where, _dotted(call.func) + "(...)"))
    elif callee in TURNED_ON and callee != "compile":
        name, value = TURNED_ON[callee]
        found.append(Setting(name, value, where, callee + "(...)"))
    if callee == "set_float32_matmul_precision" and call.args:
        value = _literal(call.args[0])
        if value in ("high", "medium", "highest"):
            found.append(Setting("tf32", "off" if value == "highest" else "on", where, f'"{value}"'))
    if callee in DISTRIBUTED and (callee != "initialize" or _dotted(call.func).startswith("deepspeed")):
        found.append(Setting("distribution", DISTRIBUTED[callee], where, _dotted(call.func) + "(...)"))
    if callee in ("to", "bfloat16", "half") and _model(call.func):
        dtype = _literal(call.args[0]) if callee == "to" and call.args else callee
        read = reading("dtype", "bfloat16" if dtype == "bfloat16" else dtype)
        if read is not None and read[1] in (BF16, FP16):
            found.append(Setting("weights_dtype", read[1], where, _dotted(call.func) + "(...)"))
    return found


def _builds_model(callee: str) -> bool:
    """A call whose ``dtype=`` is the model's: a loader (``from_pretrained``, ``load_model``), a model or config
    class (``GPT``, ``ModelArgs``), not a tensor factory (``torch.arange``) or another object's buffer."""
    words = (
        "pretrained",
        "config",
        "model",
        "load",
        "args",
        "arguments",
        "transformer",
        "gpt",
        "llama",
        "lm",
    )
    return any(word in callee.lower() for word in words)


def _model(func: ast.expr) -> bool:
    """A method of something named as a model (``model.to(...)``, ``self.model.bfloat16()``), not a tensor's."""
    return isinstance(func, ast.Attribute) and "model" in _dotted(func.value).rpartition(".")[2].lower()


def _autocast(value: object) -> tuple[str, str] | None:
    """An autocast's precision; none for a float32 one, which keeps a region (a MoE router, a loss) out of the
    run's lower precision rather than setting it."""
    read = reading("dtype", value)
    return None if read is None or read[1] == FP32 else ("mixed_precision", f"{read[1]} (autocast)")


def _written(keyword: ast.keyword) -> str:
    return f"{keyword.arg}={_dotted(keyword.value)}"


def _assigned(path: str, assign: ast.Assign) -> list[Setting]:
    """``torch.backends.cuda.matmul.allow_tf32 = True``, ``compile = True`` in a config module."""
    value = _literal(assign.value)
    found = []
    for target in assign.targets:
        name = _name(target) if isinstance(target, (ast.Attribute, ast.Name)) else ""
        if name == "allow_tf32" and "matmul" in _dotted(target):
            read = reading("tf32", value)
        elif isinstance(target, ast.Name) and name in ("compile",):
            read = reading(name, value)
        else:
            read = None
        if read is not None:
            found.append(Setting(read[0], read[1], f"{path}:{assign.lineno}", f"{_dotted(target)} = {value}"))
    return found


def _dataclass_like(node: ast.ClassDef) -> bool:
    """A dataclass, a pydantic model (a framework's config schema) or a config class by its base's name."""
    decorated = any("dataclass" in _dotted(d) for d in node.decorator_list)
    bases = ("TrainingArguments", "Config", "Arguments", "BaseModel", "BaseSettings")
    return decorated or any(_name(b).endswith(bases) for b in node.bases)


def _argument_default(path: str, call: ast.Call) -> list[Setting]:
    """``parser.add_argument("--num_workers", type=int, default=0)``: the flag's default, and a
    ``store_true`` flag's ``False``."""
    flags = [a.value for a in call.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
    if _name(call.func) != "add_argument" or not flags:
        return []
    flag = str(flags[0])
    given = {k.arg: k.value for k in call.keywords if k.arg}
    if "default" in given:
        value = _literal(given["default"])
    elif "action" in given and _literal(given["action"]) in ("store_true", "store_false"):
        value = _literal(given["action"]) == "store_false"
    else:
        return []
    read = None if value is ... else reading(flag[2:].replace("-", "_"), value)
    if read is None:
        return []
    return [
        Setting(read[0], read[1], f"{path}:{call.lineno}", f"{flag} default {value!r}", option_default=True)
    ]


def _field_defaults(path: str, cls: ast.ClassDef) -> list[Setting]:
    found = []
    for statement in cls.body:
        if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
            continue
        default = statement.value
        if isinstance(default, ast.Call) and _name(default.func) == "field":
            default = next((k.value for k in default.keywords if k.arg == "default"), None)
        if default is None:
            continue
        value = _literal(default)
        read = None if value is ... else reading(statement.target.id, value)
        if read is not None:
            written = f"{statement.target.id} = {_dotted(default)}  (default of {cls.name})"
            found.append(
                Setting(read[0], read[1], f"{path}:{statement.lineno}", written, option_default=True)
            )
    return found


def precision_of(settings: dict[str, Setting]) -> str | None:
    """``bf16``/``fp16`` where the run computes in that precision (mixed precision or weights), else None."""
    for name in ("mixed_precision", "weights_dtype"):
        found = settings.get(name)
        if found is not None and found.value.split(" ")[0] in (BF16, FP16):
            return found.value.split(" ")[0]
    return None
