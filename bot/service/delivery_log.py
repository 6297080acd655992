"""The server's log of deliveries: one line per event, tracebacks only for bugs.

Each answer to a delivery, and the end of each accepted delivery's work, is one ``INFO`` line of ``key=value``
fields in a fixed order: ``delivery=<X-GitHub-Delivery> repo=<owner/name> user=<login> event=<type>
outcome=<outcome> reason=<short text>``. A value with anything but letters, digits and ``_.@/#:+-`` is written
as a JSON string (quoted, escaped), so no value — the delivery id comes from an unsigned header — can split a
line or forge another; an unknown value is ``-``. What the service meets in normal operation (a bad signature,
no permission, GitHub's API answering 403 or 5xx, a command's own error) is an outcome with a reason; only an
exception nobody expected (a bug) adds its traceback to its line, which is then logged at ``ERROR``.
"""

from __future__ import annotations

import json
import logging
import re
from enum import StrEnum
from typing import Protocol

import git

from bot.errors import BotError

log = logging.getLogger(__name__)

MAX_VALUE_CHARS = 200
EVENT = "issue_comment"  # the only event whose deliveries are queued
_BARE = re.compile(r"[\w.@/#:+-]+", re.ASCII)


class Outcome(StrEnum):
    """How a delivery, or a step of it, ended."""

    ACCEPTED = "accepted"  # queued: a second line follows when its work ends
    REFUSED = "refused"
    IGNORED = "ignored"
    FAILED = "failed"
    DONE = "done"
    REQUEUED = "requeued"  # back in the queue, not ended: a check to try again, a run a stop interrupted


class Delivered(Protocol):
    """What a queued delivery tells the log about itself (a :class:`~bot.service.dispatch.CommentCommand`)."""

    @property
    def delivery(self) -> str: ...
    @property
    def repo(self) -> str: ...
    @property
    def author(self) -> str: ...


def log_delivery(
    outcome: Outcome,
    reason: str,
    *,
    delivery: str = "",
    repo: str = "",
    user: str = "",
    event: str = "",
    bug: BaseException | None = None,
) -> None:
    """Log one delivery line; with ``bug`` (an exception nobody expected), at ``ERROR`` with its traceback."""
    fields = {"delivery": delivery, "repo": repo, "user": user, "event": event, "outcome": outcome}
    line = " ".join(f"{key}={_value(value)}" for key, value in {**fields, "reason": reason}.items())
    log.log(logging.ERROR if bug else logging.INFO, line, exc_info=bug)


def log_command(
    command: Delivered, outcome: Outcome, reason: str, *, bug: BaseException | None = None
) -> None:
    """:func:`log_delivery` for a queued delivery."""
    log_delivery(
        outcome,
        reason,
        delivery=command.delivery,
        repo=command.repo,
        user=command.author,
        event=EVENT,
        bug=bug,
    )


def is_expected(error: Exception) -> bool:
    """Whether ``error`` is one the service meets in normal operation: a :class:`BotError`, an error answer of
    GitHub's API, the network, or a git command that failed (a fetch, a push). Anything else is a bug."""
    import requests
    from github import GithubException

    network = (requests.RequestException, ConnectionError, TimeoutError)
    return isinstance(error, (BotError, GithubException, git.GitCommandError, *network))


def describe(error: Exception) -> str:
    """``error`` in one short line: GitHub's status and message for an API error, else its type and text."""
    from github import GithubException

    if isinstance(error, GithubException):
        message = error.data.get("message") if isinstance(error.data, dict) else error.data
        return f"GitHub API {error.status}: {message or 'no message'}"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _value(value: object) -> str:
    text = str(value)[:MAX_VALUE_CHARS] or "-"
    return text if _BARE.fullmatch(text) else json.dumps(text)
