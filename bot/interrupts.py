"""After an interrupt (Ctrl-C, or SIGTERM, which ``bot.cli`` turns into one): the cleanup that records where a
command stopped, kept from being cut short by the next Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_STOPPING = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """SIGINT and SIGTERM ignored while the block runs, so a second Ctrl-C cannot leave a half-written record or a
    half-reset tree: the git processes the block starts inherit the ignoring, as they share the terminal's process
    group and would get the signal too. The previous handlers come back afterwards. In another thread than the
    main one (where Python delivers signals) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in _STOPPING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
