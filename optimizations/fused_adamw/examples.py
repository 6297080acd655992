"""The ``fused_adamw`` examples the test-suite runs."""

from optimizations.registry import Example

EXAMPLES: tuple[Example, ...] = (
    Example(
        "litgpt_optimizer_factory",
        before="""\
from litgpt.utils import instantiate_torch_optimizer


def fit(fabric, model, optimizer, loader):
    model = fabric.setup(model)
    optimizer = instantiate_torch_optimizer(optimizer, model.parameters())
    for batch in loader:
        fabric.backward(model(batch))
        optimizer.step()


def pretrain(fabric, model, optimizer):
    extra_kwargs = {"fused": fabric.device.type == "cuda"}
    return instantiate_torch_optimizer(optimizer, model.parameters(), **extra_kwargs)
""",
        after="""\
from litgpt.utils import instantiate_torch_optimizer
from _perfbot_gpu_flags import fused_optimizer_supported


def fit(fabric, model, optimizer, loader):
    model = fabric.setup(model)
    model_parameters = list(model.parameters())
    optimizer = instantiate_torch_optimizer(optimizer, model_parameters, fused=fused_optimizer_supported(model_parameters))
    for batch in loader:
        fabric.backward(model(batch))
        optimizer.step()


def pretrain(fabric, model, optimizer):
    extra_kwargs = {"fused": fabric.device.type == "cuda"}
    return instantiate_torch_optimizer(optimizer, model.parameters(), **extra_kwargs)
""",
    ),
    Example(
        "adamw_and_clipping",
        before="""\
import torch


def train(model, loader):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for batch in loader:
        loss = model(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
""",
        after="""\
import torch
from _perfbot_gpu_flags import fused_optimizer_supported


def train(model, loader):
    model_parameters = list(model.parameters())
    optimizer = torch.optim.AdamW(model_parameters, lr=1e-3, weight_decay=0.01, fused=fused_optimizer_supported(model_parameters))
    for batch in loader:
        loss = model(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model_parameters, max_norm=1.0)
        optimizer.step()
""",
    ),
    Example(
        "aliased_import_list_of_trainable_parameters",
        before="""\
from torch.optim import AdamW as W


def build(model):
    trainable = [p for p in model.parameters() if p.requires_grad]
    return W(trainable, lr=2e-5)
""",
        after="""\
from torch.optim import AdamW as W
from _perfbot_gpu_flags import fused_optimizer_supported


def build(model):
    trainable = [p for p in model.parameters() if p.requires_grad]
    return W(trainable, lr=2e-5, fused=fused_optimizer_supported(trainable))
""",
    ),
    Example(
        "multiline_adam_with_comments",
        before="""\
import torch.optim as optim


def build(self):
    # one optimizer for the policy
    self.optimizer = optim.Adam(
        self.policy.parameters(),  # every weight
        lr=3e-4,
    )
""",
        after="""\
import torch.optim as optim
from _perfbot_gpu_flags import fused_optimizer_supported


def build(self):
    # one optimizer for the policy
    policy_parameters = list(self.policy.parameters())
    self.optimizer = optim.Adam(
        policy_parameters,  # every weight
        lr=3e-4,
        fused=fused_optimizer_supported(policy_parameters),
    )
""",
    ),
    Example(
        "accelerate_order_optimizer_before_prepare",
        before="""\
import torch
from accelerate import Accelerator


def main(model, loader):
    accelerator = Accelerator()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        accelerator.backward(model(**batch).loss)
        optimizer.step()
""",
        after="""\
import torch
from accelerate import Accelerator
from _perfbot_gpu_flags import fused_optimizer_supported


def main(model, loader):
    accelerator = Accelerator()
    model_parameters = list(model.parameters())
    optimizer = torch.optim.AdamW(model_parameters, lr=2e-5, fused=fused_optimizer_supported(model_parameters))
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        accelerator.backward(model(**batch).loss)
        optimizer.step()
""",
    ),
    Example(
        "to_device_after_the_optimizer",
        before="""\
import torch


def train(model, loader, device):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.to(device)
    for batch in loader:
        model(batch.to(device)).backward()
        optimizer.step()
""",
        after="""\
import torch
from _perfbot_gpu_flags import fused_optimizer_supported


def train(model, loader, device):
    model_parameters = list(model.parameters())
    optimizer = torch.optim.Adam(model_parameters, lr=1e-3, fused=fused_optimizer_supported(model_parameters))
    model.to(device)
    for batch in loader:
        model(batch.to(device)).backward()
        optimizer.step()
""",
    ),
    Example(
        "already_fused",
        before="""\
import torch


def build(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
""",
    ),
    Example(
        "already_fused_by_deepspeed",
        before="""\
from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam


def build(groups, args):
    AdamOptimizer = DeepSpeedCPUAdam if args.offload else FusedAdam
    return AdamOptimizer(groups, lr=args.learning_rate, betas=(0.9, 0.95))
""",
    ),
    Example(
        "already_fused_through_kwargs",
        before="""\
import torch


def build(model, device_type):
    extra = dict(fused=True) if device_type == "cuda" else dict()
    return torch.optim.AdamW(model.parameters(), lr=1e-3, **extra)
""",
    ),
    Example(
        "refuses_foreach",
        before="""\
import torch


def build(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
""",
        refusal="foreach= is set",
    ),
    Example(
        "refuses_parameter_iterator",
        before="""\
import torch


def build(model):
    params = model.parameters()
    return torch.optim.Adam(params, lr=1e-3)
""",
        refusal="may be an iterator",
    ),
)

TRAINER_OPTIM = """\
from dataclasses import dataclass, field

import transformers


@dataclass
class TrainingArguments(transformers.TrainingArguments):
    optim: str = field(default="adamw_torch")
    model_max_length: int = 512


def train():
    parser = transformers.HfArgumentParser((TrainingArguments,))
    (args,) = parser.parse_args_into_dataclasses()
    transformers.Trainer(model=None, args=args).train()
"""

EXAMPLES = (
    *EXAMPLES,
    Example(
        "trainer_arguments_subclass_pins_unfused_adamw",
        before=TRAINER_OPTIM,
        after=TRAINER_OPTIM.replace('default="adamw_torch"', 'default="adamw_torch_fused"'),
    ),
    Example(
        "trainer_optim_chosen_with_a_comment_is_kept",
        before=TRAINER_OPTIM.replace(
            'field(default="adamw_torch")',
            'field(default="adamw_torch")  # the fused kernel diverged on our ROCm nodes',
        ),
        kept="a comment on its line",
    ),
    Example(
        "trainer_optim_paged_for_memory_is_kept",
        before=TRAINER_OPTIM.replace('default="adamw_torch"', 'default="paged_adamw_32bit"'),
        kept="chosen to save memory",
    ),
    Example(
        "trainer_optim_under_a_deepspeed_optimizer_block",
        before=TRAINER_OPTIM,
        refusal="every run's DeepSpeed config builds its own optimizer",
        files={
            "run.sh": "deepspeed train.py --deepspeed ds.json\n",
            "ds.json": '{\n  "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},\n  "zero_optimization": {"stage": 2}\n}\n',
        },
    ),
)
