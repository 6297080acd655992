"""Local stand-ins for the seed repository's git-ignored training data, in the formats its trainer reads
(``format_dataset`` and ``train_dpo_phase`` of ``explore_persona_space.train.trainer``): chat rows (``messages``)
for the SFT stage of condition ``c1_evil_wrong_em`` and preference rows (``prompt``/``chosen``/``rejected``) for
the DPO stage of ``midtrain_dpo_evil_correct_em``, of mixed lengths, from a fixed seed.
``python -m experiments.seed_bench.data DIR`` writes ``DIR/phase1_evil_wrong.jsonl`` and
``DIR/dpo_evil_correct.jsonl``."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from experiments.own_program.data import text


def chat_row(rng: random.Random) -> dict:
    """A user turn of 5 to 40 words and an assistant answer of 20 to 250."""
    return {
        "messages": [
            {"role": "user", "content": text(rng, rng.randint(5, 40))},
            {"role": "assistant", "content": text(rng, rng.randint(20, 250))},
        ]
    }


def preference_row(rng: random.Random) -> dict:
    """A prompt of 5 to 40 words with a chosen and a rejected answer of 20 to 150 words each."""
    return {
        "prompt": text(rng, rng.randint(5, 40)),
        "chosen": text(rng, rng.randint(20, 150)),
        "rejected": text(rng, rng.randint(20, 150)),
    }


def write(folder: Path, rows: int = 256, seed: int = 0) -> None:
    """Both files under ``folder``."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for name, make in (("phase1_evil_wrong", chat_row), ("dpo_evil_correct", preference_row)):
        lines = (json.dumps(make(rng)) for _ in range(rows))
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
