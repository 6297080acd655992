"""Multi-process workloads under the launch wrapper: launcher parsing, merging the ranks' records, and a real
``torchrun --nproc-per-node 2`` run of a hand-written DDP loop on CPU (gloo), with counts known in advance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.distributed import DistributedLaunch, LauncherError, aggregate_ranks, parse_launcher

REPO_ROOT = Path(__file__).resolve().parents[1]

# A DDP loop over an embedding + linear model. Rank r feeds batches of (r + 1) * 2 rows of 8 tokens, so the ranks'
# token counts differ and their sum is known. Each rank writes its losses to LOSSES.rank<r>.
# argv: steps losses-prefix delay-ms (a DDP comm hook that finishes each all-reduce that much later).
DDP_LOOP = """
import json, sys, threading
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

steps, losses_prefix, delay_ms = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 32)))

def late_allreduce(state, bucket):
    buffer = bucket.buffer().div_(dist.get_world_size())
    done = dist.all_reduce(buffer, async_op=True).get_future()
    late = torch.futures.Future()
    done.then(lambda f: threading.Timer(delay_ms / 1000, lambda: late.set_result(f.value()[0])).start())
    return late

if delay_ms > 0:
    model.register_comm_hook(None, late_allreduce)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(rank)
losses = []
for step in range(steps):
    ids = torch.randint(0, 32, ((rank + 1) * 2, 8), generator=generator)
    loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
