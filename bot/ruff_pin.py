"""The ruff that tidies and lints a target: perfbot's own, unless the target pins another version.

A target may set ``required-version`` (in ``ruff.toml``, ``.ruff.toml`` or ``[tool.ruff]`` of
``pyproject.toml``); ruff then refuses to run at any other version. perfbot looks for a ruff that satisfies the
pin: ``$PERFBOT_RUFF``, then its own, then a ``ruff`` on ``PATH`` or in the target's ``.venv``/``venv``. When
none does, :func:`ruff_for` raises :class:`RuffPinMismatch`, whose message names the pin and how to meet it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from ruff.__main__ import find_ruff_bin

ENVIRONMENT = "PERFBOT_RUFF"
# Where a target keeps a ruff of its own, relative to its root.
TARGET_VIRTUALENVS = (".venv", "venv")


class RuffPinMismatch(RuntimeError):
    """The target pins a ruff version that no ruff perfbot can find satisfies."""


def required_version(root: Path) -> str | None:
    """The target's ``required-version`` for ruff, from the config file ruff reads first, else ``None``. Each
    file is parsed once per modification time: tidy runs ruff many times per commit."""
    for name, table in (("ruff.toml", ()), (".ruff.toml", ()), ("pyproject.toml", ("tool", "ruff"))):
        path = root / name
        if not path.is_file():
            continue
        settings = _toml(str(path), path.stat().st_mtime_ns)
        if settings is None:
            continue
        for key in table:
            settings = settings.get(key) if isinstance(settings, dict) else None
        if isinstance(settings, dict):
            pin = settings.get("required-version")
            return pin if isinstance(pin, str) else None
    return None


def satisfies(version: Version, pin: str) -> bool:
    """Whether ``version`` meets ``pin`` as ruff reads it: a PEP 440 specifier, or a bare version meaning ``==``."""
    try:
        return version in SpecifierSet(_as_requirement(pin))
    except InvalidSpecifier:
        return False


def ruff_version(binary: str) -> Version | None:
    """The version ``binary --version`` prints (``ruff 0.16.2``), or ``None`` when it does not run as ruff.
    Asked once per file and modification time."""
    try:
        modified = os.stat(binary).st_mtime_ns
    except OSError:
        return None
    return _version(binary, modified)


@functools.cache
def _toml(path: str, modified: int) -> dict | None:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None


@functools.cache
def _own_ruff() -> str:
    """perfbot's own ruff executable."""
    return str(find_ruff_bin())


@functools.cache
def _version(binary: str, modified: int) -> Version | None:
    try:
        completed = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
        name, _, version = completed.stdout.strip().partition(" ")
        return Version(version) if completed.returncode == 0 and name == "ruff" else None
    except (OSError, subprocess.TimeoutExpired, InvalidVersion):
        return None


def ruff_for(root: Path) -> str:
    """The ruff executable to run on the target at ``root``: one that satisfies its pin, perfbot's own where it
    pins none. Raises :class:`RuffPinMismatch` when no ruff found satisfies the pin."""
    own = _own_ruff()
    pin = required_version(root)
    if pin is None:
        return os.environ.get(ENVIRONMENT) or own
    candidates = [
        os.environ.get(ENVIRONMENT),
        own,
        shutil.which("ruff"),
        *(str(root / folder / "bin" / "ruff") for folder in TARGET_VIRTUALENVS),
    ]
    for candidate in dict.fromkeys(c for c in candidates if c):
        version = ruff_version(candidate)
        if version is not None and satisfies(version, pin):
            return candidate
    raise RuffPinMismatch(
        f'the repository pins ruff `required-version = "{pin}"`, which perfbot\'s ruff '
        f"{ruff_version(own)} does not meet, and no ruff that does was found (${ENVIRONMENT}, PATH, "
        f"{', '.join(TARGET_VIRTUALENVS)}): install one (`pip install 'ruff{_as_requirement(pin)}'`) and set "
        f"{ENVIRONMENT} to it"
    )


def _as_requirement(pin: str) -> str:
    """``pin`` as a requirement specifier: a bare version means ``==``."""
    text = pin.strip()
    return text if text[:1] in "<>=!~" else f"=={text}"
