"""Keeping secrets out of everything the bot writes: comments, log lines, exception text.

Every token or webhook secret the bot is handed is registered with :func:`register_secret`; :func:`redact`
replaces registered secrets (as they are, and in the encodings a program that got hold of one would print it
in: base64 at any alignment, standard or URL-safe, hex in either case, URL-encoded), anything the secret
scanner (:mod:`bot.security`) recognises as a credential, and credentials embedded in URLs, in time linear in
the text's length (it runs on every log line).
:func:`install_log_redaction` makes every log record pass through :func:`redact` before any handler sees it.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
import traceback
import urllib.parse

from bot.security import find_secrets

MASK = "***"

# user:password@ or token@ in a URL (``https://x-access-token:TOKEN@github.com/...``): found from the literal
# ``://``, with a bounded user part, so it costs at most a few hundred steps per ``://``.
_URL_CREDENTIALS = re.compile(r"://[^/@\s]{1,512}@")
# Shorter values would mask ordinary words.
_MIN_SECRET_LENGTH = 6

# Every form of every registered secret that is masked, longest first once sorted.
_secrets: set[str] = set()
_lock = threading.Lock()
_installed = False


def register_secret(value: str | bytes | None) -> None:
    """Remember ``value`` so that :func:`redact` masks it from now on."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value and len(value) >= _MIN_SECRET_LENGTH:
        with _lock:
            _secrets.update(encodings(value))


def encodings(secret: str) -> set[str]:
    """``secret`` and the forms it takes when encoded: URL-encoded, hex (lower and upper case), and base64
    (standard and URL-safe) of any text that contains it. Base64 encodes three bytes as four characters, so a
    secret inside a longer text (``x-access-token:<token>`` in a Basic auth header) comes out in one of three
    ways, by its offset; each way's characters that depend only on the secret are kept (the first and last
    group, shared with its neighbours, are left out), when long enough not to mask ordinary text."""
    raw = secret.encode()
    forms = {secret, urllib.parse.quote(secret, safe=""), raw.hex(), raw.hex().upper()}
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode().rstrip("=")
        start = 0 if offset == 0 else 4
        whole = (offset + len(raw)) // 3 * 4  # the characters of complete groups
        core = encoded[start:whole]
        if len(core) >= 2 * _MIN_SECRET_LENGTH:
            forms |= {core, core.replace("+", "-").replace("/", "_")}
    return {form for form in forms if len(form) >= _MIN_SECRET_LENGTH}


def holds_registered_secret(text: str) -> bool:
    """True when ``text`` holds a secret the bot was handed, in any of its :func:`encodings`."""
    with _lock:
        secrets = list(_secrets)
    return any(secret in text for secret in secrets)


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
