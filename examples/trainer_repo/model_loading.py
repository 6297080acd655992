"""Model and tokenizer for the example trainer: a Qwen2-style causal LM with random weights, built offline.

The model is created from a config once per size, with a fixed seed, and saved to a cache directory with
``save_pretrained``; every run (and every commit of this repository) then loads the same initial weights
through ``from_pretrained``. Nothing is ever downloaded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|endoftext|>"
UNK_TOKEN = "<|unk|>"
SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN)
PAD_TOKEN_ID = SPECIAL_TOKENS.index(PAD_TOKEN)
EOS_TOKEN_ID = SPECIAL_TOKENS.index(EOS_TOKEN)

# Seed for the initial weights: fixed, so the cached model is the same whatever --seed a run uses.
INIT_SEED = 0
SYLLABLES = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"]


@dataclass(frozen=True)
class ModelSize:
    """Architecture of one model size, and how many generated words its tokenizer knows."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    tokenizer_words: int


SIZES = {
    # CPU smoke tests and CI: trains in seconds.
    "tiny": ModelSize(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=2048,
        tokenizer_words=2048 - len(SPECIAL_TOKENS),
    ),
    # Qwen2.5-0.5B's shape (about 494M parameters with tied embeddings): the GPU benchmark size.
    "gpu": ModelSize(
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
        vocab_size=151936,
        tokenizer_words=32000,
    ),
}


def model_config(size: str) -> Qwen2Config:
    """The Qwen2 config for ``size`` ("tiny" or "gpu")."""
    spec = SIZES[size]
    return Qwen2Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=PAD_TOKEN_ID,
        bos_token_id=EOS_TOKEN_ID,
        eos_token_id=EOS_TOKEN_ID,
    )


def word_list(count: int) -> list[str]:
    """``count`` distinct pronounceable pseudo-words, the same list on every call."""
    words = []
    for index in range(count):
        syllables = []
        value = index
        while True:
            value, digit = divmod(value, len(SYLLABLES))
            syllables.append(SYLLABLES[digit])
            if value == 0:
                break
        syllables.append(SYLLABLES[(index * 7) % len(SYLLABLES)])
        words.append("".join(syllables))
    return words


def build_tokenizer(size: str) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the generated vocabulary: one token per whitespace-separated word."""
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    for word in word_list(SIZES[size].tokenizer_words):
        vocab[word] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=4096,
    )


def cache_dir(size: str) -> Path:
    """Where the model of ``size`` is cached: ``$PERFBOT_EXAMPLE_CACHE/<size>`` (default ``~/.cache/perfbot-example``)."""
    root = os.environ.get("PERFBOT_EXAMPLE_CACHE") or Path.home() / ".cache" / "perfbot-example"
    return Path(root) / size


def ensure_model(size: str) -> Path:
    """Build and save the model and tokenizer of ``size`` unless the cache already holds them; return the path.

    The weights come from a fixed seed without touching the caller's random state, so a run that builds the
    cache trains exactly like one that finds it. The files are written to a temporary sibling directory and
    renamed into place, so concurrent runs never see a half-written cache.
    """
    path = cache_dir(size)
    if (path / "config.json").exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{size}-", dir=path.parent))
    try:
        with torch.random.fork_rng(devices=[]):  # leave the caller's random state as it was
            torch.manual_seed(INIT_SEED)
            model = AutoModelForCausalLM.from_config(model_config(size), dtype=torch.float32)
        model.to(torch.bfloat16).save_pretrained(staging)
        build_tokenizer(size).save_pretrained(staging)
        os.rename(staging, path)
    except OSError:
        if not (path / "config.json").exists():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def training_dtype() -> torch.dtype:
    """bf16 on CUDA, fp32 on CPU."""
    return torch.bfloat16 if torch.cuda.is_available() else torch.float32


def load_tokenizer(size: str) -> PreTrainedTokenizerFast:
    """The cached tokenizer of ``size`` (loaded as itself: ``AutoTokenizer`` would pick Qwen2's BPE class)."""
    return PreTrainedTokenizerFast.from_pretrained(ensure_model(size))


def load_model(size: str, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """The cached model of ``size``, loaded for training in ``dtype`` (default: :func:`training_dtype`)."""
    model = AutoModelForCausalLM.from_pretrained(
        ensure_model(size),
        attn_implementation="sdpa",
        dtype=dtype or training_dtype(),
    )
    model.config.use_cache = False
    return model
