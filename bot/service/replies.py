"""What the bot writes back to a commenter, made useless as a flood or an amplifier.

A refusal (no permission, a command that cannot run, a busy issue) is replied to the same sender at most once
per issue per :data:`REFUSAL_WINDOW_S`; after that the comment gets only its final reaction. The times are kept
in SQLite in the bot's state directory, so a restart or a separate ``bot handle-event`` process remembers them.
Whatever the bot quotes from a comment or an error goes through :func:`quoted` or :func:`public`: short, its
``@mentions`` and markdown code fences neutralised, and no absolute path of the server in it.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from pathlib import Path

from bot.redact import redact

REFUSAL_WINDOW_S = 300.0
QUOTE_CHARS = 80
PUBLIC_CHARS = 600
DATABASE = "replies.sqlite3"
# U+2060 WORD JOINER after "@": the text reads the same, and GitHub links no mention and notifies nobody.
_AT = "@\u2060"
# Two or more absolute path components (``/home/ci/.local/state/perfbot``), or a home-relative path.
_SERVER_PATH = re.compile(r"(?<![\w.:/])(?:~|/)[\w.+-]*(?:/[\w.+-]+)+/?")


def quoted(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` (from a comment) fit to quote inside a code span: one line, at most ``limit`` characters,
    mentions neutralised, backticks replaced so the span cannot be closed early."""
    line = " ".join(text.split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return line.replace("`", "'").replace("@", _AT)


def public(text: str, limit: int = PUBLIC_CHARS) -> str:
    """An error message fit for an issue: secrets redacted, the server's paths replaced by ``<path>``,
    mentions neutralised, at most ``limit`` characters."""
    text = _SERVER_PATH.sub("<path>", redact(text)).replace("@", _AT)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RefusalLog:
    """When each sender was last sent a refusal on each issue; :meth:`may_reply` lets one through per window."""

    def __init__(self, state_dir: str | Path, window: float = REFUSAL_WINDOW_S) -> None:
        self.window = window
        self.path = Path(state_dir) / DATABASE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS refusals (repo TEXT, issue INTEGER, sender TEXT, sent REAL,"
            " PRIMARY KEY (repo, issue, sender))"
        )

    def may_reply(self, repo: str, issue: int, sender: str) -> bool:
        """True (and the time noted) when ``sender`` got no refusal on this issue within the window."""
        now = time.time()
        with self._lock:
            changed = self._db.execute(
                "INSERT INTO refusals VALUES (?, ?, ?, ?) ON CONFLICT (repo, issue, sender) DO UPDATE"
                " SET sent = excluded.sent WHERE refusals.sent <= ?",
                (repo.lower(), issue, sender.lower(), now, now - self.window),
            ).rowcount
        return changed == 1
