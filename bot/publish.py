"""The git remote side of a run: the branch a run starts from, pushing the work branch. Never the default
branch, never a force-push, and credentials only ever in the environment (``env``), never on a command line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import git

from bot.errors import BotError
from bot.redact import redact
from bot.workspace import Workspace

log = logging.getLogger(__name__)


class PushError(BotError):
    """The branch could not be pushed; the message says why, with credentials removed."""


class FetchError(BotError):
    """A branch could not be fetched from the repository; the message says why, with credentials removed."""


def push_branch(
    workspace: Workspace, url: str, default_branch: str, env: Mapping[str, str] | None = None
) -> None:
    """Push the work branch to ``url`` as a fast-forward; ``env`` carries the credentials.

    A plain (non-force) push is refused by the remote when its branch holds commits this branch lacks, so
    commits the bot did not write are never overwritten; that case is reported with what to do.
    """
    branch = workspace.branch
    if branch == default_branch:
        raise PushError(
            f"refusing to push to the default branch {default_branch!r}; the bot works on bot/* branches"
        )
    try:
        workspace.repo.git.push(url, f"refs/heads/{branch}:refs/heads/{branch}", env=dict(env or {}))
    except git.GitCommandError as exc:
        detail = redact(str(exc.stderr or exc)).strip()
        if "non-fast-forward" in detail or "fetch first" in detail or "rejected" in detail:
            raise PushError(
                f"the remote branch {branch} has commits this run does not have; the bot never force-pushes. "
                f"Merge or delete the remote branch, then re-run. ({detail})"
            ) from exc
        raise PushError(f"git push of {branch} failed: {detail}") from exc


def check_out_fetched(repo: git.Repo, url: str, branch: str, env: Mapping[str, str]) -> None:
    """Fetch ``branch`` from ``url`` and check it out as it is there (the local branch is reset to it)."""
    _fetch(repo, url, branch, env)
    repo.git.checkout("-B", branch, "FETCH_HEAD")


def check_out_branch(repo: git.Repo, url: str, branch: str, env: Mapping[str, str]) -> None:
    """Check out ``branch``: the local one when there is one, else the one fetched from ``url``."""
    if branch in repo.heads:
        repo.heads[branch].checkout()
        return
    try:
        _fetch(repo, url, branch, env)
    except FetchError as error:
        log.warning("staying on %s: %s", repo.active_branch.name, error)
        return
    repo.git.checkout("-b", branch, "FETCH_HEAD")


def return_to(repo: git.Repo, branch: str) -> None:
    """Check out ``branch`` again after a run; a tree the run left dirty stays as it is, with a warning."""
    try:
        repo.git.checkout(branch)
    except git.GitCommandError as error:
        log.warning("could not return the checkout to %s: %s", branch, redact(error.stderr or error))


def _fetch(repo: git.Repo, url: str, branch: str, env: Mapping[str, str]) -> None:
    try:
        repo.git.fetch("--no-tags", url, f"refs/heads/{branch}", env=dict(env))
    except git.GitCommandError as exc:
        raise FetchError(f"git fetch of {branch} failed: {redact(exc.stderr or exc).strip()}") from exc
