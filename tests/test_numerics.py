"""Numerics contracts: every optimization declares one, `bot list` and each commit show it, and a drafted plan
keeps anything but pure speedups out of the tiers applied unconditionally."""

from __future__ import annotations

import json

import pytest
from git_repos import make_repo

from bot.cli import main
from bot.plan import parse_plan
from bot.scan import Finding, render_plan, scan
from bot.workspace import Workspace
from optimizations.program.repository import Site
from optimizations.registry import Numerics, registry

PURE_SPEEDUPS = "### Performance fixes (apply unconditionally; pure speedups)"
NUMERICS_CHANGES = "### Changes to what training computes"

SFT = """\
from trl import SFTConfig, SFTTrainer


def main(model, dataset):
    args = SFTConfig(output_dir="out", bf16=False)  # fp32: TRL's configs train in bf16 unless told otherwise
    SFTTrainer(model=model, args=args, train_dataset=dataset).train()
"""


def test_every_registered_optimization_declares_a_contract_and_says_why_where_not_exact():
    for optimization in registry().values():
        assert isinstance(optimization.numerics, Numerics), optimization.id
        if optimization.numerics is not Numerics.EXACT:
            assert optimization.numerics_reason.strip(), optimization.id


def test_the_changes_measured_to_move_training_are_dynamics():
    # packing: 125 -> 16 steps an epoch; vocab_padding: new logits in the softmax's normaliser
    for optimization_id in ("packing", "vocab_padding"):
        assert registry()[optimization_id].numerics is Numerics.DYNAMICS
    # bf16_adapters keeps float32 adapter weights and optimizer state (tests/test_update_fidelity.py: every
    # element moves at lr 5e-6): bf16 matmuls only
    assert registry()["bf16_adapters"].numerics is Numerics.ROUNDING


def _findings(bf16: bool) -> list[Finding]:
    """One changeable site for every registered optimization; with ``bf16``, bf16 autocast finds the program
    already training in bf16 instead."""
    findings = []
    for line, optimization in enumerate(registry().values(), start=1):
        already = bf16 and optimization.id == "bf16_autocast"
        site = Site(
            "train.py", line, optimization.id, f"{optimization.id} here", not already, already=already
        )
        findings.append(Finding(optimization, [site]))
    return findings


@pytest.mark.parametrize("bf16", [False, True])
def test_no_dynamics_change_is_drafted_among_the_pure_speedups(tmp_path, bf16):
    text = render_plan(tmp_path, _findings(bf16))
    speedups = text[text.index(PURE_SPEEDUPS) : text.index(NUMERICS_CHANGES)]
    changes = text[text.index(NUMERICS_CHANGES) : text.index("## Success criteria")]
    plan = parse_plan(text, registry().values(), "scan")
    dynamics = [o.id for o in registry().values() if o.numerics is Numerics.DYNAMICS]
    assert dynamics and not [i for i in dynamics if f"(opt:{i})" in speedups]
    opt_in_tier = 1 + max(o.tier for o in registry().values())
    tier_of = {i: item.tier for item in plan.items if item.auto_apply for i in item.optimizations}
    for optimization in registry().values():
        row = f"(opt:{optimization.id})"
        pure = optimization.numerics is Numerics.EXACT or (
            bf16 and optimization.numerics is Numerics.ROUNDING
        )
        if optimization.id == "bf16_autocast" and bf16:
            continue  # already done: no row
        assert (row in speedups, row in changes) == (pure, not pure), optimization.id
        assert tier_of[optimization.id] == (optimization.tier if pure else opt_in_tier), optimization.id
        if not pure:
            assert optimization.numerics.shown(optimization.numerics_reason) in changes
    assert ("did not see the files of the `rounding` rows here train in bf16" in changes) is not bf16


LOOP = """\
import torch


def train(model, loader, optimizer):
    for x, y in loader:
{forward}
        loss.backward()
        optimizer.step()
"""
FP32 = "        loss = torch.nn.functional.cross_entropy(model(x), y)"
BF16 = '        with torch.autocast("cuda", dtype=torch.bfloat16):\n    ' + FP32


