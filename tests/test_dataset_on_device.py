"""dataloader_workers leaves a loader alone where its dataset is a repository class whose code uses CUDA (a
replay buffer that may keep its experience on the GPU): a worker process cannot touch CUDA tensors."""

import pytest
from git_repos import make_repo

from optimizations.registry import get

TRAINER = """\
import torch
from torch.utils.data import DataLoader

from {package}buffer import ReplayBuffer


class Trainer:
    def __init__(self, limit):
        self.buffer = ReplayBuffer(limit)

    def train(self, model, optimizer):
        loader = DataLoader(self.buffer, batch_size=4, shuffle=True)
        for batch in loader:
            loss = model(batch).mean()
            loss.backward()
            optimizer.step()
"""

BUFFER = """\
import torch
from torch.utils.data import Dataset


class ReplayBuffer(Dataset):
    def __init__(self, limit):
        self.items = []
        self.limit = limit{device}

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]
"""

DEVICES = {
    "torch.cuda": (
        "\n        self.device = torch.device(f'cuda:{torch.cuda.current_device()}')",
        "torch.cuda",
    ),
    "a cuda string": ("\n        self.device = 'cuda'", "`'cuda'`"),
    ".cuda()": ("\n\n    def add(self, item):\n        self.items.append(item.cuda())", "`item.cuda()`"),
}


@pytest.mark.parametrize("relative", [False, True], ids=["absolute import", "relative import"])
@pytest.mark.parametrize("device", sorted(DEVICES))
def test_a_dataset_whose_class_uses_cuda_gets_no_workers(tmp_path, device, relative):
    code, evidence = DEVICES[device]
    files = {
        "rl/__init__.py": "",
        "rl/buffer.py": BUFFER.format(device=code),
        "rl/trainer.py": TRAINER.format(package="." if relative else "rl."),
    }
    make_repo(tmp_path, files)
    change = get("dataloader_workers").dry_run(tmp_path)
    (site,) = change.sites
    assert not site.applicable and change.files == {}
    assert "the dataset `self.buffer` is a `ReplayBuffer`, whose code uses CUDA" in site.reason
    assert evidence in site.reason and "rl/buffer.py:" in site.reason


def test_a_dataset_class_on_the_host_gets_workers(tmp_path):
    files = {
        "rl/__init__.py": "",
        "rl/buffer.py": BUFFER.format(device=""),
        "rl/trainer.py": TRAINER.format(package="rl."),
    }
    make_repo(tmp_path, files)
    change = get("dataloader_workers").dry_run(tmp_path)
    (site,) = change.sites
    assert site.applicable and "num_workers=DATALOADER_WORKERS" in change.files["rl/trainer.py"]
