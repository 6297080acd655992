"""Train a two-camera vision policy (images -> action vector) with a hand-written PyTorch loop.

    python train_vision.py --size tiny --max-steps 20
    python train_vision.py --size gpu --max-steps 200

The data is synthetic and seeded, and the math is deterministic, so the per-step losses printed at the end
(``step=N loss=X``) are comparable from one commit to the next.
"""

import argparse
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.deterministic
from torch import nn
from torch.utils.data import DataLoader, Dataset

CAMERAS = 2
ACTION_DIM = 7
SIZES = {
    "tiny": {"batch_size": 4, "image_size": 32, "width": 8, "frames": 8},
    "gpu": {"batch_size": 64, "image_size": 224, "width": 64, "frames": 64},
}


class CameraEpisodes(Dataset):
    """Seeded synthetic samples: two float32 camera images (C, H, W) and the action that goes with them."""

    def __init__(self, length, image_size, frames, seed):
        rng = np.random.default_rng(seed)
        gains = rng.random((frames, CAMERAS, 3, 1, 1), dtype=np.float32)
        self.images = rng.random((frames, CAMERAS, 3, image_size, image_size), dtype=np.float32) * gains
        # The action is a fixed linear function of the per-channel brightness plus noise: learnable.
        projection = rng.standard_normal((CAMERAS * 3, ACTION_DIM)).astype(np.float32)
        self.frame_of_sample = rng.integers(0, frames, size=length)
        brightness = gains.reshape(frames, CAMERAS * 3)[self.frame_of_sample] - 0.5
        noise = 0.05 * rng.standard_normal((length, ACTION_DIM)).astype(np.float32)
        self.actions = brightness @ projection + noise

    def __len__(self):
        return len(self.actions)

    def __getitem__(self, index):
        return {"images": self.images[self.frame_of_sample[index]], "actions": self.actions[index]}


class BasicBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class VisionPolicy(nn.Module):
    """A ResNet-18-shaped encoder shared by both cameras, and an MLP head on the joined features."""

    def __init__(self, width):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        blocks = []
        channels = width
        for stage, out_channels in enumerate((width, 2 * width, 4 * width, 8 * width)):
            blocks.append(BasicBlock(channels, out_channels, stride=1 if stage == 0 else 2))
            blocks.append(BasicBlock(out_channels, out_channels, stride=1))
            channels = out_channels
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.Linear(CAMERAS * channels, 256), nn.ReLU(), nn.Linear(256, ACTION_DIM))

    def forward(self, images):
        batch_size = images.shape[0]
        features = self.blocks(self.stem(images.flatten(0, 1))).mean(dim=(2, 3))
        return self.head(features.reshape(batch_size, -1))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=10)
    return parser.parse_args()


def main():
    args = parse_args()
    size = SIZES[args.size]
    # cuBLAS needs a fixed workspace to be deterministic; set it before the first CUDA matmul.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    dataset = CameraEpisodes(
        length=args.max_steps * size["batch_size"],
        image_size=size["image_size"],
        frames=size["frames"],
        seed=args.seed,
    )
    loader = DataLoader(
        dataset,
        batch_size=size["batch_size"],
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(args.seed),
    )
    model = VisionPolicy(size["width"]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    losses = []
    started = time.perf_counter()
    model.train()
    for step, batch in enumerate(loader):
        images = batch["images"].to(device)
        actions = batch["actions"].to(device)
        loss = F.mse_loss(model(images), actions)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        losses.append(loss.item())
        if step % args.log_every == 0:
            elapsed = time.perf_counter() - started
            print(f"[train] step {step}/{args.max_steps} loss {losses[-1]:.4f} ({elapsed:.3f}s)", flush=True)

    print(f"[train] {len(losses)} steps in {time.perf_counter() - started:.1f}s")
    for step, value in enumerate(losses):
        print(f"step={step} loss={value:.6f}")


if __name__ == "__main__":
    main()
