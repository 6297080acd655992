"""What perfbot writes into, and reads from, a target repository: commit trailers, its git identity, the
git-notes ref, work-branch names and the ``[tool.bot]`` table of ``pyproject.toml``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import git

from bot.errors import BadInput

BOT_NAME = "perfbot"
BOT_EMAIL = "perfbot@users.noreply.github.com"

TRAILER_OPTIMIZATION = "Bot-Optimization"
TRAILER_ITEM = "Bot-Plan-Item"
TRAILER_ISSUE = "Bot-Issue"
TRAILER_TIER = "Bot-Tier"
TRAILER_REVERT_OF = "Bot-Revert-Of"

NOTES_REF = "perfbot"
BRANCH_PREFIX = "bot/"
_BRANCH = re.compile(r"bot/(?P<issue>.+)-tier-(?P<tier>\d+)")


def bot_actor() -> git.Actor:
    """The identity the bot commits and writes notes as."""
    return git.Actor(BOT_NAME, BOT_EMAIL)


def bot_git_environment() -> dict[str, str]:
    """Environment variables that make a ``git`` command author and commit as the bot."""
    return {
        "GIT_AUTHOR_NAME": BOT_NAME,
        "GIT_AUTHOR_EMAIL": BOT_EMAIL,
        "GIT_COMMITTER_NAME": BOT_NAME,
        "GIT_COMMITTER_EMAIL": BOT_EMAIL,
    }


def branch_name(issue: int | str, tier: int) -> str:
    """``bot/<issue-or-plan>-tier-<n>``, with the issue part reduced to characters git accepts."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", str(issue)).strip("-.").lower() or "plan"
    return f"{BRANCH_PREFIX}{slug}-tier-{tier}"


def parse_branch(name: str) -> tuple[int | str, int] | None:
    """``(issue, tier)`` of a work-branch name, or None for any other branch."""
    match = _BRANCH.fullmatch(name)
    if match is None:
        return None
    issue = match["issue"]
    return (int(issue) if issue.isdigit() else issue), int(match["tier"])


def issue_key(text: str) -> int | str:
    """An issue given on the command line or in a trailer: a number when it is one, else the plan's name."""
    return int(text) if str(text).isdigit() else text


STATE_DIR = ".bot"


def state_dir(root: Path) -> Path:
    """``<root>/.bot``, where the bot keeps results, profiles and local issues; listed in
    ``.git/info/exclude`` so its bookkeeping never dirties the tree it commits to."""
    exclude = Path(root) / ".git" / "info" / "exclude"
    if exclude.parent.parent.is_dir():  # a clone may lack .git/info
        exclude.parent.mkdir(exist_ok=True)
        lines = exclude.read_text().splitlines() if exclude.exists() else []
        if f"/{STATE_DIR}/" not in lines:
            exclude.write_text("\n".join([*lines, f"/{STATE_DIR}/"]) + "\n")
    return Path(root) / STATE_DIR


def pyproject_document(root: Path) -> dict[str, Any]:
    """The target's parsed ``pyproject.toml`` (empty when there is none); invalid TOML is bad input."""
    path = Path(root) / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path} is not valid TOML ({exc}); fix it, then re-run") from exc


def tool_settings(root: Path) -> dict[str, Any]:
    """The target's ``[tool.bot]`` table (empty when there is no ``pyproject.toml`` or no table)."""
    path = Path(root) / "pyproject.toml"
    table = pyproject_document(root).get("tool", {}).get("bot", {})
    if not isinstance(table, dict):
        raise BadInput(f"{path}: [tool.bot] must be a table; fix it, then re-run")
    return table
