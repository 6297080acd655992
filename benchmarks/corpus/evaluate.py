"""One corpus repository end to end: materialise its snapshot, run perfbot there, score the run."""

from __future__ import annotations

from pathlib import Path

from benchmarks.corpus.manifest import Manifest
from benchmarks.corpus.materialise import Unavailable, materialise
from benchmarks.corpus.perfbot import TIERS, TIMEOUT_S, run_perfbot
from benchmarks.corpus.score import Score, score


def evaluate(
    manifest: Manifest,
    work: Path,
    cache: Path,
    timeout: float = TIMEOUT_S,
    mirror_root: Path | None = None,
    tiers: tuple[int, ...] = TIERS,
) -> Score:
    """Score perfbot on `manifest`'s repository, materialised under `work` (wheels kept in `cache`); a
    snapshot that cannot be had gives a score that says "not available" and why."""
    try:
        snapshot = materialise(manifest, work / manifest.name, cache, mirror_root)
    except Unavailable as why:
        return Score(manifest.name, manifest.source, available=False, why=str(why))
    result = score(manifest, run_perfbot(snapshot.repo, work, timeout, tiers), snapshot.repo)
    result.left_out = list(snapshot.left_out)
    return result
