"""Turning an issue comment into a bot command: parsing, who may run it, one run per issue, reactions.

A comment whose first line is ``/bot <command> [options]``, unindented (an indented line is a markdown code
block), is parsed with the CLI's own parser, after checking that it uses only the options a comment may
(:data:`COMMENT_OPTIONS`). Only a new comment (``issue_comment`` / ``created``) on an issue of the configured
repository triggers; edits, pull-request comments and comments by bots or by the bot's own account do not. The
event's ``repository.id`` must be the configured repository's, and the commenter's repository permission (the
collaborator permission API) write, maintain or admin. ``help`` and ``status`` are answered here; every other
command goes to the injected runner while a lock file holds the issue, so a second command meanwhile is
answered with a link instead. Every command ends with a final reaction (🚀 done, 😕 refused, busy or failed);
a sender without permission, or whose issue is busy, is answered in words at most once per issue in a few
minutes (:mod:`bot.service.replies`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import NamedTuple, TypeVar
from urllib.parse import urlsplit

import git

from bot.commands.table import COMMANDS, FromComment, Parser, command_parser
from bot.errors import BadInput, BotError
from bot.progress import Progress, find_progress
from bot.publish import check_out_branch, check_out_fetched, return_to
from bot.redact import redact
from bot.service.delivery_log import Outcome, describe, is_expected, log_command, log_delivery
from bot.service.replies import RefusalLog, public, quoted
from bot.trackers.base import Tracker

log = logging.getLogger(__name__)
FieldT = TypeVar("FieldT")

PREFIX = "/bot"
MAY_RUN = frozenset({"admin", "maintain", "write"})
_BENCH_OPTIONS = (
    "--workload",
    "--size",
    "--steps",
    "--repeats",
    "--max-repeats",
    "--min-time",
    "--time-budget",
    "--warmup-rounds",
    "--max-host-load",
    "--drop-regressions",
)
# The commands a comment may start and the options it may give them. Left out on purpose: whatever reads files
# on the bot's side (--plan, --results), names another repository or issue (--repo, --issue) or sends work to
# other machines (--runner, --address). From a comment the plan is the issue, the repository is the checkout
# the bot runs in, and benchmarks run where the bot runs.
COMMENT_OPTIONS: dict[str, frozenset[str]] = {
    "apply": frozenset({"--tier", "--bench", "--pr", "--no-push", *_BENCH_OPTIONS}),
    "bench": frozenset({"--profile", *_BENCH_OPTIONS}),
    "review": frozenset({"--tier"}),
    "status": frozenset(),
    "help": frozenset(),
    "list": frozenset(),
}
COMMENT_COMMANDS = tuple(COMMENT_OPTIONS)
HELP_OPTIONS = frozenset({"--help", "-h"})
# The commands that work in the checkout: each starts from the freshly fetched default branch.
CHECKOUT_COMMANDS = ("apply", "bench", "review")

_parse_lock = threading.Lock()
_build_lock = threading.Lock()
# Lock files this process holds: a lock naming this pid but not listed here was left by an earlier process
# that had the same pid (a container restarted, its server is pid 1 again).
_held: set[Path] = set()


def comment_command(name: str) -> ModuleType:
    """The module of command ``name``, one a comment may start (:data:`COMMENT_COMMANDS`). Imported on first
    use: they load libcst and the benchmark harness. The service names them itself rather than going through
    ``bot.commands``, which loads every command module, ``bot serve``'s own among them."""
    from bot.commands import apply, bench, review, status
    from bot.commands import help as help_command
    from bot.commands import list as list_command

    modules = {
        "apply": apply,
        "bench": bench,
        "review": review,
        "status": status,
        "help": help_command,
        "list": list_command,
    }
    return modules[name]


def comment_parser() -> argparse.ArgumentParser:
    """The CLI's parser, with the options of the commands a comment may start."""

    def add_arguments(name: str, parser: argparse.ArgumentParser) -> None:
        if name in COMMENT_COMMANDS:
            comment_command(name).add_arguments(parser)

    return command_parser(add_arguments)


class MalformedEvent(BadInput):
    """An ``issue_comment`` payload whose fields do not have GitHub's types."""


@dataclass(frozen=True)
class CommentCommand:
    """A ``/bot`` line from a new issue comment, before anyone has checked it; ``delivery`` is GitHub's
    ``X-GitHub-Delivery`` id, for the log only (unsigned: never part of :attr:`key`)."""

    repo: str
    issue: int
    comment_id: int
    comment_url: str
    author: str
    line: str
    repo_id: int = 0
    delivery: str = ""

    @property
    def key(self) -> str:
        """What identifies the comment, from signed fields only: ``<repository id>/<comment id>/created``."""
        return f"{self.repo_id}/{self.comment_id}/created"


