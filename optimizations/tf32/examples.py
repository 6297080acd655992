"""The ``tf32`` examples the test-suite runs."""

from optimizations.program.config_use import HELPER_ONLY_CONFIG_FILES, HELPER_ONLY_CONFIG_PROGRAM
from optimizations.registry import Example

EXAMPLES = (
    Example(
        "no_site_config_only_a_repository_helper_reads",
        before=HELPER_ONLY_CONFIG_PROGRAM,
        files=HELPER_ONLY_CONFIG_FILES,
    ),
    Example(
        "training_function",
        before="""\
import torch


def main():
    \"\"\"Train.\"\"\"
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
""",
        after="""\
import torch
from _perfbot_gpu_flags import enable_tf32


def main():
    \"\"\"Train.\"\"\"
    enable_tf32()
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "aliased_torch_deterministic",
        before="""\
import torch as th


def train(model, loader, optimizer):
    th.use_deterministic_algorithms(True)
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        after="""\
import torch as th
from _perfbot_gpu_flags import enable_tf32


def train(model, loader, optimizer):
    enable_tf32(cudnn_benchmark=False)
    th.use_deterministic_algorithms(True)
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
    ),
    Example(
        "trainer_config_multiline",
        before="""\
from trl import SFTConfig


def build(out):
    return SFTConfig(
        output_dir=out,  # checkpoints
        bf16=True,
    )
""",
        after="""\
from trl import SFTConfig
from transformers.utils import is_torch_tf32_available


def build(out):
    return SFTConfig(
        output_dir=out,  # checkpoints
        bf16=True,
        tf32=True if is_torch_tf32_available() else None,
    )
""",
    ),
    Example(
        "already_sets_legacy_flags",
        before="""\
import torch

torch.backends.cuda.matmul.allow_tf32 = True


def train(model, loader, optimizer):
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
    ),
    Example(
        "chunked_loss_back_propagating_per_call",
        before="""\
import torch


class ChunkedLoss:
    def __call__(self, hidden, head, labels):
        total = 0.0
        for h, y in zip(hidden.chunk(4), labels.chunk(4)):
            loss = torch.nn.functional.cross_entropy(head(h), y)
            loss.backward(retain_graph=True)
            total += loss.detach()
        return total
""",
    ),
    Example(
        "autograd_function_backward_per_shard",
        before="""\
import torch


class TiledMLP(torch.autograd.Function):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        grads = []
        for shard, grad_shard in zip(x.chunk(4, dim=1), grad.chunk(4, dim=1)):
            shard = shard.detach().requires_grad_()
            with torch.enable_grad():
                ctx.fn(shard).backward(grad_shard)
            grads.append(shard.grad)
        return torch.cat(grads, dim=1), None
""",
    ),
    Example(
        "trainer_class_call_steps",
        before="""\
import torch


class Trainer:
    def __call__(self, model, loader, optimizer):
        for batch in loader:
            model(batch).backward()
            optimizer.step()
""",
        after="""\
import torch
from _perfbot_gpu_flags import enable_tf32


class Trainer:
    def __call__(self, model, loader, optimizer):
        enable_tf32()
        for batch in loader:
            model(batch).backward()
            optimizer.step()
""",
    ),
    Example(
        "refuses_tf32_switched_off",
        before="""\
import torch


def train(model, loader, optimizer):
    torch.set_float32_matmul_precision("highest")
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        refusal="switched off explicitly",
    ),
    Example(
        "config_splat_whose_keys_are_known",
        before="""\
from transformers import Trainer, TrainingArguments


def warmup(config):
    if config.warmup_steps > 0:
        return {"warmup_steps": config.warmup_steps}
    return {}


def main(config, model, data):
    extra = warmup(config)
    args = TrainingArguments(output_dir="out", bf16=True, **extra)
    Trainer(model=model, args=args, train_dataset=data).train()
""",
        after="""\
from transformers import Trainer, TrainingArguments
from transformers.utils import is_torch_tf32_available


def warmup(config):
    if config.warmup_steps > 0:
        return {"warmup_steps": config.warmup_steps}
    return {}


def main(config, model, data):
    extra = warmup(config)
    args = TrainingArguments(output_dir="out", bf16=True, **extra, tf32=True if is_torch_tf32_available() else None)
    Trainer(model=model, args=args, train_dataset=data).train()
""",
    ),
    Example(
        "refuses_config_splat_of_unknown_keys",
        before="""\
from transformers import Trainer, TrainingArguments


def main(model, data, **options):
    args = TrainingArguments(output_dir="out", **options)
    Trainer(model=model, args=args, train_dataset=data).train()
""",
        refusal="`**options` (train.py:4), whose keys are unknown: `options` is a parameter of main()",
    ),
)
