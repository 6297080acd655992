"""The ``bf16_autocast`` examples the test-suite runs, in one tuple: hand-written loops here, framework
settings in :mod:`.examples_frameworks`."""

from optimizations.registry import Example

from .examples_frameworks import FRAMEWORK_CALL_ROLES, FRAMEWORK_SETTINGS

# Autocast around the forward pass and loss; an FSDP policy or a self-casting model of the same run.
# A loop whose model casts its own layers to a dtype by name (karpathy/nanochat's gpt.py), in a package beside it.
SELF_CASTING_LOOP = """\
import torch

from mini.gpt import GPT

model = GPT()
optimizer = torch.optim.AdamW(model.parameters())
for x, y in batches():
    loss = model(x, y)
    loss.backward()
    optimizer.step()
"""


def self_casting_package(dtype: str) -> dict[str, str]:
    """The ``mini`` package whose GPT casts its embedding to ``dtype`` (a name) at line 11 of ``mini/gpt.py``."""
    return {
        "mini/__init__.py": "",
        "mini/common.py": "import torch\n\nCOMPUTE_DTYPE = torch.bfloat16 if torch.cuda.is_available() else torch.float32\n",
        "mini/gpt.py": (
            "import torch\nfrom torch import nn\n\nfrom mini.common import COMPUTE_DTYPE\n\n\n"
            "class GPT(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f"        self.wte = nn.Embedding(512, 64)\n        self.wte.to(dtype={dtype})\n"
        ),
    }


