"""TF32 switched on by another file of the run: a launcher that sets it at import and holds no loop, a
repository function the training script calls, a module it imports that sets it at import."""

from __future__ import annotations

from pathlib import Path

from git_repos import make_repo

from optimizations.registry import registry

LOOP = """\
import torch
{head}

def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        loss.backward()
        optimizer.step()
"""


def _sites(tmp_path: Path) -> set[tuple[str, int, bool, bool]]:
    change = registry()["tf32"].dry_run(tmp_path)
    assert not change.files
    return {(s.path, s.line, s.already, s.applicable) for s in change.sites}


def test_a_launcher_that_sets_tf32_at_import_is_reported_done(tmp_path: Path) -> None:
    launcher = "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\nfrom train import train\n"
    make_repo(tmp_path, {"launch.py": launcher, "train.py": LOOP.format(head="")})
    assert ("launch.py", 2, True, False) in _sites(tmp_path)


def test_a_called_repository_function_that_sets_tf32_counts_as_done(tmp_path: Path) -> None:
    common = 'import torch\n\ndef compute_init():\n    torch.set_float32_matmul_precision("high")\n'
    head = "from common import compute_init\n\ncompute_init()"
    make_repo(tmp_path, {"common.py": common, "train.py": LOOP.format(head=head)})
    assert _sites(tmp_path) == {("common.py", 4, True, False), ("train.py", 4, True, False)}


def test_a_module_that_sets_tf32_at_import_counts_as_done(tmp_path: Path) -> None:
    flags = (
        "import torch\n\nif torch.cuda.is_available():\n    torch.backends.cuda.matmul.allow_tf32 = True\n"
    )
    make_repo(tmp_path, {"flags.py": flags, "train.py": LOOP.format(head="import flags")})
    assert ("train.py", 4, True, False) in _sites(tmp_path)


def test_a_run_whose_deepspeed_config_casts_the_weights_to_bf16_is_refused(tmp_path: Path) -> None:
    files = {"train.py": LOOP.format(head=""), "run.sh": "deepspeed train.py --deepspeed ds.json\n"}
    make_repo(
        tmp_path, {**files, "ds.json": '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}\n'}
    )
    (site,) = registry()["tf32"].dry_run(tmp_path).sites
    assert not site.applicable and "bf16 weights (ds.json:1" in site.reason


def test_a_deepspeed_config_in_fp16_leaves_float32_matmuls_for_tf32(tmp_path: Path) -> None:
    files = {"train.py": LOOP.format(head=""), "run.sh": "deepspeed train.py --deepspeed ds.json\n"}
    make_repo(tmp_path, {**files, "ds.json": '{"fp16": {"enabled": true}}\n'})
    assert [s.applicable for s in registry()["tf32"].dry_run(tmp_path).sites] == [True]
