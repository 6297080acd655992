"""The git remote side of a run: the branch a run starts from, pushing the work branch. Never the default
branch, never a force-push, never a commit that holds a credential (each new commit's added lines and message
are scanned first), and the bot's own credentials only ever in the environment (``env``), never on a command
line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import git

from bot import history
from bot.errors import BotError
from bot.redact import holds_registered_secret, redact
from bot.security import find_secrets
from bot.workspace import Workspace

log = logging.getLogger(__name__)


class PushError(BotError):
    """The branch could not be pushed; the message says why, with credentials removed."""


class CredentialInCommit(PushError):
    """A commit about to be pushed holds a credential: nothing was pushed, the branch stays local."""


@dataclass(frozen=True)
class Leak:
    """A credential in a commit: which commit, where (a file and line, or a line of its message), what kind.
    Never the value."""

    commit: str
    path: str
    line: int
    kind: str

    def __str__(self) -> str:
        where = f"its message, line {self.line}" if not self.path else f"{self.path}:{self.line}"
        return f"commit {self.commit[:10]} adds a {self.kind} at {where}"


def credentials_in(repo: git.Repo, since: str, head: str) -> list[Leak]:
    """Every credential the commits ``since..head`` add, in their added lines or their messages: the shapes
    :func:`bot.security.find_secrets` knows, and the secrets the bot was handed (in any encoding)."""
    leaks = []
    for commit in repo.iter_commits(f"{since}..{head}", reverse=True):
        message = (
            commit.message if isinstance(commit.message, str) else commit.message.decode("utf-8", "replace")
        )
        places = [("", dict(enumerate(message.splitlines(), start=1)))]
        places += [
            (path, hunks.added)
            for path, hunks in history.hunks(repo, history.parent_of(commit), commit.hexsha).items()
        ]
        for path, lines in places:
            for line, text in sorted(lines.items()):
                kinds = [kind for kind, _, _ in find_secrets(text)]
                if holds_registered_secret(text):
                    kinds.append("credential this bot was given")
                leaks += [Leak(commit.hexsha, path, line, kind) for kind in dict.fromkeys(kinds)]
    return leaks


class FetchError(BotError):
    """A branch could not be fetched from the repository; the message says why, with credentials removed."""


def push_branch(
    workspace: Workspace,
    url: str,
    default_branch: str,
    env: Mapping[str, str] | None = None,
    *,
    since: str,
) -> None:
    """Push the work branch to ``url`` as a fast-forward; ``env`` carries the credentials. The commits after
    ``since`` (the run's baseline) are scanned first: one that adds a credential stops the push
    (:class:`CredentialInCommit`, naming the commit, the place and the kind of credential), and the branch
    stays local.

    A plain (non-force) push is refused by the remote when its branch holds commits this branch lacks, so
    commits the bot did not write are never overwritten; that case is reported with what to do.
    """
    branch = workspace.branch
    if branch == default_branch:
        raise PushError(
            f"refusing to push to the default branch {default_branch!r}; the bot works on bot/* branches"
        )
    leaks = credentials_in(workspace.repo, since, branch)
    if leaks:
        more = f" (and {len(leaks) - 1} more)" if len(leaks) > 1 else ""
        raise CredentialInCommit(
            f"not pushed: {leaks[0]}{more}; {branch} stays local. Take the credential out of the repository "
            "(an edited line is committed whole) and run again"
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
