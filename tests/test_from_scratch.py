"""The from-scratch GPT optimizations (bf16 autocast, SDPA, torch's layer norm/GELU, torch.compile, vocabulary
padding): each transformed model or loop computes what the original did, on CPU, within float32 rounding;
the example's PLAN.md names them; `bot apply` on a copy of examples/gpt_loop makes commits that lint and
still train.

Equivalence: the source before and after the transform is executed, the model built from each with the
same weights (the after model loads the before model's state dict, strictly), and the forward outputs and
every gradient compared. The largest absolute differences are printed (``pytest -s``).
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import types
from pathlib import Path

import git
import pytest
import torch
from git_repos import commit_all

from bot.cli import main
from bot.plan import parse_plan
from bot.workspace import Workspace
from optimizations.program.repository import RepoContext
from optimizations.registry import registry
from optimizations.runtime import COMPILE_RUNTIME, GPU_FLAGS_RUNTIME, PRECISION_RUNTIME

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gpt_loop"
FLOAT32_TOLERANCE = 1e-5  # relative to the largest value compared
MODULE = "from_scratch_example"


def transformed(
    optimization_ids: list[str], source: str, path: str = "model.py", root: Path = EXAMPLE
) -> str:
    """``source`` after each optimization in turn; every one must change something."""
    for optimization_id in optimization_ids:
        result = registry()[optimization_id].transform_source(source, path, RepoContext(root))
        assert result.source != source, (optimization_id, [s.describe() for s in result.sites])
        source = result.source
    return source


def load(source: str) -> dict:
    """The namespace of ``source`` executed as a module (named :data:`MODULE` while it runs, for dataclasses)."""
    module = types.ModuleType(MODULE)
    sys.modules[MODULE] = module
    try:
        exec(compile(source, "<example>", "exec"), module.__dict__)
    finally:
        del sys.modules[MODULE]
    return module.__dict__


@pytest.fixture
def vendored(monkeypatch):
    """The runtime helpers importable under their vendored names, as they are in a patched repository."""
    for runtime in (PRECISION_RUNTIME, COMPILE_RUNTIME, GPU_FLAGS_RUNTIME):
        module = types.ModuleType(runtime.module)
        exec(compile(runtime.source(), module.__name__, "exec"), module.__dict__)
        monkeypatch.setitem(sys.modules, module.__name__, module)


def max_difference(
    before: torch.nn.Module, after: torch.nn.Module, inputs, train: bool
) -> tuple[float, float]:
    """The largest difference between the two modules' outputs, input gradients and parameter gradients,
    absolute and relative to the largest value compared; ``after`` takes ``before``'s weights first."""
    after.load_state_dict(before.state_dict())
    before.train(train)
    after.train(train)
    results = []
    for module in (before, after):
        leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
        output = module(*leaves)
        output = output[0] if isinstance(output, tuple) else output
        torch.manual_seed(1)
        output.mul(torch.randn_like(output)).sum().backward()
        grads = [x.grad for x in leaves if x.grad is not None] + [p.grad for p in module.parameters()]
        results.append([output.detach(), *grads])
    pairs = list(zip(*results, strict=True))
    absolute = max((a - b).abs().max().item() for a, b in pairs)
    relative = absolute / max(a.abs().max().item() for a, _ in pairs)
    return absolute, relative


# -- scaled_dot_product_attention ------------------------------------------------------------------------
NANOGPT_CONFIG = types.SimpleNamespace(n_embd=32, n_head=4, block_size=16, dropout=0.2)

# Variants not written for the transform: torch.matmul, `/ math.sqrt(self.head_dim)`, a method softmax,
# dropout around it, a 2-D tril buffer; a bool triu buffer, permute, `k.shape[-1] ** -0.5` as its own
# statement, the mask applied after the scale; a local triu mask and `self.scale` (from the examples).
VARIANTS = {
    "matmul_head_dim_method_softmax": (
        """\
import math

import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.n_head = n_head
        self.head_dim = n_embd // n_head
        self.q = nn.Linear(n_embd, n_embd)
        self.k = nn.Linear(n_embd, n_embd)
        self.v = nn.Linear(n_embd, n_embd)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x):
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = self.v(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        wei = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        wei = self.drop(wei.softmax(dim=-1))
        return torch.matmul(wei, v).transpose(1, 2).reshape(B, T, C)
""",
        lambda ns: ns["SelfAttention"](32, 4, 16, 0.2),
    ),
    "bool_triu_buffer_permute_power_scale": (
        """\
import torch
from torch import nn


class Attn(nn.Module):
    def __init__(self, dim, heads, max_len):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        causal = torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x):
        b, n, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.reshape(b, n, h, d // h).permute(0, 2, 1, 3)
        k = k.reshape(b, n, h, d // h).permute(0, 2, 1, 3)
        v = v.reshape(b, n, h, d // h).permute(0, 2, 1, 3)
        scores = q @ k.transpose(-1, -2)
        scores = scores * k.shape[-1] ** -0.5
        scores = scores.masked_fill(self.causal[:n, :n], float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return out.permute(0, 2, 1, 3).reshape(b, n, d)
""",
        lambda ns: ns["Attn"](32, 4, 16),
    ),
}


