"""A word-level tokenizer built in code (no download) for the tests that train a tiny model with TRL."""

from __future__ import annotations

SPECIALS = {"<pad>": 0, "<eos>": 1, "<unk>": 2}


def word_tokenizer(words: list[str]):
    """A ``PreTrainedTokenizerFast`` over ``words`` split on whitespace, with its own pad, EOS and unknown
    tokens (ids 0, 1, 2; the words follow)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = SPECIALS | {word: index + len(SPECIALS) for index, word in enumerate(words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
