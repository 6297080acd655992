"""`bot review` reads the record apply wrote: after `bot apply`, plain `bot review` (the branch checked out, no
--issue) shows each progress row with the state `bot status` shows and counts them alike, reviews the tier of
the branch (or the one asked for), and finds no lint error in perfbot's own commits, whichever range holds them.

Run through the real CLI on a fixture of a TRL SFT script beside a plain PyTorch loop, and on the bundled
example repository."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import git
import pytest
from git_repos import committed_example, make_repo

from bot.status import ItemStatus

PERFBOT = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff"]

SFT_SCRIPT = '''"""Fine-tune a small causal LM with TRL's SFTTrainer."""

from datasets import load_dataset
from trl import SFTConfig, SFTTrainer


def main():
    dataset = load_dataset("json", data_files="data.jsonl", split="train")
    config = SFTConfig(output_dir="out", per_device_train_batch_size=4, max_steps=10, packing=False)
    trainer = SFTTrainer(model="tiny-gpt2", args=config, train_dataset=dataset)
    trainer.train()


if __name__ == "__main__":
    main()
'''
LOOP_SCRIPT = '''"""A plain PyTorch training loop."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model = model.cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    for step, (x, y) in enumerate(loader):
        x, y = x.cuda(), y.cuda()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step={step} loss={loss.item()}")


if __name__ == "__main__":
    main()
'''
PYPROJECT = """[project]
name = "fixture"
version = "0"

[tool.ruff]
line-length = 100

[tool.ruff.lint]
select = ["E", "F", "I"]
"""
PLAN = """# Speed up the fixture: Tier 1

## Tier 1

- opt:packing in sft_train.py
- opt:dataloader_workers in sft_train.py and loop.py
- opt:liger_guard
- Rewrite the tokenizer by hand

## Tier 2

- opt:sync_free_logging in loop.py
- opt:fused_adamw in loop.py
- opt:tf32

## Success criteria

- All code changes applied
"""


def bot(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=repo,
        env={"PYTHONPATH": str(PERFBOT), "PATH": "/usr/bin:/bin", "HOME": str(repo.parent)},
        capture_output=True,
        text=True,
        check=False,
    )


def status_rows(repo: Path) -> tuple[dict[str, str], str]:
    """`bot status`: the state shown for each row (by its item keys) and the counts of its headline."""
    out = bot(repo, "status").stdout
    labels = sorted((status.label for status in ItemStatus), key=len, reverse=True)
    rows = {}
    for line in out.splitlines()[2:]:
        found = next((label for label in labels if f"  {label}" in line), None)
        if found is not None:
            rows[line.split("  ")[0]] = found
    [done] = re.findall(r"^Done: (.*)$", out, re.M)
    return rows, done


def review_json(repo: Path, *args: str) -> dict:
    run = bot(repo, "review", "--json", *args)
    assert run.returncode in (0, 1), run.stderr
    return json.loads(run.stdout)


def assert_review_matches_status(repo: Path, tier: int) -> dict:
    rows, done = status_rows(repo)
    verdict = review_json(repo)
    assert verdict["tier"] == tier and verdict["items"] == done
    reviewed = {a["key"]: a["status"] for a in verdict["adherence"] if "behavioural" not in a["status"]}
    assert reviewed == rows
    assert not [f for f in verdict["findings"] if f["severity"] == "blocker"], verdict["findings"]
    return verdict


def assert_every_commit_lint_clean(repo: Path, branch: str) -> None:
    """ruff under the target's config passes at every commit of the branch, and reviewing one commit alone
    finds the lint the whole range found for it (none)."""
    handle = git.Repo(repo)
    shas = [c.hexsha for c in handle.iter_commits(f"main..{branch}")]
    for sha in shas:
        handle.git.checkout("-q", sha)
        run = subprocess.run([*RUFF, "check", "--no-cache", "."], cwd=repo, capture_output=True, text=True)
        assert run.returncode == 0, (sha, run.stdout)
        assert review_json(repo, sha)["lint_new"] == 0
    handle.git.checkout("-q", branch)


@pytest.fixture
def trl_and_loop(tmp_path: Path) -> Path:
    root = tmp_path / "fixture"
    files = {"sft_train.py": SFT_SCRIPT, "loop.py": LOOP_SCRIPT, "pyproject.toml": PYPROJECT, "PLAN.md": PLAN}
    make_repo(root, files)
    clean = subprocess.run([*RUFF, "check", "--no-cache", "."], cwd=root, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout  # the fixture starts lint-clean
    return root


def test_review_of_a_trl_script_and_a_loop_agrees_with_status(trl_and_loop: Path):
    repo = trl_and_loop
    for tier in (1, 2):
        git.Repo(repo).git.checkout("-q", "main")
        applied = bot(repo, "apply", "--tier", str(tier), "--plan", "PLAN.md")
        assert applied.returncode == 0, applied.stdout + applied.stderr
        verdict = assert_review_matches_status(repo, tier)
        keys = {a["key"] for a in verdict["adherence"]}
        assert {k for k in keys if k.startswith("T")} == {
            f"T{tier}.{n}" for n in range(1, 4 if tier == 2 else 5)
        }
        assert_every_commit_lint_clean(repo, f"bot/plan-tier-{tier}")
    # tier 1's success criterion is judged on tier 1 only; the dataloader commit claims GPU utilisation,
    # which the benchmark does not measure
    tier1 = review_json(repo, "--tier", "1")
    assert tier1["tier"] == 1 and [c["status"] for c in tier1["criteria"]] == ["NOT MET"]
    assert "T1.4: 🙋 needs a human" in tier1["criteria"][0]["observed"]
    claims = {c["subject"].split(":")[0]: c for c in tier1["claims"]}
    assert claims["perf(data)"]["kind"] == "GPU util"
    assert claims["perf(data)"]["status"] == "NOT MEASURED HERE"


@pytest.mark.slow
def test_review_of_the_example_tiers_agrees_with_status(tmp_path: Path):
    repo = tmp_path / "example"
    committed_example(repo)
    for tier in (1, 2):
        git.Repo(repo).git.checkout("-q", "main")
        applied = bot(repo, "apply", "--tier", str(tier), "--plan", "PLAN.md")
        assert applied.returncode == 0, applied.stdout + applied.stderr
        verdict = assert_review_matches_status(repo, tier)
        if tier == 1:  # the Liger item apply refused on LoRA is not applicable, never "make it by hand"
            [liger] = [a for a in verdict["adherence"] if a["key"].startswith("D")]
            assert liger["status"] == "➖ not applicable" and "LoRA" in liger["note"]
            assert not [f for f in verdict["findings"] if "Plan item D" in f["title"]]
        else:
            assert verdict["criteria"] == []  # the plan's criteria are tier 1's
            assert len(verdict["claims"]) == len(verdict["commits"])  # every Expected line read
        assert_every_commit_lint_clean(repo, f"bot/plan-tier-{tier}")
