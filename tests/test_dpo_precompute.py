"""DPO precompute: the reference batch size it picks, and the sites it refuses beyond its examples."""

from __future__ import annotations

import libcst as cst
import pytest

from optimizations.dpo_precompute.edit import reference_batch_size
from optimizations.dpo_precompute.rule import DpoPrecompute
from optimizations.program.repository import RepoContext
from optimizations.program.syntax import code_of


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('output_dir="o"', "16"),
        ("per_device_train_batch_size=3", "6"),
        ('per_device_train_batch_size=cfg["bs"]', '2 * cfg["bs"]'),
        ("per_device_train_batch_size=args.bs", "2 * args.bs"),
        ("per_device_train_batch_size=bs // 2", "2 * (bs // 2)"),
    ],
)
def test_reference_batch_is_twice_the_training_batch(arguments, expected):
    call = cst.parse_expression(f"DPOConfig({arguments})")
    assert code_of(reference_batch_size(call)) == expected


def _sites(source, tmp_path):
    return DpoPrecompute().transform_source(source, "train.py", RepoContext(tmp_path))


@pytest.mark.parametrize(
    ("setup", "fragment"),
    [
        ("dataset = IterableDataset.from_generator(rows)", "IterableDataset.from_generator(...)"),
        ("dataset = Dataset.from_dict(rows).to_iterable_dataset()", "to_iterable_dataset()"),
        ("model = AutoModelForVision2Seq.from_pretrained('m')", "vision-language"),
    ],
)
def test_refuses_iterable_datasets_and_vision_models_anywhere_in_the_module(setup, fragment, tmp_path):
    source = f"""\
from datasets import Dataset, IterableDataset
from transformers import AutoModelForVision2Seq
from trl import DPOConfig


def build(rows):
    args = DPOConfig(output_dir="out")
    {setup}
    return args
"""
    result = _sites(source, tmp_path)
    assert result.source == source
    (site,) = result.sites
    assert not site.applicable and fragment in site.reason


def test_refuses_a_torch_iterable_dataset_class(tmp_path):
    source = """\
import torch
from trl import DPOConfig


class Pairs(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield {}


def build():
    return DPOConfig(output_dir="out")
"""
    (site,) = _sites(source, tmp_path).sites
    assert not site.applicable and "class Pairs" in site.reason


@pytest.mark.parametrize(
    ("setting", "fragment"),
    [
        ("sync_ref_model=cfg.sync", "sync_ref_model=cfg.sync"),
        ("use_liger_loss=True", "Liger DPO loss"),
        ("use_liger_kernel=LIGER", "use_liger_kernel=LIGER"),
    ],
)
def test_refuses_settings_that_move_or_replace_the_reference(setting, fragment, tmp_path):
    source = (
        f'from trl import DPOConfig\n\n\ndef build(cfg):\n    return DPOConfig(output_dir="o", {setting})\n'
    )
    result = _sites(source, tmp_path)
    assert result.source == source
    assert fragment in result.sites[0].reason


def test_liger_switched_off_does_not_block(tmp_path):
    source = 'from trl import DPOConfig\n\n\ndef build():\n    return DPOConfig(output_dir="o", use_liger_kernel=False)\n'
    result = _sites(source, tmp_path)
    assert "precompute_ref_log_probs=True, precompute_ref_batch_size=16" in result.source


def test_parser_recipes_switch_on_except_where_the_reference_moves(tmp_path):
    script = """\
from trl import DPOConfig, ModelConfig, ScriptArguments, TrlParser


def main():
    return TrlParser((ScriptArguments, DPOConfig, ModelConfig)).parse_args_and_config()
"""
    recipe = "learning_rate: 5.0e-7\nbeta: 0.1\nprecompute_ref_log_probs: false  # slow\n"
    synced = recipe + "sync_ref_model: true\n"
    for name, text in {"dpo.py": script, "recipes/dpo.yaml": recipe, "recipes/tr_dpo.yaml": synced}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    root = tmp_path  # not a git checkout: every file present is in scope
    change = DpoPrecompute().apply(root)
    assert change is not None and sorted(change.files) == ["recipes/dpo.yaml"]
    assert (root / "recipes/dpo.yaml").read_text() == recipe.replace("false", "true")
    assert [(s.path, "sync_ref_model" in s.reason) for s in change.refused] == [("recipes/tr_dpo.yaml", True)]


def test_the_programs_own_cache_switch_is_refused_where_its_recipe_sets_it(tmp_path):
    """ContextualAI/HALOs: trainers read `self.config.cache_reference_logprobs`, which the Hydra config sets to
    false: the switch is the run's to turn on, said at the config line too."""
    from optimizations.dpo_precompute.examples import EXAMPLES
    from optimizations.registry import registry

    (example,) = [e for e in EXAMPLES if e.name == "refuses_a_reference_the_program_caches_behind_a_switch"]
    script = "import hydra\n" + example.before.replace(
        "def train(policy, reference_model, loader, optimizer, config):",
        "@hydra.main(config_path='config', config_name='config')\ndef train(config):",
    )
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text("lr: 1e-6\ncache_reference_logprobs: false\n")
    (tmp_path / "train.py").write_text(script)
    sites = {(s.path, s.line): s for s in registry()["dpo_precompute"].find(tmp_path)}
    site = sites[("config/config.yaml", 2)]
    assert not site.applicable and "read at train.py:" in site.reason
