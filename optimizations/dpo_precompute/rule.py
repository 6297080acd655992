"""DPO reference log-probs computed once before training instead of in every step.

What TRL 1.x does with it (checked against ``trl.trainer.dpo_trainer`` of TRL 1.16): with
``precompute_ref_log_probs=True`` the DPOTrainer runs the reference (the separate ``ref_model``, or the policy
itself, with its LoRA adapter disabled on a PEFT model) over the whole train and eval datasets once, in batches of
``precompute_ref_batch_size`` (``per_device_train_batch_size`` when unset), caches the log-probs as dataset
columns, and every training step then skips the reference forward pass. Measured: +19.5% to +21.7%
samples/s on LoRA DPO.

Memory: it is not a memory saving on LoRA, where there is no separate reference model to drop. Measured
peak GPU memory goes from 19.08 GB to 31.09 GB (+63%) on LoRA DPO (Qwen2.5-7B, batch 2, H100) in one run and
+30% (18.6 to 24.2 GB) in another; a job close to its memory limit may need a smaller batch. Only full
fine-tuning without a ``ref_model`` saves the memory of a reference model.

The reference pass runs without gradients, so twice the training batch fits: the batch size is
``2 × per_device_train_batch_size``, written as an expression when that comes from the repository's config, and
16 (twice TrainingArguments' default of 8) when it is not set.

Refused where TRL cannot do it or the team keeps it off: ``sync_ref_model`` (the reference moves during training;
TRL raises), an iterable/streaming dataset in the module (TRL needs a map-style dataset to cache the columns
and raises), a vision-language model or processor (TRL raises for vision datasets), and Liger: the Liger DPO loss
(``use_liger_loss`` of TRL < 1.0) computes reference log-probs itself, and ``use_liger_kernel`` on the same
config is kept apart from precompute. With full fine-tuning and no
``ref_model``, ``trainer.evaluate(new_dataset)`` after training started raises in TRL; pass eval datasets to the
trainer up front.

Config-driven like packing (``dpo.get("precompute_ref_log_probs", True)``, a dataclass field, recipe YAMLs; see
:mod:`optimizations.program.config_switch`), so a run short of memory turns it off in its config.

Several processes: TRL writes the log-probs to an Arrow file from the main process and reads it on every rank, at
a path taken from the dataset's cache files; a dataset built in memory has none, each rank then looks in a
temporary directory of its own, and every rank but the main one fails (``FileNotFoundError`` under ``torchrun``).
So where the setting is turned on, the ``train_dataset=``/``eval_dataset=`` of each ``DPOTrainer`` in the same
module is handed through ``with_shared_cache`` (``optimizations/dpo_precompute/helper.py``, vendored beside the file),
which gives an in-memory dataset files that all ranks share and leaves any other dataset as it is. A trainer in
another module than its config is not wrapped: a multi-GPU run with an in-memory dataset wraps it by hand.
"""

from __future__ import annotations

import libcst as cst
from libcst.helpers import parse_template_expression

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.edits.config_switch import SettingSwitch
from optimizations.edits.expressions import call_expr, parenthesized, replace_keyword
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.hf import DEFAULT_TRAIN_BATCH_SIZE
from optimizations.program.repository import RepoContext
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under
from optimizations.registry import Example, Numerics, Optimization

RUNTIME = RuntimeHelper("dpo_cache", "optimizations.dpo_precompute")
SHARED_CACHE = "with_shared_cache"
DATASET_KEYWORDS = ("train_dataset", "eval_dataset")
# Liger settings that keep precompute off, and why.
LIGER_SETTINGS = {
    "use_liger_loss": "the Liger DPO loss computes the reference log-probs itself",
    "use_liger_kernel": "Liger kernels and precomputed reference log-probs are kept apart on one config",
}


def _atomic(node: cst.BaseExpression) -> bool:
    """True when ``2 * node`` needs no parentheses around ``node``."""
    return isinstance(node, (cst.Name, cst.Attribute, cst.Subscript, cst.Call, cst.Integer)) and not node.lpar


def reference_batch_size(call: cst.Call) -> cst.BaseExpression:
    """Twice the call's training batch: a literal when it is one, ``2 * <expression>`` when it is read."""
    given = keyword(call, "per_device_train_batch_size")
    if given is None:
        return cst.Integer(str(2 * DEFAULT_TRAIN_BATCH_SIZE))
    value = literal_value(given.value)
    if isinstance(value, int) and not isinstance(value, bool):
        return cst.Integer(str(2 * value))
    operand = given.value if _atomic(given.value) else parenthesized(given.value)
    return parse_template_expression("2 * {batch}", batch=operand)


