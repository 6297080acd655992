"""Issues and comments kept as files under ``.bot/`` in the target repository: the tracker when no GitHub token
is configured.

Layout: ``.bot/issues/<id>/issue.md`` (first line ``# title``, then the body), ``comments.json`` (every
comment), and one readable ``<kind>.md`` per bot marker (``progress.md``, ``results.md`` ...). ``.bot/`` is
added to ``.git/info/exclude`` so the bot's own bookkeeping never dirties the tree it commits to.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from bot.conventions import state_dir
from bot.errors import BadInput
from bot.trackers.base import MARKERS, Comment, Issue

LOCAL_USER = "perfbot"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


class LocalTracker:
    """A :class:`bot.trackers.base.Tracker` backed by files in ``<repo>/.bot``."""

    def __init__(self, repo_root: str | Path, user: str = LOCAL_USER):
        self.root = state_dir(Path(repo_root))
        self.user = user

    def _dir(self, number: int | str) -> Path:
        return self.root / "issues" / str(number)

    def create_issue(self, number: int | str, title: str, body: str) -> Issue:
        """Record an issue (a plan given as a file gets one, named after the file)."""
        _write_atomic(self._dir(number) / "issue.md", f"# {title}\n\n{body}")
        return self.issue(number)

    def issue(self, number: int | str) -> Issue:
        path = self._dir(number) / "issue.md"
        if not path.exists():
            raise BadInput(f"no local issue {number}: write its plan to {path} or pass --plan FILE")
        title, _, body = path.read_text(encoding="utf-8").partition("\n")
        return Issue(number, title.removeprefix("# ").strip(), body.lstrip("\n"), path.as_uri())

    def comments(self, number: int | str) -> list[Comment]:
        path = self._dir(number) / "comments.json"
        if not path.exists():
            return []
        return [Comment(**entry) for entry in json.loads(path.read_text(encoding="utf-8"))]

    def _save(self, number: int | str, comments: list[Comment]) -> None:
        data = [{"id": c.id, "author": c.author, "body": c.body, "url": c.url} for c in comments]
        _write_atomic(self._dir(number) / "comments.json", json.dumps(data, indent=2, ensure_ascii=False))

    def upsert_comment(self, number: int | str, marker: str, body: str) -> Comment:
        comments = self.comments(number)
        for index, comment in enumerate(comments):
            if comment.author == self.user and comment.has_marker(marker):
                comments[index] = Comment(comment.id, comment.author, body, comment.url)
                break
        else:
            comments.append(self._new(number, body, comments))
        self._save(number, comments)
        if marker in MARKERS:
            _write_atomic(self.marker_file(number, marker), body)
        return next(c for c in comments if c.author == self.user and c.has_marker(marker))

    def marker_file(self, number: int | str, marker: str) -> Path:
        """The readable copy of the bot's comment for ``marker``: ``.bot/issues/<n>/<kind>.md``."""
        kind = marker.removeprefix("<!-- bot:").split(" ")[0]
        return self._dir(number) / f"{kind}.md"

    def reply(self, number: int | str, body: str) -> Comment:
        comments = self.comments(number)
        comment = self._new(number, body, comments)
        self._save(number, [*comments, comment])
        return comment

    def _new(self, number: int | str, body: str, existing: list[Comment]) -> Comment:
        next_id = max((c.id for c in existing), default=0) + 1
        return Comment(
            next_id, self.user, body, f"{(self._dir(number) / 'comments.json').as_uri()}#{next_id}"
        )

    def react(self, comment_id: int, emoji: str) -> None:
        """Local comments carry no reactions; the progress comment already says what happened."""

    def permission(self, user: str) -> str:
        """Whoever runs the bot locally owns the checkout."""
        return "admin"

    # --- no repository to push to: the natural nothing ------------------------------------------------------

    @property
    def bot_login(self) -> None:
        """Every local comment is the bot's own to read: none is filtered by author."""
        return None

    @property
    def repository_id(self) -> None:
        """No webhook events come for a local issue."""
        return None

    @property
    def commit_url(self) -> None:
        """Commits are shown without links."""
        return None

    @property
    def default_branch(self) -> None:
        """Nothing is pushed, so no branch needs guarding."""
        return None

    def push_url(self) -> None:
        """The work branch stays local."""
        return None

    def git_environment(self) -> dict[str, str]:
        """No credentials to hand to git."""
        return {}

    def open_or_update_pull_request(
        self, branch: str, title: str, body: str, base: str | None = None
    ) -> None:
        """A local run opens no pull request."""
        return None
