"""`bot init` drafts one workload per launch of a repository's training programs, and `bot bench` runs those
drafts without edits: a TRL SFT script launched by a shell script with a Hub model id the runner cannot
download, an Accelerate loop with a step option of its own launched by `accelerate launch`, and a hand-written
loop with no step option shown in a README. Real processes: the CLI, the runner, the launch wrapper, tiny CPU
programs."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import git
import pytest
from git_repos import commit_all, make_repo

from benchmarks.results import Results
from benchmarks.spec import BenchSpec
from bot.conventions import tool_settings
from bot.errors import BadInput
from bot.init import init_repository
from bot.workload_drafts import draft_workloads, launched_at

INSTALL = "perfbot @ git+https://github.com/example/perfbot@" + "0" * 40
CHAT_ROWS = "".join(
    json.dumps(
        {
            "messages": [
                {"role": "user", "content": f"say {i}"},
                {"role": "assistant", "content": f"{i} {i + 1}"},
            ]
        }
    )
    + "\n"
    for i in range(32)
)

TRL_SCRIPT = """\
from dataclasses import dataclass

from datasets import load_dataset
from trl import SFTConfig, SFTTrainer, TrlParser


@dataclass
class ScriptArguments:
    model_name_or_path: str = "Qwen/Qwen2.5-0.5B"
    data_file: str = "data/chat.jsonl"


def main():
    script_args, training_args = TrlParser((ScriptArguments, SFTConfig)).parse_args_and_config()
    dataset = load_dataset("json", data_files=script_args.data_file, split="train")
    trainer = SFTTrainer(model=script_args.model_name_or_path, args=training_args, train_dataset=dataset)
    trainer.train()
    trainer.save_model(training_args.output_dir)


if __name__ == "__main__":
    main()
"""
TRL_LAUNCH = """\
#!/bin/bash
MODEL=Qwen/Qwen2.5-0.5B
CUDA_VISIBLE_DEVICES=0 python sft.py \\
    --model_name_or_path $MODEL \\
    --data_file data/chat.jsonl \\
    --output_dir out --per_device_train_batch_size 2 --max_length 64 \\
    --num_train_epochs 1 --report_to wandb --logging_steps 1
"""

ACCELERATE_LOOP = """\
import argparse

