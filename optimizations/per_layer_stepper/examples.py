"""Before/after examples of ``per_layer_stepper``; ``tests/test_examples.py`` runs them all."""

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "loop_adamw",
        before="""\
import torch


def train(model, loader):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        after="""\
import torch
from _perfbot_per_layer_stepper import per_layer_adamw


def train(model, loader):
    optimizer = per_layer_adamw(model.parameters(), lr=1e-3, weight_decay=0.01, model=model)
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
    ),
    Example(
        "aliased_import_trainable_list",
        before="""\
from torch.optim import AdamW as W


def build(net):
    trainable = [p for p in net.parameters() if p.requires_grad]
    return W(trainable, lr=2e-5)
""",
        after="""\
from _perfbot_per_layer_stepper import per_layer_adamw


def build(net):
    trainable = [p for p in net.parameters() if p.requires_grad]
    return per_layer_adamw(trainable, lr=2e-5, model=net)
""",
    ),
    Example(
        "multiline_with_comments",
        before="""\
import torch


def build(self, args):
    # one optimizer for the policy
    self.optimizer = torch.optim.AdamW(
        self.policy.parameters(),  # every weight
        lr=args.lr,
        betas=(0.9, 0.95),  # LLM-style
    )
""",
        after="""\
import torch
from _perfbot_per_layer_stepper import per_layer_adamw


def build(self, args):
    # one optimizer for the policy
    self.optimizer = per_layer_adamw(
        self.policy.parameters(),  # every weight
        lr=args.lr,
        betas=(0.9, 0.95),  # LLM-style
        model=self.policy,
    )
""",
    ),
    Example(
        "after_fused_adamw",
        before="""\
import torch
from _perfbot_gpu_flags import fused_optimizer_supported


def train(model):
    model_parameters = list(model.parameters())
    return torch.optim.AdamW(model_parameters, lr=1e-3, fused=fused_optimizer_supported(model_parameters))
""",
        after="""\
import torch
from _perfbot_gpu_flags import fused_optimizer_supported
from _perfbot_per_layer_stepper import per_layer_adamw


def train(model):
    model_parameters = list(model.parameters())
    return per_layer_adamw(model_parameters, lr=1e-3, fused=fused_optimizer_supported(model_parameters), model=model)
""",
    ),
    Example(
        "proposal_trainer",
        before="""\
from trl import SFTConfig, SFTTrainer


def main(model, dataset):
    config = SFTConfig(output_dir="out", learning_rate=2e-5)
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,  # tokenized
    )
    trainer.train()
""",
        proposal="a patch of Trainer internals",
    ),
    Example(
        "already_streamed",
        before="""\
import transformers
from _perfbot_per_layer_stepper import per_layer_adamw, with_per_layer_adamw


def loop(model):
    return per_layer_adamw(model.parameters(), lr=1e-3, model=model)


def trainer(model, args):
    return with_per_layer_adamw(transformers.Trainer(model=model, args=args))
""",
    ),
    Example(
        "refuses_amsgrad",
        before="""\
import torch


def build(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3, amsgrad=True)
""",
        refusal="amsgrad=True is set",
    ),
    Example(
        "refuses_adam",
        before="""\
from torch import optim


def build(model):
    return optim.Adam(model.parameters(), lr=1e-3, weight_decay=0.01)
""",
        refusal="AdamW only",
    ),
    Example(
        "refuses_trainer_with_its_own_optimizer",
        before="""\
from transformers import Trainer


def build(model, args, optimizer, scheduler):
    return Trainer(model=model, args=args, optimizers=(optimizer, scheduler))
""",
        refusal="given `optimizers=`",
    ),
)
