"""A loader whose worker count is read from a setting whose defaults in its file are all above 0 (minGPT's
``C.num_workers = 4``, an argument parser's ``default=8``) already loads with workers; a default of 0 does not."""

from __future__ import annotations

from pathlib import Path

import pytest
from git_repos import make_repo

from optimizations.registry import registry

SCRIPT = """\
import argparse

import torch
from torch.utils.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--num_workers", type=int, default={default})
args = parser.parse_args()


def train(model, dataset, optimizer):
    loader = DataLoader(dataset, batch_size=8, num_workers=args.num_workers, pin_memory=True)
    for batch in loader:
        model(batch).backward()
        optimizer.step()
"""
CONFIG = """\
from torch.utils.data import DataLoader


class Trainer:
    @staticmethod
    def get_default_config():
        C = Config()
        C.num_workers = 4
        return C

    def run(self, config, dataset):
        loader = DataLoader(dataset, num_workers=config.num_workers, pin_memory=True)
        for batch in loader:
            self.model(batch).backward()
            self.optimizer.step()
"""


@pytest.mark.parametrize(
    ("files", "lines"),
    # the script's flag default is a line where its run sets the workers too
    [({"train.py": SCRIPT.format(default=8)}, {7, 12}), ({"train.py": CONFIG}, {12})],
)
def test_a_positive_default_is_already_workers(
    tmp_path: Path, files: dict[str, str], lines: set[int]
) -> None:
    make_repo(tmp_path, files)
    change = registry()["dataloader_workers"].dry_run(tmp_path)
    assert not change.files
    assert {(s.path, s.line, s.already) for s in change.sites} == {("train.py", line, True) for line in lines}


def test_a_default_of_zero_is_refused_as_before(tmp_path: Path) -> None:
    make_repo(tmp_path, {"train.py": SCRIPT.format(default=0)})
    change = registry()["dataloader_workers"].dry_run(tmp_path)
    assert [(s.line, s.already, s.applicable) for s in change.sites] == [(12, False, False)]
    assert "raise its default" in change.sites[0].reason
