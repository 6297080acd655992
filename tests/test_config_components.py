"""YAML configs that build a program's parts by class name (torchtune's ``_component_``, Hydra's ``_target_``):
the optimizers they build given ``fused: True`` in place (``fused_adamw``) and their ``compile`` setting turned on
(``compile_model``), or reported as already done or refused."""

from __future__ import annotations

from pathlib import Path

import yaml

from optimizations.edits.component_configs import add_keyword
from optimizations.program.components import components
from optimizations.registry import get
from tests.git_repos import commit_all, make_repo

ADAMW = ("torch.optim.AdamW",)
RECIPE = """\
# LoRA recipe
model:
  _component_: torchtune.models.llama3_2.lora_llama3_2_1b
  lora_rank: 64
optimizer:
  _component_: torch.optim.AdamW  # the paper's optimizer
  weight_decay: 0.01
  lr: 3e-4
lr_scheduler:
  _component_: torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup
"""
TRAINER = """\
from torchtune import config


def setup(cfg, model):
    return config.instantiate(cfg.optimizer, model.parameters())
"""


def _dry_run(tmp_path: Path, optimization: str, recipe: str, configs: dict[str, str]):
    """``optimization``'s change on a new repository of ``recipe`` and ``configs``, and its sites by place:
    ``(path, line) -> (applicable, already, reason)``."""
    make_repo(tmp_path, {"recipe.py": recipe, **configs})
    change = get(optimization).dry_run(tmp_path)
    return change, {(s.path, s.line): (s.applicable, s.already, s.reason) for s in change.sites}


def test_components_finds_the_mapping_that_builds_the_class_with_its_keywords_and_lines():
    [found] = components("r.yaml", RECIPE, ADAMW)
    assert (found.line, found.cls, found.indent, found.flow) == (6, "torch.optim.AdamW", 2, False)
    assert found.keywords == {"weight_decay": 0.01, "lr": "3e-4"}
    assert found.lines == {"weight_decay": 7, "lr": 8}
    hydra = "optim:\n  _target_: torch.optim.AdamW\n  lr: 0.1\ntensor_parallel_dim: 2\n"
    [target] = components("h.yaml", hydra, ADAMW)
    assert target.cls == "torch.optim.AdamW" and target.settings["tensor_parallel_dim"] == 2
    assert components("r.yaml", RECIPE, ("torch.optim.SGD",)) == []
    assert components("r.yaml", "optimizer: {_component_: torch.optim.AdamW\n", ADAMW) == []  # not YAML


def test_add_keyword_puts_one_line_after_the_class_key_and_keeps_the_rest():
    [found] = components("r.yaml", RECIPE, ADAMW)
    edited = add_keyword(RECIPE, found, "fused", "True")
    assert edited == RECIPE.replace(
        "  _component_: torch.optim.AdamW  # the paper's optimizer\n",
        "  _component_: torch.optim.AdamW  # the paper's optimizer\n  fused: True\n",
    )
    assert yaml.safe_load(edited)["optimizer"]["fused"] is True
    last = "optimizer:\n  _component_: torch.optim.AdamW"  # no newline at the end of the file
    assert (
        add_keyword(last, components("r.yaml", last, ADAMW)[0], "fused", "True") == last + "\n  fused: True\n"
    )
    inline = "optimizer: {_component_: torch.optim.AdamW, lr: 0.1}\n"
    [flow] = components("r.yaml", inline, ADAMW)
    assert flow.flow and add_keyword(inline, flow, "fused", "True") is None


def test_fused_adamw_fuses_what_the_configs_build_and_reports_the_rest(tmp_path: Path):
    configs = {
        "configs/lora.yaml": RECIPE,
        "configs/fused.yaml": "optimizer:\n  _component_: torch.optim.AdamW\n  fused: True\n",
        "configs/off.yaml": "optimizer:\n  _component_: torch.optim.Adam\n  fused: false  # CPU offload\n",
        "configs/foreach.yaml": "optimizer:\n  _component_: torch.optim.AdamW\n  foreach: True\n",
        "configs/parallel.yaml": "tensor_parallel_dim: 2\noptimizer:\n  _component_: torch.optim.AdamW\n",
        "configs/inline.yaml": "optimizer: {_component_: torch.optim.AdamW, lr: 0.1}\n",
        "configs/paged.yaml": "optimizer:\n  _component_: bitsandbytes.optim.PagedAdamW8bit\n",
    }
    change, rows = _dry_run(tmp_path, "fused_adamw", TRAINER, configs)
    assert rows[("configs/lora.yaml", 7)] == (True, False, "")
    assert rows[("configs/fused.yaml", 3)] == (False, True, "")
    assert "fused is set to `False` at line 3" in rows[("configs/off.yaml", 2)][2]
    assert "`foreach` is set at line 3" in rows[("configs/foreach.yaml", 2)][2]
    assert "tensor_parallel_dim is 2" in rows[("configs/parallel.yaml", 3)][2]
    assert "inline" in rows[("configs/inline.yaml", 1)][2]
    assert len(rows) == 6  # nothing for the 8-bit optimizer of another package
    assert set(change.files) == {"configs/lora.yaml"}
    assert yaml.safe_load(change.files["configs/lora.yaml"])["optimizer"]["fused"] is True

    change.write(tmp_path)
    again = get("fused_adamw").dry_run(tmp_path)
    assert not again.files
    assert ("configs/lora.yaml", 7) in {(s.path, s.line) for s in again.sites if s.already}


