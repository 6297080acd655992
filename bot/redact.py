"""Keeping secrets out of everything the bot writes: comments, log lines, exception text.

Every token or webhook secret the bot is handed is registered with :func:`register_secret`; :func:`redact`
replaces registered secrets, anything the secret scanner (:mod:`bot.security`) recognises as a credential, and
credentials embedded in URLs, in time linear in the text's length (it runs on every log line).
:func:`install_log_redaction` makes every log record pass through :func:`redact` before any handler sees it.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback

from bot.security import find_secrets

MASK = "***"

# user:password@ or token@ in a URL (``https://x-access-token:TOKEN@github.com/...``): found from the literal
# ``://``, with a bounded user part, so it costs at most a few hundred steps per ``://``.
_URL_CREDENTIALS = re.compile(r"://[^/@\s]{1,512}@")
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
    result = _mask_spans(result, find_secrets(result))
    return _URL_CREDENTIALS.sub(f"://{MASK}@", result)


def _mask_spans(text: str, spans: list[tuple[str, int, int]]) -> str:
    """``text`` with every ``(kind, start, end)`` span replaced by the mask; overlapping spans merge."""
    pieces, done = [], 0
    for _, start, end in sorted(spans, key=lambda span: span[1]):
        if start >= done:
            pieces += [text[done:start], MASK]
        done = max(done, end)
    return "".join(pieces) + text[done:]


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
