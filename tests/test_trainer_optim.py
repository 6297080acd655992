"""The Trainer's optimizer pinned to the unfused AdamW in a recipe YAML or a launch flag: switched to the fused
one there, comments and layout kept; one chosen with a comment kept as it is."""

from __future__ import annotations

from pathlib import Path

from git_repos import make_repo

from optimizations.registry import registry

SCRIPT = """\
from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser

if __name__ == "__main__":
    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    SFTTrainer(model=model_args.model_name_or_path, args=training_args).train()
"""
RECIPE = """\
# Zephyr SFT
bf16: true
learning_rate: 2.0e-05
optim: adamw_torch
per_device_train_batch_size: 16
"""
KEPT = "learning_rate: 1.0e-05\nnum_train_epochs: 1\noptim: adamw_torch  # fused diverged with fp16 here\n"


def test_recipe_and_flag_switched_and_a_commented_choice_kept(tmp_path: Path) -> None:
    make_repo(
        tmp_path,
        {
            "scripts/sft.py": SCRIPT,
            "recipes/sft.yaml": RECIPE,
            "recipes/old.yaml": KEPT,
            "run.sh": "accelerate launch scripts/sft.py --config recipes/sft.yaml \\\n    --optim adamw_torch\n",
        },
    )
    change = registry()["fused_adamw"].dry_run(tmp_path)
    assert change.files["recipes/sft.yaml"] == RECIPE.replace(
        "optim: adamw_torch", "optim: adamw_torch_fused"
    )
    assert change.files["run.sh"].endswith("    --optim adamw_torch_fused\n")
    assert "recipes/old.yaml" not in change.files
    kept = [s for s in change.sites if s.path == "recipes/old.yaml"]
    assert len(kept) == 1 and kept[0].kept and "fused diverged with fp16 here" in kept[0].reason
    assert {(s.path, s.line) for s in change.applied} == {("recipes/sft.yaml", 4), ("run.sh", 2)}


def test_no_edit_where_nothing_pins_the_optimizer(tmp_path: Path) -> None:
    """The Trainer's own default is the fused AdamW on torch >= 2.8: nothing set, nothing to change."""
    make_repo(tmp_path, {"sft.py": SCRIPT, "recipe.yaml": RECIPE.replace("optim: adamw_torch\n", "")})
    change = registry()["fused_adamw"].dry_run(tmp_path)
    assert not change.files and not change.sites


def test_a_recipe_that_sets_no_optim_gets_the_fused_one_where_torch_is_pinned_below_2_8(
    tmp_path: Path,
) -> None:
    """open-r1's shape: setup.py pins torch 2.6, where the Trainer's default is the unfused adamw_torch, so a
    recipe its launches pass that sets no optim gets `optim: adamw_torch_fused`; without the pin, nothing."""
    recipe = RECIPE.replace("optim: adamw_torch\n", "")
    files = {
        "scripts/sft.py": SCRIPT,
        "recipes/sft.yaml": recipe,
        "run.sh": "accelerate launch scripts/sft.py --config recipes/sft.yaml\n",
        "setup.py": 'from setuptools import setup\n\nsetup(name="x", install_requires=["torch==2.6.0"])\n',
    }
    make_repo(tmp_path, files)
    change = registry()["fused_adamw"].dry_run(tmp_path)
    assert change.files["recipes/sft.yaml"] == recipe + "optim: adamw_torch_fused\n"
    [site] = [s for s in change.applied if s.path == "recipes/sft.yaml"]
    assert site.line == 5 and "setup.py:3: torch==2.6.0 keeps torch below 2.8" in site.message
    (tmp_path / "setup.py").write_text(
        'from setuptools import setup\n\nsetup(name="x", install_requires=["torch>=2.6"])\n'
    )
    assert "recipes/sft.yaml" not in registry()["fused_adamw"].dry_run(tmp_path).files