def test_configs_no_python_file_instantiates_are_left_alone(tmp_path: Path):
    make_repo(tmp_path, {"train.py": "print('configs are only read')\n", "configs/lora.yaml": RECIPE})
    change = get("fused_adamw").dry_run(tmp_path)
    assert change.sites == [] and change.files == {}


def test_a_plan_naming_one_config_fuses_that_config_only(tmp_path: Path):
    other = "optimizer:\n  _component_: torch.optim.AdamW\n"
    make_repo(tmp_path, {"recipe.py": TRAINER, "configs/lora.yaml": RECIPE, "configs/other.yaml": other})
    change = get("fused_adamw").dry_run(tmp_path, focus=("configs/lora.yaml",))
    assert [(s.path, s.line, s.applicable) for s in change.sites] == [("configs/lora.yaml", 7, True)]
    assert set(change.files) == {"configs/lora.yaml"}


def test_a_config_that_is_not_utf8_is_skipped_not_a_crash(tmp_path: Path):
    repo = make_repo(tmp_path, {"recipe.py": TRAINER, "configs/lora.yaml": RECIPE})
    (tmp_path / "configs" / "notes.yaml").write_bytes(
        "name: caf\xe9\n_component_: torch.optim.AdamW\n".encode("latin-1")
    )
    commit_all(repo, "a Latin-1 config")
    change = get("fused_adamw").dry_run(tmp_path)
    assert [(s.path, s.applicable) for s in change.sites] == [("configs/lora.yaml", True)]


RECIPE_READING_COMPILE = """\
from torchtune import config


class Recipe:
    def setup(self, cfg):
        self._compile = cfg.get("compile", False)
        self._model = config.instantiate(cfg.model)
"""


def test_compile_model_turns_on_a_component_configs_compile_setting(tmp_path: Path):
    configs = {
        "configs/plain.yaml": "model:\n  _component_: m.build\ncompile: False\n",
        "configs/commented.yaml": "model:\n  _component_: m.build\ncompile: false  # breaks with our custom loss\n",
        # A comment that only recommends turning it on for speed invites the change: no reason to keep it off.
        "configs/invited.yaml": "model:\n  _component_: m.build\ncompile: false  # True increases speed\n",
        # The lines right above it explain the setting: commented too. A section title above it is not.
        "configs/explained.yaml": (
            "model:\n  _component_: m.build\n# Performance\n# compile True: torch.compile every component\n"
            "# (model, loss, optimizer step)\ncompile: False\n"
        ),
        "configs/titled.yaml": "model:\n  _component_: m.build\n# Memory management / performance\ncompile: False\n",
        "configs/on.yaml": "model:\n  _component_: m.build\ncompile: true\n",
        "configs/nested.yaml": "model:\n  _component_: m.build\n  compile: false\n",
        "configs/no_components.yaml": "compile: false\n",
    }
    change, rows = _dry_run(tmp_path, "compile_model", RECIPE_READING_COMPILE, configs)
    assert rows == {
        ("configs/plain.yaml", 3): (True, False, ""),
        ("configs/commented.yaml", 3): (
            False,
            False,
            "the config comments on compile: false: `# breaks with our custom loss`",
        ),
        ("configs/invited.yaml", 3): (True, False, ""),
        ("configs/explained.yaml", 6): (
            False,
            False,
            "the config comments on compile: False: `# compile True: torch.compile every component`",
        ),
        ("configs/titled.yaml", 4): (True, False, ""),
        ("configs/on.yaml", 3): (False, True, ""),
    }
    # A commented choice is the author's: kept, not flagged for a human.
    assert {s.path for s in change.kept} == {"configs/commented.yaml", "configs/explained.yaml"}
    assert not change.refused
    assert change.files == {
        "configs/plain.yaml": "model:\n  _component_: m.build\ncompile: True\n",
        "configs/invited.yaml": "model:\n  _component_: m.build\ncompile: true  # True increases speed\n",
        "configs/titled.yaml": "model:\n  _component_: m.build\n# Memory management / performance\ncompile: True\n",
    }