@dataclass(frozen=True)
class CommandRequest:
    """A checked, parsed command handed to the runner."""

    repo: str
    issue: int
    comment_id: int
    comment_url: str
    author: str
    argv: tuple[str, ...]
    args: argparse.Namespace
    tracker: Tracker


Runner = Callable[[CommandRequest], int]


def run_request(request: CommandRequest) -> int:
    """The runner ``bot handle-event`` and ``bot serve`` use: the command the comment asked for, answering on
    its issue, in the checkout the bot runs in (``.``).

    A command that works in the checkout starts from the default branch freshly fetched from the repository
    (``bench`` and ``review`` without revisions: from the issue's work branch) and the checkout returns to the
    default branch afterwards, whatever happened, so no run builds on what another left behind.
    """
    comment = FromComment(request.tracker, request.issue)
    command = comment_command(request.args.command)
    if request.args.command not in CHECKOUT_COMMANDS:
        return command.run(request.args, comment)
    tracker = request.tracker
    repo = git.Repo(".")
    url, env, default = tracker.push_url(), tracker.git_environment(), tracker.default_branch
    if url is None or default is None:
        raise BadInput(
            f"`{request.args.command}` from a comment needs a repository to fetch; this tracker has none"
        )
    check_out_fetched(repo, url, default, env)
    try:
        given = getattr(request.args, "revs", None) or getattr(request.args, "range", None)
        if request.args.command != "apply" and not given:
            branch = _work_branch(tracker, request.issue)
            if branch is not None:
                check_out_branch(repo, url, branch, env)
        return command.run(request.args, comment)
    finally:
        return_to(repo, default)


def _work_branch(tracker: Tracker, issue: int) -> str | None:
    """The work branch the issue's progress comment names, if any."""
    found = find_progress(tracker, issue)
    progress = Progress.from_comment(found.body) if found else None
    return progress.branch if progress and progress.branch else None


def command_from_event(event: object) -> CommentCommand | None:
    """The ``/bot`` command in an ``issue_comment`` event payload, or None when the event must not trigger.

    Raises :class:`MalformedEvent` when a field the decision reads does not have GitHub's type.
    """
    if not isinstance(event, dict):
        raise MalformedEvent("the event is not a JSON object")
    if event.get("action") != "created":
        return None
    comment, issue = _field(event, "comment", dict), _field(event, "issue", dict)
    if issue.get("pull_request"):
        return None
    user = _field(comment, "user", dict)
    if user.get("type") == "Bot":
        return None
    first = _field(comment, "body", str).split("\n", 1)[0].rstrip()
    if first != PREFIX and not first.startswith(PREFIX + " "):
        return None
    repository = _field(event, "repository", dict)
    url = comment.get("html_url")
    return CommentCommand(
        repo=_field(repository, "full_name", str),
        issue=_field(issue, "number", int),
        comment_id=_field(comment, "id", int),
        comment_url=url if isinstance(url, str) else "",
        author=_field(user, "login", str),
        line=first,
        repo_id=_field(repository, "id", int),
    )


def _field(mapping: dict, key: str, kind: type[FieldT]) -> FieldT:
    value = mapping.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedEvent(f"`{key}` is not a JSON {'object' if kind is dict else kind.__name__}")
    return value


def configured_repository(env: Mapping[str, str] | None = None, checkout: str | Path = ".") -> str | None:
    """The one repository the bot serves, ``owner/name``: ``$PERFBOT_REPOSITORY``, else ``$GITHUB_REPOSITORY``
    (set by Actions), else the one the checkout's ``origin`` points at; None when none of them says."""
    env = os.environ if env is None else env
    named = env.get("PERFBOT_REPOSITORY") or env.get("GITHUB_REPOSITORY")
    if named:
        return named.strip()
    try:
        url = git.Repo(checkout).remotes.origin.url
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, AttributeError, ValueError):
        return None
    return repository_of(url)