json.dump(losses, open(f"{losses_prefix}.rank{rank}", "w"))
dist.destroy_process_group()
"""


def run_launch(
    tmp_path: Path, command: list[str], warmup: int = 1
) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "metrics.json"
    # TMPDIR: torchrun's torchelastic_* scratch stays in the test's directory
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.launch",
            "--out",
            str(out),
            "--warmup-steps",
            str(warmup),
            "--",
            *command,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return process, json.loads(out.read_text())


def test_launchers_are_split_into_their_options_and_the_program():
    torchrun = parse_launcher(
        ["torchrun", "--nproc-per-node", "2", "--master-port=29511", "train.py", "--lr", "1"]
    )
    assert torchrun == DistributedLaunch(
        "torch.distributed.run", ("--nproc-per-node", "2", "--master-port=29511"), ("train.py", "--lr", "1")
    )
    argv = torchrun.argv("m.json", 3)
    assert argv[1:6] == ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port=29511"]
    assert argv[6:] == ["-m", "benchmarks.launch", "--out", "m.json", "--per-rank", "--warmup-steps", "3"] + [
        "--",
        "train.py",
        "--lr",
        "1",
    ]
    module = parse_launcher(["python3", "-m", "torch.distributed.run", "--nnodes=1", "-m", "pkg.train", "-x"])
    assert module == DistributedLaunch(
        "torch.distributed.run", ("--nnodes=1",), ("python", "-m", "pkg.train", "-x")
    )
    accelerate = parse_launcher(
        ["accelerate", "launch", "--num_processes", "2", "--multi_gpu", "sft.py", "--size"]
    )
    assert accelerate == DistributedLaunch(
        "accelerate.commands.launch", ("--num_processes", "2", "--multi_gpu"), ("sft.py", "--size")
    )
    assert parse_launcher(["python", "train.py"]) is None
    assert parse_launcher(["accelerate", "config"]) is None
    with pytest.raises(LauncherError, match="no-python"):
        parse_launcher(["torchrun", "--no-python", "./train.sh"])


def _rank(rank: int, **fields) -> dict:
    record = {
        "schema": "perfbot.run/v1",
        "status": "ok",
        "rank": rank,
        "world_size": 2,
        "tokens": 100 * (rank + 1),
        "samples": rank + 1,
        "tokens_per_s": 1000.0 * (rank + 1),
        "samples_per_s": 10.0,
        "achieved_tflops": 2.0,
        "peak_tflops": 10.0,
        "mfu": 0.2,
        "peak_memory_bytes": 1000 + rank,
        "phases": {"forward": {"mean_ms": float(rank)}},
        "step_time_s": {"median": 0.5 + rank},
        "allreduce_wait": {"median_ms": 3.0 + rank},
        "loss": [{"step": 0, "loss": float(rank)}],
    }
    record.update(fields)
    return record


def test_rank_records_merge_into_one():
    merged = aggregate_ranks([_rank(0), _rank(1)], ["torchrun", "x.py"], 0)
    assert merged["status"] == "ok" and "error" not in merged and "rank" not in merged
    assert (merged["tokens"], merged["samples"], merged["tokens_per_s"]) == (300, 3, 3000.0)
    assert merged["peak_memory_bytes"] == 1001
    assert merged["phases"] == {"forward": {"mean_ms": 0.0}} and merged["loss"][0]["loss"] == 0.0
    assert merged["allreduce_wait"] == {"median_ms": 3.0}
    assert merged["achieved_tflops"] == 4.0 and merged["mfu"] == pytest.approx(0.2)
    assert merged["world_size"] == 2 and [r["rank"] for r in merged["ranks"]] == [0, 1]
    assert merged["ranks"][1]["allreduce_wait_median_ms"] == 4.0
    missing = aggregate_ranks([_rank(0)], ["torchrun", "x.py"], 0)
    assert missing["status"] == "crashed" and "rank(s) 1 wrote no metrics" in missing["error"]
    failed = aggregate_ranks([_rank(0), _rank(1)], ["torchrun", "x.py"], 1)
    assert failed["status"] == "crashed" and "exited with status 1" in failed["error"]
    oom = aggregate_ranks([_rank(0), _rank(1, status="oom", error="OutOfMemoryError")], ["x"], 1)
    assert oom["status"] == "oom" and "rank 1: OutOfMemoryError" in oom["error"]
    assert aggregate_ranks([], ["x"], 1) is None


@pytest.mark.slow
def test_torchrun_ddp_loop_is_measured_on_every_rank(tmp_path: Path):
    (tmp_path / "loop.py").write_text(DDP_LOOP)
    steps, warmup = 6, 2
    process, record = run_launch(
        tmp_path, ["torchrun", "--nproc-per-node", "2", "loop.py", str(steps), "losses", "0"], warmup
    )
    assert process.returncode == 0, process.stderr[-3000:]
    assert record["status"] == "ok" and record["world_size"] == 2
    assert record["steps_measured"] == steps - warmup
    # rank 0: 2 rows x 8 tokens per step, rank 1: 4 rows x 8 tokens
    assert record["tokens"] == (16 + 32) * (steps - warmup)
    assert record["samples"] == (2 + 4) * (steps - warmup)
    ranks = record["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["status"] == "ok" for r in ranks)
    assert record["tokens_per_s"] == pytest.approx(sum(r["tokens_per_s"] for r in ranks))
    rank0_losses = json.loads((tmp_path / "losses.rank0").read_text())
    assert [point["loss"] for point in record["loss"]] == pytest.approx(rank0_losses, rel=1e-6)
    assert record["allreduce_wait"]["median_ms"] is not None
    assert record["allreduce_wait"]["median_ms"] <= record["step_time_s"]["median"] * 1000
    assert (tmp_path / "metrics.json.rank0").exists() and (tmp_path / "metrics.json.rank1").exists()


@pytest.mark.slow
def test_allreduce_wait_is_the_exposed_gradient_sync(tmp_path: Path):
    """An all-reduce that finishes 60 ms after the gradients are ready shows up as ~60 ms of wait per step."""
    (tmp_path / "loop.py").write_text(DDP_LOOP)
    process, record = run_launch(
        tmp_path, ["torchrun", "--nproc-per-node", "2", "loop.py", "5", "losses", "60"]
    )
    assert process.returncode == 0, process.stderr[-3000:]
    wait = record["allreduce_wait"]["median_ms"]
    assert 55 <= wait <= 200
    assert wait <= record["phases"]["backward"]["median_ms"]
    assert all(r["allreduce_wait_median_ms"] >= 55 for r in record["ranks"])


@pytest.mark.slow
def test_a_failing_rank_fails_the_run(tmp_path: Path):
    (tmp_path / "loop.py").write_text("import os, sys\nif os.environ['RANK'] == '1':\n    sys.exit(3)\n")
    process, record = run_launch(tmp_path, ["torchrun", "--nproc-per-node", "2", "loop.py"])
    assert process.returncode != 0
    assert record["status"] == "crashed"
    assert "rank 1: exited with status 3" in record["error"]
