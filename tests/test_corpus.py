"""The corpus stage: the scorer (`benchmarks/corpus`) on the corpus repositories whose source is a wheel on the
package registry (`pypi:` files in benchmarks/corpus/repos; `-m corpus`, run by .ci/run after the default suite;
it never reaches GitHub). perfbot must scan, plan and apply tiers 1 and 2 there without a traceback, and every
commit must compile, resolve the imports it adds where the program runs, gain no ruff F violation, and cite only
lines that exist. How much of what was expected perfbot found is printed by `python -m benchmarks.corpus`, not
checked here. The scorer itself is tested on tiny repositories in tests/test_corpus_scorer.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.corpus.manifest import Manifest, load_all
from benchmarks.corpus.materialise import Unavailable, materialise
from benchmarks.corpus.perfbot import TIERS, run_perfbot
from benchmarks.corpus.score import score
from optimizations.registry import registry

PYPI = [manifest for manifest in load_all() if manifest.kind == "pypi"]
TIMEOUT_S = 600.0
# A tier the drafted plan has no items for, or only items already done: bad input (2), said so.
NOTHING_TO_APPLY = ("items to apply", "has no items to apply: the")


@pytest.fixture(scope="session")
def wheel_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where downloaded wheels are kept for the run (the parent of the base temp is shared by xdist workers)."""
    return tmp_path_factory.getbasetemp().parent / "corpus-wheels"


@pytest.mark.corpus
@pytest.mark.parametrize("manifest", PYPI, ids=lambda m: m.name)
def test_repository_scans_applies_and_keeps_the_program_loadable(
    manifest: Manifest, wheel_cache: Path, tmp_path: Path
) -> None:
    try:
        repo = materialise(manifest, tmp_path / manifest.name, wheel_cache).repo
    except Unavailable as reason:
        pytest.skip(f"{reason} (the corpus stage needs the package registry)")
    run = run_perfbot(repo, tmp_path, TIMEOUT_S)
    assert run.tracebacks == [] and run.timeouts == []
    scan, drafted, *applies = run.steps
    assert scan.returncode == drafted.returncode == 0, scan.stderr + drafted.stderr
    assert set(json.loads(scan.stdout)) == set(registry())
    for tier, apply in zip(TIERS, applies, strict=True):
        said = apply.stdout + apply.stderr
        nothing = apply.returncode == 2 and any(words in said for words in NOTHING_TO_APPLY)
        assert apply.returncode in (0, 1) or nothing, f"tier {tier}: {said[-500:]}"
    result = score(manifest, run, repo)
    assert result.problems == []
    assert result.compile_errors == []
    assert [str(failure) for failure in result.import_failures] == []
    assert result.new_lint == []
    assert result.false_reasons == []
    assert result.never_edited == []


def test_every_pypi_source_is_pinned_and_names_its_files() -> None:
    assert len(PYPI) >= 5
    for manifest in PYPI:
        assert manifest.target.count("==") == 1 and manifest.include, manifest.name
