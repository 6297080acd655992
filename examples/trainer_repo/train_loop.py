"""Hand-written PyTorch training loop: full fine-tune of the example's Qwen2 model, no LoRA, no TRL.

fp32 weights and optimizer state, bf16 autocast on CUDA. Run it with
``python train_loop.py --size tiny --max-steps 3 --log-every 1``.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader, Dataset

from cli import run_argument_parser
from data import sft_dataset
from model_loading import PAD_TOKEN_ID, load_model, load_tokenizer


class TokenizedExamples(Dataset):
    """The SFT examples as token ids: prompt, completion and EOS, truncated to ``max_length`` tokens."""

    def __init__(self, size: str, max_length: int):
        tokenizer = load_tokenizer(size)
        rows = sft_dataset(size)
        texts = [
            prompt + completion for prompt, completion in zip(rows["prompt"], rows["completion"], strict=True)
        ]
        self.examples = [
            (ids + [tokenizer.eos_token_id])[:max_length] for ids in tokenizer(texts)["input_ids"]
        ]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> list[int]:
        return self.examples[index]


def pad_collate(examples: list[list[int]]) -> dict[str, torch.Tensor]:
    """Right-pad a batch to its longest example; padding is masked out of attention and loss."""
    longest = max(len(ids) for ids in examples)
    input_ids = torch.full((len(examples), longest), PAD_TOKEN_ID, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), longest), dtype=torch.long)
    for row, ids in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def main(argv: list[str] | None = None) -> None:
    """Train for ``--epochs`` (or ``--max-steps``), printing ``step=N loss=X`` every ``--log-every`` steps.

    The loss printed is the mean over the steps since the previous line; the last step's loss closes the run.
    """
    parser = run_argument_parser("Full fine-tuning with a plain PyTorch loop.", "outputs/loop")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_model(args.size, dtype=torch.float32).to(device)
    model.train()

    dataset = TokenizedExamples(args.size, args.max_length)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, collate_fn=pad_collate)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    epochs = math.ceil(args.max_steps / len(loader)) if args.max_steps > 0 else args.epochs
    total_steps = args.max_steps if args.max_steps > 0 else epochs * len(loader)
    step = 0
    running_loss = 0.0
    for _epoch in range(epochs):
        for batch in loader:
            input_ids = batch["input_ids"].to(device)
            attention_mask = batch["attention_mask"].to(device)
            labels = batch["labels"].to(device)

            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

            step += 1
            running_loss += loss.item()
            if step % args.log_every == 0:
                print(f"step={step} loss={running_loss / args.log_every:.4f}", flush=True)
                running_loss = 0.0
            if step == total_steps:
                break

    print(f"done steps={step} last_loss={loss.item():.4f}", flush=True)
    model.save_pretrained(args.output_dir)


if __name__ == "__main__":
    main()