class _Precompute(SettingSwitch):
    setting = "precompute_ref_log_probs"
    configs = ("DPOConfig",)
    field_comment = "# perfbot: compute the DPO reference log-probs once, before training."
    flag_hint = "--precompute_ref_log_probs true"

    def companions(self, call: cst.Call) -> list[tuple[str, cst.BaseExpression]]:
        if keyword(call, "precompute_ref_batch_size") is not None:
            return []
        return [("precompute_ref_batch_size", reference_batch_size(call))]

    def blocked(self, call: cst.Call | None, function: cst.FunctionDef | None) -> str | None:
        if call is not None:
            sync = keyword(call, "sync_ref_model")
            if sync is not None and literal_value(sync.value) is not False:
                return (
                    f"sync_ref_model={code_of(sync.value)}: the reference model moves during training, so its "
                    "log-probs cannot be computed up front (TRL raises); leave precompute off"
                )
            for name, why in LIGER_SETTINGS.items():
                liger = keyword(call, name)
                if liger is not None and literal_value(liger.value) is not False:
                    return f"{name}={code_of(liger.value)}: {why}; choose one of the two by hand"
        if self.scope.iterable_dataset is not None:
            return (
                f"`{self.scope.iterable_dataset}` makes an iterable dataset: TRL caches reference log-probs as "
                "columns of a map-style Dataset and raises on an IterableDataset; load it without streaming first"
            )
        if self.scope.vision_model is not None:
            return (
                f"`{self.scope.vision_model}` may load a vision-language model or processor: TRL does not precompute "
                "reference log-probs for vision datasets (it raises)"
            )
        return None

    def yaml_blocked(self, siblings: dict[str, object]) -> str | None:
        if siblings.get("sync_ref_model") is True:
            return "sync_ref_model: true moves the reference model during training; leave precompute off"
        for name, why in LIGER_SETTINGS.items():
            if siblings.get(name) is True:
                return f"{name}: true: {why}; choose one of the two by hand"
        return None