@pytest.mark.parametrize(("forward", "pure"), [(BF16, True), (FP32, False)])
def test_rounding_counts_as_a_pure_speedup_only_where_the_loop_already_autocasts_to_bf16(
    tmp_path, forward, pure
):
    make_repo(tmp_path, {"train.py": LOOP.format(forward=forward)})
    text = render_plan(tmp_path, scan(tmp_path))
    end = text.index(NUMERICS_CHANGES) if NUMERICS_CHANGES in text else text.index("### Refused sites")
    assert "(opt:tf32)" in text and ("(opt:tf32)" in text[:end]) is pure
    assert (PURE_SPEEDUPS in text) is pure  # nothing else in this loop is exact


def test_a_rounding_change_is_pure_in_the_files_that_train_in_bf16_and_opt_in_elsewhere(tmp_path):
    """Lightning-AI/litgpt's shape: its trainers set bf16 and one tutorial trains in fp32. The tutorial keeps the
    repository from reading as bf16, but not the trainers' rounding changes from their tier."""
    make_repo(tmp_path, {"bf16.py": LOOP.format(forward=BF16), "fp32.py": LOOP.format(forward=FP32)})
    text = render_plan(tmp_path, scan(tmp_path))
    speedups = text[text.index(PURE_SPEEDUPS) : text.index(NUMERICS_CHANGES)]
    changes = text[text.index(NUMERICS_CHANGES) : text.index("### Refused sites")]
    [pure] = [line for line in speedups.splitlines() if "(opt:tf32)" in line]
    [opt_in] = [line for line in changes.splitlines() if "(opt:tf32)" in line]
    assert "bf16.py:" in pure and "fp32.py" not in pure
    assert "fp32.py:" in opt_in and "bf16.py" not in opt_in


def test_scan_plan_then_apply_tier_1_lands_only_pure_speedups_and_the_opt_in_tier_the_rest(tmp_path, capsys):
    root = tmp_path / "target"
    repo = make_repo(root, {"train.py": SFT})
    assert main(["scan", str(root), "--plan"]) == 0
    plan = tmp_path / "PLAN.md"
    plan.write_text(capsys.readouterr().out)

    def landed(since: str) -> dict[str, str]:
        return {c.optimization: repo.commit(c.sha).message for c in Workspace(root).bot_commits(since)}

    base = repo.head.commit.hexsha
    assert main(["apply", "--tier", "1", "--plan", str(plan), "--repo", str(root)]) == 0
    tier1 = landed(base)
    assert list(tier1) == ["dataloader_workers"]
    workers = registry()["dataloader_workers"]
    assert f"\nNumerics: exact ({Numerics.EXACT.meaning}) — {workers.numerics_reason}\n" in tier1[workers.id]

    head = repo.head.commit.hexsha
    opt_in_tier = 1 + max(o.tier for o in registry().values())
    assert main(["apply", "--tier", str(opt_in_tier), "--plan", str(plan), "--repo", str(root)]) == 0
    packing = registry()["packing"]
    message = landed(head)[packing.id]
    assert f"\nNumerics: dynamics ({Numerics.DYNAMICS.meaning}) — {packing.numerics_reason}\n" in message


def test_bot_list_shows_each_contract_and_why(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # piped, and no width asked: one whole line per optimization
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "numerics" in lines[0].split()
    for optimization in registry().values():
        [row] = [line for line in lines if line.split()[0] == optimization.id]
        assert optimization.numerics.shown(optimization.numerics_reason) in row
    assert main(["--json", "list"]) == 0
    shown = {
        row["id"]: (row["numerics"], row["numerics_reason"]) for row in json.loads(capsys.readouterr().out)
    }
    assert shown == {o.id: (o.numerics.value, o.numerics_reason) for o in registry().values()}
