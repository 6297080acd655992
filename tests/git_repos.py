"""Throwaway git repositories for the tests: a fixed commit identity, a repository made from a dict of files,
and a committed copy of the bundled example repository (examples/trainer_repo)."""

from __future__ import annotations

import shutil
from pathlib import Path

import git

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "trainer_repo"
# Local leftovers of running the example or the bot in it, never part of a copy.
EXAMPLE_IGNORE = ("__pycache__", "outputs", ".bot", ".cache")
IDENTITY = {
    "GIT_AUTHOR_NAME": "dev",
    "GIT_AUTHOR_EMAIL": "d@d",
    "GIT_COMMITTER_NAME": "dev",
    "GIT_COMMITTER_EMAIL": "d@d",
}


def commit_all(repo: git.Repo, message: str, identity: dict[str, str] = IDENTITY) -> str:
    """Stage everything in the working tree (`git add -A`), commit it as `identity`; the new commit's sha."""
    repo.git.add("-A")
    repo.git.commit("-qm", message, env=identity)
    return repo.head.commit.hexsha


def make_repo(
    path: Path, files: dict[str, str], message: str = "base", branch: str | None = "main"
) -> git.Repo:
    """A new repository at `path` holding `files` (relative path -> text) in one commit on `branch`
    (None: git's default initial branch)."""
    repo = git.Repo.init(path, initial_branch=branch)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    commit_all(repo, message)
    return repo


def copy_example(destination: Path, ignore: tuple[str, ...] = EXAMPLE_IGNORE) -> Path:
    """Copy the example repository to `destination` (which must not exist), leaving out `ignore` patterns."""
    shutil.copytree(EXAMPLE, destination, ignore=shutil.ignore_patterns(*ignore))
    return destination


def committed_example(destination: Path, message: str = "example trainer") -> git.Repo:
    """A copy of the example repository at `destination`, committed as one commit on main."""
    repo = git.Repo.init(copy_example(destination), initial_branch="main")
    commit_all(repo, message)
    return repo
