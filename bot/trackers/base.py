"""The issue tracker the bot reads plans from and writes its comments to.

Two backends implement :class:`Tracker`: ``bot.trackers.local.LocalTracker`` (files under ``.bot/``) and
``bot.trackers.github.GitHubTracker`` (PyGithub). The bot owns exactly one comment per marker kind and edits it
in place; every marker is a hidden first line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

PROGRESS = "<!-- bot:progress v1 -->"
RESULTS = "<!-- bot:results v1 -->"
VERDICT = "<!-- bot:reviewer-verdict v1 -->"
NOTE = "<!-- bot:note v1 -->"
MARKERS = (PROGRESS, RESULTS, VERDICT, NOTE)

# GitHub rejects comment bodies longer than this many characters.
COMMENT_LIMIT = 65536


@dataclass(frozen=True)
class Issue:
    """An issue (or a local plan) the bot works on."""

    number: int | str
    title: str
    body: str
    url: str = ""


@dataclass(frozen=True)
class Comment:
    """One comment on an issue."""

    id: int
    author: str
    body: str
    url: str = ""

    def has_marker(self, marker: str) -> bool:
        """True when the comment's first line is ``marker``."""
        return self.body.lstrip().splitlines()[0].strip() == marker if self.body.strip() else False


class Tracker(Protocol):
    """What the bot needs from an issue tracker.

    A tracker without a repository to push to (the local one) answers the repository questions with nothing:
    no login, repository id, commit URL, default branch or push URL, an empty git environment, no pull request.
    """

    @property
    def bot_login(self) -> str | None:
        """The account the bot's comments are posted as; None when every comment is the bot's own."""

    @property
    def repository_id(self) -> int | None:
        """The repository's numeric id, which a webhook event's ``repository.id`` must match."""

    @property
    def commit_url(self) -> str | None:
        """Prefix of a commit's web page (append the sha), for links in comments."""

    @property
    def default_branch(self) -> str | None:
        """The repository's default branch (the bot never pushes to it)."""

    def push_url(self) -> str | None:
        """The URL to fetch from and push to (no credentials in it); None when there is nowhere to push."""

    def git_environment(self) -> dict[str, str]:
        """Environment for a git fetch or push, carrying the credentials they need."""

    def open_or_update_pull_request(
        self, branch: str, title: str, body: str, base: str | None = None
    ) -> str | None:
        """Open a pull request from ``branch`` (or refresh the open one); its URL, None without pull requests."""

    def issue(self, number: int | str) -> Issue:
        """The issue with this number."""

    def comments(self, number: int | str) -> list[Comment]:
        """All comments on the issue, oldest first."""

    def upsert_comment(self, number: int | str, marker: str, body: str) -> Comment:
        """Create the bot's comment for ``marker`` or edit it in place; ``body`` starts with ``marker``."""

    def reply(self, number: int | str, body: str) -> Comment:
        """Post a plain new comment (a refusal, an answer to ``/bot status``)."""

    def react(self, comment_id: int, emoji: str) -> None:
        """React to a comment: ``eyes`` on receipt, ``rocket`` when done, ``confused`` on failure."""

    def permission(self, user: str) -> str:
        """The user's repository permission: ``admin``, ``maintain``, ``write``, ``triage``, ``read`` or ``none``."""
