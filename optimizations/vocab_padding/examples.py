"""Before/after examples of ``vocab_padding``; ``tests/test_examples.py`` runs them all."""

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "already_padded_by_the_config_itself",
        path="model.py",
        before="""\
from dataclasses import dataclass
from typing import Optional

import torch.nn as nn


@dataclass
class Config:
    vocab_size: int = 50254
    padding_multiple: int = 512
    padded_vocab_size: Optional[int] = None
    n_embd: int = 768

    def __post_init__(self):
        if self.padded_vocab_size is None:
            self.padded_vocab_size = -(-self.vocab_size // self.padding_multiple) * self.padding_multiple


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.padded_vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
""",
    ),
    Example(
        "config_field",
        path="model.py",
        before="""\
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50257  # GPT-2 BPE
    n_embd: int = 768


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
""",
        after="""\
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2 BPE
    n_embd: int = 768


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
""",
    ),
    Example(
        "config_built_in_another_file",
        before="""\
from model import GPTConfig

SIZES = {"small": GPTConfig(n_layer=12, vocab_size=50257), "tiny": GPTConfig(n_layer=2, vocab_size=512)}
""",
        after="""\
from model import GPTConfig

SIZES = {"small": GPTConfig(n_layer=12, vocab_size=50304), "tiny": GPTConfig(n_layer=2, vocab_size=512)}
""",
        files={
            "model.py": """\
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class GPTConfig:
    n_layer: int = 12
    vocab_size: int = 50304


def head(config, width):
    return nn.Linear(width, config.vocab_size)
"""
        },
    ),
    Example(
        "a_read_in_a_script_that_shares_nothing_is_not_a_problem",
        before="""\
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class GPTConfig:
    vocab_size: int = 50257


def head(config, width):
    return nn.Linear(width, config.vocab_size)
""",
        after="""\
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class GPTConfig:
    vocab_size: int = 50304


def head(config, width):
    return nn.Linear(width, config.vocab_size)
""",
        files={
            "records/old_train.py": """\
from dataclasses import dataclass


@dataclass
class OldConfig:
    vocab_size: int = 50257


def check(config, tokenizer):
    assert config.vocab_size == tokenizer.n_vocab
"""
        },
    ),
    Example(
        "already_padded_by_the_model_class",
        before="""\
import torch.nn as nn


def next_multiple_of_n(v, *, n):
    return next(x for x in range(n, int(v) + 1 + n, n) if x >= v)


class GPT(nn.Module):
    def __init__(self, vocab_size: int, model_dim: int):
        super().__init__()
        vocab_size = next_multiple_of_n(vocab_size, n=128)
        self.embed = nn.Embedding(vocab_size, model_dim)


model = GPT(vocab_size=50257, model_dim=768)
""",
    ),
    Example(
        "a_namesake_class_that_pads_in_an_unrelated_script_is_another_class",
        before="""\
import torch.nn as nn


class GPT(nn.Module):
    def __init__(self, vocab_size: int, model_dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, model_dim)


model = GPT(vocab_size=50257, model_dim=768)
""",
        after="""\
import torch.nn as nn


class GPT(nn.Module):
    def __init__(self, vocab_size: int, model_dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, model_dim)


model = GPT(vocab_size=50304, model_dim=768)
""",
        files={
            "records/newer_train.py": """\
import torch.nn as nn


class GPT(nn.Module):
    def __init__(self, vocab_size: int, model_dim: int):
        super().__init__()
        self.embed = nn.Embedding(round_up(vocab_size, 128), model_dim)
"""
        },
    ),
    Example(
        "already_a_multiple_of_64",
        before="""\
class Config:
    vocab_size = 32000
""",
    ),
    Example(
        "refuses_size_checked_against_tokenizer",
        before="""\
from dataclasses import dataclass

import tiktoken


@dataclass
class Config:
    vocab_size: int = 50257


def check(config):
    assert config.vocab_size == tiktoken.get_encoding("gpt2").n_vocab
""",
        refusal="`config.vocab_size` is read at train.py:12",
    ),
    Example(
        "refuses_hugging_face_config",
        before="""\
from transformers import GPT2Config

config = GPT2Config(vocab_size=50257, n_layer=12)
""",
        refusal="resize_token_embeddings",
    ),
    Example(
        "pads_resized_hugging_face_embeddings",
        before="""\
def get_model_tokenizer(model, tokenizer):
    model.resize_token_embeddings(len(tokenizer))
    return model, tokenizer
""",
        after="""\
def get_model_tokenizer(model, tokenizer):
    model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)
    return model, tokenizer
""",
    ),
    Example(
        "proposes_resize_whose_new_rows_are_the_last_rows",
        before="""\
def resize(tokens, tokenizer, model):
    count = tokenizer.add_special_tokens(tokens)
    model.resize_token_embeddings(len(tokenizer))
    embeddings = model.get_input_embeddings().weight.data
    embeddings[-count:] = embeddings[:-count].mean(dim=0, keepdim=True)
""",
        proposal="initialises the new tokens as the last rows",
    ),
    Example(
        "refuses_resize_under_an_old_transformers",
        before="""\
def resize(model, tokenizer):
    model.resize_token_embeddings(len(tokenizer))
""",
        files={"requirements.txt": "transformers==4.31.0\n"},
        refusal="keeps transformers below 4.32",
    ),
)