def test_compile_needs_a_program_that_reads_the_setting(tmp_path: Path):
    calls_only = RECIPE_READING_COMPILE.replace('cfg.get("compile", False)', "self._model.compile()")
    make_repo(
        tmp_path, {"recipe.py": calls_only, "configs/plain.yaml": "m:\n  _component_: b\ncompile: False\n"}
    )
    assert get("compile_model").dry_run(tmp_path).sites == []


def _torchtune_config(max_seq_len: str, packed: str) -> str:
    return (
        f"tokenizer:\n  _component_: torchtune.models.llama3.llama3_tokenizer\n  max_seq_len: {max_seq_len}\n"
        f"dataset:\n  - _component_: torchtune.datasets.alpaca_dataset\n    packed: {packed}\n"
        "  - _component_: torchtune.datasets.slimorca_dataset\n"
    )


def test_packing_turns_on_a_torchtune_dataset_where_the_tokenizer_sets_the_row_length(tmp_path: Path):
    configs = {
        "configs/set.yaml": _torchtune_config("2048", "False"),
        "configs/unset.yaml": _torchtune_config("null", "False"),
        "configs/commented.yaml": _torchtune_config("2048", "False  # the collator does not support it"),
        "configs/invited.yaml": _torchtune_config("2048", "False  # True increases speed"),
        "configs/on.yaml": _torchtune_config("2048", "True"),
        "configs/model_length.yaml": _torchtune_config("null", "False")
        + "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\n  max_seq_len: 4096\n",
    }
    change, rows = _dry_run(tmp_path, "packing", RECIPE_READING_COMPILE, configs)
    assert rows[("configs/set.yaml", 6)] == (True, False, "")
    assert rows[("configs/on.yaml", 6)] == (False, True, "")
    assert "does not set" in rows[("configs/unset.yaml", 6)][2]
    assert "does not set" in rows[("configs/model_length.yaml", 6)][2]  # the model's length is not the rows'
    assert "comments on packed" in rows[("configs/commented.yaml", 6)][2]
    assert rows[("configs/invited.yaml", 6)] == (True, False, "")
    assert change.files == {
        "configs/set.yaml": _torchtune_config("2048", "True"),
        "configs/invited.yaml": _torchtune_config("2048", "True  # True increases speed"),
    }


def test_packing_leaves_a_multimodal_torchtune_dataset_alone(tmp_path: Path):
    config = _torchtune_config("2048", "False").replace("datasets.alpaca", "datasets.multimodal.the_cauldron")
    make_repo(tmp_path, {"recipe.py": RECIPE_READING_COMPILE, "configs/vision.yaml": config})
    [site] = get("packing").dry_run(tmp_path).sites
    assert site.refused and site.reason == "torchtune does not pack multimodal datasets"


LOOP_RECIPE = """\
import torch
from torchtune import config, training


def train(cfg, loader):
    dtype = training.get_dtype(cfg.dtype)
    model = config.instantiate(cfg.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
"""


def test_bf16_autocast_reads_a_program_built_in_bf16_by_its_configs(tmp_path: Path):
    model = "model:\n  _component_: m.build\n"
    nested = "checkpointer:\n  _component_: c.save\n  dtype: fp32\n"  # a part's own setting, not the run's
    configs = {
        "configs/a.yaml": f"{model}dtype: bf16\n{nested}",
        "configs/b.yaml": f"{model}dtype: bf16  # A100\n",
    }
    change, rows = _dry_run(tmp_path / "bf16", "bf16_autocast", LOOP_RECIPE, configs)
    assert rows == {("configs/a.yaml", 3): (False, True, ""), ("configs/b.yaml", 3): (False, True, "")}
    assert change.files == {}

    configs["configs/c.yaml"] = f"{model}dtype: fp32\n"  # one config trains in float32: the loop is judged
    change, rows = _dry_run(tmp_path / "mixed", "bf16_autocast", LOOP_RECIPE, configs)
    assert list(rows) == [("recipe.py", 10)] and rows[("recipe.py", 10)][0]
    assert "torch.autocast" in change.files["recipe.py"]
