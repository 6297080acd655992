"""A launch that chooses fp16 with its own flag is a refused bf16_autocast site at that launch (the user's
choice), beside the launches that train in bf16 already; so is one that sets no precision beside bf16 ones."""

from __future__ import annotations

from pathlib import Path

from git_repos import make_repo

from optimizations.registry import registry

SCRIPT = """\
from transformers import HfArgumentParser, Trainer, TrainingArguments

if __name__ == "__main__":
    (args,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses()
    Trainer(model=None, args=args).train()
"""


def test_an_fp16_launch_is_refused_and_a_bf16_one_done(tmp_path: Path) -> None:
    make_repo(
        tmp_path,
        {
            "train.py": SCRIPT,
            "scripts/bf16.sh": "torchrun train.py --output_dir out --bf16 True\n",
            "scripts/fp16.sh": "torchrun train.py --output_dir out --fp16 True\n",
        },
    )
    sites = {s.path: s for s in registry()["bf16_autocast"].dry_run(tmp_path).sites if s.path.endswith(".sh")}
    assert sites["scripts/bf16.sh"].already
    refused = sites["scripts/fp16.sh"]
    assert not refused.applicable and not refused.already
    assert "this run trains in fp16 on purpose" in refused.reason and "scripts/fp16.sh:1" in refused.reason


def test_a_launch_that_sets_no_precision_beside_bf16_launches_is_refused_there(tmp_path: Path) -> None:
    """qlora's shape: the Guanaco scripts pass --bf16, the basic one passes neither flag and trains in fp32."""
    launches = {f"scripts/bf16_{n}.sh": "torchrun train.py --output_dir out --bf16 True\n" for n in (1, 2)}
    make_repo(
        tmp_path, {"train.py": SCRIPT, **launches, "scripts/basic.sh": "torchrun train.py --output_dir out\n"}
    )
    sites = {s.path: s for s in registry()["bf16_autocast"].dry_run(tmp_path).sites if s.path.endswith(".sh")}
    assert sites["scripts/bf16_1.sh"].already and sites["scripts/bf16_2.sh"].already
    basic = sites["scripts/basic.sh"]
    assert not basic.applicable and not basic.already
    assert (
        "this launch sets no precision, so it trains in fp32, unlike scripts/bf16_1.sh:1 `--bf16 True` and 1 more"
        in (basic.reason)
    )


def test_tf32_off_and_a_memory_saving_optimizer_chosen_by_a_launch_are_refused(tmp_path: Path) -> None:
    make_repo(
        tmp_path,
        {
            "train.py": SCRIPT,
            "scripts/run.sh": "torchrun train.py --output_dir out --tf32 False --optim adamw_bnb_8bit\n",
        },
    )
    tf32 = [s for s in registry()["tf32"].dry_run(tmp_path).sites if s.path == "scripts/run.sh"]
    assert [(s.applicable, s.already) for s in tf32] == [(False, False)]
    assert "switches TF32 off explicitly" in tf32[0].reason
    fused = [s for s in registry()["fused_adamw"].dry_run(tmp_path).sites if s.path == "scripts/run.sh"]
    assert [(s.applicable, s.already) for s in fused] == [(False, False)]
    assert fused[0].reason.startswith("kept: an optimizer the launch chose to save memory")
