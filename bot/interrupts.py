"""After an interrupt (Ctrl-C, or SIGTERM, which ``bot.cli`` turns into one): the cleanup that records where a
command stopped, kept from being cut short by the next Ctrl-C, and the record of a command that keeps no record
of its own (``bot review``), which ``bot status`` reads."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from bot.conventions import state_dir

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


def _record_path(root: Path, branch: str, command: str) -> Path:
    """``.bot/interrupted/<branch>-<command>.txt`` (ignored by git)."""
    return state_dir(root) / "interrupted" / f"{branch.replace('/', '-')}-{command}.txt"


def record_interrupted(root: Path, branch: str, command: str, step: str) -> None:
    """Keep that ``command`` on ``branch`` was interrupted at ``step`` (replaced whole, never half-written)."""
    path = _record_path(root, branch, command)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(f"{step}\n", encoding="utf-8")
    partial.replace(path)


def clear_interrupted(root: Path, branch: str, command: str) -> None:
    """Forget an interrupt of ``command`` on ``branch``: a later run of it finished."""
    _record_path(root, branch, command).unlink(missing_ok=True)


def interrupted_step(root: Path, branch: str, command: str) -> str | None:
    """The step the last run of ``command`` on ``branch`` was interrupted at; None when it finished."""
    path = _record_path(root, branch, command)
    return path.read_text(encoding="utf-8").strip() if path.is_file() else None
