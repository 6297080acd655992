"""Training data generated in code: SFT prompt/completion pairs and DPO preference triples.

Texts are sequences of the tokenizer's words (one token each), so token lengths are exact; answers start
with a space so that TRL's prompt + answer concatenation keeps the word boundary. Lengths follow a
lognormal distribution, long-tailed like real chat data, so padding to the longest sequence in a batch costs
what it costs in practice. Words are drawn from a Zipf-like distribution so the loss has something to learn;
in DPO pairs the chosen answer keeps to the frequent half of the vocabulary and the rejected one does not.
The generator has its own fixed seed: every run and every commit sees the same data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from datasets import Dataset

from model_loading import SIZES, word_list

DATA_SEED = 1234


@dataclass(frozen=True)
class LengthShape:
    """How many examples, and the lognormal their total token length is drawn from (before truncation)."""

    examples: int
    mean_tokens: float
    sigma: float
    min_tokens: int
    max_tokens: int


SFT_SHAPES = {
    "tiny": LengthShape(examples=64, mean_tokens=24, sigma=0.6, min_tokens=4, max_tokens=64),
    "gpu": LengthShape(examples=800, mean_tokens=250, sigma=0.8, min_tokens=16, max_tokens=1024),
}
DPO_SHAPES = {
    "tiny": LengthShape(examples=32, mean_tokens=24, sigma=0.6, min_tokens=6, max_tokens=64),
    "gpu": LengthShape(examples=400, mean_tokens=300, sigma=0.7, min_tokens=24, max_tokens=1024),
}


def draw_lengths(rng: np.random.Generator, shape: LengthShape) -> np.ndarray:
    """Total token lengths, lognormal with the shape's mean, clipped to [min_tokens, max_tokens]."""
    mu = math.log(shape.mean_tokens) - shape.sigma**2 / 2
    lengths = rng.lognormal(mean=mu, sigma=shape.sigma, size=shape.examples)
    return np.clip(np.rint(lengths), shape.min_tokens, shape.max_tokens).astype(int)


class WordSampler:
    """Draws texts of an exact token count from the size's vocabulary with Zipf-like word frequencies."""

    def __init__(self, size: str, rng: np.random.Generator):
        self.words = np.array(word_list(SIZES[size].tokenizer_words))
        weights = 1.0 / (np.arange(len(self.words)) + 2.7) ** 1.1
        self.probabilities = weights / weights.sum()
        self.rng = rng

    def text(self, tokens: int, vocabulary_share: float = 1.0) -> str:
        """``tokens`` words joined by spaces, drawn from the first ``vocabulary_share`` of the vocabulary."""
        count = max(1, int(len(self.words) * vocabulary_share))
        probabilities = self.probabilities[:count] / self.probabilities[:count].sum()
        return " ".join(self.words[self.rng.choice(count, size=tokens, p=probabilities)])


def sft_dataset(size: str, seed: int = DATA_SEED) -> Dataset:
    """Prompt/completion examples whose prompt takes 20-60% of each example's tokens."""
    rng = np.random.default_rng(seed)
    sampler = WordSampler(size, rng)
    prompts, completions = [], []
    for length in draw_lengths(rng, SFT_SHAPES[size]):
        prompt_tokens = max(1, int(length * rng.uniform(0.2, 0.6)))
        prompts.append(sampler.text(prompt_tokens))
        completions.append(" " + sampler.text(max(1, length - prompt_tokens)))
    return Dataset.from_dict({"prompt": prompts, "completion": completions})


def dpo_dataset(size: str, seed: int = DATA_SEED) -> Dataset:
    """Prompt/chosen/rejected triples; chosen and rejected answers have independent long-tailed lengths."""
    rng = np.random.default_rng(seed)
    sampler = WordSampler(size, rng)
    shape = DPO_SHAPES[size]
    rows = {"prompt": [], "chosen": [], "rejected": []}
    for length in draw_lengths(rng, shape):
        prompt_tokens = max(1, int(length * rng.uniform(0.2, 0.5)))
        answer_budget = length - prompt_tokens
        rows["prompt"].append(sampler.text(prompt_tokens))
        rows["chosen"].append(" " + sampler.text(max(1, answer_budget), vocabulary_share=0.5))
        rejected_tokens = int(
            np.clip(answer_budget * rng.lognormal(0.0, 0.3), 1, shape.max_tokens - prompt_tokens)
        )
        rows["rejected"].append(" " + sampler.text(rejected_tokens))
    return Dataset.from_dict(rows)
