"""Pushing the work branch and opening its pull request. Never the default branch, never a force-push."""

from __future__ import annotations

import git

from bot.errors import BotError
from bot.redact import redact
from bot.workspace import Workspace


class PushError(BotError):
    """The branch could not be pushed; the message says why, with credentials removed."""


def push_branch(workspace: Workspace, url: str, default_branch: str) -> None:
    """Push the work branch to ``url`` as a fast-forward.

    A plain (non-force) push is refused by the remote when its branch holds commits this branch lacks, so
    commits the bot did not write are never overwritten; that case is reported with what to do.
    """
    branch = workspace.branch
    if branch == default_branch:
        raise PushError(
            f"refusing to push to the default branch {default_branch!r}; the bot works on bot/* branches"
        )
    try:
        workspace.repo.git.push(url, f"refs/heads/{branch}:refs/heads/{branch}")
    except git.GitCommandError as exc:
        detail = redact(str(exc.stderr or exc)).strip()
        if "non-fast-forward" in detail or "fetch first" in detail or "rejected" in detail:
            raise PushError(
                f"the remote branch {branch} has commits this run does not have; the bot never force-pushes. "
                f"Merge or delete the remote branch, then re-run. ({detail})"
            ) from exc
        raise PushError(f"git push of {branch} failed: {detail}") from exc
