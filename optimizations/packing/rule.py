"""Sequence packing: several short SFT examples share one ``max_length`` row instead of being padded one per row.

What TRL 1.x does with it (checked against the ``trl.trainer.sft_trainer`` source of TRL 1.16):

- ``packing_strategy="bfd"`` (best-fit decreasing, TRL's default strategy; releases before mid-2025, TRL PR
  #3696, called it ``"ffd"`` and reject ``"bfd"``) packs whole examples and makes the trainer padding-free: its own collator flattens each batch into one row with ``position_ids`` restarting at 0
  per example and ``cu_seq_lens`` for the varlen FlashAttention kernels, and leaves ``attention_mask`` out on
  purpose. With SDPA or eager attention, transformers 5.x builds the block-diagonal mask from those
  ``position_ids`` only when no ``attention_mask`` is given, so nothing here adds one; FlashAttention uses the
  varlen kernels. Either way an example never attends to its neighbours in the row.
- The trainer raises on packing with a custom ``data_collator`` (padding-free needs its own collator) and on
  image datasets, so calls beside a collator or a vision-language model/processor are refused.
- Already ``packing=True`` without a strategy is left alone: the default strategy is already ``bfd``, and a
  commit that only spells out the default would measure nothing.
- Fewer, fuller rows mean fewer optimizer steps per epoch (125 steps become 16 on short examples):
  compare runs by tokens/s and by loss at equal tokens, not at equal step numbers.

Config-driven, with the default the file has (off), where the call reads its settings from a config object
(``training.get("packing", False)``, ``getattr``, a dataclass field) or from its function's parameters (a new
``packing: bool = False`` parameter): packing changes the steps per epoch, so the repository's config decides.
Recipe YAMLs the call reads that say ``packing: false`` are switched on, as are the recipes and flag defaults of
``HfArgumentParser``/``TrlParser`` scripts; where nothing turns it on, the site says which key does. See
:mod:`optimizations.program.config_switch`. A recipe with a ``packing_strategy`` other than bfd is left to a human.

torchtune builds its datasets from the config (``dataset: {_component_: torchtune.datasets.alpaca_dataset,
packed: False}``) and packs them into rows of the tokenizer's ``max_seq_len``: in a program that instantiates
components, a dataset mapping's ``packed: false`` becomes true (:meth:`Packing.config_sites`), refused where the
document's tokenizer has no ``max_seq_len`` (torchtune raises without it), for a multimodal dataset (torchtune
does not pack those), or where the line comments on it.
"""

from __future__ import annotations

import libcst as cst

from optimizations.edits.component_configs import switch_on
from optimizations.edits.config_switch import SettingSwitch
from optimizations.edits.expressions import expr
from optimizations.program.components import components, config_files, instantiates_components, read_text
from optimizations.program.config_use import HELPER_ONLY_CONFIG_FILES, HELPER_ONLY_CONFIG_PROGRAM
from optimizations.program.repository import RepoContext, Site
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.program.yaml_settings import settings
from optimizations.registry import Example, Numerics, Optimization

PADDING_FREE_STRATEGIES = ("bfd", "bfd_split")


