"""An Accelerator given a DDP handler that searches for unused parameters, in a program every launch of which
runs under an FSDP accelerate config, or as one process: no DDP wrapper is built, so the static-graph check is
refused, citing the config or the launches; under a DDP launch it is wrapped as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from git_repos import make_repo

from optimizations.registry import registry

TRAIN = """\
from accelerate import Accelerator, DistributedDataParallelKwargs


def main(model, loader, optimizer):
    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        accelerator.backward(model(batch))
        optimizer.step()


if __name__ == "__main__":
    main(None, None, None)
"""
FSDP = "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\nnum_processes: 4\n"
DDP = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 4\n"


@pytest.mark.parametrize(("config", "refused"), [(FSDP, True), (DDP, False)], ids=["fsdp", "ddp"])
def test_every_run_sharded_refuses_the_static_graph(tmp_path: Path, config: str, refused: bool) -> None:
    make_repo(
        tmp_path,
        {
            "train.py": TRAIN,
            "configs/accelerate.yaml": config,
            "run.sh": "accelerate launch --config_file configs/accelerate.yaml train.py\n",
        },
    )
    [site] = registry()["ddp_static_graph"].dry_run(tmp_path).sites
    assert site.applicable is not refused
    if refused:
        assert "every run shards the model (FSDP at configs/accelerate.yaml:2)" in site.reason


@pytest.mark.parametrize(
    ("launches", "refused"),
    [
        ("python train.py\n", True),
        ("python train.py\ntorchrun --nproc-per-node 4 train.py\n", False),
    ],
    ids=["python", "python-and-torchrun"],
)
def test_every_run_one_process_refuses_the_static_graph(tmp_path: Path, launches: str, refused: bool) -> None:
    make_repo(tmp_path, {"train.py": TRAIN, "run.sh": launches})
    [site] = registry()["ddp_static_graph"].dry_run(tmp_path).sites
    assert site.applicable is not refused
    if refused:
        assert "every run is one process (run.sh:1): no DDP wrapper is built" in site.reason


def test_a_file_no_launch_reaches_is_not_refused_as_one_process(tmp_path: Path) -> None:
    make_repo(tmp_path, {"train.py": TRAIN})
    [site] = registry()["ddp_static_graph"].dry_run(tmp_path).sites
    assert site.applicable
