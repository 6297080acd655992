"""The packing transform across files (YAML configs, recipes), its plan keywords, and the TRL behaviour it relies on."""

from __future__ import annotations

from pathlib import Path

import git
import git_repos
import pytest

from bot.plan import parse_plan
from optimizations.packing.rule import Packing
from optimizations.registry import registry

SEED_PLAN = Path("/work/shared/seeds/issue-tier1-plan-and-reports.txt")

TRAINER = """\
from trl import SFTConfig


def build(cfg):
    training = cfg["training"]
    return SFTConfig(
        output_dir=cfg["output_dir"],
        learning_rate=training["learning_rate"],
        max_length=training["max_length"],
        packing=False,
    )
"""
SFT_YAML = "# SFT defaults\nlearning_rate: 2.0e-4  # peak\nmax_length: 1024\npacking: false\n"
# Has packing but not the keys the SFTConfig call reads: another config, left alone.
OTHER_YAML = "beta: 0.1\nmax_length: 1024\npacking: false\n"

PARSER_SCRIPT = """\
from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser


def main():
    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    return parser.parse_args_and_config()
"""
RECIPE = (
    "model_name_or_path: Qwen/Qwen2.5-0.5B\nlearning_rate: 2.0e-5\nmax_length: 2048\npacking: false  # off\n"
)


def make_repo(root: Path, files: dict[str, str]) -> Path:
    git_repos.make_repo(root, files, branch=None)
    return root


def test_config_driven_packing_switches_on_the_yaml_the_call_reads(tmp_path):
    root = make_repo(
        tmp_path, {"train.py": TRAINER, "configs/sft.yaml": SFT_YAML, "configs/other.yaml": OTHER_YAML}
    )
    change = Packing().apply(root)
    assert change is not None
    assert sorted(change.files) == ["configs/sft.yaml", "train.py"]
    assert (root / "configs/sft.yaml").read_text() == SFT_YAML.replace("packing: false", "packing: true")
    assert (root / "configs/other.yaml").read_text() == OTHER_YAML
    assert 'packing=training.get("packing", False),' in (root / "train.py").read_text()
    assert [(s.path, s.line) for s in change.applied] == [("train.py", 6), ("configs/sft.yaml", 4)]
    assert Packing().apply(root) is None


def test_a_yaml_file_that_is_not_utf8_is_skipped_not_a_crash(tmp_path):
    root = make_repo(tmp_path, {"train.py": TRAINER, "configs/sft.yaml": SFT_YAML})
    (root / "configs" / "notes.yaml").write_bytes("packing: false  # caf\xe9\n".encode("latin-1"))
    git_repos.commit_all(git.Repo(root), "Latin-1 notes")
    change = Packing().apply(root)
    assert change is not None and sorted(change.files) == ["configs/sft.yaml", "train.py"]


def test_a_plan_focus_on_the_python_file_still_reaches_its_yaml(tmp_path):
    root = make_repo(tmp_path, {"src/train.py": TRAINER, "configs/sft.yaml": SFT_YAML})
    change = Packing().apply(root, focus=("train.py",))
    assert change is not None and "configs/sft.yaml" in change.files


def test_parser_recipes_are_switched_on_and_a_wrapped_strategy_is_left_to_a_human(tmp_path):
    wrapped = RECIPE + "packing_strategy: wrapped\n"
    root = make_repo(
        tmp_path, {"sft.py": PARSER_SCRIPT, "recipes/qwen.yaml": RECIPE, "recipes/wrapped.yaml": wrapped}
    )
    change = Packing().apply(root)
    assert change is not None and sorted(change.files) == ["recipes/qwen.yaml"]
    assert (root / "recipes/qwen.yaml").read_text() == RECIPE.replace("packing: false", "packing: true")
    assert (root / "sft.py").read_text() == PARSER_SCRIPT
    assert [s.path for s in change.applied] == ["recipes/qwen.yaml"]
    assert [(s.path, "packing_strategy" in s.reason) for s in change.refused] == [
        ("recipes/wrapped.yaml", True)
    ]
    # Once a recipe packs, the parser is not reported as needing a human: that recipe is already done.
    assert [(s.path, s.already, s.refused) for s in Packing().find(root)] == [
        ("recipes/qwen.yaml", True, False),
        ("recipes/wrapped.yaml", False, True),
    ]


def test_parser_without_any_recipe_needs_a_human(tmp_path):
    root = make_repo(tmp_path, {"sft.py": PARSER_SCRIPT, "configs/other.yaml": "beta: 0.1\npacking: false\n"})
    assert Packing().apply(root) is None
    (site,) = Packing().find(root)
    assert (site.path, site.applicable) == ("sft.py", False)
    assert "--packing true" in site.reason


def test_seed_plan_rows_that_name_packing_and_only_those():
    plan = parse_plan(SEED_PLAN.read_text(), registry().values())
    assert [i.key for i in plan.items if "packing" in i.optimizations] == ["B", "G"]
    assert [i.key for i in plan.items if "dpo_precompute" in i.optimizations] == ["E"]


def test_trl_bfd_packing_batches_are_padding_free_without_attention_mask():
    """What the transform relies on: TRL's bfd packing yields flat rows whose position_ids restart per example
    and no attention_mask (which would stop transformers from masking examples apart)."""
    torch = pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from word_tokenizer import word_tokenizer

    words = [f"w{i}" for i in range(60)]
    tokenizer = word_tokenizer(words)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    model = Qwen2ForCausalLM(config)
    lengths = [3, 7, 2, 5, 4, 6]
    dataset = Dataset.from_dict({"text": [" ".join(words[:n]) for n in lengths]})
    args = trl.SFTConfig(
        output_dir="unused",
        packing=True,
        packing_strategy="bfd",
        max_length=16,
        per_device_train_batch_size=2,
        report_to="none",
        use_cpu=True,
    )
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    batch = next(iter(trainer.get_train_dataloader()))
    assert "attention_mask" not in batch
    positions = batch["position_ids"][0].tolist()
    starts = [i for i, p in enumerate(positions) if p == 0]
    assert len(starts) > 2  # several examples share the row
    assert batch["input_ids"].shape[0] == 1
    # Each packed example sees only itself: its logits in the row equal those of the example run alone.
    model.eval()
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits[0]
        ends = [*starts[1:], len(positions)]
        for start, end in zip(starts, ends, strict=True):
            alone = model(input_ids=batch["input_ids"][:, start:end]).logits[0]
            torch.testing.assert_close(packed[start:end], alone, rtol=1e-4, atol=1e-5)


def test_attention_masked_by_the_packed_examples_lengths_is_packing_done(tmp_path):
    """mistral-finetune packs examples into seq_len rows and masks attention block-diagonally by their lengths."""
    model = """\
import torch
from xformers.ops.fmha.attn_bias import BlockDiagonalCausalMask


def forward(layers, x, seqlens):
    mask = BlockDiagonalCausalMask.from_seqlens(seqlens)
    for layer in layers:
        x = layer(x, mask)
    return x


def train(layers, batches, optimizer):
    for x, seqlens in batches:
        forward(layers, x, seqlens).sum().backward()
        optimizer.step()
"""
    (tmp_path / "train.py").write_text(model)
    sites = [(s.line, s.already) for s in registry()["packing"].find(tmp_path)]
    assert sites == [(6, True)]
