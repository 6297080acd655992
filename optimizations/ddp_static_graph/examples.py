"""Before/after examples of ``ddp_static_graph``; ``tests/test_examples.py`` runs them all."""

from optimizations.program.config_use import HELPER_ONLY_CONFIG_FILES, HELPER_ONLY_CONFIG_PROGRAM
from optimizations.registry import Example

EXAMPLES = (
    Example(
        "no_site_config_only_a_repository_helper_reads",
        before=HELPER_ONLY_CONFIG_PROGRAM,
        files=HELPER_ONLY_CONFIG_FILES,
    ),
    Example(
        "aliased_ddp",
        before="""\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model, rank):
    return DDP(model.to(rank), device_ids=[rank], find_unused_parameters=True)
""",
        after="""\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from _perfbot_ddp_check import guard_static_graph


def wrap(model, rank):
    return guard_static_graph(DDP(model.to(rank), device_ids=[rank], find_unused_parameters=True))
""",
    ),
    Example(
        "module_path_multiline_with_comments",
        before="""\
import torch


def wrap(model, rank, cfg):
    ddp = torch.nn.parallel.DistributedDataParallel(
        model,  # already on the GPU
        device_ids=[rank],
        find_unused_parameters=cfg.find_unused,  # from the YAML
    )
    return ddp
""",
        after="""\
import torch
from _perfbot_ddp_check import guard_static_graph


def wrap(model, rank, cfg):
    ddp = guard_static_graph(torch.nn.parallel.DistributedDataParallel(
        model,  # already on the GPU
        device_ids=[rank],
        find_unused_parameters=cfg.find_unused,  # from the YAML
    ))
    return ddp
""",
    ),
    Example(
        "accelerate_handler",
        before="""\
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs


def setup():
    ddp_kwargs = DistributedDataParallelKwargs(find_unused_parameters=True)
    accelerator = Accelerator(mixed_precision="bf16", kwargs_handlers=[ddp_kwargs])
    return accelerator
""",
        after="""\
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs
from _perfbot_ddp_check import static_graph_accelerator


def setup():
    ddp_kwargs = DistributedDataParallelKwargs(find_unused_parameters=True)
    accelerator = static_graph_accelerator(Accelerator(mixed_precision="bf16", kwargs_handlers=[ddp_kwargs]))
    return accelerator
""",
    ),
    Example(
        "trainer_config_flag",
        before="""\
from transformers import Trainer, TrainingArguments


def train(model, data):
    args = TrainingArguments(output_dir="out", ddp_find_unused_parameters=True)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
""",
        after="""\
from transformers import Trainer, TrainingArguments
from _perfbot_ddp_check import static_graph_trainer


def train(model, data):
    args = TrainingArguments(output_dir="out", ddp_find_unused_parameters=True)
    trainer = static_graph_trainer(Trainer(model=model, args=args, train_dataset=data))
    trainer.train()
""",
    ),
    Example(
        "trl_module_import_default_flag",
        before="""\
import trl


def train(model, data, lora):
    trl.SFTTrainer(
        model=model,
        args=trl.SFTConfig(output_dir="out"),  # the Trainer's default searches a PEFT model
        train_dataset=data,
        peft_config=lora,
    ).train()
""",
        after="""\
import trl
from _perfbot_ddp_check import static_graph_trainer


def train(model, data, lora):
    static_graph_trainer(trl.SFTTrainer(
        model=model,
        args=trl.SFTConfig(output_dir="out"),  # the Trainer's default searches a PEFT model
        train_dataset=data,
        peft_config=lora,
    )).train()
""",
    ),
    Example(
        "already_static_or_not_searching",
        before="""\
from torch.nn.parallel import DistributedDataParallel
from transformers import Trainer, TrainingArguments


def wrap(model, rank, data):
    fast = DistributedDataParallel(model, device_ids=[rank])
    static = DistributedDataParallel(model, find_unused_parameters=True, static_graph=True)
    args = TrainingArguments(output_dir="out", ddp_find_unused_parameters=False)
    return fast, static, Trainer(model=model, args=args, train_dataset=data)
""",
    ),
    Example(
        "already_no_search_wherever_ddp_runs",
        before="""\
import os

from transformers import Trainer, TrainingArguments


def train(model, data):
    ddp = int(os.environ.get("WORLD_SIZE", 1)) != 1
    args = TrainingArguments(output_dir="out", ddp_find_unused_parameters=False if ddp else None)
    Trainer(model=model, args=args, train_dataset=data).train()
""",
    ),
    Example(
        "already_guarded",
        before="""\
from torch.nn.parallel import DistributedDataParallel as DDP
from _perfbot_ddp_check import guard_static_graph


def wrap(model, rank):
    return guard_static_graph(DDP(model, device_ids=[rank], find_unused_parameters=True))
""",
    ),
    Example(
        "refuses_branch_only_some_batches_take",
        before="""\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(8, 8)
        self.aux = torch.nn.Linear(8, 2)

    def forward(self, x, with_aux=False):
        out = self.body(x)
        if with_aux:
            return out, self.aux(out)
        return out


def wrap(rank):
    model = Net().to(rank)
    return DDP(model, device_ids=[rank], find_unused_parameters=True)
""",
        refusal="`Net.forward` calls `self.aux` only under the condition at line 13",
    ),
    Example(
        "refuses_explicit_dynamic_graph",
        before="""\
from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model):
    return DDP(model, find_unused_parameters=True, static_graph=False)
""",
        refusal="static_graph=False is set explicitly",
    ),
    Example(
        "refuses_handler_without_accelerator",
        before="""\
from accelerate import DistributedDataParallelKwargs


def handlers():
    return [DistributedDataParallelKwargs(find_unused_parameters=True)]
""",
        refusal="no Accelerator(kwargs_handlers=[...]) in this module receives this handler",
    ),
)