class _Pack(SettingSwitch):
    default_as_found = True  # packing changes the steps per epoch: the repository's config decides
    setting = "packing"
    configs = ("SFTConfig",)
    field_comment = "# perfbot: pack examples into max_length rows (TRL's padding-free bfd packing)."
    flag_hint = "--packing true --packing_strategy bfd"
    recipe_companions = {"packing_strategy": "bfd"}

    def companions(self, call: cst.Call) -> list[tuple[str, cst.BaseExpression]]:
        return [] if keyword(call, "packing_strategy") is not None else [("packing_strategy", expr('"bfd"'))]

    def blocked(self, call: cst.Call | None, function: cst.FunctionDef | None) -> str | None:
        if call is not None:
            strategy = keyword(call, "packing_strategy")
            if strategy is not None and literal_value(strategy.value) not in (*PADDING_FREE_STRATEGIES, ...):
                return (
                    f'packing_strategy={code_of(strategy.value)} is not padding-free; switch it to "bfd" by hand '
                    "if examples may be cut and mixed"
                )
            max_length = keyword(call, "max_length")
            if max_length is not None and literal_value(max_length.value) is None:
                return "max_length=None: packing needs a row length; set max_length, then enable packing"
        trainers = self.scope.calls_to(("SFTTrainer",))
        for site in self.scope.near(trainers, function) if call is not None else trainers:
            collator = keyword(site.call, "data_collator")
            if collator is not None and literal_value(collator.value) is not None:
                return (
                    f"the SFTTrainer gets a custom data_collator (`{code_of(collator.value)}`): TRL packs only "
                    "with its own padding-free collator and raises otherwise; drop the collator to pack"
                )
        if self.scope.vision_model is not None:
            return (
                f"`{self.scope.vision_model}` may load a vision-language model or processor: TRL does not pack "
                "image batches; leave packing off"
            )
        return None

    def yaml_blocked(self, siblings: dict[str, object]) -> str | None:
        strategy = siblings.get("packing_strategy", "bfd")
        if strategy not in PADDING_FREE_STRATEGIES:
            return f"packing_strategy: {strategy} is not padding-free; set packing_strategy: bfd by hand"
        return None


# The modules whose dataset builders take ``packed`` (torchtune's), as :func:`components` matches them.
DATASET_BUILDERS = ("torchtune.datasets.",)
MULTIMODAL_BUILDERS = "torchtune.datasets.multimodal."


def _of_tokenizer(siblings: dict[str, object]) -> bool:
    """A mapping that builds a tokenizer (``_component_: torchtune.models.llama3.llama3_tokenizer``)."""
    return "tokenizer" in str(siblings.get("_component_", ""))


class Packing(Optimization):
    """Padding-free best-fit-decreasing packing of SFT examples, config-driven where the repository has a config."""

    id = "packing"
    title = "config-driven packing with the padding-free bfd strategy"
    tier = 1
    expected = "+15-20% SFT tokens/s"
    summary = (
        'SFTConfig packing=True, packing_strategy="bfd" (padding-free), read from the repository\'s config'
    )
    scope = "train"
    numerics = Numerics.DYNAMICS
    numerics_reason = (
        "several examples per packed row: fewer optimizer steps per epoch, each over other tokens"
    )
    keywords = (
        "packing=",
        "packing_strategy",
        "sequence packing",
        "config-driven packing",
        "packing config-driven",
        "packing with bfd",
        "enable packing",
    )
    codemods = (_Pack,)
    needs = _Pack.needs()

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """``packed: false`` -> true in the torchtune dataset mappings of the YAML configs of a program that
        instantiates components; none otherwise."""
        if not instantiates_components(ctx):
            return []
        sites: list[Site] = []
        for path in config_files(ctx):
            text = original = read_text(ctx, path)
            datasets = components(path, text, DATASET_BUILDERS) if text is not None else []
            builders = {c.lines["packed"]: c.cls for c in datasets if "packed" in c.keywords}
            if not builders:
                continue
            lengths = [s.value for s in settings(path, text, "max_seq_len") if _of_tokenizer(s.siblings)]
            unset = not any(isinstance(length, int) and length > 0 for length in lengths)
            for setting in reversed(settings(path, text, "packed")):
                if setting.line not in builders:
                    continue
                blocked = None
                if builders[setting.line].startswith(MULTIMODAL_BUILDERS):
                    blocked = "torchtune does not pack multimodal datasets"
                elif unset:
                    blocked = "torchtune packs into rows of the tokenizer's max_seq_len, which this config does not set"
                text, site = switch_on(
                    text, setting, self.id, "examples packed into max_seq_len rows", blocked
                )
                sites.append(site)
            if text != original:
                ctx.edit(path, text)
        return sorted(sites, key=lambda site: (site.path, site.line))

    examples = (
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
    )