class _SharedCache(OptimizationCodemod):
    """Hands the datasets of every ``DPOTrainer(...)`` in the module through ``with_shared_cache``."""

    def __init__(self, context, optimization: Optimization, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.wrapped = False

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not qualified_under(self.names(original_node.func), ("trl",), ("DPOTrainer",)):
            return updated_node
        call = updated_node
        for name in DATASET_KEYWORDS:
            given = keyword(call, name)
            if given is None or literal_value(given.value) is None or _shared(given.value):
                continue
            call = replace_keyword(call, name, call_expr(SHARED_CACHE, given.value))
            self.changed(
                original_node,
                f"{code_of(original_node.func)}({name}={SHARED_CACHE}({code_of(given.value)})): one cache file "
                "for the reference log-probs on every rank",
            )
            self.wrapped = True
        return call

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.wrapped:
            self.import_runtime(RUNTIME, SHARED_CACHE)
        return updated_node


def _shared(value: cst.BaseExpression) -> bool:
    """True for ``with_shared_cache(...)``: a dataset handed through already."""
    return (
        isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == SHARED_CACHE
    )


class DpoPrecompute(Optimization):
    """Reference log-probs computed once before DPO training; each step skips the reference forward pass."""

    id = "dpo_precompute"
    title = "precompute DPO reference log-probs"
    tier = 1
    expected = "+20% DPO throughput"
    summary = "DPOConfig precompute_ref_log_probs=True with a reference batch twice the training batch"
    scope = "train"
    numerics = Numerics.EXACT
    numerics_reason = "the same reference log-probs, computed once before training instead of in every step"
    keywords = (
        "precompute_ref_log_probs",
        "precompute_ref_batch_size",
        "precompute reference log",
        "precomputed reference log",
        "precompute dpo reference",
        "precompute ref log",
    )
    # Where precompute is switched on, the trainers' datasets get one cache file for every rank.
    codemods = (_Precompute, _SharedCache)
    needs = _Precompute.needs()

    examples = (
        Example(
            "plain",
            before="""\
from trl import DPOConfig


def build():
    return DPOConfig(output_dir="out", per_device_train_batch_size=4, beta=0.1)
""",
            after="""\
from trl import DPOConfig


def build():
    return DPOConfig(output_dir="out", per_device_train_batch_size=4, beta=0.1, precompute_ref_log_probs=True, precompute_ref_batch_size=8)
""",
        ),
        Example(
            "aliased_class",
            before="""\
from trl import DPOConfig as Cfg


def build():
    return Cfg(output_dir="out")
""",
            after="""\
from trl import DPOConfig as Cfg


def build():
    return Cfg(output_dir="out", precompute_ref_log_probs=True, precompute_ref_batch_size=16)
""",
        ),
        Example(
            "batch_size_expression",
            before="""\
from trl import DPOConfig


def build(args):
    return DPOConfig(output_dir="out", per_device_train_batch_size=args.batch or 2)
""",
            after="""\
from trl import DPOConfig


def build(args):
    return DPOConfig(output_dir="out", per_device_train_batch_size=args.batch or 2, precompute_ref_log_probs=True, precompute_ref_batch_size=2 * (args.batch or 2))
""",
        ),
        Example(
            "config_dataclass_default_turned_on",
            before="""\
from dataclasses import dataclass

from trl import DPOConfig


@dataclass
class DpoSettings:
    beta: float = 0.1
    batch_size: int = 4
    precompute_ref_log_probs: bool = False  # opt in


def build(settings: DpoSettings):
    return DPOConfig(
        output_dir="out",
        beta=settings.beta,
        per_device_train_batch_size=settings.batch_size,
        precompute_ref_log_probs=settings.precompute_ref_log_probs,
    )
""",
            after="""\
from dataclasses import dataclass

from trl import DPOConfig


@dataclass
class DpoSettings:
    beta: float = 0.1
    batch_size: int = 4
    precompute_ref_log_probs: bool = True  # opt in


def build(settings: DpoSettings):
    return DPOConfig(
        output_dir="out",
        beta=settings.beta,
        per_device_train_batch_size=settings.batch_size,
        precompute_ref_log_probs=settings.precompute_ref_log_probs,
        precompute_ref_batch_size=2 * settings.batch_size,
    )
""",
        ),
        Example(
            "trainer_datasets_shared_across_ranks",
            before="""\
from datasets import Dataset
from trl import DPOConfig, DPOTrainer


def train(model, tokenizer, rows, eval_rows):
    args = DPOConfig(output_dir="out", per_device_train_batch_size=2)
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(eval_rows),
        processing_class=tokenizer,
    )
    trainer.train()
""",
            after="""\
from datasets import Dataset
from trl import DPOConfig, DPOTrainer
from _perfbot_dpo_cache import with_shared_cache


def train(model, tokenizer, rows, eval_rows):
    args = DPOConfig(output_dir="out", per_device_train_batch_size=2, precompute_ref_log_probs=True, precompute_ref_batch_size=4)
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=with_shared_cache(Dataset.from_list(rows)),
        eval_dataset=with_shared_cache(Dataset.from_list(eval_rows)),
        processing_class=tokenizer,
    )
    trainer.train()
""",
        ),
        Example(
            "already_precomputes",
            before="""\
from trl import DPOConfig


def build():
    return DPOConfig(output_dir="out", precompute_ref_log_probs=True)
""",
        ),
        Example(
            "refuses_sync_ref_model",
            before="""\
from trl import DPOConfig


def build():
    return DPOConfig(output_dir="out", sync_ref_model=True, ref_model_sync_steps=64)
""",
            refusal="sync_ref_model=True",
        ),
        Example(
            "refuses_streaming_dataset",
            before="""\
from datasets import load_dataset
from trl import DPOConfig, DPOTrainer


def train(model, tokenizer):
    dataset = load_dataset("trl-lib/ultrafeedback_binarized", split="train", streaming=True)
    args = DPOConfig(output_dir="out", max_steps=100)
    DPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer).train()
""",
            refusal="streaming=True",
        ),
        Example(
            "refuses_liger",
            before="""\
from trl import DPOConfig


def build():
    return DPOConfig(output_dir="out", use_liger_kernel=True)
""",
            refusal="use_liger_kernel=True",
        ),
        Example(
            "refuses_hidden_kwargs",
            before="""\
from trl import DPOConfig


def build(overrides):
    return DPOConfig(output_dir="out", **overrides)
""",
            refusal="**overrides",
        ),
        Example(
            "refuses_repo_controlled_expression",
            before="""\
from trl import DPOConfig


def build(cfg):
    return DPOConfig(output_dir="out", precompute_ref_log_probs=cfg.precompute)
""",
            refusal="already controls",
        ),
        Example(
            "refuses_trl_parser_without_recipe",
            before="""\
from trl import DPOConfig, ModelConfig, ScriptArguments, TrlParser


def main():
    parser = TrlParser((ScriptArguments, DPOConfig, ModelConfig))
    return parser.parse_args_and_config()
""",
            refusal="--precompute_ref_log_probs true",
        ),
        Example(
            "module_import_multiline_config_dict",
            before="""\
import trl


def build(dpo):
    return trl.DPOConfig(
        output_dir="out",  # checkpoints
        per_device_train_batch_size=dpo["per_device_batch_size"],
        # the reference is the base model (LoRA adapter off)
        beta=dpo["beta"],
        precompute_ref_log_probs=False,
    )
""",
            after="""\
import trl


def build(dpo):
    return trl.DPOConfig(
        output_dir="out",  # checkpoints
        per_device_train_batch_size=dpo["per_device_batch_size"],
        # the reference is the base model (LoRA adapter off)
        beta=dpo["beta"],
        precompute_ref_log_probs=dpo.get("precompute_ref_log_probs", True),
        precompute_ref_batch_size=2 * dpo["per_device_batch_size"],
    )
""",
        ),
    )
