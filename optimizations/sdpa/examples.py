"""The ``sdpa`` examples the registry runs: rewrites, refusals, and code left alone."""

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "nanogpt_attention",
        before="""\
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.register_buffer(
            "bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size)
        )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

        # causal self-attention
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)
""",
        after="""\
import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.register_buffer(
            "bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size)
        )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

        # causal self-attention
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.attn_dropout.p if self.attn_dropout.training else 0.0)
        return y.transpose(1, 2).contiguous().view(B, T, C)
""",
    ),
    Example(
        "reshape_matmul_local_triu_mask_self_scale",
        before="""\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = v.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        weights = torch.softmax(scores.masked_fill(mask, -torch.inf), dim=-1)
        weights = torch.nn.functional.dropout(weights, p=self.dropout, training=self.training)
        out = torch.matmul(weights, v)
        return out.transpose(1, 2).reshape(b, t, -1)
""",
        after="""\
from torch import nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = v.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return out.transpose(1, 2).reshape(b, t, -1)
""",
    ),
    Example(
        "softmax_of_other_scores",
        before="""\
import torch


def mix(scores, values):
    return torch.softmax(scores, dim=-1) @ values
""",
    ),
    Example(
        "refuses_returned_attention_weights",
        before="""\
import math

import torch
import torch.nn.functional as F


def attend(q, k, v):
    T = q.size(-2)
    mask = torch.ones(T, T).tril()
    att = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))
    att = att.masked_fill(mask == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    return att @ v, att
""",
        refusal="does not return the attention weights",
    ),
    Example(
        "refuses_temperature_scale",
        before="""\
import torch
import torch.nn.functional as F


def attend(q, k, v, temperature):
    T = q.size(-2)
    mask = torch.ones(T, T).tril()
    att = (q @ k.transpose(-2, -1)) / temperature
    att = att.masked_fill(mask == 0, float("-inf"))
    return F.softmax(att, dim=-1) @ v
""",
        refusal="not provably 1/sqrt(head size)",
    ),
    Example(
        "already_fused",
        before="""\
import torch.nn.functional as F


def attend(q, k, v, p):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
""",
    ),
    Example(
        "kept_hand_written_attention_with_a_reason_above_it",
        before="""\
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.register_buffer(
            "bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size)
        )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

        # keep the explicit softmax: the probe in eval.py needs these weights' exact float32 values
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)
""",
        kept="the comment at line 26: `# keep the explicit softmax",
    ),
    Example(
        "kept_hand_written_attention_in_a_file_with_block_diagonal_masks",
        before="""\
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.register_buffer(
            "bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size)
        )

    def forward(self, x, segments=None):
        if segments is not None:
            mask = torch.block_diag(*segments)
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

        # causal self-attention
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)
""",
        kept="builds block-diagonal attention masks",
    ),
    Example(
        "kept_hand_written_attention_whose_class_docstring_says_it_is_explicit_on_purpose",
        # minGPT: an educational model that writes attention out "to show that there is nothing too scary here".
        before="""\
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    \"\"\"
    A vanilla multi-head masked self-attention layer. It is possible to use torch.nn.MultiheadAttention here but
    I am including an explicit implementation here to show that there is nothing too scary here.
    \"\"\"

    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.register_buffer(
            "bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size)
        )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)
""",
        kept="the docstring of class `CausalSelfAttention` at line 9: `A vanilla multi-head masked self-attention",
    ),
)
