"""What the optimizations know about the Hugging Face libraries (transformers, TRL, PEFT): class and argument
names, and the defaults and call conventions the transforms depend on."""

from __future__ import annotations

import re
from collections.abc import Iterable

from optimizations.program.syntax import qualified_under

# Packages whose trainers and configs the optimizations edit.
HF_PACKAGES = ("transformers", "trl")

# The TrainingArguments family: transformers' own and TRL's per-trainer configs.
HF_CONFIGS = (
    "TrainingArguments",
    "Seq2SeqTrainingArguments",
    "SFTConfig",
    "DPOConfig",
    "KTOConfig",
    "ORPOConfig",
    "CPOConfig",
    "BCOConfig",
    "RewardConfig",
    "PRMConfig",
    "GRPOConfig",
    "RLOOConfig",
    "GKDConfig",
)

# TrainingArguments.per_device_train_batch_size.
DEFAULT_TRAIN_BATCH_SIZE = 8

# TrainingArguments fields that mark a YAML mapping as a recipe for an argument parser.
RECIPE_FIELDS = frozenset(
    {
        "output_dir",
        "learning_rate",
        "num_train_epochs",
        "max_steps",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "gradient_checkpointing",
        "max_length",
        "max_seq_length",
        "lr_scheduler_type",
        "warmup_ratio",
        "bf16",
        "logging_steps",
        "beta",
        "dataset_text_field",
    }
)

# Argument parsers that fill TrainingArguments-family dataclasses from flags and recipe YAMLs.
ARGUMENT_PARSERS = (("transformers", "HfArgumentParser"), ("trl", "TrlParser"))
# Boolean fields of ``trl.ScriptArguments`` (the first dataclass of TRL's scripts) and their defaults.
SCRIPT_ARGUMENT_DEFAULTS = {"dataset_streaming": False, "ignore_bias_buffers": False}

# TRL's helper that builds a LoRA config from parsed ModelConfig flags: ``None`` unless ``use_peft`` is set.
PEFT_FROM_FLAGS = ("trl", "get_peft_config")

# Position of ``args`` among a trainer's positional parameters, where callers pass it positionally.
TRAINER_ARGS_POSITION = {
    "Trainer": 1,
    "Seq2SeqTrainer": 1,
    "SFTTrainer": 1,
    "RewardTrainer": 1,
    "DPOTrainer": 2,
}
# A trainer's keyword arguments that choose its optimizer (or rebuild the model it would step).
TRAINER_OPTIMIZER_KEYWORDS = ("optimizers", "optimizer_cls_and_kwargs", "model_init")
# Positional arguments from which `model_init`/`optimizers` may be among them (Trainer's 7th is model_init).
TRAINER_POSITIONAL_LIMIT = 6

# Model-loading class methods, and the parameter that names the checkpoint or config to load.
MODEL_LOADERS = {"from_pretrained": "pretrained_model_name_or_path", "from_config": "config"}
# transformers model classes: the Auto classes and concrete ``*Model`` / ``*For<Task>`` ones.
MODEL_CLASS = re.compile(r"^(AutoModel\w*|[A-Z]\w*(Model|For[A-Z]\w*))$")

# transformers classes that load a vision-language model or an image processor.
VISION_CLASSES = frozenset(
    {"AutoModelForVision2Seq", "AutoModelForImageTextToText", "AutoProcessor", "AutoImageProcessor"}
)

# peft callables that return a model with adapter layers in it.
PEFT_WRAPPERS = ("get_peft_model", "inject_adapter_in_model", "from_pretrained")

# transformers' check for a GPU and torch build that run TF32 (``tf32=True`` raises without one).
TF32_CHECK = ("transformers.utils", "is_torch_tf32_available")


def is_training_config(names: Iterable[str]) -> bool:
    """True when one of the qualified ``names`` is a TrainingArguments-family config class."""
    return qualified_under(names, HF_PACKAGES, HF_CONFIGS)


def is_argument_parser(names: Iterable[str]) -> bool:
    """True when one of the qualified ``names`` is an argument parser that reads flags and recipe YAMLs."""
    return any(qualified_under(names, (package,), (parser,)) for package, parser in ARGUMENT_PARSERS)


def trainer_class(names: Iterable[str]) -> str | None:
    """The class name when one of the qualified ``names`` is a transformers or TRL trainer (``*Trainer``): the
    longest such name, so a call's own class (``GKDTrainer``) is named before the ``Trainer`` it derives from,
    whatever order the set of names iterates in."""
    found = []
    for name in names:
        head, _, last = name.rpartition(".")
        if last.endswith("Trainer") and head.split(".")[0] in HF_PACKAGES:
            found.append(last)
    return max(found, key=lambda last: (len(last), last), default=None)


def is_vision_class(part: str) -> bool:
    """A transformers class that is (or may be) multimodal: the vision auto classes and ``*ForConditionalGeneration``."""
    return part in VISION_CLASSES or part.endswith("ForConditionalGeneration")
