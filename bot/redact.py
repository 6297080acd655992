"""Keeping secrets out of everything the bot writes: comments, log lines, exception text.

Every token or webhook secret the bot is handed is registered with :func:`register_secret`; :func:`redact`
replaces registered secrets, anything shaped like a GitHub token, and credentials embedded in URLs.
:func:`install_log_redaction` makes every log record pass through :func:`redact` before any handler sees it.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback

MASK = "***"

# Shapes of GitHub credentials: classic/fine-grained PATs, OAuth, app installation and refresh tokens.
_TOKEN_SHAPES = re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})\b")
# user:password@ or token@ in a URL (``https://x-access-token:TOKEN@github.com/...``).
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
# Shorter values would mask ordinary words.
_MIN_SECRET_LENGTH = 6

_secrets: set[str] = set()
_lock = threading.Lock()
_installed = False


def register_secret(value: str | bytes | None) -> None:
    """Remember ``value`` so that :func:`redact` masks it from now on."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value and len(value) >= _MIN_SECRET_LENGTH:
        with _lock:
            _secrets.add(value)


def redact(text: object) -> str:
    """``text`` as a string with every registered secret, token-shaped string and URL credential masked."""
    result = str(text)
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        result = result.replace(secret, MASK)
    result = _TOKEN_SHAPES.sub(MASK, result)
    return _URL_CREDENTIALS.sub(lambda match: f"{match['scheme']}{MASK}@", result)


def install_log_redaction() -> None:
    """Redact every log record (message, arguments, traceback) when it is created; safe to call repeatedly."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        make_record = logging.getLogRecordFactory()

    def redacting_record(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            record.msg, record.args = redact(record.getMessage()), None
        except Exception:  # a malformed log call: leave it to logging's own error report
            record.msg = redact(record.msg)
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return record

    logging.setLogRecordFactory(redacting_record)
