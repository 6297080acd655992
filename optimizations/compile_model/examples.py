"""The registry examples of ``compile_model``: loops whose model is compiled, and the ones it leaves or refuses."""

from __future__ import annotations

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "already_compiled_behind_a_flag_a_launch_turns_on",
        before="""\
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--compile", default=0, type=int)
args = parser.parse_args()


def train(model, loader, optimizer):
    if args.compile:
        model = torch.compile(model)
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        files={"run.sh": "torchrun --nproc_per_node 8 train.py --compile 1\n"},
    ),
    Example(
        "refuses_a_compile_behind_a_flag_off_by_default",
        before="""\
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--use_compile", default=0, type=int, choices=[0, 1])
args = parser.parse_args()


def train(model, loader, optimizer):
    if args.use_compile == 1:
        model = torch.compile(model)
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        refusal="off by default (line 6): turning it on is the launch's choice",
    ),
    Example(
        "module_set_up_by_lightning_fabric",
        before="""\
import lightning as L
import torch

from model import GPT


def train(fabric: L.Fabric, model, optimizer, loader):
    for batch in loader:
        loss = model(batch)
        fabric.backward(loss)
        optimizer.step()


def main(config, loader):
    fabric = L.Fabric(precision="bf16-mixed")
    model = fabric.setup(GPT(config))
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters()))
    train(fabric, model, optimizer, fabric.setup_dataloaders(loader))
""",
        refusal="compile the inner module before wrapping it",
    ),
    Example(
        "framework_compiles_the_model",
        before="""\
from torchtune import training


def train(model, loader, optimizer, compile_model):
    if compile_model:
        training.compile_model(model)
    model.train()
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
    ),
    Example(
        "built_and_moved",
        before="""\
import torch

from model import GPT


def main(config, loader, device):
    model = GPT(config)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model.train()
    for x, y in loader:
        _, loss = model(x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
""",
        after="""\
import torch

from model import GPT
from _perfbot_compile import compile_model


def main(config, loader, device):
    model = GPT(config)
    model.to(device)
    compile_model(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model.train()
    for x, y in loader:
        _, loss = model(x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
""",
    ),
    Example(
        "model_passed_in",
        before="""\
import torch


def fit(net, loader, epochs):
    \"\"\"Train `net` in place.\"\"\"
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
""",
        after="""\
import torch
from _perfbot_compile import compile_model


def fit(net, loader, epochs):
    \"\"\"Train `net` in place.\"\"\"
    compile_model(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
""",
    ),
    Example(
        "no_training_loop",
        before="""\
import torch


@torch.no_grad()
def evaluate(model, loader):
    return sum(model(x).argmax(-1).eq(y).sum().item() for x, y in loader)
""",
    ),
    Example(
        "already_compiled",
        before="""\
import torch


def main(model, loader, optimizer):
    model = torch.compile(model)
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "already_compiled_in_a_script",
        before="""\
import torch

from model import GPT

compile = True
model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
if compile:
    model = torch.compile(model)
while True:
    loss = model(*next_batch())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
""",
    ),
    Example(
        "refuses_a_loop_at_the_top_level_of_a_script",
        before="""\
import torch

from model import GPT

model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
for batch in batches():
    loss = model(*batch)
    loss.backward()
    optimizer.step()
""",
        refusal="runs at the top level of the script, not in a function",
    ),
    Example(
        "model_and_optimizer_passed_by_the_caller",
        before="""\
import torch


def step_loss(batch, net):
    inputs, labels = batch
    return torch.nn.functional.cross_entropy(net(inputs), labels)


def fit(net, batches, opt, sched, epochs):
    for _ in range(epochs):
        net.train()
        for batch in batches:
            opt.zero_grad()
            step_loss(batch, net).backward()
            opt.step()
            sched.step()


def run(build, batches):
    classifier = build()
    opt = torch.optim.AdamW(classifier.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    fit(classifier, batches, opt, sched, epochs=3)
""",
        after="""\
import torch
from _perfbot_compile import compile_model


def step_loss(batch, net):
    inputs, labels = batch
    return torch.nn.functional.cross_entropy(net(inputs), labels)


def fit(net, batches, opt, sched, epochs):
    compile_model(net)
    for _ in range(epochs):
        net.train()
        for batch in batches:
            opt.zero_grad()
            step_loss(batch, net).backward()
            opt.step()
            sched.step()


def run(build, batches):
    classifier = build()
    opt = torch.optim.AdamW(classifier.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    fit(classifier, batches, opt, sched, epochs=3)
""",
    ),
    Example(
        "refuses_two_modules_passed_in",
        before="""\
import torch


def adversarial(gen, disc, batches, g_opt, d_opt):
    for noise, real in batches:
        d_loss = disc(gen(noise).detach()).mean() - disc(real).mean()
        d_loss.backward()
        d_opt.step()
        g_loss = -disc(gen(noise)).mean()
        g_loss.backward()
        g_opt.step()


def main(make_gen, make_disc, batches):
    generator, critic = make_gen(), make_disc()
    g_opt = torch.optim.Adam(generator.parameters())
    d_opt = torch.optim.Adam(critic.parameters())
    adversarial(generator, critic, batches, g_opt, d_opt)
""",
        refusal="several modules reach the loop",
    ),
    Example(
        "refuses_distributed_wrapper",
        before="""\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def main(model, loader, rank):
    model = DDP(model.to(rank), device_ids=[rank])
    optimizer = torch.optim.AdamW(model.parameters())
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
        refusal="compile the inner module",
    ),
    Example(
        "kept_compile_turned_off_with_a_reason",
        before="""\
import torch

compile = False  # torch.compile breaks on our custom CUDA op


def train(model, loader, optimizer):
    model = model.to("cuda")
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
        kept="torch.compile breaks on our custom CUDA op",
    ),
)