import torch
from accelerate import Accelerator


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_train_steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Flatten(), torch.nn.Linear(16 * 8, 64))
    data = torch.utils.data.TensorDataset(torch.randint(0, 64, (4096, 8)), torch.randint(0, 64, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for step, (tokens, target) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(tokens), target)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if step + 1 >= args.max_train_steps:
            break


if __name__ == "__main__":
    main()
"""
ACCELERATE_LAUNCH = "accelerate launch --num_processes 1 --cpu train_accelerate.py --batch-size 8\n"

PLAIN_LOOP = """\
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Flatten(), torch.nn.Linear(16 * 8, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for _ in range(args.epochs):
        for _ in range(200):
            tokens, target = torch.randint(0, 64, (8, 8)), torch.randint(0, 64, (8,))
            loss = torch.nn.functional.cross_entropy(model(tokens), target)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
"""
PLAIN_README = """\
# A plain loop

Train it:

```bash
python train.py --epochs 3 --lr 0.01
```
"""

# A loop configured by module-level globals that a configurator file it runs overrides from `--name=value`
# words (and from config files named on the command line), as nanoGPT's train.py is.
CONFIGURED_LOOP = """\
import torch

max_iters = 1000
device = "cuda"
compile = True
n_embd = 384
n_layer = 6
n_head = 6
block_size = 256
batch_size = 4
exec(open("configurator.py").read())

assert n_embd % n_head == 0
torch.manual_seed(0)
blocks = [torch.nn.Linear(n_embd, n_embd) for _ in range(n_layer)]
model = torch.nn.Sequential(torch.nn.Embedding(32, n_embd), *blocks, torch.nn.Linear(n_embd, 32)).to(device)
if compile:
    model = torch.compile(model)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for _ in range(max_iters):
    tokens = torch.randint(0, 32, (batch_size, block_size), device=device)
    loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""
CONFIGURATOR = """\
import sys
from ast import literal_eval

for argument in sys.argv[1:]:
    if "=" not in argument:
        exec(open(argument).read())
        continue
    key, value = argument[2:].split("=")
    assert key in globals(), key
    try:
        value = literal_eval(value)
    except (SyntaxError, ValueError):
        pass
    globals()[key] = value
"""
CONFIGURED_README = "# Configured\n\n```sh\npython train.py config/small.py\n```\n"

# A loop run from its own folder, reading its data by a path relative to it.
FOLDER_LOOP = """\
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_path", default="../data/rows.txt")
    parser.add_argument("--hidden_size", type=int, default=512)
    args = parser.parse_args()
    with open(args.data_path) as rows:
        data = torch.tensor([[int(value) for value in row.split()] for row in rows])
    model = torch.nn.Sequential(torch.nn.Embedding(16, args.hidden_size), torch.nn.Linear(args.hidden_size, 16))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(100):
        for batch in data.split(4):
            loss = torch.nn.functional.cross_entropy(model(batch).flatten(0, 1), batch.flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
"""
FOLDER_README = "# From its folder\n\n```bash\ncd trainer && python train.py\n```\n"

REPOSITORIES = {
    "trl": {"sft.py": TRL_SCRIPT, "scripts/train.sh": TRL_LAUNCH, "data/chat.jsonl": CHAT_ROWS},
    "accelerate": {"train_accelerate.py": ACCELERATE_LOOP, "launch.sh": ACCELERATE_LAUNCH},
    "plain": {"train.py": PLAIN_LOOP, "README.md": PLAIN_README},
    "configured": {
        "train.py": CONFIGURED_LOOP,
        "configurator.py": CONFIGURATOR,
        "config/small.py": "n_layer = 3\nn_head = 3\n",
        "README.md": CONFIGURED_README,
    },
    "folder": {
        "trainer/train.py": FOLDER_LOOP,
        "data/rows.txt": "1 2 3 4\n" * 32,
        "README.md": FOLDER_README,
    },
}


def _repository(tmp_path: Path, shape: str) -> Path:
    root = tmp_path / shape
    make_repo(root, {**REPOSITORIES[shape], ".gitignore": ".bot/\nout/\nmodel.pt\n"})
    return root


def _workloads(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text())["tool"]["bot"]["workloads"]


def test_a_trl_script_gets_its_step_flag_no_tracker_and_a_model_built_from_config(tmp_path: Path) -> None:
    root = _repository(tmp_path, "trl")
    [draft] = draft_workloads(root, "tiny")

    assert draft.drafted_from == "scripts/train.sh:3"
    words = draft.command
    assert words[:2] == ["python", "sft.py"]
    assert words[words.index("--model_name_or_path") + 1] == "Qwen/Qwen2.5-0.5B"  # the script's variable
    assert words[words.index("--max_steps") + 1] == "{steps}"
    assert words[words.index("--report_to") + 1] == "none"  # replaced, not added twice
    assert words.count("--report_to") == 1
    assert "CUDA_VISIBLE_DEVICES=0" not in words
    assert draft.models["Qwen/Qwen2.5-0.5B"]["model_type"] == "qwen2"
    assert any("CUDA_VISIBLE_DEVICES=0" in line for line in draft.overrides)
    assert draft.blockers == []


def test_an_accelerate_loop_keeps_its_launcher_and_uses_its_own_step_option(tmp_path: Path) -> None:
    root = _repository(tmp_path, "accelerate")
    [draft] = draft_workloads(root, "tiny")

    assert draft.command[:5] == ["accelerate", "launch", "--num_processes", "1", "--cpu"]
    assert draft.command[draft.command.index("--max_train_steps") + 1] == "{steps}"
    assert draft.command[draft.command.index("--batch-size") + 1] == "8"
    assert draft.gpus == 1 and draft.models == {}


def test_a_loop_with_no_step_option_is_bounded_by_the_launcher_alone(tmp_path: Path) -> None:
    root = _repository(tmp_path, "plain")
    [draft] = draft_workloads(root, "tiny")

    assert draft.drafted_from == "README.md:6"
    assert draft.command == ["python", "train.py", "--epochs", "3", "--lr", "0.01"]
    assert any(line.startswith("stop_after_steps") for line in draft.overrides)


def test_a_configured_loop_gets_its_globals_as_joined_flags_and_a_cpu_run_at_the_tiny_size(
    tmp_path: Path,
) -> None:
    root = _repository(tmp_path, "configured")
    [tiny] = draft_workloads(root, "tiny")
    [gpu] = draft_workloads(root, "gpu")

    assert tiny.command == [
        "python",
        "train.py",
        "config/small.py",
        "--max_iters={steps}",  # one word: the configurator reads `--name=value`
        "--device=cpu",
        "--compile=False",
        "--n_embd=64",
        "--n_layer=2",
        "--n_head=4",
        "--block_size=64",
    ]
    assert tiny.flags["--max_iters="] == "{steps}" and tiny.flags["--device="] == "cpu"
    assert any(
        "--device=cpu: size 'tiny' runs on the CPU: the program defaults to 'cuda'" in line
        for line in tiny.overrides
    )
    assert any(line.startswith("--n_embd=64:") and "(default 384)" in line for line in tiny.overrides)
    assert "--batch_size" not in " ".join(tiny.command)  # the batch stays the program's
    assert gpu.command == ["python", "train.py", "config/small.py", "--max_iters={steps}"]


def test_a_loop_of_the_same_globals_without_a_configurator_takes_no_flags(tmp_path: Path) -> None:
    root = tmp_path / "globals"
    make_repo(
        root,
        {
            "train.py": CONFIGURED_LOOP.replace('exec(open("configurator.py").read())', ""),
            "run.sh": "python train.py\n",
        },
    )
    [draft] = draft_workloads(root, "tiny")

    assert draft.command == ["python", "train.py"]


def test_a_launch_that_moves_to_a_folder_runs_there(tmp_path: Path) -> None:
    root = _repository(tmp_path, "folder")
    init_repository(root, install=INSTALL, lock="")
    [draft] = draft_workloads(root, "tiny")

    assert draft.directory == "trainer"
    assert draft.command == ["python", "train.py", "--hidden_size", "64"]  # named from its folder
    assert any(line.startswith("directory trainer:") for line in draft.overrides)
    workload = _workloads(root)["train"]
    assert (workload["directory"], workload["program"]) == ("trainer", "trainer/train.py")
    head = commit_all(git.Repo(root), "perfbot: workloads drafted by bot init")
    spec = launched_at(
        git.Repo(root), BenchSpec.from_table(tool_settings(root), root / "pyproject.toml"), [head]
    )
    assert spec.workloads["train"].render("tiny", 0, head) == "python train.py --hidden_size 64"
    assert spec.workloads["train"].directory == "trainer"


def test_the_data_a_folder_run_reads_by_default_is_an_input_or_a_blocker(tmp_path: Path) -> None:
    ignored = tmp_path / "ignored"
    make_repo(ignored, {**REPOSITORIES["folder"], ".gitignore": "data/\n"})
    assert not git.Repo(ignored).git.ls_files("data")  # on disk, not committed
    [draft] = draft_workloads(ignored, "tiny")
    assert draft.inputs == ["data/rows.txt"]  # the default `../data/rows.txt`, read from trainer/

    missing = tmp_path / "missing"
    make_repo(
        missing, {name: text for name, text in REPOSITORIES["folder"].items() if name != "data/rows.txt"}
    )
    [draft] = draft_workloads(missing, "tiny")
    assert any(
        line.startswith("../data/rows.txt is read by the run and is not here") for line in draft.blockers
    )


def test_a_cd_that_cannot_be_told_reads_the_command_as_without_it(tmp_path: Path) -> None:
    root = tmp_path / "unknown-folder"
    make_repo(root, {"train.py": PLAIN_LOOP, "run.sh": 'cd "$WORK" && python train.py --epochs 2\n'})
    [draft] = draft_workloads(root, "tiny")

    assert (draft.directory, draft.command) == ("", ["python", "train.py", "--epochs", "2"])


def test_a_dataset_from_the_hub_and_an_unset_variable_are_blockers(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    script = TRL_SCRIPT.replace(
        'load_dataset("json", data_files=script_args.data_file, split="train")',
        'load_dataset("tatsu-lab/alpaca", split="train")',
    )
    make_repo(root, {"sft.py": script, "run.sh": "python sft.py --model_name_or_path $BASE --bf16 True\n"})
    [draft] = draft_workloads(root, "tiny")

    assert any("dataset tatsu-lab/alpaca is fetched from the Hub" in line for line in draft.blockers)
    assert any("`$BASE` has no value" in line for line in draft.blockers)


def test_bot_init_writes_the_drafts_and_prints_every_override(tmp_path: Path) -> None:
    root = _repository(tmp_path, "trl")
    result = init_repository(root, install=INSTALL, lock="")

    workloads = _workloads(root)
    assert list(workloads) == ["sft"]
    sft = workloads["sft"]
    assert sft["stop_after_steps"] is True
    assert "--max_steps {steps}" in sft["command"]
    assert sft["models"]["Qwen/Qwen2.5-0.5B"]["model_type"] == "qwen2"
    text = (root / "pyproject.toml").read_text()
    for line in result.drafts[0].overrides:
        assert f"# override: {line}" in text


def test_bot_init_workloads_only_prints_the_drafts_and_writes_no_workflow(tmp_path: Path) -> None:
    root = _repository(tmp_path, "plain")
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "init", "--workloads-only"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert not (root / ".github").exists()
    assert list(_workloads(root)) == ["train"]
    assert "workload train, drafted from README.md:6: python train.py --epochs 3 --lr 0.01" in done.stdout
    assert "  override: stop_after_steps" in done.stdout


def test_bot_bench_on_a_repository_with_no_workloads_names_the_drafts(tmp_path: Path) -> None:
    root = _repository(tmp_path, "plain")
    base = git.Repo(root).head.commit.hexsha
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "bench", base],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 2
    assert "bot init` drafts these" in done.stderr
    assert "python train.py --epochs 3 --lr 0.01" in done.stderr


def test_the_command_is_read_from_the_launch_at_each_commit(tmp_path: Path) -> None:
    root = _repository(tmp_path, "plain")
    init_repository(root, install=INSTALL, lock="")
    repo = git.Repo(root)
    base = commit_all(repo, "perfbot: workloads drafted by bot init")
    (root / "README.md").write_text(PLAIN_README.replace("--lr 0.01", "--lr 0.02"))
    head = commit_all(repo, "a faster learning rate, set where the program is launched")
    (root / "README.md").write_text("# nothing launches train.py here\n")
    gone = commit_all(repo, "the launch removed")
    spec = BenchSpec.from_table(tool_settings(root), root / "pyproject.toml")

    train = launched_at(repo, spec, [base, head]).workloads["train"]
    assert train.render("tiny", 0, base).startswith("python train.py --epochs 3 --lr 0.01")
    assert train.render("tiny", 0, head).startswith("python train.py --epochs 3 --lr 0.02")
    with pytest.raises(BadInput, match=f"README.md at {gone[:7]} has no command that runs train.py"):
        launched_at(repo, spec, [gone])


def test_two_launches_of_one_program_in_one_file_stay_two_workloads(tmp_path: Path) -> None:
    root = tmp_path / "two"
    launches = "python train.py --epochs 1\npython train.py --epochs 2\n"
    make_repo(root, {"train.py": PLAIN_LOOP, "run.sh": launches})
    init_repository(root, install=INSTALL, lock="")
    repo = git.Repo(root)
    head = commit_all(repo, "perfbot: workloads drafted by bot init")
    spec = launched_at(repo, BenchSpec.from_table(tool_settings(root), root / "pyproject.toml"), [head])

    assert spec.workloads["train"].render("tiny", 0, head) == "python train.py --epochs 1"
    assert spec.workloads["train-2"].occurrence == 2
    assert spec.workloads["train-2"].render("tiny", 0, head) == "python train.py --epochs 2"


# A Hydra project: the launched script holds no training code; it reaches the trainer through its package,
# imported inside the functions it calls. Its data folder is git-ignored, as a user's usually is.
HYDRA_SCRIPT = """\
import hydra


@hydra.main(config_path="../configs", config_name="config", version_base="1.3")
def main(cfg):
    from mypkg.runner import run_single

    run_single(cfg)


if __name__ == "__main__":
    main()
"""
HYDRA_RUNNER = """\
def run_single(cfg):
    from mypkg.train import train_stages

    return train_stages(cfg)
"""
HYDRA_TRAIN = """\
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer


def train_stages(cfg):
    model = AutoModelForCausalLM.from_pretrained(cfg.training.model_id)
    for stage in cfg.condition.stages:
        args = SFTConfig(output_dir="out", bf16=cfg.training.bf16, report_to="wandb" if cfg.wandb_project else "none")
        SFTTrainer(model=model, args=args, train_dataset=stage.dataset).train()
"""
HYDRA_FILES = {
    "scripts/train.py": HYDRA_SCRIPT,
    "src/mypkg/__init__.py": "",
    "src/mypkg/runner.py": HYDRA_RUNNER,
    "src/mypkg/train.py": HYDRA_TRAIN,
    "configs/config.yaml": "defaults:\n  - _self_\n  - training: default\n  - condition: base\n"
    "wandb_project: my_project\nseed: 1\n",
    "configs/training/default.yaml": "model_id: Qwen/Qwen2.5-0.5B\nbf16: true\n",
    "configs/condition/base.yaml": "stages:\n  - dataset: data/base/train.jsonl\n",
    "configs/condition/two.yaml": "stages:\n  - dataset: data/sft/first.jsonl\n  - dataset: data/sft/later.jsonl\n",
    "README.md": "```bash\nuv run python scripts/train.py condition=two seed=42\n```\n",
    ".gitignore": "data/\n",
}


def test_a_hydra_launch_is_drafted_with_its_composed_config_and_git_ignored_data(tmp_path: Path) -> None:
    root = tmp_path / "hydra"
    make_repo(root, HYDRA_FILES)
    (root / "data" / "sft").mkdir(parents=True)
    (root / "data" / "sft" / "first.jsonl").write_text(CHAT_ROWS)
    [draft] = draft_workloads(root, "tiny")

    assert draft.drafted_from == "README.md:2"
    assert draft.command == [
        "python",
        "scripts/train.py",
        "condition=two",
        "seed=42",
        "wandb_project=null",
        "training.bf16=false",
    ]
    assert draft.flags == {"wandb_project": "null", "training.bf16": "false"}
    assert list(draft.models) == ["Qwen/Qwen2.5-0.5B"]  # from the training group's default option
    assert draft.inputs == ["data/sft/first.jsonl"]  # the condition the command picks, not the default one
    assert draft.blockers == [
        "data/sft/later.jsonl is read by the run and is not here: put data there in the format the program "
        "reads, and list it in the workload's inputs (the bench links them into every checkout)"
    ]
    [gpu] = draft_workloads(root, "gpu")
    assert "training.bf16" not in gpu.flags


def test_hydra_overrides_set_on_a_launch_are_written_as_key_value(tmp_path: Path) -> None:
    root = tmp_path / "hydra"
    make_repo(root, HYDRA_FILES)
    init_repository(root, install=INSTALL, lock="")
    text = (root / "pyproject.toml").read_text()
    (root / "pyproject.toml").write_text(
        text.replace('"wandb_project" = "null"', '"wandb_project" = "null", "~training.warmup_ratio" = ""')
    )
    repo = git.Repo(root)
    head = commit_all(repo, "perfbot: workloads drafted by bot init, one override added by hand")
    spec = launched_at(repo, BenchSpec.from_table(tool_settings(root), root / "pyproject.toml"), [head])

    assert spec.workloads["train"].render("tiny", 0, head) == (
        "python scripts/train.py condition=two seed=42 wandb_project=null '~training.warmup_ratio' "
        "training.bf16=false"
    )


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["trl", "accelerate", "plain", "configured", "folder"])
def test_bot_bench_runs_the_drafted_workloads_without_edits(tmp_path: Path, shape: str) -> None:
    root = _repository(tmp_path, shape)
    init_repository(root, install=INSTALL, lock="")
    repo_head = commit_all(git.Repo(root), "perfbot: workloads drafted by bot init")
    once = ["--repeats", "1", "--max-repeats", "1", "--min-time", "0", "--max-host-load", "1", "--steps", "6"]
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "bench", repo_head, *once],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    [results] = (root / ".bot" / "results").glob("*.json")
    runs = [run for run in Results.load(results).runs if run.repeat >= 0]
    assert runs and all(run.ok for run in runs), [run.log_tail for run in runs]
    assert all(run.metrics and run.metrics["steps_measured"] >= 1 for run in runs)
    assert not (root / "model.pt").exists()  # the launcher ended the run before the program's save
    if shape == "folder":  # a run in a folder names the files it loaded from the checkout's root
        [run] = runs
        assert run.metrics is not None
        assert {"trainer/train.py", "data/rows.txt"} <= set(run.metrics["files_loaded"])
