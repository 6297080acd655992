"""The issue-7 transforms (prefetcher, sync-free logging, fused AdamW, TF32) applied one after another to the
example repository: each edits both hand-written loops, and both still train to the same losses on CPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from git_repos import EXAMPLE_IGNORE, copy_example

from optimizations.prefetcher.edit import RUNTIME as PREFETCHER_RUNTIME
from optimizations.registry import get
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

    for optimization in CHAIN:
        change = get(optimization).apply(repo)
        assert change is not None, optimization
        assert set(LOOPS) <= set(change.files), (optimization, sorted(change.files))
        assert not [site.describe() for site in change.refused if site.path in LOOPS]
        assert _vision(repo, cache) == expected_vision, f"train_vision.py losses changed after {optimization}"
        assert get(optimization).apply(repo) is None, f"{optimization} is not idempotent on the example"

    with ThreadPoolExecutor(2) as pool:
        before, after = pool.map(lambda root: _loop(root, cache), (baseline, repo))
    assert after == before

    vision = (repo / "train_vision.py").read_text()
    assert "for step, batch in enumerate(CudaPrefetcher(loader, device)):" in vision
    assert "losses.append(loss.detach())" in vision and "fused=fused_optimizer_supported(" in vision
    for helper in (PREFETCHER_RUNTIME, GPU_FLAGS_RUNTIME):
        assert (repo / f"{helper.module}.py").read_text() == helper.source()