def repository_of(url: str) -> str | None:
    """``owner/name`` of a clone URL (``https://host[:port]/owner/name.git``, ``git@host:owner/name.git``,
    ``ssh://git@host/owner/name``); None for a local path."""
    if "://" in url:
        path = urlsplit(url).path if not url.startswith("file://") else ""
    elif ":" in url.split("/", 1)[0]:
        path = url.split(":", 1)[1]
    else:
        path = ""
    parts = [part for part in path.removesuffix("/").removesuffix(".git").split("/") if part]
    return "/".join(parts[-2:]) if len(parts) >= 2 else None


class IssueLock:
    """A lock file per issue under the state directory; a lock left by a dead process on this host is stale."""

    def __init__(self, state_dir: str | Path, repo: str, issue: int) -> None:
        self.path = Path(state_dir) / "locks" / f"{repo.replace('/', '__') or 'local'}-{issue}.lock"

    def acquire(self, holder: dict) -> bool:
        """Take the lock for ``holder`` (a JSON-able description of the run); False when someone holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {**holder, "pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._stale():
                    return False
                log.warning("removing the stale lock %s", self.path)
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as handle:
                json.dump(record, handle)
            _held.add(self.path)
            return True
        return False

    def holder(self) -> dict | None:
        """What the current holder wrote, or None when the lock is free."""
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:  # being written right now
            return {}

    def release(self) -> None:
        _held.discard(self.path)
        self.path.unlink(missing_ok=True)

    def _stale(self) -> bool:
        holder = self.holder()
        if not holder or holder.get("host") != socket.gethostname():
            return False
        if holder.get("pid") == os.getpid():
            return self.path not in _held
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


class Parsed(NamedTuple):
    """A ``/bot`` line read with the CLI's parser; ``answer`` is set when the command must not run, and
    ``reason`` says why in a few words, for the log."""

    argv: tuple[str, ...]
    args: argparse.Namespace | None = None
    answer: str | None = None
    failed: bool = True
    reason: str = ""


@dataclass
class Accepted:
    """A command that passed every check and holds its issue's lock, waiting to run."""

    request: CommandRequest
    lock: IssueLock
    command: CommentCommand