LOOP_AUTOCAST = (
    Example(
        "forward_returns_loss",
        before="""\
import torch


def train(model, loader, optimizer, device):
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        logits, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
""",
        after="""\
import torch
from _perfbot_precision import bf16_supported


def train(model, loader, optimizer, device):
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
            logits, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "loss_kept_on_the_trainer",
        before="""\
import torch


class Trainer:
    def run(self, model, loader, optimizer):
        for x, y in loader:
            logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            optimizer.step()
""",
        after="""\
import torch
from _perfbot_precision import bf16_supported


class Trainer:
    def run(self, model, loader, optimizer):
        for x, y in loader:
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
                logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            optimizer.step()
""",
    ),
    Example(
        "forward_then_loss_with_accumulation",
        before="""\
import torch.nn.functional as F


def train(model, batches, optimizer, accumulation):
    for step, batch in enumerate(batches):
        inputs = batch["input_ids"].cuda()
        # next-token prediction
        logits = model(inputs[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), inputs[:, 1:].flatten())
        loss = loss / accumulation
        loss.backward()
        if (step + 1) % accumulation == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
        after="""\
import torch.nn.functional as F
import torch
from _perfbot_precision import bf16_supported


def train(model, batches, optimizer, accumulation):
    for step, batch in enumerate(batches):
        inputs = batch["input_ids"].cuda()
        # next-token prediction
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
            logits = model(inputs[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), inputs[:, 1:].flatten())
            loss = loss / accumulation
        loss.backward()
        if (step + 1) % accumulation == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
    ),
    Example(
        "already_bf16",
        before="""\
import torch


def train(model, loader, optimizer):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "a_tensor_cast_is_not_a_model_in_bf16",
        before="""\
import torch


def orthogonalize(G):
    X = G.bfloat16()
    return X / (X.norm() + 1e-7)


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
        after="""\
import torch
from _perfbot_precision import bf16_supported


def orthogonalize(G):
    X = G.bfloat16()
    return X / (X.norm() + 1e-7)


def train(model, loader, optimizer):
    for x, y in loader:
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "refuses_a_loop_run_with_fsdp_mixed_precision",
        before="""\
def train(model, loader, optimizer):
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
""",
        files={
            "policies.py": """\
import torch
from torch.distributed.fsdp import MixedPrecision

bf16_policy = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
""",
            "main.py": """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from policies import bf16_policy
from train import train

if __name__ == "__main__":
    model = FSDP(build_model(), mixed_precision=bf16_policy)
    train(model, loader(), optimizer(model))
""",
        },
        refusal="FSDP mixed precision is set up at policies.py:4",
    ),
    Example(
        "an_fsdp_policy_of_another_program_is_not_this_loops",
        before="""\
import torch


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    train(build(), batches(), make_optimizer())
""",
        after="""\
import torch
from _perfbot_precision import bf16_supported


def train(model, loader, optimizer):
    for x, y in loader:
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
            loss = model(x, y)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    train(build(), batches(), make_optimizer())
""",
        files={
            "sharded/main.py": """\
import torch
from torch.distributed.fsdp import MixedPrecision

if __name__ == "__main__":
    policy = MixedPrecision(param_dtype=torch.bfloat16)
""",
        },
    ),
    Example(
        "already_an_autocast_to_the_dtype_a_flag_picks",
        # llm.c's train_gpt2.py: `--dtype bfloat16` in its launches, float32 for the C reference by default.
        before="""\
import argparse
from contextlib import nullcontext

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", type=str, default="float32")
args = parser.parse_args()
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
ctx = torch.amp.autocast(device_type="cuda", dtype=ptdtype) if torch.cuda.is_available() else nullcontext()


def train(model, loader, optimizer):
    for x, y in loader:
        with ctx:
            loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "already_a_model_that_casts_itself_to_its_compute_dtype",
        before=SELF_CASTING_LOOP,
        files=self_casting_package("COMPUTE_DTYPE"),
    ),
    Example(
        "refuses_a_model_that_casts_itself_to_float16",
        before=SELF_CASTING_LOOP,
        files=self_casting_package("torch.float16"),
        refusal="the model casts itself to its compute dtype by hand at mini/gpt.py:11",
    ),
)

# A model already in bf16: weights cast by hand, built or loaded in bf16, an autocast through a name.
MODEL_IN_BF16 = (
    Example(
        "a_tensor_cast_in_a_library_layer_is_no_model_precision",
        before="""\
import torch

from tuners.layer import Adapter

model = Adapter()
optimizer = torch.optim.AdamW(model.parameters())
for x, y in batches():
    loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch

from tuners.layer import Adapter
from tuners._perfbot_precision import bf16_supported

model = Adapter()
optimizer = torch.optim.AdamW(model.parameters())
for x, y in batches():
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
        files={
            "tuners/__init__.py": "",
            "tuners/layer.py": """\
from torch import nn


class Adapter(nn.Module):
    def merge(self, base_layer, delta, orig_dtype):
        base_layer.bias.data.add_(delta).to(orig_dtype)
        self.base.weight.to(dtype=orig_dtype)
""",
        },
    ),
    Example(
        "already_bf16_weights_cast_by_hand",
        before="""\
import torch
from torch import nn

from model import GPT

model = GPT().cuda()
for m in model.modules():
    if isinstance(m, nn.Embedding):
        m.weight.data = m.weight.data.bfloat16()
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters())
for x, y in batches():
    loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
    ),
    Example(
        "already_bf16_layers_built_in_bf16",
        before="""\
import torch
from torch import nn


class GPT(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim).bfloat16()
        self.proj = nn.Linear(dim, vocab_size)


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "already_bf16_model_cast_in_place",
        before="""\
import torch


def train(model, loader, optimizer):
    model.to(torch.bfloat16)
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "already_bf16_model_loaded_in_bf16",
        before="""\
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.bfloat16).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
for batch in loader:
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
""",
    ),
    Example(
        "already_bf16_model_loaded_with_a_bf16_param_dtype",
        before="""\
import torch

from model import load_model


def train(folder, loader):
    param_dtype = torch.bfloat16
    model = load_model(folder=folder, param_dtype=param_dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for batch in loader:
        loss = model(batch)
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "already_bf16_through_a_name",
        before="""\
import contextlib
import torch

dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
cast = {"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = torch.autocast("cuda", dtype=cast) if torch.cuda.is_available() else contextlib.nullcontext()
scaler = torch.cuda.amp.GradScaler(enabled=dtype == "float16")


def train(model, loader, optimizer):
    for x, y in loader:
        with ctx:
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
""",
    ),
)

# Loops that use float16: a GradScaler, a float16 autocast.
FLOAT16_LOOPS = (
    Example(
        "refuses_grad_scaler",
        before="""\
import torch


def train(model, loader, optimizer):
    scaler = torch.cuda.amp.GradScaler()
    for x, y in loader:
        loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        refusal="GradScaler",
    ),
    Example(
        "refuses_float16_autocast",
        before="""\
import torch


def train(model, loader, optimizer):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
        refusal="already autocasts",
    ),
)

EXAMPLES = (*LOOP_AUTOCAST, *FRAMEWORK_CALL_ROLES, *MODEL_IN_BF16, *FRAMEWORK_SETTINGS, *FLOAT16_LOOPS)
