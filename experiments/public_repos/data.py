"""Local stand-ins, made from a fixed seed, for the data two public repositories download, each in the format
the repository's own code reads:

- nanoGPT's ``data/shakespeare_char/input.txt``: plain text of speakers' lines, as Tiny Shakespeare is (its
  ``prepare.py`` downloads the file only when it is missing, then turns it into ``train.bin``/``val.bin``);
- MiniMind's ``dataset/pretrain_t2t_mini.jsonl``: one ``{"text": ...}`` object a line, the pretraining rows its
  ``PretrainDataset`` (``dataset/lm_dataset.py``) reads.

``python -m experiments.public_repos.data shakespeare FILE`` or ``... pretrain FILE`` writes one.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SYLLABLES = [c + v for c in "bdfghklmnprstvwz" for v in "aeiou"]
PUNCTUATION = ".,;:!?"


def word(rng: random.Random) -> str:
    """A made-up word of one to three syllables."""
    return "".join(rng.choices(SYLLABLES, k=rng.randint(1, 3)))


def sentence(rng: random.Random, words: int) -> str:
    """``words`` words, the first capitalised, ending in a punctuation mark."""
    text = " ".join(word(rng) for _ in range(words))
    return text[:1].upper() + text[1:] + rng.choice(PUNCTUATION)


def shakespeare(path: Path, characters: int = 1_115_394, seed: int = 0) -> None:
    """About as many characters as Tiny Shakespeare, in its layout: a speaker's name in capitals and a colon
    on a line, one to four lines of speech, a blank line."""
    rng = random.Random(seed)
    speakers = [word(rng).upper() for _ in range(40)]
    blocks, size = [], 0
    while size < characters:
        lines = [f"{rng.choice(speakers)}:"] + [
            sentence(rng, rng.randint(3, 10)) for _ in range(rng.randint(1, 4))
        ]
        block = "\n".join(lines) + "\n\n"
        blocks.append(block)
        size += len(block)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(blocks)[:characters], encoding="utf-8")


def pretrain(path: Path, rows: int = 16384, seed: int = 0) -> None:
    """``rows`` pretraining rows of 20 to 400 words (most shorter than MiniMind's 340-token window, some
    longer, so both padding and truncation happen)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(rows):
        words = rng.randint(20, 400)
        sentences, left = [], words
        while left > 0:
            count = min(left, rng.randint(4, 14))
            sentences.append(sentence(rng, count))
            left -= count
        lines.append(json.dumps({"text": " ".join(sentences)}, ensure_ascii=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    kind, target = sys.argv[1], Path(sys.argv[2])
    {"shakespeare": shakespeare, "pretrain": pretrain}[kind](target)