class Dispatcher:
    """Checks comment commands and runs them through ``runner``; ``parser`` defaults to
    :func:`comment_parser`."""

    def __init__(
        self,
        runner: Runner,
        state_dir: str | Path,
        parser: argparse.ArgumentParser | None = None,
        refusals: RefusalLog | None = None,
    ) -> None:
        self.runner = runner
        self.state_dir = Path(state_dir)
        self.refusals = refusals if refusals is not None else RefusalLog(self.state_dir)
        self._parser = parser

    @property
    def parser(self) -> argparse.ArgumentParser:
        """The parser commands are read with (built on first use, once: it loads the command modules, seconds)."""
        with _build_lock:
            if self._parser is None:
                self._parser = comment_parser()
        return self._parser

    def handle(self, command: CommentCommand, tracker: Tracker) -> int:
        """Check and run ``command`` now; the exit code of the run, 0 when nothing had to run."""
        accepted = self.intake(command, tracker)
        return self.run(accepted) if accepted else 0

    def intake(
        self, command: CommentCommand, tracker: Tracker, repository_id: int | None = None
    ) -> Accepted | None:
        """The quick part: the repository, the author, permission, parsing, answers to help/status, the issue
        lock. None when done (its outcome logged). ``repository_id`` is the configured repository's, when known
        (else the tracker's)."""
        expected = repository_id if repository_id is not None else tracker.repository_id
        if expected is not None and command.repo_id != expected:
            log_command(command, Outcome.IGNORED, f"repository id {command.repo_id}, not {expected}")
            return None
        own = tracker.bot_login
        if own and command.author.lower() == own.lower():
            log_command(command, Outcome.IGNORED, "the bot's own comment")
            return None
        permission = tracker.permission(command.author)
        if permission not in MAY_RUN:
            answered = self._refuse(
                tracker,
                command,
                f"@{command.author} only people with write, maintain or admin permission on this repository "
                f"can run `/bot` commands (yours: {quoted(permission)}). Ask a maintainer to run it.",
            )
            log_command(command, Outcome.REFUSED, f"permission {permission}; {answered}")
            return None
        _react(tracker, command.comment_id, "eyes")
        parsed = self._parse(command.line)
        if parsed.answer is not None:  # to someone who may run commands: always worth the words
            tracker.reply(command.issue, parsed.answer)
            _react(tracker, command.comment_id, "confused" if parsed.failed else "rocket")
            log_command(command, Outcome.REFUSED if parsed.failed else Outcome.DONE, parsed.reason)
            return None
        argv, name = parsed.argv, parsed.argv[0]
        if name == "help":
            tracker.reply(command.issue, self.usage())
            _react(tracker, command.comment_id, "rocket")
            log_command(command, Outcome.DONE, "answered help")
            return None
        lock = IssueLock(self.state_dir, command.repo, command.issue)
        if name == "status":
            tracker.reply(command.issue, self._status(tracker, command, lock))
            _react(tracker, command.comment_id, "rocket")
            log_command(command, Outcome.DONE, "answered status")
            return None
        if not lock.acquire(
            {"author": command.author, "comment_url": command.comment_url, "command": command.line}
        ):
            answered = self._refuse(tracker, command, self._busy(tracker, command, lock))
            log_command(command, Outcome.REFUSED, f"a run is in progress on #{command.issue}; {answered}")
            return None
        assert parsed.args is not None  # parsed: only help and status have no arguments, answered above
        request = CommandRequest(
            command.repo,
            command.issue,
            command.comment_id,
            command.comment_url,
            command.author,
            argv,
            parsed.args,
            tracker,
        )
        return Accepted(request, lock, command)

    def run(self, accepted: Accepted) -> int:
        """The long part: run the command, react 🚀 or 😕, release the issue lock whatever happens; its outcome
        logged (with the traceback when the command raised what no command should: a bug)."""
        request, ran = accepted.request, f"/bot {' '.join(accepted.request.argv)}"
        try:
            code = self.runner(request)
        except Exception as error:
            bug = None if is_expected(error) else error
            log_command(accepted.command, Outcome.FAILED, f"{ran}: {describe(error)}", bug=bug)
            _react(request.tracker, request.comment_id, "confused")
            with contextlib.suppress(Exception):
                request.tracker.reply(
                    request.issue,
                    f"`/bot {quoted(' '.join(request.argv))}` failed: {type(error).__name__}: {public(str(error))}",
                )
            return 1
        finally:
            accepted.lock.release()
        _react(request.tracker, request.comment_id, "rocket" if code == 0 else "confused")
        outcome = Outcome.DONE if code == 0 else Outcome.FAILED
        log_command(accepted.command, outcome, f"{ran}: exit code {code}")
        return code

    def usage(self) -> str:
        """The ``/bot help`` answer."""
        return (
            "Comment `/bot <command> [options]` as the first line of a new comment on a plan issue. "
            f"Commands: {', '.join(f'`{name}`' for name in COMMENT_COMMANDS)}. Only people with write, "
            "maintain or admin permission on this repository can run them; one run per issue at a time.\n\n"
            f"```\n{self.parser.format_help().rstrip()}\n```"
        )

    def _refuse(self, tracker: Tracker, command: CommentCommand, text: str) -> str:
        """Reply ``text`` unless this sender had a refusal on this issue lately; react 😕 either way. Which of
        the two it did, in words."""
        replied = self.refusals.may_reply(command.repo, command.issue, command.author)
        if replied:
            tracker.reply(command.issue, text)
        _react(tracker, command.comment_id, "confused")
        return "answered" if replied else "reacted only (refused lately)"

    def _parse(self, line: str) -> Parsed:
        """The arguments after ``/bot`` and their parse, or the answer to give instead of running."""
        try:
            argv = tuple(shlex.split(line[len(PREFIX) :]))
        except ValueError as error:
            return Parsed((), answer=f"Could not read `{quoted(line)}`: {error}.", reason=str(error))
        argv = argv or ("help",)
        if argv[0] not in COMMENT_COMMANDS:
            names = ", ".join(f"`{name}`" for name in COMMENT_COMMANDS)
            answer = f"`/bot {quoted(argv[0])}` cannot run from a comment. Commands here: {names}."
            return Parsed(argv, answer=answer, reason=f"unknown command {argv[0]}")
        allowed = COMMENT_OPTIONS[argv[0]] | HELP_OPTIONS
        refused = [
            token
            for token in argv[1:]
            if token.startswith("-") and not token[1:2].isdigit() and token.split("=", 1)[0] not in allowed
        ]
        if refused:
            options = ", ".join(f"`{option}`" for option in sorted(COMMENT_OPTIONS[argv[0]])) or "none"
            return Parsed(
                argv,
                answer=(
                    f"`{quoted(refused[0])}` is for the command line: from a comment the plan is this issue, the "
                    "repository is the one the bot runs in, and benchmarks run where the bot runs. "
                    f"Options of `/bot {argv[0]}` here: {options}."
                ),
                reason=f"option {refused[0]} is for the command line",
            )
        if argv[0] in ("help", "status"):
            return Parsed(argv)
        if HELP_OPTIONS.intersection(argv[1:]):
            text = f"```\n{_command_help(argv[0]).rstrip()}\n```"
            return Parsed(argv, answer=text, failed=False, reason=f"answered {argv[0]} --help")
        # The CLI's parser raises instead of printing: nothing here touches the process's stdout and stderr,
        # which a run on another thread is writing to.
        with _parse_lock:
            try:
                return Parsed(argv, self.parser.parse_args(list(argv)))
            except BotError as error:
                text = (
                    f"`/bot {quoted(' '.join(argv))}` is not a valid command:\n\n"
                    f"```\n{public(quoted(str(error), limit=300))}\n```"
                )
                # the argument at fault, not the text given for it (the answer quotes that)
                return Parsed(argv, answer=text, reason=f"not valid: {str(error).split(':', 1)[0]}")

    def _status(self, tracker: Tracker, command: CommentCommand, lock: IssueLock) -> str:
        progress = find_progress(tracker, command.issue)
        holder = lock.holder()
        if holder is not None:
            where = progress.url if progress else holder.get("comment_url", "")
            running = f"`{quoted(str(holder.get('command', '/bot')))}` by @{holder.get('author', '?')}"
            return f"A run is in progress ({running}): {where}"
        if progress is not None:
            return f"No run in progress. Latest progress: {progress.url}"
        return "No run yet on this issue. Start one with `/bot apply --tier 1`."

    def _busy(self, tracker: Tracker, command: CommentCommand, lock: IssueLock) -> str:
        holder = lock.holder() or {}
        progress = find_progress(tracker, command.issue)
        where = progress.url if progress else holder.get("comment_url", "the running command")
        return (
            f"@{command.author} a run is already in progress on this issue ({where}); "
            "one run per issue at a time. Comment again when it has finished."
        )


