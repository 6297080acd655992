"""Command-line flags shared by every entry point, and the loss lines they print."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence

from model_loading import SIZES


def run_argument_parser(description: str, default_output_dir: str) -> argparse.ArgumentParser:
    """A parser with ``--size``, ``--max-steps``, ``--seed`` and ``--output-dir``; callers may add more."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="model and data size")
    parser.add_argument(
        "--max-steps",
        type=int,
        default=-1,
        help="stop after this many optimizer steps (-1: the configured epochs)",
    )
    parser.add_argument("--seed", type=int, default=42, help="training seed (shuffling, adapter init)")
    parser.add_argument("--output-dir", default=default_output_dir, help="where checkpoints and logs go")
    return parser


def parse_run_args(
    description: str, default_output_dir: str, argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Parse the shared flags."""
    return run_argument_parser(description, default_output_dir).parse_args(argv)


def print_losses(log_history: Iterable[dict]) -> None:
    """Print ``step=N loss=X`` for every logged training step of a Trainer's ``state.log_history``."""
    for entry in log_history:
        if "loss" in entry:
            print(f"step={entry['step']} loss={entry['loss']:.4f}", flush=True)
