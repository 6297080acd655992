"""DPO LoRA training (in-process path): ``python train_dpo.py --size tiny --max-steps 3``."""

from __future__ import annotations

import logging

from cli import parse_run_args, print_losses
from config import load_config
from trainer import train_dpo


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, read ``configs/dpo/default.yaml`` and train."""
    args = parse_run_args("DPO LoRA training with TRL.", "outputs/dpo", argv)
    cfg = {
        "size": args.size,
        "seed": args.seed,
        "max_steps": args.max_steps,
        "output_dir": args.output_dir,
        "dpo": load_config("dpo"),
    }
    print_losses(train_dpo(cfg))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    main()
