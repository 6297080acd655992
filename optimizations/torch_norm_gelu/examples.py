"""Before/after examples of ``torch_norm_gelu``; ``tests/test_examples.py`` runs them all."""

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "nanogpt_layer_norm_and_gelu",
        before="""\
import math

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    \"\"\"Layer normalisation over the last dimension, with a learned scale and shift.\"\"\"

    def __init__(self, ndim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def new_gelu(x):
    \"\"\"The GELU of the GPT-2 paper (tanh approximation).\"\"\"
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
""",
        after="""\
import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.Module):
    \"\"\"Layer normalisation over the last dimension, with a learned scale and shift.\"\"\"

    def __init__(self, ndim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


def new_gelu(x):
    \"\"\"The GELU of the GPT-2 paper (tanh approximation).\"\"\"
    return F.gelu(x, approximate="tanh")
""",
    ),
    Example(
        "rsqrt_norm_without_bias_gelu_module_and_erf",
        before="""\
import math

import torch
from torch import nn
from torch.nn import functional as F


class Norm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))

    def forward(self, h):
        centred = h - h.mean(-1, keepdim=True)
        return self.gain * centred * torch.rsqrt((centred**2).mean(-1, keepdim=True) + 1e-6)


class NewGELU(nn.Module):
    def forward(self, x):
        return x * 0.5 * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))


def exact_gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def mlp(x, w):
    return F.linear(exact_gelu(x), w)
""",
        after="""\
import torch
from torch import nn
from torch.nn import functional as F


class Norm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))

    def forward(self, h):
        return F.layer_norm(h, h.shape[-1:], self.gain, None, 1e-6)


class NewGELU(nn.Module):
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


def exact_gelu(x):
    return F.gelu(x)


def mlp(x, w):
    return F.linear(exact_gelu(x), w)
""",
    ),
    Example(
        "already_functional",
        before="""\
import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)
""",
    ),
    Example(
        "refuses_eps_on_standard_deviation",
        before="""\
import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    "Construct a layernorm module (See citation for details)."

    def __init__(self, features, eps=1e-6):
        super(LayerNorm, self).__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2
""",
        refusal="eps is added to the standard deviation",
    ),
    Example(
        "no_site_rms_norm_that_rebinds_its_input",
        # GaLore's modeling_llama.py: `hidden_states = hidden_states * ...` names itself; reading its factors
        # through the intermediate names once recursed without end.
        before="""\
import torch
from torch import nn


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states
""",
    ),
    Example(
        "kept_gelu_whose_docstring_says_it_is_the_exact_one_on_purpose",
        # llm.c's reference model: the C/CUDA kernels mirror this formula, and its docstring warns so.
        before="""\
import math

import torch
import torch.nn as nn


class NewGELU(nn.Module):
    \"\"\"Careful there are a few versions of GeLU, this one is the exact one used by OpenAI\"\"\"

    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))
""",
        kept="the docstring of class `NewGELU` at line 8: `Careful there are a few versions of GeLU",
    ),
)
