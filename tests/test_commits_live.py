"""Every commit takes effect: a fused-optimizer commit on a program that builds its optimizer before the model
moves to the device (the usual Accelerate order, ``model.to(device)`` after the optimizer, a helper that builds
it for a caller that moves the model) says so, and in a tiny CPU run the optimizer the committed code builds is
fused, as the commit claims, and trains."""

from __future__ import annotations

import runpy
import sys
import textwrap

import pytest
import torch

from bot.scan import render_plan, scan
from optimizations.program.repository import RepoContext
from optimizations.program.shapes import ProgramShape, program_shapes
from optimizations.registry import get

NET = "torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))"

ACCELERATE_ORDER = f"""\
import torch
from accelerate import Accelerator


def main():
    accelerator = Accelerator(cpu=True)
    model = {NET}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(3):
        loss = model(torch.randn(4, 8)).square().mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer
"""

MOVED_AFTER = f"""\
import torch


def main(device="cpu"):
    model = {NET}
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=1e-2)
    model.to(device)
    for _ in range(3):
        loss = model(torch.randn(4, 8, device=device)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer
"""

BUILT_FOR_A_CALLER = f"""\
import torch


def build_optimizer(net):
    return torch.optim.AdamW(net.parameters(), lr=1e-2)


def main(device="cpu"):
    model = {NET}
    optimizer = build_optimizer(model)
    model = model.to(device)
    for _ in range(3):
        loss = model(torch.randn(4, 8, device=device)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer
"""

MOVED_FIRST = f"""\
import torch
from accelerate import Accelerator


def main(device="cpu"):
    accelerator = Accelerator(cpu=True)
    model = {NET}.to(device)
    model.to(torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    model.to(torch.float32)
    return model, optimizer
"""

LATE = "the model moves to its device after the optimizer is built"


def _applied(tmp_path, source: str):
    """The fused_adamw change of a one-file repository, written out; its one site."""
    (tmp_path / "train.py").write_text(source + '\n\nif __name__ == "__main__":\n    main()\n')
    change = get("fused_adamw").dry_run(tmp_path)
    (site,) = change.sites
    assert site.applicable
    for path, text in change.files.items():
        (tmp_path / path).write_text(text)
    return site


def _run(tmp_path):
    """``main()`` of the committed ``train.py``: the model and the optimizer it built and stepped."""
    sys.path.insert(0, str(tmp_path))
    try:
        return runpy.run_path(str(tmp_path / "train.py"))["main"]()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("_perfbot_gpu_flags", None)


@pytest.mark.parametrize(
    ("source", "move"),
    [
        (ACCELERATE_ORDER, "`accelerator.prepare(model, optimizer)` at train.py:9"),
        (MOVED_AFTER, "`model.to(device)` at train.py:8"),
        (BUILT_FOR_A_CALLER, "`model.to(device)` at train.py:11"),
    ],
    ids=["accelerate_prepare", "to_device_after", "helper_then_caller_moves"],
)
def test_optimizer_built_before_the_move_is_fused_in_a_tiny_run(tmp_path, source, move):
    site = _applied(tmp_path, source)
    assert f"{LATE} ({move})" in site.message
    assert "live from torch 2.4" in site.message
    torch.manual_seed(0)
    model, optimizer = _run(tmp_path)
    torch.manual_seed(0)
    before = {name: p.detach().clone() for name, p in eval(NET).named_parameters()}
    inner = getattr(optimizer, "optimizer", optimizer)  # Accelerate wraps the optimizer it prepares
    assert inner.defaults["fused"] is True
    assert all(group["fused"] for group in inner.param_groups)
    moved = [not torch.equal(before[name], p) for name, p in model.named_parameters()]
    assert all(moved)  # the fused steps ran and updated every weight


def test_no_move_note_where_the_model_moved_first(tmp_path):
    site = _applied(tmp_path, MOVED_FIRST)
    assert LATE not in site.message
    _model, optimizer = _run(tmp_path)
    assert optimizer.optimizer.defaults["fused"] is True


def test_parameters_passed_in_with_no_move_in_sight(tmp_path):
    source = textwrap.dedent(
        """\
        import torch


        def main(params=None):
            return None, torch.optim.AdamW(params or [torch.nn.Parameter(torch.zeros(2))], lr=1e-2)
        """
    )
    site = _applied(tmp_path, source)
    assert LATE not in site.message


