"""Where a command's plan and tracker come from: a plan file, stdin, an issue, or the repository's PLAN.md;
GitHub when a token and repository are configured, else the local tracker under ``.bot/``."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from bot import credentials
from bot.errors import BadInput
from bot.plan import Plan, PlanError, parse_plan, unknown_optimizations
from bot.trackers.base import Tracker
from bot.trackers.local import LocalTracker
from optimizations.registry import registry

DEFAULT_PLAN = "PLAN.md"
# The longest plan read, in characters: 15 times GitHub's 65,536-character limit on an issue body, far more than
# any plan needs, and small enough that parsing it and committing its items' text stays quick.
MAX_PLAN_CHARS = 1_000_000


def tracker_for(root: Path, env: Mapping[str, str] | None = None) -> Tracker:
    """GitHub (a token: see :mod:`bot.credentials`; ``GITHUB_REPOSITORY``, ``GITHUB_API_URL``,
    ``PERFBOT_LOGIN``) when a token and repository are configured, else the local tracker under ``.bot/``."""
    env = os.environ if env is None else env
    token = credentials.get(credentials.TOKEN, env)
    repository = env.get("GITHUB_REPOSITORY")
    if token and repository:
        from bot.trackers.github import GitHubTracker  # PyGithub is slow to import; most runs are local

        return GitHubTracker.from_env(repository, env)
    return LocalTracker(root)


def read_plan_file(file: str | Path) -> tuple[str, str]:
    """The text of a plan file (``-``: stdin) and a name for it; anything unreadable is bad input."""
    if str(file) == "-":
        return sys.stdin.read(), "stdin"
    path = Path(file)
    if path.is_dir():
        raise BadInput(f"{file} is a directory; pass the path of an issue body saved as markdown")
    if not path.is_file():
        raise BadInput(f"no plan file {file}; pass the path of an issue body saved as markdown")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{file} is not UTF-8 text (byte {exc.start}); pass a markdown file") from exc
    except OSError as exc:
        raise BadInput(f"cannot read {file}: {exc.strerror}") from exc
    if not text.strip():
        raise BadInput(f"{file} is empty; pass an issue body with a plan table or tier list")
    return text, path.name


def load_plan(text: str, source: str) -> Plan:
    """Parse a plan against the registered optimizations; an unparseable plan, one over
    :data:`MAX_PLAN_CHARS`, or one naming an ``opt:<id>`` nothing registers is bad input."""
    if len(text) > MAX_PLAN_CHARS:
        raise BadInput(
            f"the plan in {source} is {len(text):,} characters, over the {MAX_PLAN_CHARS:,} a plan may have; "
            "keep the plan's tables and lists and move the rest elsewhere"
        )
    known = registry()
    unknown = unknown_optimizations(text, known)
    if unknown:
        named = "; ".join(
            f"opt:{i}" + (f" (did you mean {' or '.join(close)}?)" if close else "")
            for i, close in unknown.items()
        )
        raise BadInput(
            f"the plan in {source} names optimizations nothing registers: {named}; `bot list` shows the ids"
        )
    try:
        return parse_plan(text, known.values(), source)
    except PlanError as exc:
        raise BadInput(str(exc)) from exc


def plan_from_issue(tracker: Tracker, issue: int | str) -> Plan:
    """The plan written in an issue's body."""
    return load_plan(tracker.issue(issue).body, f"issue {issue}")


def plan_file_of(root: Path, file: str | None) -> tuple[Plan, str, str]:
    """The plan in ``file`` (default: the repository's PLAN.md), its text, and the name runs file it under."""
    text, name = read_plan_file(file or Path(root) / DEFAULT_PLAN)
    return load_plan(text, name), text, Path(name).stem.lower()
