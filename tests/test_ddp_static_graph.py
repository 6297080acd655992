"""The vendored DDP static-graph check (optimizations/ddp_static_graph/helper.py), run for real: two CPU ranks under
``torchrun`` with the gloo backend, a hand-built DDP model, an accelerate ``Accelerator`` and a TRL-free
``transformers.Trainer`` on a LoRA model. The transform's own before/after examples run in test_examples.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from optimizations.ddp_static_graph.helper import guard_static_graph, static_graph_trainer
from optimizations.registry import get

REPO_ROOT = Path(__file__).resolve().parents[1]

COMMON = """
import io, json, logging, os, sys
import torch, torch.distributed as dist
from optimizations.ddp_static_graph.helper import guard_static_graph, static_graph_accelerator, static_graph_trainer

out = sys.argv[1]
log = io.StringIO()
checker = logging.getLogger("optimizations.ddp_static_graph.helper")
checker.addHandler(logging.StreamHandler(log))
checker.setLevel(logging.INFO)


# Write this rank's results and leave without finalizing the interpreter: torch's gloo worker thread can still be
# dropping a finished all_gather's tensor then, and its taking the GIL during finalization aborts the process
# (SIGABRT, 'terminate called without an active exception', about one run in ten on 2 cores).
def finish(results):
    with open(f"{out}.rank{os.environ['RANK']}", "w") as file:
        json.dump(results, file)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
"""

# Hand-built DDP models: guarded against unguarded (same losses and weights?), a model with a parameter no batch
# reaches, ranks that disagree, and the accelerate path.
DDP_SCENARIOS = (
    COMMON
    + """
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()


class Net(torch.nn.Module):
    def __init__(self, extra=False):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.norm = torch.nn.BatchNorm1d(8)
        self.drop = torch.nn.Dropout(0.3)
        self.b = torch.nn.Linear(8, 1)
        self.extra = torch.nn.Linear(8, 8) if extra else None

    def forward(self, x, use_extra=False):
        h = self.drop(self.norm(self.a(x)))
        if use_extra:
            h = h + self.extra(h)
        return self.b(h)


def train(model, use_extra=False, steps=4):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    losses = []
    for _ in range(steps):
        loss = model(torch.randn(6, 8, generator=generator), use_extra=use_extra).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    state = {k: v.tolist() for k, v in model.module.state_dict().items()}
    return {"losses": losses, "static": model.static_graph, "state": state, "log": log.getvalue()}


def build(extra=False, guard=True):
    torch.manual_seed(0)
    model = DDP(Net(extra), find_unused_parameters=True)
    return guard_static_graph(model) if guard else model


results = {}
results["plain"] = train(build(guard=False))
log.truncate(0)
results["guarded"] = train(build())
log.truncate(0)
results["unused"] = train(build(extra=True))
log.truncate(0)
results["disagree"] = train(build(extra=True), use_extra=rank == 1)
log.truncate(0)

from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs

accelerator = static_graph_accelerator(
    Accelerator(cpu=True, kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
)
torch.manual_seed(0)
prepared = accelerator.prepare(Net())
results["accelerate"] = {"type": type(prepared).__name__, **train(prepared)}
finish(results)
"""
)

# A transformers Trainer on a LoRA model (PEFT models get find_unused_parameters=True from the Trainer), trained
# twice with the same seed: unguarded, then through static_graph_trainer.
TRAINER = (
    COMMON
    + """
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM, Trainer, TrainingArguments
from torch.utils.data import Dataset


class Rows(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        ids = torch.tensor([(7 * i + j) % 60 + 1 for j in range(12)])
        return {"input_ids": ids, "labels": ids}


def run(guard):
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    model = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    args = TrainingArguments(output_dir=out + "-trainer", max_steps=4, per_device_train_batch_size=2,
                             learning_rate=1e-2, logging_steps=1, report_to="none", save_strategy="no",
                             disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=Rows())
    if guard:
        trainer = static_graph_trainer(trainer)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    wrapped = trainer.model_wrapped
    return {"type": type(wrapped).__name__, "static": getattr(wrapped, "static_graph", None),
            "find_unused": getattr(wrapped, "find_unused_parameters", None), "losses": losses}


results = {"plain": run(False), "guarded": run(True), "log": log.getvalue()}
finish(results)
"""
)


def torchrun(tmp_path: Path, program: str, **env: str) -> list[dict]:
    """Run ``program`` on two CPU ranks; each rank's JSON result, by rank."""
    (tmp_path / "program.py").write_text(program)
    out = tmp_path / "result"
    process = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "program.py", str(out)],
        cwd=tmp_path,
        # TMPDIR: torchrun's torchelastic_* scratch stays in the test's directory
        env={
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "OMP_NUM_THREADS": "1",
            "TMPDIR": str(tmp_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    return [json.loads((tmp_path / f"result.rank{rank}").read_text()) for rank in (0, 1)]


@pytest.mark.slow
def test_hand_built_ddp_models(tmp_path):
    for rank, result in enumerate(torchrun(tmp_path, DDP_SCENARIOS)):
        plain, guarded = result["plain"], result["guarded"]
        assert (plain["static"], guarded["static"]) == (False, True)
        # the check's extra forward leaves dropout's random stream and BatchNorm's statistics as they were
        assert guarded["losses"] == plain["losses"]
        assert guarded["state"] == plain["state"]
        assert "static graph enabled" in guarded["log"]

        unused = result["unused"]
        assert unused["static"] is False
        assert "extra.weight, extra.bias" in unused["log"]

        disagree = result["disagree"]  # rank 1 uses `extra` on its first batch, rank 0 does not
        assert disagree["static"] is False
        expected = "got no gradient" if rank == 0 else "another rank found parameters without a gradient"
        assert expected in disagree["log"]

        accelerate = result["accelerate"]
        assert accelerate["type"] == "DistributedDataParallel" and accelerate["static"] is True


@pytest.mark.slow
def test_trainer_on_a_lora_model(tmp_path):
    for result in torchrun(tmp_path, TRAINER, ACCELERATE_USE_CPU="1"):
        plain, guarded = result["plain"], result["guarded"]
        assert plain["type"] == guarded["type"] == "DistributedDataParallel"
        assert plain["find_unused"] is True and plain["static"] is False
        assert guarded["static"] is True
        assert len(guarded["losses"]) == 4
        assert guarded["losses"] == pytest.approx(plain["losses"], rel=1e-5)
        assert "static graph enabled" in result["log"]


def test_without_ddp_the_helpers_change_nothing():
    linear = torch.nn.Linear(2, 2)
    assert guard_static_graph(linear) is linear
    assert "forward" not in vars(linear)

    class FakeTrainer:
        def __init__(self):
            self.callbacks = []

        def add_callback(self, callback):
            self.callbacks.append(callback)

    trainer = FakeTrainer()
    assert static_graph_trainer(trainer) is trainer
    (callback,) = trainer.callbacks
    trainer.model_wrapped = linear  # one process: the Trainer never wraps the model in DDP
    callback.on_train_begin(None, None, None)
    assert "forward" not in vars(linear)


def test_ddp_that_does_not_search_is_left_alone(monkeypatch):
    ddp = DistributedDataParallel.__new__(DistributedDataParallel)  # flags only: no process group needed
    torch.nn.Module.__init__(ddp)
    ddp.find_unused_parameters, ddp.static_graph = False, False
    assert guard_static_graph(ddp) is ddp and "forward" not in vars(ddp)
    ddp.find_unused_parameters, ddp.static_graph = True, True
    assert guard_static_graph(ddp) is ddp and "forward" not in vars(ddp)
    ddp.static_graph = False
    guard_static_graph(ddp)
    assert "forward" in vars(ddp)
    guard_static_graph(ddp)  # guarding twice installs one check
    assert len([name for name in vars(ddp) if name.startswith("_perfbot")]) == 1


def test_plan_rows_name_the_optimization_and_no_other():
    optimization = get("ddp_static_graph")
    assert optimization.tier == 2
    assert optimization.matches(
        "| A | train.py:40 | DDP find_unused_parameters=False / static_graph=True | +5% |"
    )
    seeds = Path("/work/shared/seeds/issue-tier1-plan-and-reports.txt")
    rows = seeds.read_text().splitlines() if seeds.exists() else []
    rows += (REPO_ROOT / "examples/trainer_repo/PLAN.md").read_text().splitlines()
    assert not [row for row in rows if row.startswith("|") and optimization.matches(row)]
