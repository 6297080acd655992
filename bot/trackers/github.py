"""The GitHub backend of :class:`bot.trackers.base.Tracker`, on PyGithub.

Retries: PyGithub's own :class:`github.GithubRetry` (an urllib3 ``Retry``) retries the idempotent methods
(GET, PATCH, PUT, DELETE) on 5xx, 429 and rate-limit 403 responses and on connection errors, honouring
``Retry-After`` and waiting for secondary rate limits. POST is left out of it on purpose: a POST that reached
GitHub but whose answer was lost (a 502 from a proxy, a dropped connection) would be sent again and leave a
duplicate comment. Each POST therefore goes through :meth:`GitHubTracker._create_once`: a rate-limited POST
(never processed) is sent again after the wait; after a transient failure the comments are listed again, for
up to ``settle_wait`` seconds when the request may still be in flight on GitHub's side (a timeout, a dropped
connection, a gateway error), and the one the failed POST created, if any, is used instead of posting twice.
Should a duplicate still appear, the next edit of that comment deletes it. No wait, ``Retry-After`` included,
is ever longer than ``max_rate_limit_wait``: beyond it the request fails instead of holding the issue.

Git fetches and pushes get the token through :meth:`GitHubTracker.git_environment` (a credential helper
reading it from the environment), never on a command line.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TypeVar

import github
import requests
from github import Auth, Github, GithubException, GithubRetry, RateLimitExceededExceedsMaxWait
from github.IssueComment import IssueComment
from urllib3.connectionpool import ConnectionPool
from urllib3.response import HTTPResponse
from urllib3.util.retry import Retry

from bot import credentials
from bot.errors import BadInput
from bot.redact import install_log_redaction, redact, register_secret
from bot.trackers.base import COMMENT_LIMIT, Comment, Issue

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.github.com"
# Who GET /user cannot name: an Actions GITHUB_TOKEN gets 403 there, and posts as this account.
ACTIONS_BOT_LOGIN = "github-actions[bot]"
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
# Permission names as GitHub's collaborator permission API reports them (``role_name``, then ``permission``).
PERMISSIONS = ("admin", "maintain", "write", "triage", "read", "none")
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "PATCH", "DELETE"})
TRUNCATION_NOTE = "\n\n…(truncated: GitHub limits a comment to 65536 characters)"
# Failures after which the request may still be processed on GitHub's side: look longer before re-posting.
IN_FLIGHT_STATUSES = frozenset({502, 504})
LOOK_INTERVAL_S = 2.0
# Answers git's credential request from the environment; the other configured helpers are switched off.
CREDENTIAL_HELPER = (
    '!f() { test "$1" = get && printf "username=x-access-token\\npassword=%s\\n" "$PERFBOT_GIT_TOKEN"; }; f'
)

T = TypeVar("T")


class GitHubTracker:
    """Issues and comments of one GitHub (or GitHub Enterprise) repository.

    ``retries``, ``backoff`` (seconds, doubled per attempt), ``secondary_rate_wait`` (seconds to wait on a
    secondary rate limit without ``Retry-After``), ``max_rate_limit_wait`` (the longest wait of any kind),
    ``settle_wait`` (how long to look for a comment whose create timed out; default ``timeout``) and
    ``seconds_between_writes`` tune the retry policy; tests make them small.
    """

    bot_login: str  # the account the bot posts as; learnt from its first comment when /user cannot tell

    def __init__(
        self,
        repo_full_name: str,
        token: str,
        base_url: str = DEFAULT_API_URL,
        bot_login: str | None = None,
        *,
        retries: int = 5,
        backoff: float = 1.0,
        secondary_rate_wait: float = 60.0,
        max_rate_limit_wait: float = 900.0,
        seconds_between_writes: float = 1.0,
        timeout: float = 30,
        settle_wait: float | None = None,
    ) -> None:
        register_secret(token)
        install_log_redaction()
        self.repo_full_name = repo_full_name
        self._token = token
        self._retries = retries
        self._backoff = backoff
        self._secondary_rate_wait = secondary_rate_wait
        self._max_rate_limit_wait = max_rate_limit_wait
        self._settle_wait = timeout if settle_wait is None else settle_wait
        retry = CappedRetry(
            total=retries,
            backoff_factor=backoff,
            backoff_max=max_rate_limit_wait,
            status_forcelist=[429, *range(500, 600)],
            allowed_methods=IDEMPOTENT_METHODS,
            secondary_rate_wait=secondary_rate_wait,
            max_rate_limit_wait=max_rate_limit_wait,
            raise_on_status=False,
        )
        self._github = Github(
            auth=Auth.Token(token),
            base_url=base_url.rstrip("/"),
            retry=retry,
            timeout=timeout,  # type: ignore[arg-type]  # PyGithub says int; requests takes float seconds
            per_page=100,
            lazy=True,
            seconds_between_requests=None,
            seconds_between_writes=seconds_between_writes or None,
        )
        self._repo = self._github.get_repo(repo_full_name)
        self.bot_login = bot_login or self._whoami()

    @classmethod
    def from_env(cls, repo_full_name: str, env: Mapping[str, str] | None = None) -> GitHubTracker:
        """A tracker from the environment: the token (:mod:`bot.credentials`: ``PERFBOT_TOKEN`` or
        ``GITHUB_TOKEN``, or their ``_FILE``/``_COMMAND`` forms), ``GITHUB_API_URL`` (set by Actions, right for
        GitHub Enterprise too) and ``PERFBOT_LOGIN`` (the bot's account)."""
        env = os.environ if env is None else env
        token = credentials.get(credentials.TOKEN, env)
        if not token:
            raise BadInput(
                "no GitHub token: set PERFBOT_TOKEN (or GITHUB_TOKEN, PERFBOT_TOKEN_FILE, PERFBOT_TOKEN_COMMAND)"
            )
        if not repo_full_name:
            raise BadInput("no repository: the event names none and GITHUB_REPOSITORY is not set")
        return cls(
            repo_full_name,
            token,
            base_url=env.get("GITHUB_API_URL") or DEFAULT_API_URL,
            bot_login=env.get("PERFBOT_LOGIN") or None,
        )

    def _whoami(self) -> str:
        try:
            return self._github.get_user().login
        except GithubException as error:
            if error.status == 403:  # an installation token (Actions' GITHUB_TOKEN) may not read /user
                return ACTIONS_BOT_LOGIN
            raise

    # --- Tracker protocol -------------------------------------------------------------------------------

    def issue(self, number: int | str) -> Issue:
        """The issue with this number."""
        issue = self._repo.get_issue(int(number))
        return Issue(number=issue.number, title=issue.title, body=issue.body or "", url=issue.html_url)

    def comments(self, number: int | str) -> list[Comment]:
        """All comments on the issue, oldest first."""
        return [_comment(raw) for raw in self._raw_comments(number)]

    def upsert_comment(self, number: int | str, marker: str, body: str) -> Comment:
        """Edit the bot's own comment whose first line is ``marker``, or create it."""
        body = _comment_body(body if body.lstrip().startswith(marker) else f"{marker}\n{body}")
        mine = [raw for raw in self._raw_comments(number) if self._is_mine(raw, marker)]
        if mine:
            existing, *duplicates = mine
            if existing.body != body:
                existing.edit(body)
            for duplicate in duplicates:  # left by a create whose answer was lost and that was sent again
                log.warning("deleting duplicate %s comment %s", marker, duplicate.id)
                duplicate.delete()
            return _comment(existing)
        return self._create_comment(number, body, marker=marker)

    def reply(self, number: int | str, body: str) -> Comment:
        """Post a new plain comment."""
        return self._create_comment(number, _comment_body(body))

    def react(self, comment_id: int, emoji: str) -> None:
        """React to an issue comment with ``eyes``, ``rocket``, ``confused`` (or another GitHub reaction)."""
        if emoji not in REACTIONS:
            raise ValueError(f"unknown reaction {emoji!r}; GitHub knows {', '.join(sorted(REACTIONS))}")
        comment = IssueComment(
            self._github.requester, url=f"{self._repo.url}/issues/comments/{int(comment_id)}"
        )
        # GitHub answers an existing reaction with 200 and no new one, so sending it twice is harmless.
        self._create_once(lambda: comment.create_reaction(emoji), find=None)

    def permission(self, user: str) -> str:
        """The user's repository permission from the collaborator permission API (``none`` when unknown)."""
        try:
            role = self._repo.get_collaborator_role_name(user)
            # A custom repository role has its own name; its base permission is what counts.
            return role if role in PERMISSIONS else self._repo.get_collaborator_permission(user)
        except GithubException as error:
            if error.status == 404:
                return "none"
            raise

    # --- the repository: branches and pull requests -------------------------------------------------------

    @property
    def repository_id(self) -> int:
        """The repository's numeric id, which a webhook event's ``repository.id`` must match."""
        return self._repo.id

    @property
    def default_branch(self) -> str:
        """The repository's default branch (the bot never pushes to it)."""
        return self._repo.default_branch

    @property
    def commit_url(self) -> str:
        """Prefix of a commit's web page: append the sha."""
        return f"{self._repo.html_url}/commit/"

    def push_url(self) -> str:
        """The clone URL to fetch from and push to, as GitHub gives it (no credentials in it)."""
        return self._repo.clone_url

    def git_environment(self) -> dict[str, str]:
        """Environment for a git fetch or push with the token: a credential helper that reads it from
        ``PERFBOT_GIT_TOKEN``, so it is never on a command line (``ps`` shows command lines to everyone)."""
        return {
            "PERFBOT_GIT_TOKEN": self._token,
            "GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": "credential.helper",
            "GIT_CONFIG_VALUE_0": "",
            "GIT_CONFIG_KEY_1": "credential.helper",
            "GIT_CONFIG_VALUE_1": CREDENTIAL_HELPER,
            "GIT_TERMINAL_PROMPT": "0",
        }

    def open_or_update_pull_request(self, branch: str, title: str, body: str, base: str | None = None) -> str:
        """Open a pull request from ``branch`` (or refresh the open one's title and body); returns its URL."""
        base = base or self.default_branch
        if branch == base:
            raise ValueError(f"refusing to open a pull request from {branch!r} into itself")
        body = _comment_body(body)
        head = f"{self.repo_full_name.split('/')[0]}:{branch}"

        def find_open():
            return next(iter(self._repo.get_pulls(state="open", head=head)), None)

        pull = find_open()
        if pull is not None:
            if pull.title != title or pull.body != body:
                pull.edit(title=title, body=body)
            return pull.html_url
        return self._create_once(
            lambda: self._repo.create_pull(base=base, head=branch, title=title, body=body), find=find_open
        ).html_url

    # --- internals ----------------------------------------------------------------------------------------

    def _raw_comments(self, number: int | str) -> list[IssueComment]:
        return list(self._repo.get_issue(int(number)).get_comments())

    def _is_mine(self, raw: IssueComment, marker: str | None = None) -> bool:
        if raw.user is None or raw.user.login != self.bot_login:
            return False
        return marker is None or _comment(raw).has_marker(marker)

    def _create_comment(self, number: int | str, body: str, marker: str | None = None) -> Comment:
        before = {raw.id for raw in self._raw_comments(number)} if marker is None else set()

        def find_created() -> IssueComment | None:
            for raw in self._raw_comments(number):
                if raw.id in before or not self._is_mine(raw, marker):
                    continue
                if marker is not None or raw.body == body:
                    return raw
            return None

        issue = self._repo.get_issue(int(number))
        created = self._create_once(lambda: issue.create_comment(body), find=find_created)
        if created.user is not None and created.user.login != self.bot_login:
            # e.g. a GitHub App token, which cannot read /user: learn the login from what it posted.
            log.warning("comments post as %s, not %s; set PERFBOT_LOGIN", created.user.login, self.bot_login)
            self.bot_login = created.user.login
        return _comment(created)

    def _create_once(self, create: Callable[[], T], find: Callable[[], T | None] | None) -> T:
        """Run a POST at most once per attempt, looking for its result before sending it again."""
        attempt = 0
        while True:
            try:
                return create()
            except Exception as error:
                wait = self._rate_limit_wait(error)
                transient = wait is None and _is_transient(error)
                if attempt == self._retries or not (transient or wait is not None):
                    raise
                if wait is None:
                    wait = self._backoff * 2**attempt
                if wait > self._max_rate_limit_wait:
                    raise
                log.warning("POST failed (%s); trying again in %.2f s", _describe(error), wait)
                attempt += 1
                if not (transient and find is not None):
                    time.sleep(wait)
                    continue
                look = max(wait, self._settle_wait) if _maybe_in_flight(error) else wait
                found = _look_for(find, look)
                if found is not None:
                    return found

    def _rate_limit_wait(self, error: Exception) -> float | None:
        """Seconds to wait when ``error`` is a rate limit (the request was not processed), else None."""
        if not isinstance(error, GithubException) or error.status not in (403, 429):
            return None
        headers = {key.lower(): value for key, value in (error.headers or {}).items()}
        message = (error.data or {}).get("message", "") if isinstance(error.data, dict) else ""
        if headers.get("retry-after", "").isdigit():
            wait = float(headers["retry-after"])
        elif headers.get("x-ratelimit-remaining") == "0" and headers.get("x-ratelimit-reset", "").isdigit():
            wait = float(headers["x-ratelimit-reset"]) - time.time() + 1
        elif error.status == 429 or github.Requester.Requester.isSecondaryRateLimitError(message):
            wait = self._secondary_rate_wait
        else:
            return None
        return max(wait, 0.0)


class CappedRetry(GithubRetry):
    """PyGithub's retry policy, with ``Retry-After`` capped too: urllib3 would sleep as long as it says."""

    # GithubRetry.increment narrows urllib3's `response` and return types, so no signature matches both;
    # this one is GithubRetry's.
    def increment(  # type: ignore[override]
        self,
        method: str | None = None,
        url: str | None = None,
        response: HTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Retry:
        wait = self.get_retry_after(response) if response is not None else None
        if (
            response is not None
            and wait is not None
            and self.max_rate_limit_wait is not None
            and wait > self.max_rate_limit_wait
        ):
            longest = f"the longest wait ({self.max_rate_limit_wait:.0f} s)"
            message = {"message": f"Retry-After {wait:.0f} s exceeds {longest}"}
            raise RateLimitExceededExceedsMaxWait(response.status, message, dict(response.headers), wait=wait)
        return super().increment(
            method, url, response=response, error=error, _pool=_pool, _stacktrace=_stacktrace
        )


def _look_for(find: Callable[[], T | None], seconds: float) -> T | None:
    """Call ``find`` after ``seconds``, and every couple of seconds before, until it finds something."""
    deadline = time.monotonic() + seconds
    while True:
        remaining = deadline - time.monotonic()
        time.sleep(max(0.0, min(LOOK_INTERVAL_S, remaining)))
        found = find()
        if found is not None or remaining <= LOOK_INTERVAL_S:
            return found


def _maybe_in_flight(error: Exception) -> bool:
    """A failure after which GitHub may still be working on the request (it may yet save the comment)."""
    if isinstance(error, GithubException):
        return error.status in IN_FLIGHT_STATUSES
    return isinstance(error, (requests.ConnectionError, requests.Timeout))


def _is_transient(error: Exception) -> bool:
    if isinstance(error, GithubException):
        return error.status >= 500
    return isinstance(error, (requests.ConnectionError, requests.Timeout))


def _describe(error: Exception) -> str:
    if isinstance(error, GithubException):
        return redact(f"HTTP {error.status}")
    return redact(type(error).__name__)


def _comment(raw: IssueComment) -> Comment:
    return Comment(
        id=raw.id, author=raw.user.login if raw.user else "", body=raw.body or "", url=raw.html_url
    )


def _comment_body(body: str) -> str:
    body = redact(body)
    if len(body) <= COMMENT_LIMIT:
        return body
    return body[: COMMENT_LIMIT - len(TRUNCATION_NOTE)] + TRUNCATION_NOTE
