"""The before/after examples of ``packing``: SFT configs it switches on where their settings come from, and
the ones it refuses."""

from optimizations.program.config_use import HELPER_ONLY_CONFIG_FILES, HELPER_ONLY_CONFIG_PROGRAM
from optimizations.registry import Example

EXAMPLES = (
    Example(
        "no_site_config_only_a_repository_helper_reads",
        before=HELPER_ONLY_CONFIG_PROGRAM,
        files=HELPER_ONLY_CONFIG_FILES,
    ),
    Example(
        "plain",
        before="""\
from trl import SFTConfig, SFTTrainer


def build(model, dataset):
    args = SFTConfig(output_dir="out", max_length=2048, packing=False)
    return SFTTrainer(model=model, args=args, train_dataset=dataset)
""",
        after="""\
from trl import SFTConfig, SFTTrainer


def build(model, dataset):
    args = SFTConfig(output_dir="out", max_length=2048, packing=True, packing_strategy="bfd")
    return SFTTrainer(model=model, args=args, train_dataset=dataset)
""",
    ),
    Example(
        "aliased_class",
        before="""\
from trl import SFTConfig as Cfg


def build():
    return Cfg(output_dir="out", bf16=True)
""",
        after="""\
from trl import SFTConfig as Cfg


def build():
    return Cfg(output_dir="out", bf16=True, packing=True, packing_strategy="bfd")
""",
    ),
    Example(
        "module_import_multiline_with_comments",
        before="""\
import trl


def build(model, dataset):
    args = trl.SFTConfig(
        output_dir="out",  # checkpoints
        max_length=2048,
        # one row per example for now
        bf16=True,
    )
    return trl.SFTTrainer(model=model, args=args, train_dataset=dataset)
""",
        after="""\
import trl


def build(model, dataset):
    args = trl.SFTConfig(
        output_dir="out",  # checkpoints
        max_length=2048,
        # one row per example for now
        bf16=True,
        packing=True,
        packing_strategy="bfd",
    )
    return trl.SFTTrainer(model=model, args=args, train_dataset=dataset)
""",
    ),
    Example(
        "config_dict_and_yaml",
        before="""\
from trl import SFTConfig


def build(cfg):
    training = cfg["training"]
    return SFTConfig(
        output_dir=cfg["output_dir"],
        learning_rate=training["learning_rate"],
        max_length=training["max_length"],
        packing=False,
    )
""",
        after="""\
from trl import SFTConfig


def build(cfg):
    training = cfg["training"]
    return SFTConfig(
        output_dir=cfg["output_dir"],
        learning_rate=training["learning_rate"],
        max_length=training["max_length"],
        packing=training.get("packing", False),
        packing_strategy="bfd",
    )
""",
        files={
            "configs/training.yaml": "learning_rate: 2.0e-4\nmax_length: 1024\npacking: false  # one example per row\n"
        },
    ),
    Example(
        "config_dataclass_gets_a_field",
        before="""\
from dataclasses import dataclass

import trl


@dataclass
class RunConfig:
    output_dir: str = "out"
    learning_rate: float = 2e-4
    max_length: int = 1024

    def describe(self):
        return f"lr={self.learning_rate}"


def build(config: RunConfig):
    return trl.SFTConfig(
        output_dir=config.output_dir,
        learning_rate=config.learning_rate,
        max_length=config.max_length,
    )
""",
        after="""\
from dataclasses import dataclass

import trl


@dataclass
class RunConfig:
    output_dir: str = "out"
    learning_rate: float = 2e-4
    max_length: int = 1024
    # perfbot: pack examples into max_length rows (TRL's padding-free bfd packing).
    packing: bool = False

    def describe(self):
        return f"lr={self.learning_rate}"


def build(config: RunConfig):
    return trl.SFTConfig(
        output_dir=config.output_dir,
        learning_rate=config.learning_rate,
        max_length=config.max_length,
        packing=config.packing,
        packing_strategy="bfd",
    )
""",
    ),
    Example(
        "argparse_namespace",
        before="""\
from trl import SFTConfig


def build(args):
    return SFTConfig(output_dir=args.output_dir, learning_rate=args.lr, packing=False)
""",
        after="""\
from trl import SFTConfig


def build(args):
    return SFTConfig(output_dir=args.output_dir, learning_rate=args.lr, packing=getattr(args, "packing", False), packing_strategy="bfd")
""",
    ),
    Example(
        "hf_argument_parser_dataclass_default",
        before="""\
from dataclasses import dataclass, field

from transformers import HfArgumentParser
from trl import SFTConfig


@dataclass
class ScriptArguments:
    model_name: str = "Qwen/Qwen2.5-0.5B"
    packing: bool = field(default=False, metadata={"help": "pack examples"})


def main():
    (script_args,) = HfArgumentParser(ScriptArguments).parse_args_into_dataclasses()
    return SFTConfig(output_dir="out", packing=script_args.packing)
""",
        after="""\
from dataclasses import dataclass, field

from transformers import HfArgumentParser
from trl import SFTConfig


@dataclass
class ScriptArguments:
    model_name: str = "Qwen/Qwen2.5-0.5B"
    packing: bool = field(default=True, metadata={"help": "pack examples"})


def main():
    (script_args,) = HfArgumentParser(ScriptArguments).parse_args_into_dataclasses()
    return SFTConfig(output_dir="out", packing=script_args.packing, packing_strategy="bfd")
""",
    ),
    Example(
        "get_with_false_default_kept",
        before="""\
from trl import SFTConfig


def build(training):
    return SFTConfig(
        output_dir=training.get("output_dir", "out"),
        learning_rate=training.get("lr", 2e-5),
        packing=training.get("packing", False),
    )
""",
    ),
    Example(
        "dict_literal_with_subscript_assignments",
        before="""\
from trl import SFTConfig, SFTTrainer


def train(model, data, *, lr=1e-5, epochs=1, every=0):
    settings = {
        "output_dir": "out",
        "learning_rate": lr,
        "num_train_epochs": epochs,
    }
    if every:
        settings["save_steps"] = every
    args = SFTConfig(**settings)
    return SFTTrainer(model=model, args=args, train_dataset=data)
""",
        after="""\
from trl import SFTConfig, SFTTrainer


def train(model, data, *, lr=1e-5, epochs=1, every=0, packing: bool = False):
    settings = {
        "output_dir": "out",
        "learning_rate": lr,
        "num_train_epochs": epochs,
        "packing": packing,
        "packing_strategy": "bfd",
    }
    if every:
        settings["save_steps"] = every
    args = SFTConfig(**settings)
    return SFTTrainer(model=model, args=args, train_dataset=data)
""",
    ),
    Example(
        "beside_a_splat_a_helper_builds",
        before="""\
from trl import SFTConfig


def schedule(run):
    if run.warmup > 1:
        return {"warmup_steps": run.warmup}
    return dict(warmup_ratio=run.warmup)


def build(run):
    extra = schedule(run)
    return SFTConfig(output_dir=run.out, learning_rate=run.lr, **extra, packing=False)
""",
        after="""\
from trl import SFTConfig


def schedule(run):
    if run.warmup > 1:
        return {"warmup_steps": run.warmup}
    return dict(warmup_ratio=run.warmup)


def build(run):
    extra = schedule(run)
    return SFTConfig(output_dir=run.out, learning_rate=run.lr, **extra, packing=getattr(run, "packing", False), packing_strategy="bfd")
""",
    ),
    Example(
        "refuses_splat_dict_that_may_set_it",
        before="""\
from trl import SFTConfig


def build(run, pack):
    options = {"output_dir": run.out}
    options["packing_strategy"] = "wrapped" if pack else "bfd"
    return SFTConfig(learning_rate=run.lr, **options)
""",
        refusal="may set packing_strategy",
    ),
    Example(
        "already_packs",
        before="""\
from trl import SFTConfig


def build():
    return SFTConfig(output_dir="out", packing=True)
""",
    ),
    Example(
        "refuses_custom_collator",
        before="""\
from trl import SFTConfig, SFTTrainer
from transformers import DataCollatorForSeq2Seq


def build(model, tokenizer, dataset):
    args = SFTConfig(output_dir="out", packing=False)
    collator = DataCollatorForSeq2Seq(tokenizer)
    return SFTTrainer(model=model, args=args, train_dataset=dataset, data_collator=collator)
""",
        refusal="custom data_collator",
    ),
    Example(
        "refuses_vision_language_model",
        before="""\
from transformers import AutoModelForImageTextToText, AutoProcessor
from trl import SFTConfig, SFTTrainer


def build(name, dataset):
    model = AutoModelForImageTextToText.from_pretrained(name)
    processor = AutoProcessor.from_pretrained(name)
    args = SFTConfig(output_dir="out")
    return SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=processor)
""",
        refusal="vision-language model",
    ),
    Example(
        "refuses_hidden_kwargs",
        before="""\
from trl import SFTConfig


def build(overrides):
    return SFTConfig(output_dir="out", **overrides)
""",
        refusal="**overrides",
    ),
    Example(
        "refuses_repo_controlled_expression",
        before="""\
import os

from trl import SFTConfig


def build():
    return SFTConfig(output_dir="out", packing=os.environ.get("PACK") == "1")
""",
        refusal="already controls",
    ),
    Example(
        "refuses_trl_parser_without_recipe",
        before="""\
from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser


def main():
    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    return parser.parse_args_and_config()
""",
        refusal="--packing true",
    ),
    Example(
        "proposed_where_every_example_is_padded_to_the_full_length",
        # lm-sys/FastChat's train.py: preprocess() pads each conversation to model_max_length for the Trainer.
        before="""\
import transformers


def preprocess(texts, tokenizer):
    return tokenizer(texts, return_tensors="pt", padding="max_length", max_length=2048, truncation=True)


def train(model, tokenizer, texts, args):
    dataset = preprocess(texts, tokenizer)
    transformers.Trainer(model=model, args=args, train_dataset=dataset).train()
""",
        proposal="pads every example to the full length",
    ),
)
