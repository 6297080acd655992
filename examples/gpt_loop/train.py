"""Train the GPT of model.py on a synthetic token stream: plain fp32 PyTorch, one process.

python train.py --size tiny --max-steps 20
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

from model import GPT, GPTConfig

# `vocab`: the data's vocabulary, what its tokenizer gives; the model's `vocab_size` may be rounded up past it.
SIZES = {
    "tiny": dict(
        vocab=512,
        config=GPTConfig(block_size=64, vocab_size=512, n_layer=2, n_head=2, n_embd=64),
        batch_size=8,
    ),
    "gpu": dict(
        vocab=50257,
        config=GPTConfig(block_size=1024, vocab_size=50257, n_layer=12, n_head=12, n_embd=768),
        batch_size=12,
    ),
}


class TokenStream(Dataset):
    """Fixed-length windows over a synthetic token stream (Zipf-distributed ids, seeded)."""

    def __init__(self, vocab_size: int, block_size: int, n_tokens: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        ranks = torch.arange(1, vocab_size + 1, dtype=torch.float)
        weights = 1.0 / ranks
        self.data = torch.multinomial(weights, n_tokens, replacement=True, generator=generator)
        self.block_size = block_size

    def __len__(self):
        return (len(self.data) - 1) // self.block_size

    def __getitem__(self, i):
        chunk = self.data[i * self.block_size : (i + 1) * self.block_size + 1]
        return chunk[:-1], chunk[1:]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    size = SIZES[args.size]
    config, batch_size = size["config"], size["batch_size"]
    num_workers = args.num_workers

    dataset = TokenStream(
        size["vocab"],
        config.block_size,
        (args.max_steps + 1) * batch_size * (config.block_size + 1),
        args.seed,
    )
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers, drop_last=True)

    model = GPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)

    model.train()
    step = 0
    t0 = time.time()
    while step < args.max_steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits, loss = model(x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            if step % args.log_interval == 0 or step == args.max_steps:
                dt = time.time() - t0
                print(f"step {step}: loss {loss.item():.4f}, {dt * 1000 / args.log_interval:.1f} ms/step")
                t0 = time.time()
            if step >= args.max_steps:
                break


if __name__ == "__main__":
    main()
