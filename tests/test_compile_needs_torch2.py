"""Optimizations that compile the model are refused where the requirements keep torch below 2.0, which has no
``torch.compile``; a lower bound alone installs the newest torch and changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from git_repos import make_repo

from optimizations.registry import registry

TRAIN = """\
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


def main():
    model = AutoModelForCausalLM.from_pretrained("EleutherAI/pythia-1b")
    Trainer(model=model, args=TrainingArguments(output_dir="out")).train()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("requirement", "refused"), [("torch>=1.13.1,<2\n", True), ("torch>=1.13.1\n", False)]
)
def test_regional_compile_needs_a_torch_with_compile(tmp_path: Path, requirement: str, refused: bool) -> None:
    make_repo(tmp_path, {"train.py": TRAIN, "requirements.txt": f"transformers>=4.32\n{requirement}"})
    change = registry()["regional_compile"].dry_run(tmp_path)
    assert bool(change.files) is not refused
    [site] = change.sites
    assert site.applicable is not refused
    if refused:
        assert "requirements.txt:2: torch>=1.13.1,<2 keeps torch below 2.0" in site.reason


def test_a_pin_above_the_release_admits_it(tmp_path: Path) -> None:
    """``torch==2.2`` pins a release newer than 2.0: it keeps torch.compile, so nothing is refused for it."""
    make_repo(tmp_path, {"train.py": TRAIN, "requirements.txt": "transformers>=4.32\ntorch==2.2\n"})
    [site] = registry()["regional_compile"].dry_run(tmp_path).sites
    assert site.applicable and "keeps torch below" not in site.reason
