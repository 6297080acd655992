"""sdpa recognises hand-written causal attention by its math, whatever the spelling: each module below (written
for these tests) computes the same outputs and gradients after the transform as before, in eval mode, with the
same state dict (loaded strictly: the mask buffer stays); the spellings it must not touch are refused with the
line that blocks, and attention already fused is reported as already done."""

from __future__ import annotations

import pytest
import torch
from test_from_scratch import FLOAT32_TOLERANCE, load, max_difference, transformed

from bot.plan import match_optimizations
from optimizations.program.repository import RepoContext
from optimizations.registry import registry

# Heads split by `.view` and `.transpose` on separate lines, `k.transpose(2, 3)`, a local bool slice of a
# float triu buffer, the scores masked in place with `-torch.inf` before they are scaled by `/ k.shape[-1]**0.5`.
SEPARATE_STEPS = """\
import torch
import torch.nn as nn


class HeadsAttention(nn.Module):
    def __init__(self, width, heads, longest, p):
        super().__init__()
        self.heads = heads
        self.size = width // heads
        self.to_q = nn.Linear(width, width, bias=False)
        self.to_k = nn.Linear(width, width, bias=False)
        self.to_v = nn.Linear(width, width, bias=False)
        self.proj = nn.Linear(width, width)
        self.drop = nn.Dropout(p)
        self.register_buffer("upper", torch.triu(torch.ones(longest, longest), diagonal=1))

    def forward(self, x):
        n, steps, width = x.shape
        k = self.to_k(x)
        q = self.to_q(x)
        v = self.to_v(x)
        k = k.view(n, steps, self.heads, self.size)
        v = v.view(n, steps, self.heads, self.size)
        q = q.view(n, steps, self.heads, self.size)
        k = k.transpose(1, 2)
        q = q.transpose(1, 2)
        v = v.transpose(1, 2)
        raw = q @ k.transpose(2, 3)
        hidden = self.upper.bool()[:steps, :steps]
        raw.masked_fill_(hidden, -torch.inf)
        probs = torch.softmax(raw / k.shape[-1]**0.5, dim=-1)
        probs = self.drop(probs)
        mixed = (probs @ v).transpose(1, 2)
        return self.proj(mixed.reshape(n, steps, width))
"""

# Scores and output by einsum, `* self.scale` (`head ** -0.5`), fused QKV by `chunk`, a 4-D tril buffer read
# `== 0`, filled with `torch.finfo(...).min`, `F.dropout(..., training=self.training)`.
EINSUM_FUSED = """\
import torch
import torch.nn.functional as F
from torch import nn


class FusedEinsum(nn.Module):
    def __init__(self, width, heads, longest, p):
        super().__init__()
        self.heads = heads
        self.head = width // heads
        self.scale = self.head ** -0.5
        self.p = p
        self.qkv = nn.Linear(width, 3 * width)
        self.register_buffer("keep", torch.tril(torch.ones(longest, longest)).view(1, 1, longest, longest))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, self.head).transpose(1, 2)
        k = k.reshape(b, t, self.heads, self.head).transpose(1, 2)
        v = v.reshape(b, t, self.heads, self.head).transpose(1, 2)
        s = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        s = s.masked_fill(self.keep[:, :, :t, :t] == 0, torch.finfo(s.dtype).min)
        a = F.dropout(F.softmax(s, dim=-1), p=self.p, training=self.training)
        y = torch.einsum("bhij,bhjd->bhid", a, v)
        return y.transpose(1, 2).reshape(b, t, c)
"""

# A mask added to the scores: a triu of `torch.full(..., float("-inf"))` buffer; `torch.matmul`; `/ math.sqrt(d)`
# with `d` a local read from q; permute for the heads.
ADDITIVE_MASK = """\
import math

import torch
import torch.nn as nn


class AddedMask(nn.Module):
    def __init__(self, width, heads, longest):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.register_buffer("bias", torch.triu(torch.full((longest, longest), float("-inf")), diagonal=1))

    def forward(self, x):
        b, t, c = x.shape
        k, v = self.kv(x).split(c, dim=-1)
        q = self.q(x).view(b, t, self.heads, c // self.heads).permute(0, 2, 1, 3)
        k = k.view(b, t, self.heads, c // self.heads).permute(0, 2, 1, 3)
        v = v.view(b, t, self.heads, c // self.heads).permute(0, 2, 1, 3)
        d = q.size(-1)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores + self.bias[:t, :t]
        out = torch.matmul(scores.softmax(dim=-1), v)
        return out.permute(0, 2, 1, 3).reshape(b, t, c)
"""

# The causal mask built inline, in the masked_fill call; `* (1.0 / math.sqrt(self.head))`.
INLINE_MASK = """\
import math

import torch
import torch.nn as nn


class InlineMask(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.head = width // heads
        self.qkv = nn.Linear(width, 3 * width, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, self.head).transpose(1, 2)
        k = k.view(b, t, self.heads, self.head).transpose(1, 2)
        v = v.view(b, t, self.heads, self.head).transpose(1, 2)
        w = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head))
        w = w.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1), float("-inf"))
        w = torch.softmax(w, dim=-1)
        return (w @ v).transpose(1, 2).reshape(b, t, c)
"""

