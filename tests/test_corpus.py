"""The corpus stage: perfbot on training programs it did not write, installed from the package registry (their
source only; `-m corpus`, run by .ci/run after the default suite). Every program must scan and apply without a
traceback, and every file the apply changed must compile and gain no ruff F violation. The machinery itself is
tested on small wheels made here (no registry needed) in the default run."""

from __future__ import annotations

import zipfile
from pathlib import Path

import git
import pytest
from git_repos import commit_all, make_repo

from experiments.corpus.corpus import (
    Expect,
    Program,
    Unavailable,
    build_repository,
    new_lint,
    run_program,
    wheel_for,
)
from experiments.corpus.programs import PROGRAMS
from experiments.corpus.table import render, verdict
from optimizations.registry import registry

NO_TIER_ONE = "the plan has no tier-1 items"
ALL_DONE = "has no items to apply: the"

# A training program of our own: an fp32 loop whose DataLoader has no workers.
LOOP = """import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
"""


def make_wheel(folder: Path, name: str, files: dict[str, str]) -> Path:
    """A wheel-shaped zip `name` in `folder` holding `files` (member path -> text)."""
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / name, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return folder / name


def site(path: str, *, applicable: bool = True, already: bool = False) -> dict:
    """A site as `bot scan --json` prints it."""
    return {
        "path": path,
        "line": 1,
        "message": "m",
        "applicable": applicable,
        "reason": "r",
        "already": already,
    }


@pytest.fixture(scope="session")
def wheel_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where downloaded wheels are kept for the run (the parent of the base temp is shared by xdist workers)."""
    return tmp_path_factory.getbasetemp().parent / "corpus-wheels"


@pytest.mark.corpus
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.slug)
def test_program_scans_and_applies_cleanly(program: Program, wheel_cache: Path, tmp_path: Path) -> None:
    try:
        wheel = wheel_for(program, wheel_cache)
    except Unavailable as reason:
        pytest.skip(f"{reason} (the corpus stage needs the package registry)")
    repo = build_repository(program, wheel, tmp_path / program.slug)
    outcome = run_program(program, repo, tmp_path)
    assert outcome.tracebacks == []
    scan, drafted, apply = outcome.steps
    assert scan.returncode == drafted.returncode == 0, scan.stderr + drafted.stderr
    # A drafted plan whose tier-1 rows are all refusals, or that lists only sites already done, leaves apply
    # nothing to do: bad input (2), said so.
    # (``--json``: the one-line error is JSON on stdout)
    said = apply.stdout + apply.stderr
    nothing_to_apply = "— Tier 1" not in outcome.plan and (NO_TIER_ONE in said or ALL_DONE in said)
    assert apply.returncode in (0, 1) or (apply.returncode == 2 and nothing_to_apply), apply.stderr
    assert set(outcome.sites) == set(registry())
    assert outcome.compile_errors == []
    assert outcome.new_lint == []
    assert outcome.dirty == []


def test_expectations_name_registered_optimizations() -> None:
    known = registry()
    for program in PROGRAMS:
        assert set(program.expected) <= set(known), program.name
        assert {e.answer for e in program.expected.values()} <= {"change", "already", "refuse"}
        assert program.requirement.count("==") == 1, "corpus programs are pinned"


def test_repository_holds_only_the_included_files(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path / "wheels",
        "toy-1.0-py3-none-any.whl",
        {"toy/scripts/train.py": LOOP, "toy/scripts/sub/util.py": "X = 1\n", "toy/model.py": "Y = 2\n"},
    )
    program = Program(name="toy scripts", requirement="toy==1.0", root="toy/scripts", include=("*.py",))
    repo = build_repository(program, wheel, tmp_path / "repo")
    assert repo.git.ls_files().splitlines() == ["train.py"]
    assert not repo.is_dirty(untracked_files=True)


def test_wheel_comes_from_the_cache_before_the_registry(tmp_path: Path) -> None:
    cached = make_wheel(tmp_path / "cache", "no_such_corpus_pkg-2.0-py3-none-any.whl", {"a.py": ""})
    program = Program(name="p", requirement="no-such-corpus-pkg==2.0", root="", include=("*.py",))
    assert wheel_for(program, tmp_path / "cache", local=()) == cached


def test_new_lint_lists_only_violations_the_head_added(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a.py": "import os\n"})
    base = repo.head.commit.hexsha
    (tmp_path / "r" / "a.py").write_text("import os\n\nprint(undefined_name)\n")
    commit_all(repo, "head")
    assert [v.split(":")[0] + ": " + v.split(": ")[1].split()[0] for v in new_lint(repo, base, ["a.py"])] == [
        "a.py: F821"
    ]
    assert repo.active_branch.name == "main"


def test_run_program_on_a_loop_of_our_own(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "wheels", "toy-1.0-py3-none-any.whl", {"toy/train.py": LOOP})
    expected = Expect("change", ("train.py",), "the DataLoader in main()")
    program = Program(
        name="toy",
        requirement="toy==1.0",
        root="toy",
        include=("*.py",),
        expected={"dataloader_workers": expected},
    )
    repo = build_repository(program, wheel, tmp_path / "toy")
    outcome = run_program(program, repo, tmp_path)
    assert outcome.tracebacks == [] and [s.returncode for s in outcome.steps] == [0, 0, 0]
    rows = {r["optimization"]: r["status"] for r in outcome.applied["rows"]}
    assert rows["dataloader_workers"] == "landed"
    assert "train.py" in outcome.changed
    assert outcome.compile_errors == outcome.new_lint == outcome.dirty == []
    assert git.Repo(tmp_path / "toy").active_branch.name.startswith("bot/")
    assert verdict(expected, outcome.sites["dataloader_workers"]) == "✅ as expected"
    table = render([outcome], {"dataloader_workers": 1})
    assert "| toy | dataloader_workers (t1) | change: the DataLoader in main() | change 1: train.py:" in table
    assert table.rstrip().endswith("| ✅ as expected |")


@pytest.mark.parametrize(
    ("expect", "sites", "said"),
    [
        (Expect("change", ("a.py",), ""), [site("a.py")], "✅ as expected"),
        (Expect("change", ("a.py",), ""), [site("a.py", applicable=False)], "✗ refuses there"),
        (Expect("change", ("a.py",), ""), [site("b.py")], "✗ elsewhere only"),
        (Expect("change", ("a.py",), ""), [], "✗ miss"),
        (
            Expect("already", ("c/*.yaml",), ""),
            [site("c/x.yaml", applicable=False, already=True)],
            "✅ as expected",
        ),
        (Expect("already", ("a.py",), ""), [site("a.py")], "✗ changes there"),
        (Expect("refuse", ("a.py",), ""), [site("a.py", applicable=False)], "✅ as expected"),
        (None, [site("a.py")], "✗ changes where no site was expected"),
        (None, [site("a.py", applicable=False)], "· refused, no site expected"),
        (None, [], ""),
    ],
)
def test_verdict(expect: Expect | None, sites: list[dict], said: str) -> None:
    assert verdict(expect, sites) == said