def sdpa_cases() -> dict:
    """``name -> (source, build)``: the examples the transform changes, and the variants."""
    examples = {e.name: e.before for e in registry()["sdpa"].examples}
    return {
        "nanogpt_attention": (
            examples["nanogpt_attention"],
            lambda ns: ns["CausalSelfAttention"](NANOGPT_CONFIG),
        ),
        "local_triu_self_scale": (
            examples["reshape_matmul_local_triu_mask_self_scale"],
            lambda ns: ns["Attention"](32, 4, dropout=0.2),
        ),
        **VARIANTS,
    }


@pytest.mark.parametrize(
    ("name", "source", "build"), [pytest.param(n, s, b, id=n) for n, (s, b) in sdpa_cases().items()]
)
@pytest.mark.parametrize("seq", [16, 5])
def test_sdpa_computes_the_hand_written_attention(name, source, build, seq):
    after = transformed(["sdpa"], source)
    assert "scaled_dot_product_attention" in after and "softmax" not in after
    torch.manual_seed(0)
    before_model, after_model = build(load(source)), build(load(after))
    x = torch.randn(3, seq, 32)
    # eval: dropout off in both; the weights' gradients cover the whole chain
    absolute, relative = max_difference(before_model, after_model, [x], train=False)
    print(f"sdpa {name} T={seq}: max abs diff {absolute:.2e} (relative {relative:.1e})")
    assert relative < FLOAT32_TOLERANCE


def test_sdpa_dropout_only_while_training():
    source = sdpa_cases()["nanogpt_attention"][0]
    namespace = load(transformed(["sdpa"], source))
    model = namespace["CausalSelfAttention"](NANOGPT_CONFIG)
    x = torch.randn(2, 16, 32)
    model.eval()
    assert torch.equal(model(x), model(x))
    model.train()
    assert not torch.equal(model(x), model(x))  # attention dropout (p=0.2) is drawn in training


# -- layer norm and GELU -------------------------------------------------------------------------------------
def test_layer_norm_and_gelu_match_the_hand_written_ones():
    for example in registry()["torch_norm_gelu"].examples:
        if example.after is None:
            continue
        before, after = load(example.before), load(example.after)
        torch.manual_seed(0)
        x = torch.randn(4, 7, 24) * 3 + 1
        for name, value in before.items():
            if isinstance(value, type) and issubclass(value, torch.nn.Module) and value.__module__ == MODULE:
                args = () if name.endswith("GELU") else (24,)
                module_before, module_after = value(*args), after[name](*args)
                with torch.no_grad():
                    for p in module_before.parameters():
                        p.uniform_(-2, 2)
                absolute, relative = max_difference(module_before, module_after, [x], train=True)
            elif callable(value) and getattr(value, "__module__", None) == MODULE and name.endswith("gelu"):
                a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
                out_a, out_b = value(a), after[name](b)
                out_a.sum().backward()
                out_b.sum().backward()
                absolute = max((out_a - out_b).abs().max().item(), (a.grad - b.grad).abs().max().item())
                relative = absolute / max(out_a.abs().max().item(), a.grad.abs().max().item())
            else:
                continue
            print(
                f"torch_norm_gelu {example.name} {name}: max abs diff {absolute:.2e} (relative {relative:.1e})"
            )
            assert relative < FLOAT32_TOLERANCE, (example.name, name)


# -- the whole example model ------------------------------------------------------------------------------
def test_gpt_example_model_with_sdpa_and_torch_kernels_is_the_same_model():
    source = (EXAMPLE / "model.py").read_text()
    after = transformed(["sdpa", "torch_norm_gelu"], source)
    assert "import math" not in after  # nothing else used it
    before_ns, after_ns = load(source), load(after)
    config = dict(block_size=32, vocab_size=96, n_layer=2, n_head=4, n_embd=64, dropout=0.1)
    torch.manual_seed(0)
    before_model = before_ns["GPT"](before_ns["GPTConfig"](**config))
    after_model = after_ns["GPT"](after_ns["GPTConfig"](**config))
    assert before_model.state_dict().keys() == after_model.state_dict().keys()
    idx = torch.randint(0, 96, (4, 32))
    targets = torch.randint(0, 96, (4, 32))
    absolute, relative = max_difference(before_model, after_model, [idx, targets], train=False)
    print(
        f"gpt_loop model.py (sdpa + torch_norm_gelu): max abs diff {absolute:.2e} (relative {relative:.1e})"
    )
    assert relative < FLOAT32_TOLERANCE


