"""The ``dpo_precompute`` examples the registry runs: configs, dataclass defaults and recipes switched on, refusals,
and the shared dataset cache."""

from __future__ import annotations

from optimizations.registry import Example

EXAMPLES = (
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
        "already_reference_log_probs_cached_before_the_loop",
        before="""\
import torch.nn.functional as F

from dpo_utils import build_reference_logprobs_cache


def train(policy, reference_model, loader, optimizer):
    cache = build_reference_logprobs_cache(reference_model, loader)
    for batch in loader:
        chosen = policy(batch)
        loss = -F.logsigmoid(chosen - cache[batch["index"]]).mean()
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "proposal_reference_in_the_step_method_loss_imported",
        before="""\
import torch

from losses import preference_loss


class Trainer:
    def batch_metrics(self, batch):
        chosen = self.policy(batch["chosen"])
        with torch.no_grad():
            reference = self.forward(self.reference_model, batch)
        return preference_loss(chosen, reference)

    def train(self, loader):
        for batch in loader:
            loss = self.batch_metrics(batch)
            loss.backward()
            self.optimizer.step()
""",
        files={
            "losses.py": "import torch.nn.functional as F\n\n\ndef preference_loss(c, r):\n    return -F.logsigmoid(c - r).mean()\n"
        },
        proposal="a precompute pass the loop lacks",
    ),
    Example(
        "refuses_a_reference_the_program_caches_behind_a_switch",
        before="""\
import torch
import torch.nn.functional as F


def train(policy, reference_model, loader, optimizer, config):
    for batch in loader:
        chosen = policy(batch)
        with torch.no_grad():
            reference = reference_model(batch, use_cache=config.cache_reference_logprobs)
        loss = -F.logsigmoid(chosen - reference).mean()
        loss.backward()
        optimizer.step()
""",
        refusal="caches the reference log-probs itself behind `use_cache=config.cache_reference_logprobs`",
    ),
    Example(
        "proposal_hand_written_loop_runs_the_reference_each_step",
        before="""\
import torch
import torch.nn.functional as F


def train(policy, ref_model, loader, optimizer, beta=0.1):
    for batch in loader:
        chosen, rejected = policy(batch["chosen"]), policy(batch["rejected"])
        with torch.no_grad():
            ref_chosen, ref_rejected = ref_model(batch["chosen"]), ref_model(batch["rejected"])
        margin = (chosen - ref_chosen) - (rejected - ref_rejected)
        loss = -F.logsigmoid(beta * margin).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
""",
        proposal="a precompute pass the loop lacks",
    ),
    Example(
        "no_site_hand_written_loop_with_reference_log_probs_read_from_the_batch",
        before="""\
import torch.nn.functional as F


def train(policy, loader, optimizer, beta=0.1):
    for batch in loader:
        chosen, rejected = policy(batch["chosen"]), policy(batch["rejected"])
        margin = (chosen - batch["ref_chosen"]) - (rejected - batch["ref_rejected"])
        loss = -F.logsigmoid(beta * margin).mean()
        loss.backward()
        optimizer.step()
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
