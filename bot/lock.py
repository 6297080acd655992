"""The lock ``bot init`` writes: perfbot's dependencies pinned, each with the sha256 of its wheel, so the runner
installs exactly the files that were hashed here (``pip install --require-hashes``), never whatever an index
serves later under the same name.

Versions are the ones installed with this perfbot (its requirements followed through the installed
distributions, markers evaluated for this interpreter), plus the build backend perfbot's own source needs.
Hashes are of the wheel files themselves: pip downloads each pinned wheel (``pip download --no-deps
--only-binary=:all:``, through pip's own configuration: an index, a mirror, a ``--find-links`` directory, so it
works offline where pip does) and the bytes are hashed. A distribution's installed ``RECORD`` would not do: it
hashes the files a wheel unpacked to, not the wheel pip checks.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from bot.errors import BadInput

# What building perfbot from its source needs (pyproject.toml's [build-system]); the runner installs it from
# the lock and builds without isolation, so nothing unpinned is fetched for the build either.
BUILD_REQUIREMENTS = ("setuptools",)
PIP_TIMEOUT_S = 600


def installed_pins(
    distribution: str = "perfbot", build: Sequence[str] = BUILD_REQUIREMENTS
) -> dict[str, str]:
    """``{name: version}`` of every distribution ``distribution`` needs as installed here (no extras), and of
    ``build``; a requirement that is not installed is bad input."""
    pins: dict[str, str] = {}
    todo = [*_requirements(distribution), *map(Requirement, build)]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in pins:
            continue
        try:
            pins[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError as error:
            raise BadInput(
                f"{name} is not installed, so its version cannot be pinned; install perfbot first"
            ) from error
        todo += _requirements(name)
    return dict(sorted(pins.items()))


def _requirements(distribution: str) -> list[Requirement]:
    found = []
    for text in importlib.metadata.requires(distribution) or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            found.append(requirement)
    return found


def wheel_hashes(pins: Mapping[str, str], pip_options: Sequence[str] = ()) -> dict[str, list[str]]:
    """``{name: [sha256, ...]}``: the wheels pip downloads for each ``name==version`` (``pip_options`` such as
    ``--platform``, ``--python-version``, ``--find-links``, ``--no-index`` pass through), hashed."""
    with tempfile.TemporaryDirectory(prefix="perfbot-lock-") as folder:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        command += ["--dest", folder, *pip_options, *(f"{name}=={version}" for name, version in pins.items())]
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise BadInput(f"pip could not download the wheels to hash: {last}")
        hashes: dict[str, list[str]] = {name: [] for name in pins}
        for wheel in sorted(Path(folder).glob("*.whl")):
            name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
            hashes.setdefault(name, []).append(hashlib.sha256(wheel.read_bytes()).hexdigest())
    missing = sorted(name for name, found in hashes.items() if not found)
    if missing:
        raise BadInput(f"no wheel to hash for {', '.join(missing)}")
    return hashes


def render_lock(pins: Mapping[str, str], hashes: Mapping[str, Sequence[str]], note: str = "") -> str:
    """The lock as a pip requirements file in hash-checking form."""
    lines = ["# Written by `bot init`: perfbot's dependencies, each pinned with the sha256 of its wheel."]
    lines += [f"# {line}" for line in note.splitlines()]
    for name, version in pins.items():
        lines.append(f"{name}=={version} \\")
        digests = sorted(hashes[name])
        lines += [
            f"    --hash=sha256:{digest}" + (" \\" if n < len(digests) - 1 else "")
            for n, digest in enumerate(digests)
        ]
    return "\n".join(lines) + "\n"


def dependency_lock(distribution: str = "perfbot", pip_options: Sequence[str] = ()) -> str:
    """The lock for ``distribution`` as installed here (see the module docstring)."""
    pins = installed_pins(distribution)
    return render_lock(
        pins, wheel_hashes(pins, pip_options), "Regenerate with `bot init --force` after upgrading."
    )