LOADER = """\
import torch
from transformers import AutoModelForCausalLM


def main(name, model_args):
    model = AutoModelForCausalLM.from_pretrained(name{dtype})
    model.train()
    return model
"""


@pytest.mark.parametrize(
    ("dtype", "live_when"),
    [
        ("", "live only where the weights load in bf16/fp16: this call gives no dtype"),
        (', dtype="auto"', "live only where the checkpoint's weights are bf16/fp16"),
        (", torch_dtype=model_args.dtype", "live only where `model_args.dtype` is bf16/fp16"),
        (", dtype=torch.bfloat16", None),
        (', torch_dtype="float16"', None),
    ],
)
def test_attention_commit_says_when_it_is_live(tmp_path, dtype, live_when):
    """The picker keeps SDPA for float32 weights, so a commit whose call may load them says it is live only
    in half precision; a call that loads bf16/fp16 needs no such word."""
    (tmp_path / "train.py").write_text(LOADER.format(dtype=dtype))
    (site,) = get("fa2").dry_run(tmp_path).sites
    assert site.applicable
    if live_when is None:
        assert "live only" not in site.message
    else:
        assert live_when in site.message


def test_attention_on_float32_weights_is_refused(tmp_path):
    (tmp_path / "train.py").write_text(LOADER.format(dtype=", dtype=torch.float32"))
    (site,) = get("fa2").dry_run(tmp_path).sites
    assert site.refused and "loaded in float32 (`torch.float32`)" in site.reason


# -- the Expected line: a win measured on another shape of program says so --------------------------------

TRL_SCRIPT = """\
from trl import SFTConfig, SFTTrainer


def main(model, dataset):
    SFTTrainer(model=model, args=SFTConfig(output_dir="out"), train_dataset=dataset).train()
"""

HF_SCRIPT = """\
from transformers import Trainer, TrainingArguments


class MyTrainer(Trainer):
    pass


def main(model, dataset):
    MyTrainer(model=model, args=TrainingArguments("out"), train_dataset=dataset).train()
"""


@pytest.mark.parametrize(
    ("files", "shapes"),
    [
        ({"train.py": ACCELERATE_ORDER}, {ProgramShape.LOOP}),
        ({"sft.py": TRL_SCRIPT}, {ProgramShape.TRL_TRAINER}),
        ({"hf.py": HF_SCRIPT, "loop.py": MOVED_AFTER}, {ProgramShape.HF_TRAINER, ProgramShape.LOOP}),
        ({"model.py": "import torch\n\nnet = torch.nn.Linear(2, 2)\n"}, set()),
    ],
    ids=["accelerate_loop", "trl", "hf_subclass_and_loop", "no_training"],
)
def test_program_shapes(tmp_path, files, shapes):
    for path, text in files.items():
        (tmp_path / path).write_text(text)
    assert program_shapes(RepoContext(tmp_path)) == shapes


def test_expected_says_not_measured_for_another_shape():
    fa2 = get("fa2")  # measured on the TRL SFT workload
    assert fa2.expected_for(frozenset({ProgramShape.TRL_TRAINER})) == fa2.expected
    loop = fa2.expected_for(frozenset({ProgramShape.LOOP}))
    assert loop == f"{fa2.expected} (measured on a TRL trainer; not measured for this shape)"
    estimate = get("dataloader_workers")  # no measurement behind its number
    assert estimate.expected_for(frozenset({ProgramShape.LOOP})).endswith("(not measured for this shape)")


def test_drafted_plan_and_commit_qualify_a_number_from_another_shape(tmp_path):
    """The fused-AdamW win was measured on a hand-written loop: on a TRL-only repository the drafted plan's
    cell and the commit's Expected line say it was not measured for this shape; on a loop they do not."""
    (tmp_path / "sft.py").write_text(
        TRL_SCRIPT + "\n\ndef build(model):\n    import torch\n\n"
        "    return torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
    )
    plan = render_plan(tmp_path, scan(tmp_path))
    row = next(line for line in plan.splitlines() if "opt:fused_adamw" in line)
    assert "(measured on a hand-written loop; not measured for this shape)" in row
    loop_repo = tmp_path / "loop"
    loop_repo.mkdir()
    (loop_repo / "train.py").write_text(ACCELERATE_ORDER)
    row = next(
        line for line in render_plan(loop_repo, scan(loop_repo)).splitlines() if "opt:fused_adamw" in line
    )
    assert "not measured for this shape" not in row
