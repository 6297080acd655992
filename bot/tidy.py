"""Keeping the bot's edits as clean as the code around them, in repositories that use ruff.

Transforms keep the file's own layout, but imports added by libcst land at the end of the import block, and a
long added argument is not wrapped. Where the target configures ruff, the changed files get ruff's import
sorting, and those that were ``ruff format`` clean before the change are formatted again, so the commit
passes the repository's own ``ruff check`` / ``ruff format --check``.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

from ruff.__main__ import find_ruff_bin

RUFF_CONFIGS = ("ruff.toml", ".ruff.toml")


def uses_ruff(root: Path) -> bool:
    """True when the repository configures ruff (``ruff.toml`` or ``[tool.ruff]`` in pyproject.toml)."""
    if any((root / name).exists() for name in RUFF_CONFIGS):
        return True
    pyproject = root / "pyproject.toml"
    return pyproject.exists() and "[tool.ruff" in pyproject.read_text(encoding="utf-8")


@cache
def _ruff_binary() -> str:
    """The ruff executable (run directly: a ``python -m ruff`` would start an interpreter per call)."""
    return str(find_ruff_bin())


def _ruff(root: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_ruff_binary(), *args],
        cwd=root,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )


def was_format_clean(root: Path, path: str, original: str) -> bool:
    """Whether ``original`` (the file before the change) passed ``ruff format --check``."""
    return _ruff(root, "format", "--check", "--stdin-filename", path, "-", stdin=original).returncode == 0


def tidy(root: Path, originals: dict[str, str | None]) -> None:
    """Sort imports in the changed Python files, and re-format those that were format-clean before.

    ``originals`` maps each changed path to its text before the change (``None`` for a new file).
    """
    if not uses_ruff(root):
        return
    python = [p for p in originals if p.endswith(".py")]
    if not python:
        return
    _ruff(root, "check", "--fix", "--select", "I001", "--quiet", *python)
    clean_before = [p for p in python if originals[p] is None or was_format_clean(root, p, originals[p])]
    if clean_before:
        _ruff(root, "format", "--quiet", *clean_before)
