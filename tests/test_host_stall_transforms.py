"""The issue-7 transforms (prefetcher, sync-free logging, fused AdamW, TF32) applied one after another to the
example repository: each edits both hand-written loops, and both still train to the same losses on CPU, as each
change's numerics contract allows: bit for bit after an ``exact`` change, within the contract's loss tolerance
after a ``rounding`` one (fused AdamW and TF32 round in another order)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from git_repos import EXAMPLE_IGNORE, copy_example

from benchmarks.stats import DEFAULT_THRESHOLDS
from optimizations.prefetcher.edit import RUNTIME as PREFETCHER_RUNTIME
from optimizations.registry import Numerics, get
from optimizations.runtime import GPU_FLAGS_RUNTIME

CHAIN = ("prefetcher", "sync_free_logging", "fused_adamw", "tf32")
LOOPS = ("train_vision.py", "train_loop.py")
LOSS_LINE = re.compile(r"^step=(\d+) loss=(\S+)$", re.MULTILINE)


def _run(repo: Path, cache: Path, *argv: str) -> list[tuple[str, str]]:
    env = {
        **os.environ,
        "PERFBOT_EXAMPLE_CACHE": str(cache),
        "OMP_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    result = subprocess.run(
        [sys.executable, *argv], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    losses = LOSS_LINE.findall(result.stdout)
    assert losses, result.stdout[-2000:]
    return losses


def _vision(repo: Path, cache: Path) -> list[tuple[str, str]]:
    return _run(repo, cache, "train_vision.py", "--size", "tiny", "--max-steps", "6", "--log-every", "2")


def agree(before: list[tuple[str, str]], after: list[tuple[str, str]], exact: bool) -> bool:
    """The same steps logged with the same losses: equal as printed when ``exact``, else each loss within the
    numerics contract's tolerance of the baseline's."""
    if exact or [step for step, _ in before] != [step for step, _ in after]:
        return after == before
    tolerance = DEFAULT_THRESHOLDS.loss_tolerance
    return all(
        abs(float(b) - float(a)) <= tolerance * abs(float(a))
        for (_, a), (_, b) in zip(before, after, strict=True)
    )


def test_agreement_is_bitwise_for_exact_changes_and_within_tolerance_for_rounding_ones():
    base = [("1", "7.6224"), ("2", "7.5000")]
    rounded = [("1", "7.6225"), ("2", "7.5001")]
    assert agree(base, base, exact=True) and not agree(base, rounded, exact=True)
    assert agree(base, rounded, exact=False)
    assert not agree(base, [("1", "7.6224"), ("2", "9.0")], exact=False)
    assert not agree(base, base[:1], exact=False)


def _loop(repo: Path, cache: Path) -> list[tuple[str, str]]:
    argv = ("train_loop.py", "--size", "tiny", "--max-steps", "3", "--log-every", "1")
    return _run(repo, cache, *argv, "--output-dir", str(repo / "outputs"))


@pytest.mark.slow
def test_chain_keeps_both_loops_training_to_the_same_losses(tmp_path):
    baseline = tmp_path / "baseline"
    repo = tmp_path / "repo"
    for copy in (baseline, repo):
        copy_example(copy, ignore=(*EXAMPLE_IGNORE, ".*"))  # no dot files (.gitignore, tool caches) either
    cache = tmp_path / "cache"
    expected_vision = _vision(baseline, cache)

    exact = True  # every change so far is exact: the losses must match bit for bit
    for optimization in CHAIN:
        exact = exact and get(optimization).numerics is Numerics.EXACT
        change = get(optimization).apply(repo)
        assert change is not None, optimization
        assert set(LOOPS) <= set(change.files), (optimization, sorted(change.files))
        assert not [site.describe() for site in change.refused if site.path in LOOPS]
        vision = _vision(repo, cache)
        assert agree(expected_vision, vision, exact), (
            f"train_vision.py losses moved after {optimization}: {vision}"
        )
        assert get(optimization).apply(repo) is None, f"{optimization} is not idempotent on the example"

    with ThreadPoolExecutor(2) as pool:
        before, after = pool.map(lambda root: _loop(root, cache), (baseline, repo))
    assert agree(before, after, exact), (before, after)

    vision = (repo / "train_vision.py").read_text()
    assert "for step, batch in enumerate(CudaPrefetcher(loader, device)):" in vision
    assert "losses.append(loss.detach())" in vision and "fused=fused_optimizer_supported(" in vision
    for helper in (PREFETCHER_RUNTIME, GPU_FLAGS_RUNTIME):
        assert (repo / f"{helper.module}.py").read_text() == helper.source()