def _command_help(name: str) -> str:
    """``bot <name> --help``'s text, without printing it."""
    parser = Parser(prog=f"bot {name}", description=COMMANDS[name][1])
    comment_command(name).add_arguments(parser)
    return parser.format_help()


def _react(tracker: Tracker, comment_id: int, emoji: str) -> None:
    """A reaction is a courtesy: failing to add one never stops a run."""
    try:
        tracker.react(comment_id, emoji)
    except Exception as error:
        log.warning("could not react %s to comment %s: %s", emoji, comment_id, redact(error))


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where locks and the log of handled comments live: ``$PERFBOT_STATE_DIR``, else
    ``$XDG_STATE_HOME/perfbot``.

    Outside the checkout on purpose: ``actions/checkout`` cleans the workspace between jobs.
    """
    env = os.environ if env is None else env
    if env.get("PERFBOT_STATE_DIR"):
        return Path(env["PERFBOT_STATE_DIR"])
    return Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "perfbot"


def handle_event(
    event_path: str | Path,
    runner: Runner,
    *,
    tracker: Tracker | None = None,
    state_dir: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """The GitHub Actions entry: act on the ``issue_comment`` event in ``event_path`` ($GITHUB_EVENT_PATH).

    Returns the exit code: 0 when the event was ignored, refused or answered, else the run's code. Only
    comments on :func:`configured_repository` count; the tracker defaults to :meth:`GitHubTracker.from_env`
    for it.
    """
    env = os.environ if env is None else env
    try:
        event = json.loads(Path(event_path).read_text())
    except (OSError, ValueError) as error:
        raise BadInput(
            f"cannot read the event file {event_path}: {error}; pass $GITHUB_EVENT_PATH"
        ) from error
    event_name = env.get("GITHUB_EVENT_NAME", "issue_comment")
    command = command_from_event(event) if event_name == "issue_comment" else None
    if command is None:
        log_delivery(Outcome.IGNORED, "not a new /bot comment on an issue", event=event_name)
        return 0
    repository = configured_repository(env)
    if repository is None:
        raise BadInput("no repository: set PERFBOT_REPOSITORY=owner/name (Actions sets GITHUB_REPOSITORY)")
    if command.repo.lower() != repository.lower():
        log_command(command, Outcome.IGNORED, f"this bot serves {repository}")
        return 0
    if tracker is None:
        from bot.trackers.github import GitHubTracker

        tracker = GitHubTracker.from_env(repository, env)
    dispatcher = Dispatcher(runner, state_dir if state_dir is not None else default_state_dir(env))
    return dispatcher.handle(command, tracker)
