"""Reading a target repository's history (GitPython): the bot's trailers on each commit, and which commits
are the bot's."""

from __future__ import annotations

from collections.abc import Iterable

import git

from benchmarks.results import CommitInfo
from bot.conventions import TRAILER_ISSUE, TRAILER_ITEM, TRAILER_OPTIMIZATION, TRAILER_REVERT_OF


def trailers(commit: git.Commit) -> dict[str, list[str]]:
    """The commit's trailers as ``git interpret-trailers`` parses them, keys lower-cased."""
    if ":" not in commit.message:  # no trailer can be there: skip the subprocess
        return {}
    found: dict[str, list[str]] = {}
    for key, values in commit.trailers_dict.items():
        found.setdefault(key.lower(), []).extend(v.strip() for v in values if v.strip())
    return found


def trailer(commit: git.Commit, name: str) -> str | None:
    """The first value of trailer ``name`` on the commit, or None."""
    values = trailers(commit).get(name.lower())
    return values[0] if values else None


def _might_be_bot(commit: git.Commit) -> bool:
    message = commit.message if isinstance(commit.message, str) else commit.message.decode("utf-8", "replace")
    return TRAILER_OPTIMIZATION.lower() in message.lower()


def commit_info(commit: git.Commit) -> CommitInfo:
    """The sha, subject, and the optimization and plan items the commit's trailers name."""
    found = trailers(commit) if _might_be_bot(commit) else {}
    optimizations = found.get(TRAILER_OPTIMIZATION.lower(), [])
    items = [i.strip() for value in found.get(TRAILER_ITEM.lower(), []) for i in value.split(",")]
    summary = commit.summary if isinstance(commit.summary, str) else commit.summary.decode("utf-8", "replace")
    return CommitInfo(
        sha=commit.hexsha,
        subject=summary,
        optimization=optimizations[0] if optimizations else None,
        plan_items=[i for i in items if i],
    )


def describe_commits(repo: git.Repo, revisions: Iterable[str]) -> list[CommitInfo]:
    """Resolve revisions (shas, branch names, ``HEAD~2``) to :class:`CommitInfo`, in the given order."""
    return [commit_info(repo.commit(revision)) for revision in revisions]


def is_bot_commit(commit: git.Commit) -> bool:
    """True when the commit carries a ``Bot-Optimization:`` trailer."""
    return _might_be_bot(commit) and bool(trailers(commit).get(TRAILER_OPTIMIZATION.lower()))


def bot_commits(repo: git.Repo, since: str, until: str = "HEAD") -> list[CommitInfo]:
    """The bot's commits in ``since..until``, oldest first."""
    return [commit_info(c) for c in repo.iter_commits(f"{since}..{until}", reverse=True) if is_bot_commit(c)]


def issue_of(commit: git.Commit) -> str | None:
    """The issue a bot commit's ``Bot-Issue:`` trailer names."""
    return trailer(commit, TRAILER_ISSUE) if _might_be_bot(commit) else None


def reverted_by(commit: git.Commit) -> str | None:
    """The sha a revert commit undoes (``Bot-Revert-Of:`` trailer, else git's own "This reverts commit")."""
    named = trailer(commit, TRAILER_REVERT_OF)
    if named:
        return named
    message = commit.message if isinstance(commit.message, str) else commit.message.decode("utf-8", "replace")
    marker = "This reverts commit "
    if marker in message:
        sha = message.split(marker, 1)[1].split()[0].rstrip(".")
        return sha if all(ch in "0123456789abcdef" for ch in sha) and len(sha) >= 7 else None
    return None