SPELLINGS = {
    "separate_steps": (SEPARATE_STEPS, lambda ns: ns["HeadsAttention"](32, 4, 16, 0.1)),
    "einsum_fused": (EINSUM_FUSED, lambda ns: ns["FusedEinsum"](32, 4, 16, 0.1)),
    "additive_mask": (ADDITIVE_MASK, lambda ns: ns["AddedMask"](32, 4, 16)),
    "inline_mask": (INLINE_MASK, lambda ns: ns["InlineMask"](32, 4)),
}


def sdpa(source: str):
    return registry()["sdpa"].transform_source(source, "model.py", RepoContext("."))


@pytest.mark.parametrize(("name", "source", "build"), [(n, s, b) for n, (s, b) in SPELLINGS.items()])
@pytest.mark.parametrize("seq", [16, 7])
def test_each_spelling_computes_the_same_attention(name, source, build, seq):
    after = transformed(["sdpa"], source)
    assert "scaled_dot_product_attention" in after and "softmax" not in after, after
    compile(after, name, "exec")
    torch.manual_seed(0)
    before_model, after_model = build(load(source)), build(load(after))
    x = torch.randn(2, seq, 32)
    absolute, relative = max_difference(before_model, after_model, [x], train=False)
    print(f"sdpa {name} T={seq}: max abs diff {absolute:.2e} (relative {relative:.1e})")
    assert relative < FLOAT32_TOLERANCE


def test_the_mask_buffer_stays_in_the_state_dict():
    after = transformed(["sdpa"], SEPARATE_STEPS)
    model = load(after)["HeadsAttention"](32, 4, 16, 0.1)
    assert "upper" in model.state_dict()
    assert "hidden" not in after and "masked_fill_" not in after  # the local mask and the in-place fill go


def test_dropout_of_the_module_follows_training():
    after = transformed(["sdpa"], SEPARATE_STEPS)
    assert "dropout_p=self.drop.p if self.drop.training else 0.0" in after


REFUSED = {
    "padding mask": (
        SEPARATE_STEPS.replace(
            "hidden = self.upper.bool()[:steps, :steps]", "hidden = x[:, None, None, :, 0] > 0"
        ),
        "is not a buffer slice or a tensor built here",
    ),
    "weights kept": (
        SEPARATE_STEPS.replace(
            "probs = self.drop(probs)", "self.kept = probs\n        probs = self.drop(probs)"
        ),
        "does not return the attention weights",
    ),
    "not causal": (
        SEPARATE_STEPS.replace("diagonal=1", "diagonal=2"),
        "is not causal",
    ),
    "added bias": (
        ADDITIVE_MASK.replace('float("-inf")', "-1.0"),
        "is not -inf where it masks",
    ),
    "heads not first": (
        EINSUM_FUSED.replace('"bhid,bhjd->bhij", q, k', '"bihd,bjhd->bhij", q, k'),
        "is not q @ kᵀ",
    ),
    "transpose of unknown rank": (
        SEPARATE_STEPS.replace("k = k.transpose(1, 2)\n", "k = k.transpose(1, 2).flatten(0, 0)\n"),
        "only if k is 4-D",
    ),
}


@pytest.mark.parametrize(("source", "reason"), REFUSED.values(), ids=list(REFUSED))
def test_attention_it_cannot_prove_is_refused_with_the_line(source, reason):
    result = sdpa(source)
    assert result.source == source
    refused = [s for s in result.sites if s.refused]
    assert len(refused) == 1 and reason in refused[0].reason, [s.describe() for s in result.sites]
    assert source.splitlines()[refused[0].line - 1].strip()  # a line of code, not a blank


FUSED_WITH_FALLBACK = """\
import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, width, heads, longest):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.fast = hasattr(F, "scaled_dot_product_attention")
        self.register_buffer("causal", torch.triu(torch.ones(longest, longest, dtype=torch.bool), diagonal=1))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        if self.fast:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * k.size(-1) ** -0.5
            att = att.masked_fill(self.causal[:t, :t], float("-inf"))
            y = att.softmax(dim=-1) @ v
        return y.transpose(1, 2).reshape(b, t, c)
"""


def test_attention_already_fused_is_already_done():
    result = sdpa(FUSED_WITH_FALLBACK)
    assert result.source == FUSED_WITH_FALLBACK  # the fallback beside it stays as written
    assert [(s.line, s.already) for s in result.sites] == [(21, True)]
    assert "F.scaled_dot_product_attention" in result.sites[0].message


def test_a_transformed_file_is_already_done_the_second_time():
    once = transformed(["sdpa"], SEPARATE_STEPS)
    again = sdpa(once)
    assert again.source == once
    assert [s.already for s in again.sites] == [True]


@pytest.mark.parametrize(
    ("text", "optimizations"),
    [
        # a capability: fa2 for a Hugging Face model, sdpa for hand-written attention; the repository decides
        ("Use PyTorch's fused attention", {"fa2", "sdpa"}),
        ("Tensor cores for float32 matmuls", {"tf32"}),
    ],
)
def test_plain_words_name_the_optimization(text, optimizations):
    assert {i for i, _ in match_optimizations(text, registry().values())} == optimizations