def test_padded_vocabulary_gives_the_same_logits_for_real_tokens():
    model_source = (EXAMPLE / "model.py").read_text()
    after = transformed(["vocab_padding"], model_source)
    before_ns, after_ns = load(model_source), load(after)
    assert after_ns["GPTConfig"]().vocab_size == 50304
    assert before_ns["GPTConfig"]().vocab_size == 50257
    config = dict(block_size=16, n_layer=1, n_head=2, n_embd=16)
    torch.manual_seed(0)
    before_model = before_ns["GPT"](before_ns["GPTConfig"](**config))
    after_model = after_ns["GPT"](after_ns["GPTConfig"](**config))
    state = after_model.state_dict()
    for key, value in before_model.state_dict().items():
        state[key][: value.shape[0]] = value  # the real rows; the padded ones keep their initialisation
    after_model.load_state_dict(state)
    idx = torch.randint(0, 50257, (2, 16))
    with torch.no_grad():
        logits_before, loss_before = before_model(idx, idx)
        logits_after, loss_after = after_model(idx, idx)
    logits_difference = (logits_after[..., :50257] - logits_before).abs().max().item()
    loss_difference = (loss_after - loss_before).item()
    print(
        f"vocab_padding: real-token logits max abs diff {logits_difference:.2e}, loss +{loss_difference:.2e}"
    )
    assert logits_difference == 0
    # the padded logits only add their share of the softmax normaliser: (50304 - 50257) / 50304 at most
    assert 0 <= loss_difference < math.log1p(4 * 47 / 50257)


# -- the loop transforms: a CPU run is the run it was ----------------------------------------------------
LOOP = """\
import torch


def train(steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        x = torch.randn(4, 8)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
"""


@pytest.mark.parametrize("optimization_id", ["bf16_autocast", "compile_model"])
def test_loop_transforms_leave_a_cpu_run_unchanged(optimization_id, vendored, tmp_path):
    after = transformed([optimization_id], LOOP, "train.py", tmp_path)
    assert (
        ("torch.autocast" in after)
        if optimization_id == "bf16_autocast"
        else ("compile_model(model)" in after)
    )
    before_losses, after_losses = load(LOOP)["train"](5), load(after)["train"](5)
    difference = max(abs(a - b) for a, b in zip(before_losses, after_losses, strict=True))
    print(f"{optimization_id} on CPU: max abs loss diff over 5 steps {difference:.2e}")
    assert difference == 0


# -- the plan and the example repository -------------------------------------------------------------------
def test_plan_names_every_optimization():
    plan = parse_plan((EXAMPLE / "PLAN.md").read_text(), registry().values(), "PLAN.md")
    named = {opt for item in plan.items for opt in item.optimizations}
    assert {"bf16_autocast", "sdpa", "torch_norm_gelu", "compile_model", "vocab_padding"} <= named
    assert not [item.key for item in plan.items if not item.optimizations]


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_apply_tiers_on_the_example_lints_and_trains(tmp_path):
    root = tmp_path / "gpt_loop"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__", ".bot", "outputs"))
    repo = git.Repo.init(root, initial_branch="main")
    commit_all(repo, "gpt loop")
    baseline = repo.head.commit.hexsha
    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 0
    tier1 = Workspace(root).bot_commits(baseline)
    expected = {"bf16_autocast", "sdpa", "dataloader_workers", "torch_norm_gelu", "tf32"}
    assert {c.optimization for c in tier1} == expected
    pinned = repo.git.show(f"{next(c.sha for c in tier1 if c.optimization == 'dataloader_workers')}:train.py")
    assert "pin_memory=torch.cuda.is_available()" in pinned  # the loop's --num-workers is left as it is
    assert main(["apply", "--tier", "2", "--repo", str(root)]) == 0
    tier2 = Workspace(root).bot_commits(tier1[-1].sha)
    assert {c.optimization for c in tier2} == {"compile_model", "vocab_padding", "fused_adamw"}
    branch = repo.active_branch.name
    try:
        for commit in [*tier1, *tier2]:
            repo.git.checkout("-q", commit.sha)
            lint = run([sys.executable, "-m", "ruff", "check", "--select", "F", "."], root)
            assert lint.returncode == 0, (commit.optimization, lint.stdout)
            trained = run([sys.executable, "train.py", "--size", "tiny", "--max-steps", "5"], root)
            assert trained.returncode == 0, (commit.optimization, trained.stderr[-2000:])
            assert "step 5: loss" in trained.stdout, (commit.optimization, trained.stdout)
    finally:
        repo.git.checkout("-q", branch)
