"""The effective run configuration (``bot scan --explain``) on a fixture of each kind of launch: every value
with the file and line it comes from, launches that disagree kept apart, and the plan's tiers judged by it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from git_repos import make_repo

from optimizations.program.repository import RepoContext
from optimizations.program.runs.resolve import NOTHING, EntryRuns, effective_runs
from optimizations.registry import registry

HF_SCRIPT = """\
from dataclasses import dataclass, field

import transformers
from transformers import Trainer


@dataclass
class TrainingArguments(transformers.TrainingArguments):
    optim: str = field(default="adamw_torch")
    model_max_length: int = 512


def train():
    parser = transformers.HfArgumentParser((TrainingArguments,))
    (args,) = parser.parse_args_into_dataclasses()
    model = transformers.AutoModelForCausalLM.from_pretrained("m")
    Trainer(model=model, args=args).train()


if __name__ == "__main__":
    train()
"""

ACCELERATE_LOOP = """\
import torch
from accelerate import Accelerator


def main():
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    for step in range(10):
        loss = model(torch.ones(2, 4)).sum()
        accelerator.backward(loss)
        optimizer.step()


if __name__ == "__main__":
    main()
"""

TRL_SCRIPT = """\
from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser


def main():
    script_args, training_args, model_args = TrlParser((ScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config()
    SFTTrainer(model=model_args.model_name_or_path, args=training_args).train()


if __name__ == "__main__":
    main()
"""

PLAIN_LOOP = """\
import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(10):
    loss = model(torch.ones(2, 4)).sum()
    loss.backward()
    optimizer.step()
"""


def runs_of(tmp_path: Path, files: dict[str, str]) -> list[EntryRuns]:
    make_repo(tmp_path, files)
    return effective_runs(RepoContext(tmp_path))


def values(entry: EntryRuns, run: int = 0) -> dict[str, tuple[str, str]]:
    return {name: (s.value, s.source) for name, s in entry.runs[run].settings.items()}


def test_readme_torchrun_flags_and_a_deepspeed_config_that_chooses_the_optimizer(tmp_path: Path) -> None:
    deepspeed = {
        "bf16": {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
    }
    readme = (
        "# Train\n\n```bash\ntorchrun --nproc_per_node=4 train.py \\\n    --bf16 True --tf32 True \\\n"
        "    --deepspeed configs/ds_z3.json --dataloader_num_workers 4\n```\n"
    )
    (entry,) = runs_of(
        tmp_path,
        {"train.py": HF_SCRIPT, "README.md": readme, "configs/ds_z3.json": json.dumps(deepspeed, indent=2)},
    )
    got = values(entry)
    assert got["mixed_precision"] == ("bf16", "README.md:4")  # the config's "auto" follows the flag
    assert got["tf32"] == ("on", "README.md:4")
    assert got["loader_workers"] == ("4", "README.md:4")
    assert got["distribution"] == ("DeepSpeed ZeRO-3", "configs/ds_z3.json:12")
    # ZeRO offload wins over the config's optimizer block, which wins over the dataclass default
    assert got["optimizer"][0] == "DeepSpeedCPUAdam (ZeRO offload)"
    assert entry.every_run_in("bf16")


def test_dataclass_default_is_the_optimizer_when_no_launch_sets_it(tmp_path: Path) -> None:
    (entry,) = runs_of(tmp_path, {"train.py": HF_SCRIPT})
    got = values(entry)
    assert got["optimizer"] == ("adamw_torch", "train.py:9")
    assert got["mixed_precision"][0] == "fp32"
    assert entry.runs[0].launch is None
    assert not entry.every_run_in("bf16")


def test_a_compiled_helper_function_is_no_compiled_model(tmp_path: Path) -> None:
    """open-instruct's `@torch.compile(dynamic=True)` on its log-softmax helper compiles a function, not the
    model: the run's compile stays off; a `torch.compile(model)` statement turns it on."""
    helper = "import torch\n\n\n@torch.compile(dynamic=True)\ndef gather(logits):\n    return logits.log_softmax(-1)\n"
    (entry,) = runs_of(tmp_path, {"train.py": HF_SCRIPT + "\n" + helper})
    assert values(entry)["compile"][0] == "off"
    (tmp_path / "train.py").write_text(
        HF_SCRIPT.replace("Trainer(model=model", "model = torch.compile(model)\n    Trainer(model=model")
    )
    (entry,) = effective_runs(RepoContext(tmp_path))
    assert values(entry)["compile"] == ("on", "train.py:17")


def test_a_trainer_the_script_sets_to_fp16_is_refused_bf16_there(tmp_path: Path) -> None:
    """alpaca-lora's shape: `TrainingArguments(fp16=True)` written in the script is the run's precision, chosen on
    purpose; bf16 is refused at that line, which no codemod of bf16_autocast judges."""
    script = HF_SCRIPT.replace(
        "Trainer(model=model, args=args)",
        "Trainer(model=model, args=transformers.TrainingArguments(output_dir='o', fp16=True))",
    )
    make_repo(tmp_path, {"train.py": script})
    sites = registry()["bf16_autocast"].dry_run(tmp_path).sites
    [site] = [s for s in sites if s.path == "train.py"]
    assert not site.applicable and site.line == 17
    assert "this run trains in fp16 on purpose" in site.reason and "`fp16=True` at train.py:17" in site.reason


def test_a_deepspeed_config_of_any_name_and_a_vaguer_initialize_in_the_code(tmp_path: Path) -> None:
    """open-instruct's shape: `--deepspeed_config_file x.conf` (JSON by another name) says ZeRO-3, which a
    `deepspeed.initialize(...)` elsewhere in the code (for a reference model) does not make vaguer; `--use_qlora`
    loads the model in 4 bits."""
    conf = json.dumps({"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3}}, indent=4)
    loop = (
        ACCELERATE_LOOP
        + "\n\ndef reference(model):\n    import deepspeed\n\n    return deepspeed.initialize(model=model)\n"
    )
    launch = "accelerate launch --use_deepspeed --deepspeed_config_file configs/ds.conf train.py {flag}\n"
    files = {
        "train.py": loop,
        "configs/ds.conf": conf,
        "run.sh": launch.format(flag=""),
        "qlora.sh": launch.format(flag="--use_qlora"),
    }
    (entry,) = runs_of(tmp_path, files)
    by_launch = {run.launch.path: run.settings for run in entry.runs if run.launch is not None}
    assert (by_launch["run.sh"]["distribution"].value, by_launch["run.sh"]["distribution"].source) == (
        "DeepSpeed ZeRO-3",
        "configs/ds.conf:6",
    )
    assert by_launch["run.sh"]["quantization"].value == "off"
    assert by_launch["qlora.sh"]["quantization"].value == "4-bit"


def test_an_unfused_optim_in_the_code_stands_beside_a_fused_default(tmp_path: Path) -> None:
    """alpaca-lora's `TrainingArguments(optim="adamw_torch")`: the code's unfused choice is the run's, not a vaguer
    spelling of the Trainer's fused default."""
    script = HF_SCRIPT.replace(
        "Trainer(model=model, args=args)",
        "Trainer(model=model, args=transformers.TrainingArguments(output_dir='o', optim='adamw_torch'))",
    )
    (entry,) = runs_of(tmp_path, {"train.py": script})
    assert values(entry)["optimizer"] == ("adamw_torch", "train.py:17")


def test_a_launch_whose_recipe_is_a_shell_parameter_does_not_decide_the_compile_refusal(
    tmp_path: Path,
) -> None:
    """open-instruct's `finetune_with_accelerate_config.sh`: `finetune.py "$2"` reads a recipe no one can read
    here; the ZeRO-3 launches beside it decide, and compiling stays refused."""
    conf = json.dumps({"zero_optimization": {"stage": 3}}, indent=4)
    zero3 = "accelerate launch --use_deepspeed --deepspeed_config_file ds.json train.py --bf16 True\n"
    files = {
        "train.py": HF_SCRIPT,
        "ds.json": conf,
        "zero3.sh": zero3,
        "any.sh": 'accelerate launch train.py "$2"\n',
    }
    make_repo(tmp_path, files)
    [site] = registry()["regional_compile"].dry_run(tmp_path).sites
    assert not site.applicable and "DeepSpeed ZeRO-3 at ds.json:3" in site.reason


def test_accelerate_launch_with_a_config_file(tmp_path: Path) -> None:
    config = "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\nmixed_precision: bf16\nnum_processes: 8\n"
    launch = "#!/bin/bash\naccelerate launch --config_file configs/zero3.yaml \\\n  train.py --lr 1e-4\n"
    (entry,) = runs_of(
        tmp_path, {"train.py": ACCELERATE_LOOP, "configs/zero3.yaml": config, "scripts/run.sh": launch}
    )
    got = values(entry)
    assert got["mixed_precision"] == ("bf16", "configs/zero3.yaml:5")
    assert got["distribution"] == ("DeepSpeed ZeRO-3", "configs/zero3.yaml:2")
    assert entry.runs[0].launch is not None and entry.runs[0].launch.where == "scripts/run.sh:2"


def test_recipe_yaml_and_a_flag_that_overrides_it(tmp_path: Path) -> None:
    recipe = (
        "model_name_or_path: m\nbf16: true\noptim: adamw_torch\npacking: true\ngradient_checkpointing: true\n"
    )
    launch = "accelerate launch --mixed_precision bf16 sft.py --config recipes/sft.yaml --packing false\n"
    (entry,) = runs_of(tmp_path, {"sft.py": TRL_SCRIPT, "recipes/sft.yaml": recipe, "run.sh": launch})
    got = values(entry)
    assert got["optimizer"] == ("adamw_torch", "recipes/sft.yaml:3")
    assert got["gradient_checkpointing"] == ("on", "recipes/sft.yaml:5")
    assert got["packing"] == ("off", "run.sh:1")  # the flag wins over the recipe
    assert got["mixed_precision"] == ("bf16", "run.sh:1")


def test_launches_that_disagree_are_runs_of_their_own(tmp_path: Path) -> None:
    (entry,) = runs_of(
        tmp_path,
        {
            "train.py": HF_SCRIPT,
            "run_bf16.sh": "python train.py --bf16 True\n",
            "run_fp32.sh": "python train.py --output_dir out\n",
        },
    )
    assert len(entry.runs) == 2
    assert sorted(run.name for run in entry.runs) == ["run_bf16.sh:1", "run_fp32.sh:1"]
    assert list(entry.disagreements()) == ["mixed_precision"]
    assert not entry.every_run_in("bf16")


def test_deepspeed_config_written_in_code(tmp_path: Path) -> None:
    script = PLAIN_LOOP.replace(
        "model = torch.nn.Linear(4, 4)\n",
        'import deepspeed\n\nmodel = torch.nn.Linear(4, 4)\nds_config = {\n    "train_batch_size": 8,\n'
        '    "bf16": {"enabled": True},\n    "zero_optimization": {"stage": 2},\n}\n'
        "engine, *_ = deepspeed.initialize(model=model, config=ds_config)\n",
    )
    (entry,) = runs_of(tmp_path, {"train.py": script, "run.sh": "deepspeed --num_gpus 8 train.py\n"})
    got = values(entry)
    assert got["mixed_precision"] == ("bf16 (bf16 weights)", "train.py:8")
    assert got["distribution"][0] == "DeepSpeed ZeRO-2"


def test_module_launch_makefile_and_slurm(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/train.py": PLAIN_LOOP.replace(
            "import torch\n", "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
        ),
        "Makefile": "train:\n\tpython -m pkg.train --steps 10\n",
        "job.slurm": "#!/bin/bash\n#SBATCH --gpus=8\nsrun torchrun --nproc_per_node 8 -m pkg.train\n",
    }
    (entry,) = runs_of(tmp_path, files)
    assert entry.entry == "pkg/train.py"
    assert sorted(run.name for run in entry.runs) == ["Makefile:2", "job.slurm:3"]
    by_name = {run.name: run for run in entry.runs}
    assert by_name["job.slurm:3"].settings["distribution"].value == "DDP x8"
    assert by_name["Makefile:2"].settings["distribution"].value == "one process"
    assert by_name["Makefile:2"].settings["tf32"].source == "pkg/train.py:2"
    assert all(run.launch is not None and run.launch.as_module for run in entry.runs)


def test_explain_prints_each_value_with_its_source_and_json_carries_it(tmp_path: Path) -> None:
    make_repo(
        tmp_path, {"train.py": HF_SCRIPT, "run.sh": "torchrun --nproc_per_node 2 train.py --bf16 True\n"}
    )
    command = [sys.executable, "-m", "bot.cli", "scan", "--explain", str(tmp_path)]
    text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "train.py: 1 run(s)" in text
    assert "run: run.sh:1" in text
    line = next(line for line in text.splitlines() if line.strip().startswith("mixed_precision"))
    assert "bf16" in line and "run.sh:1" in line and "--bf16 True" in line
    data = json.loads(subprocess.run([*command, "--json"], capture_output=True, text=True, check=True).stdout)
    (entry,) = data
    settings = entry["runs"][0]["settings"]
    assert settings["optimizer"] == {
        "value": "adamw_torch",
        "source": "train.py:9",
        "written": "optim = 'adamw_torch'  (default of TrainingArguments)",
    }
    assert settings["distribution"]["value"] == "DDP x2"


def test_a_bf16_trainer_run_puts_rounding_level_changes_in_the_speedup_tiers(tmp_path: Path) -> None:
    """A LoRA Trainer script whose every launch passes ``--bf16 True``: attention, regional compile and bf16
    adapters round no coarser than the run does, so the plan offers them as speedups, not as opt-in changes."""
    script = HF_SCRIPT.replace(
        'from_pretrained("m")',
        'from_pretrained("m", attn_implementation="eager")\n    from peft import LoraConfig, get_peft_model\n'
        "    model = get_peft_model(model, LoraConfig(r=8))",
    )
    make_repo(tmp_path, {"train.py": script, "run.sh": "python train.py --bf16 True\n"})
    plan = subprocess.run(
        [sys.executable, "-m", "bot.cli", "scan", "--plan", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    speedups, _, opt_in = plan.partition("change what training computes")
    assert "(opt:regional_compile)" in speedups
    assert "(opt:regional_compile)" not in opt_in


def test_compiling_is_refused_where_every_run_shards_the_model(tmp_path: Path) -> None:
    """stanford_alpaca's shape: every documented launch runs the Trainer under FSDP or ZeRO-3, so compiling its
    decoder layers is refused, naming the launch lines; one unsharded launch lets the edit through."""
    launch = 'torchrun --nproc_per_node=4 train.py --bf16 True --fsdp "full_shard auto_wrap"\n'
    make_repo(tmp_path, {"train.py": HF_SCRIPT, "run.sh": launch})
    compile_layers = registry()["regional_compile"]
    sites = compile_layers.dry_run(tmp_path).sites
    assert sites and all(not s.applicable for s in sites)
    assert "every run shards the model or loads it quantized (FSDP (full_shard auto_wrap) at run.sh:1)" in (
        sites[0].reason
    )
    (tmp_path / "single.sh").write_text("python train.py --bf16 True\n")
    assert any(s.applicable for s in compile_layers.dry_run(tmp_path).sites)


QUANTIZED_SCRIPT = HF_SCRIPT.replace(
    "    optim: str",
    "    bits: int = field(default=16)\n    q_lora: bool = False\n    optim: str",
).replace(
    'from_pretrained("m")',
    'from_pretrained(\n        "m", quantization_config=BitsAndBytesConfig(load_in_4bit=True) if args.q_lora else None\n    )',
)


@pytest.mark.parametrize(
    ("launch", "refused"),
    [
        ("python train.py --bits 4\n", "4-bit at run.sh:1"),
        ("python train.py --bits 16\n", ""),
        # The literal load_in_4bit=True is built only under --q_lora: no launch passes it.
        ("python train.py\n", ""),
    ],
    ids=["4-bit-flag", "16-bit-flag", "conditional-literal"],
)
def test_compiling_is_refused_where_every_run_loads_the_model_quantized(
    tmp_path: Path, launch: str, refused: str
) -> None:
    """qlora's shape: `--bits 4` in every launch loads 4-bit layers, which the compile helper leaves as they are;
    a `load_in_4bit=True` built only behind a flag is no setting of the run."""
    make_repo(
        tmp_path,
        {"train.py": "from transformers import BitsAndBytesConfig\n" + QUANTIZED_SCRIPT, "run.sh": launch},
    )
    [site] = registry()["regional_compile"].dry_run(tmp_path).sites
    assert site.applicable is not bool(refused), site.reason
    if refused:
        assert f"every run shards the model or loads it quantized ({refused})" in site.reason


FRAMEWORK = {
    "pyproject.toml": '[project]\nname = "fw"\nversion = "0.1"\n\n[project.scripts]\nfw = "fw.cli:main"\n',
    "fw/__init__.py": "",
    "fw/cli.py": "import sys\n\nfrom fw.train import train\n\n\ndef main():\n    train(sys.argv[2])\n",
    "fw/train.py": (
        "import transformers\n\n\ndef train(recipe):\n"
        '    model = transformers.AutoModelForCausalLM.from_pretrained("m")\n'
        '    transformers.Trainer(model=model, args=transformers.TrainingArguments("out")).train()\n'
    ),
    "examples/lora.yaml": (
        "base_model: m\nlearning_rate: 2.0e-4\nbf16: true\ndataloader_num_workers: 4\nflash_attention: true\n"
    ),
    "examples/chat.yaml": "base_model: m\ntemperature: 0.7\n",
    "README.md": "# fw\n\n```bash\nfw train examples/lora.yaml\nfw chat examples/chat.yaml\n```\n",
}


def test_a_framework_driven_by_its_console_script_and_recipes(tmp_path: Path) -> None:
    """axolotl's and LLaMA-Factory's shape: `fw train recipe.yaml` is a run of the console script's file, its
    settings come from the recipe (a `chat` recipe trains nothing), the recipe lines are "already done" sites,
    and the framework's own library is no place for an edit."""
    (entry,) = runs_of(tmp_path, FRAMEWORK)
    assert entry.entry == "fw/cli.py"
    assert [run.name for run in entry.runs] == ["README.md:4"]
    got = values(entry)
    assert got["mixed_precision"] == ("bf16", "examples/lora.yaml:3")
    assert got["loader_workers"] == ("4", "examples/lora.yaml:4")
    assert got["attention"] == ("flash_attention_2", "examples/lora.yaml:5")
    done = {
        opt: [(s.path, s.line) for s in registry()[opt].find(tmp_path) if s.already]
        for opt in ("bf16_autocast", "dataloader_workers", "fa2")
    }
    assert done == {
        "bf16_autocast": [("examples/lora.yaml", 3)],
        # the library's Trainer and model loading run with the recipe's workers and FlashAttention in every
        # run: done there too
        "dataloader_workers": [("fw/train.py", 6), ("examples/lora.yaml", 4)],
        "fa2": [("fw/train.py", 5), ("examples/lora.yaml", 5)],
    }
    refused = [s for s in registry()["regional_compile"].find(tmp_path) if s.path == "fw/train.py"]
    assert refused and not refused[0].applicable
    assert "library of a framework its commands drive by recipe (`fw` at README.md:4)" in refused[0].reason


def test_argparse_defaults_and_the_flags_a_launch_passes(tmp_path: Path) -> None:
    script = (
        "import argparse\n\nparser = argparse.ArgumentParser()\n"
        'parser.add_argument("--num_workers", type=int, default=0)\n'
        'parser.add_argument("--bf16", action="store_true")\n'
        "args = parser.parse_args()\n" + PLAIN_LOOP
    )
    files = {
        "train.py": script,
        "run.sh": "python train.py --bf16 --num_workers 4\n",
        "dev.sh": "python train.py\n",
    }
    (entry,) = runs_of(tmp_path, files)
    by_name = {run.name: run.settings for run in entry.runs}
    assert by_name["dev.sh:1"]["loader_workers"].source == "train.py:4"
    assert (by_name["dev.sh:1"]["loader_workers"].value, by_name["dev.sh:1"]["mixed_precision"].value) == (
        "0",
        "fp32",
    )
    assert by_name["run.sh:1"]["loader_workers"].value == "4"
    assert by_name["run.sh:1"]["mixed_precision"].value == "bf16"
    assert sorted(entry.disagreements()) == ["loader_workers", "mixed_precision"]


def test_a_change_every_run_already_has_is_reported_done_where_the_run_sets_it(tmp_path: Path) -> None:
    """karpathy/nanochat's shape: TF32 is turned on in a common module the training script imports, so the
    script's own start-up needs no TF32 switch: the site says where every run already sets it."""
    files = {
        "common.py": 'import torch\n\n\ndef setup():\n    torch.set_float32_matmul_precision("high")\n',
        "train.py": "import common\n" + PLAIN_LOOP,
    }
    make_repo(tmp_path, files)
    sites = [s for s in registry()["tf32"].find(tmp_path) if s.path == "train.py"]
    assert sites and all(s.already for s in sites)
    assert 'tf32 on in every run that loads this file (common.py:5 `"high"`)' in sites[0].message


def test_a_trl_config_trains_in_bf16_with_checkpointing_unless_an_old_trl_is_pinned(tmp_path: Path) -> None:
    (entry,) = runs_of(tmp_path / "new", {"sft.py": TRL_SCRIPT})
    got = values(entry)
    assert got["mixed_precision"] == ("bf16", "default of TRL's trainer configs (trl >= 0.19)")
    assert got["gradient_checkpointing"][0] == "on"
    assert entry.every_run_in("bf16")

    (pinned,) = runs_of(tmp_path / "old", {"sft.py": TRL_SCRIPT, "requirements.txt": "trl==0.18.2\n"})
    assert values(pinned)["mixed_precision"][0] == "fp32"  # TrainingArguments' default, before TRL's own
    assert values(pinned)["gradient_checkpointing"][0] == "off"

    (flagged,) = runs_of(tmp_path / "fp16", {"sft.py": TRL_SCRIPT, "run.sh": "python sft.py --fp16 True\n"})
    assert values(flagged)["mixed_precision"] == ("fp16", "run.sh:1")
    (off,) = runs_of(tmp_path / "off", {"sft.py": TRL_SCRIPT, "run.sh": "python sft.py --bf16 False\n"})
    assert values(off)["mixed_precision"] == ("fp32", "run.sh:1")
    both = TRL_SCRIPT.replace("SFTTrainer(model", "SFTConfig(fp16=True, bf16=False)\n    SFTTrainer(model")
    (half,) = runs_of(tmp_path / "half", {"sft.py": both})
    assert values(half)["mixed_precision"][0] == "fp16"


HYDRA_LOOP = """\
import hydra
import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM


@hydra.main(config_path="config", config_name="config")
def main(config):
    kwargs = {{"torch_dtype": getattr(torch, config.model.{policy}), "device_map": None}}
    policy = AutoModelForCausalLM.from_pretrained(config.model.name_or_path, **kwargs)
    reference = AutoModelForCausalLM.from_pretrained(
        config.model.name_or_path, torch_dtype=getattr(torch, config.model.reference_dtype)
    )
    accelerator = Accelerator()
    optimizer = torch.optim.AdamW(policy.parameters())
    for batch in range(10):
        accelerator.backward(policy(batch).loss - reference(batch).loss.detach())
        optimizer.step()


if __name__ == "__main__":
    main()
"""
HYDRA_CONFIGS = {
    "config/config.yaml": "defaults:\n  - model: llama\n\nlr: 1e-5\n",
    "config/model/base_model.yaml": "name_or_path: null\npolicy_dtype: bfloat16\nreference_dtype: float32\n",
    "config/model/llama.yaml": "defaults:\n  - base_model\n\nname_or_path: meta-llama/Llama-3-8B\n",
    "run.sh": "accelerate launch launch.py model=llama\n",
}


def test_a_dtype_the_code_reads_from_a_hydra_key_of_a_group_base_config(tmp_path: Path) -> None:
    (entry,) = runs_of(tmp_path, {"launch.py": HYDRA_LOOP.format(policy="policy_dtype"), **HYDRA_CONFIGS})
    # the trained model's key, from the base config llama.yaml lists first; the reference model's is not the run's
    assert values(entry)["weights_dtype"] == ("bf16", "config/model/base_model.yaml:2")
    (site,) = [s for s in registry()["bf16_autocast"].dry_run(tmp_path).sites if s.path == "launch.py"]
    assert site.already and not site.applicable


def test_a_launch_override_of_the_key_wins_over_the_recipe(tmp_path: Path) -> None:
    files = {
        **HYDRA_CONFIGS,
        "run.sh": "accelerate launch launch.py model=llama model.policy_dtype=float32\n",
    }
    (entry,) = runs_of(tmp_path, {"launch.py": HYDRA_LOOP.format(policy="policy_dtype"), **files})
    assert values(entry)["weights_dtype"] == ("fp32", "run.sh:1")


def test_a_value_read_from_no_config_sets_nothing(tmp_path: Path) -> None:
    loop = HYDRA_LOOP.format(policy="policy_dtype").replace("config.model.policy_dtype", "policy.dtype")
    (entry,) = runs_of(tmp_path, {"launch.py": loop, **HYDRA_CONFIGS})
    assert "weights_dtype" not in values(entry)


LINGUA_LOOP = """\
import torch
from omegaconf import OmegaConf


def train(args):
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    for step in range(10):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    train(OmegaConf.from_cli())
"""


@pytest.mark.parametrize(
    ("recipe", "compile_source"),
    [
        ("distributed:\n  fsdp: full_shard\n  compile: true\n  model_dtype: bf16\n", "configs/debug.yaml:3"),
        # a compile key in a mapping of no other run setting (an evaluation's) is not the run's
        ("eval:\n  compile: true\ndistributed:\n  model_dtype: bf16\n", NOTHING),
    ],
)
def test_a_recipe_passed_as_config_equals_path_and_its_keys_beside_run_settings(
    tmp_path: Path, recipe: str, compile_source: str
) -> None:
    files = {
        "apps/train.py": LINGUA_LOOP,
        "apps/__init__.py": "",
        "configs/debug.yaml": recipe,
        "README.md": "```bash\ntorchrun --nproc-per-node 8 -m apps.train config=configs/debug.yaml\n```\n",
    }
    (entry,) = runs_of(tmp_path, files)
    got = values(entry)
    assert got["compile"][1] == compile_source
    assert got["weights_dtype"][0] == "bf16" and got["weights_dtype"][1].startswith("configs/debug.yaml:")
    bf16 = {(s.path, s.already) for s in registry()["bf16_autocast"].dry_run(tmp_path).sites}
    assert ("configs/debug.yaml", True) in bf16


def test_a_float32_region_and_a_tensors_dtype_are_not_the_runs_precision(tmp_path: Path) -> None:
    """torchtitan's MoE router runs under autocast(dtype=float32) and its rotary tables are built with
    dtype=float32: neither says how the run computes; its config's FSDP parameter dtype does."""
    loop = PLAIN_LOOP.replace(
        "    loss = model(torch.ones(2, 4)).sum()\n",
        "    with torch.autocast('cuda', dtype=torch.float32):\n"
        "        scale = torch.arange(4, dtype=torch.float32)\n"
        "    loss = (model(torch.ones(2, 4)) * scale).sum()\n",
    )
    config = (
        "from dataclasses import dataclass\n\n\n@dataclass\nclass TrainingConfig:\n"
        '    mixed_precision_param: str = "bfloat16"\n'
    )
    (entry,) = runs_of(tmp_path, {"train.py": "import config\n" + loop, "config.py": config})
    got = values(entry)
    assert got["mixed_precision"] == ("bf16 (bf16 weights)", "config.py:6")
    assert "weights_dtype" not in got


DPO_HYDRA = """\
import hydra
import torch


@hydra.main(config_path="config", config_name="config")
def main(config):
    policy = torch.nn.Linear(4, 4)
    optimizer = getattr(torch.optim, config.optimizer)(policy.parameters(), lr=config.lr)
    for batch in range(10):
        policy(torch.ones(2, 4)).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""
README_INDENTED = """\
# Training

Run SFT:

    python -u train.py loss=sft lr=1e-6

1. To evaluate:

    Run python train.py loss=eval, after training.
"""


@pytest.mark.parametrize(
    ("optimizer", "applicable", "reason"),
    [("AdamW", True, ""), ("RMSprop  # as good as Adam, less memory", False, "kept as chosen")],
)
def test_an_optimizer_named_by_the_config_is_fused_only_where_it_is_adam(
    tmp_path: Path, optimizer: str, applicable: bool, reason: str
) -> None:
    files = {
        "train.py": DPO_HYDRA,
        "config/config.yaml": f"lr: 1e-6\noptimizer: {optimizer}\n",
        "README.md": README_INDENTED,
    }
    (entry,) = runs_of(tmp_path, files)
    # the indented command after a blank line is a launch; the indented prose line of the list item is not
    assert [run.launch.where for run in entry.runs if run.launch is not None] == ["README.md:5"]
    assert values(entry)["optimizer"] == (optimizer.split()[0], "config/config.yaml:2")
    (site,) = registry()["fused_adamw"].dry_run(tmp_path).sites
    assert site.applicable is applicable and reason in site.reason


def test_a_hydra_script_no_command_launches_runs_with_its_configs_defaults(tmp_path: Path) -> None:
    (entry,) = runs_of(tmp_path, {"train.py": DPO_HYDRA, "config/config.yaml": "optimizer: AdamW\n"})
    assert values(entry)["optimizer"] == ("AdamW", "config/config.yaml:1")


def test_a_library_default_that_does_the_optimization_is_reported_at_the_recipe_that_leaves_it(
    tmp_path: Path,
) -> None:
    """LLaMA-Factory's recipes set no optim: the Trainer's default, fused AdamW, is the run's, and the recipe
    is where a reader looks for it."""
    files = {
        "train.py": TRL_SCRIPT,
        "recipes/sft.yaml": "model_name_or_path: m\nlearning_rate: 1.0e-5\nbf16: true\n",
        "run.sh": "python train.py --config recipes/sft.yaml\n",
    }
    make_repo(tmp_path, files)
    sites = {(s.path, s.line): s for s in registry()["fused_adamw"].dry_run(tmp_path).sites}
    site = sites[("recipes/sft.yaml", 1)]
    assert site.already and "the default of transformers' TrainingArguments" in site.message


def test_a_framework_recipe_that_leaves_attention_and_packing_unset_is_refused_there(tmp_path: Path) -> None:
    """LLaMA-Factory's recipes set no flash_attn and no packing: asking the framework for either is the recipe
    user's choice, said at the recipe; a recipe that sets the key is done, not refused."""
    files = {**FRAMEWORK, "examples/lora.yaml": "base_model: m\nlearning_rate: 2.0e-4\nbf16: true\n"}
    make_repo(tmp_path, files)
    for optimization in ("fa2", "packing"):
        sites = [s for s in registry()[optimization].find(tmp_path) if s.path == "examples/lora.yaml"]
        assert [(s.line, s.applicable, s.already) for s in sites] == [(1, False, False)]
        assert "README.md:4" in sites[0].reason and "recipe user's" in sites[0].reason
    keyed = "base_model: m\nlearning_rate: 2.0e-4\nflash_attention: true\nsample_packing: true\n"
    make_repo(tmp_path / "keyed", {**FRAMEWORK, "examples/lora.yaml": keyed})
    for optimization in ("fa2", "packing"):
        sites = [
            s for s in registry()[optimization].find(tmp_path / "keyed") if s.path == "examples/lora.yaml"
        ]
        assert sites and all(s.already for s in sites)


def test_a_framework_recipe_gets_loader_workers_where_the_schema_takes_the_key(tmp_path: Path) -> None:
    """axolotl's quick-start recipe sets no dataloader_num_workers, which its schema defines: the key goes in the
    recipe. A framework whose code never names the key gets nothing written in its recipes."""
    recipe = "base_model: m\nlearning_rate: 2.0e-4\nbf16: true\n"
    schema = "from dataclasses import dataclass\n\n\n@dataclass\nclass Schema:\n    dataloader_num_workers: int = 0\n"
    make_repo(tmp_path, {**FRAMEWORK, "examples/lora.yaml": recipe, "fw/schema.py": schema})
    change = registry()["dataloader_workers"].dry_run(tmp_path)
    assert change.files["examples/lora.yaml"] == recipe + "dataloader_num_workers: 4\n"
    make_repo(tmp_path / "plain", {**FRAMEWORK, "examples/lora.yaml": recipe})
    assert "examples/lora.yaml" not in registry()["dataloader_workers"].dry_run(tmp_path / "plain").files


def test_a_config_fields_fused_optimizer_implementation_is_fused_adamw_done(tmp_path: Path) -> None:
    """torchtitan's optimizer config defaults to `implementation = "fused"`; llama-cookbook's train_config to
    `batching_strategy = "packing"`."""
    config = (
        "from dataclasses import dataclass\n\n\n@dataclass\nclass OptimizerConfig:\n"
        '    implementation: str = "fused"\n    batching_strategy: str = "packing"\n'
    )
    loop = PLAIN_LOOP.replace("torch.optim.AdamW(model.parameters(), lr=1e-3)", "config.build(model)")
    (entry,) = runs_of(tmp_path, {"train.py": "import config\n" + loop, "config.py": config})
    got = values(entry)
    assert got["optimizer"] == ("fused implementation", "config.py:6")
    assert got["packing"] == ("on", "config.py:7")
    done = [(s.path, s.line) for s in registry()["fused_adamw"].find(tmp_path) if s.already]
    assert ("config.py", 6) in done
