"""A target that pins its ruff (``required-version``): perfbot finds a ruff that meets the pin, or leaves its
commits untidied and says why, and review names the pin instead of blaming the target's configuration."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from packaging.version import Version
from test_lint_target_style import STRICT_RUFF, apply_tiers, ruff, trainer_repo

from bot.review.commits import commit_findings, review_commits
from bot.ruff_pin import RuffPinMismatch, required_version, ruff_for, ruff_version, satisfies

OWN = ruff_version(str(__import__("ruff.__main__").__main__.find_ruff_bin()))


def pinned(pin: str) -> str:
    return STRICT_RUFF.replace("[tool.ruff]\n", f'[tool.ruff]\nrequired-version = "{pin}"\n')


def fake_ruff(folder: Path, version: str) -> Path:
    """An executable that answers ``--version`` as a ruff of ``version`` would."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ruff"
    path.write_text(f'#!/bin/sh\necho "ruff {version}"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(autouse=True)
def no_other_ruff(monkeypatch, tmp_path):
    """No ruff on PATH and no PERFBOT_RUFF, whatever the machine has."""
    monkeypatch.delenv("PERFBOT_RUFF", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path") + os.pathsep + "/usr/bin:/bin")


def test_the_pin_is_read_from_the_config_ruff_reads_first(tmp_path):
    assert required_version(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text('[tool.ruff]\nrequired-version = "~=0.16.2"\n')
    assert required_version(tmp_path) == "~=0.16.2"
    (tmp_path / "ruff.toml").write_text('required-version = ">=0.1"\n')
    assert required_version(tmp_path) == ">=0.1"


@pytest.mark.parametrize(
    "version, pin, met",
    [
        ("0.16.10", "~=0.16.2", True),
        ("0.17.6", "~=0.16.2", False),
        ("0.17.6", "0.17.6", True),
        ("0.17.6", "0.17", False),
    ],
)
def test_a_pin_is_a_specifier_or_a_bare_version(version, pin, met):
    assert satisfies(Version(version), pin) is met


def test_a_ruff_that_meets_the_pin_is_found_in_the_targets_virtualenv(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ruff]\nrequired-version = "~=0.16.2"\n')
    with pytest.raises(
        RuffPinMismatch, match=r"pins ruff `required-version = \"~=0.16.2\"`.*pip install 'ruff~=0.16.2'"
    ):
        ruff_for(tmp_path)
    fake_ruff(tmp_path / "venv" / "bin", "0.15.0")
    newer = fake_ruff(tmp_path / ".venv" / "bin", "0.16.9")
    assert ruff_for(tmp_path) == str(newer)


def test_perfbots_own_ruff_serves_a_pin_it_meets(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(f'[tool.ruff]\nrequired-version = ">={OWN}"\n')
    assert ruff_version(ruff_for(tmp_path)) == OWN
    chosen = fake_ruff(tmp_path / "elsewhere", str(OWN))
    monkeypatch.setenv("PERFBOT_RUFF", str(chosen))
    assert ruff_for(tmp_path) == str(chosen)


def test_a_pin_no_ruff_meets_leaves_the_commit_untidied_and_says_so(tmp_path):
    root = tmp_path / "target"
    repo = trainer_repo(root, pinned("==0.0.1"))
    base = repo.head.commit.hexsha
    apply_tiers(root, 1)
    landed = list(repo.iter_commits(f"{base}..HEAD"))
    assert landed and not repo.is_dirty(untracked_files=True)
    progress = (root / ".bot" / "issues" / "plan" / "progress.md").read_text()
    assert 'not tidied: the repository pins ruff `required-version = "==0.0.1"`' in progress
    # untidied: the vendored helper keeps perfbot's own layout, which breaks this target's 100-column limit
    unpinned = root / "pyproject.toml"
    unpinned.write_text(STRICT_RUFF)
    assert "E501" in ruff(root, "check", "--select", "E501", "trainer/_perfbot_attention.py").stdout

    reviews, lint_error = review_commits(repo, base, repo.head.commit.hexsha)
    assert "pins ruff" in lint_error
    [finding] = [
        f for f in commit_findings(reviews, lint_error) if f.title == "ruff could not check the touched files"
    ]
    assert "configuration" not in finding.fix and "evidence says what stopped it" in finding.fix
