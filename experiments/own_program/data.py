"""Local stand-ins for the Hub datasets TRL's example commands name: chat rows in ``trl-lib/Capybara``'s
conversational format and preference rows in ``trl-lib/ultrafeedback_binarized``'s, of mixed lengths, made from
a fixed seed. ``python -m experiments.own_program.data DIR`` writes ``DIR/chat/{train,test}.jsonl`` and
``DIR/preference/{train,test}.jsonl``."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SYLLABLES = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"]


def text(rng: random.Random, words: int) -> str:
    """``words`` made-up words of one to three syllables."""
    return " ".join("".join(rng.choices(SYLLABLES, k=rng.randint(1, 3))) for _ in range(words))


def chat_row(rng: random.Random) -> dict:
    """A two-turn conversation: a short question, an answer of 30 to 400 words."""
    return {
        "messages": [
            {"role": "user", "content": text(rng, rng.randint(5, 60))},
            {"role": "assistant", "content": text(rng, rng.randint(30, 400))},
        ]
    }


def preference_row(rng: random.Random) -> dict:
    """A prompt with a chosen and a rejected answer, each of 20 to 200 words."""
    return {
        "prompt": [{"role": "user", "content": text(rng, rng.randint(5, 60))}],
        "chosen": [{"role": "assistant", "content": text(rng, rng.randint(20, 200))}],
        "rejected": [{"role": "assistant", "content": text(rng, rng.randint(20, 200))}],
    }


def write(folder: Path, rows: int = 800, test_rows: int = 50, seed: int = 0) -> None:
    """Both datasets under ``folder``."""
    rng = random.Random(seed)
    for name, make in (("chat", chat_row), ("preference", preference_row)):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for split, count in (("train", rows), ("test", test_rows)):
            lines = (json.dumps(make(rng)) for _ in range(count))
            (folder / name / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
