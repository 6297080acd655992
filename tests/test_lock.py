"""`bot init`'s dependency lock (#28, item 6): pins with the sha256 of the wheels pip downloads, which pip's
hash-checking mode then enforces: the locked wheels install, a wheel changed after locking is refused."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bot.errors import BadInput
from bot.lock import installed_pins, render_lock, wheel_hashes


def make_wheel(folder: Path, name: str, version: str, code: str = "") -> Path:
    """A minimal valid pure-Python wheel."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": code or f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{file},,\n" for file in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as wheel:
        for file, text in {**files, f"{info}/RECORD": record}.items():
            wheel.writestr(file, text)
    return path


def pip_install(lock: Path, wheels: Path, target: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pip", "install", "--require-hashes", "--no-deps", "--no-index"]
    command += ["--find-links", str(wheels), "--target", str(target), "-r", str(lock)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_the_lock_holds_each_wheels_hash_and_pip_enforces_it(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    paths = [make_wheel(wheels, "alpha", "1.0"), make_wheel(wheels, "beta_pkg", "2.3")]
    make_wheel(wheels, "alpha", "1.1")  # another version on the index: not the pinned one
    pins = {"alpha": "1.0", "beta-pkg": "2.3"}
    hashes = wheel_hashes(pins, ["--no-index", "--find-links", str(wheels)])
    assert hashes == {
        "alpha": [hashlib.sha256(paths[0].read_bytes()).hexdigest()],
        "beta-pkg": [hashlib.sha256(paths[1].read_bytes()).hexdigest()],
    }
    lock = tmp_path / "requirements.txt"
    lock.write_text(render_lock(pins, hashes))
    assert f"alpha==1.0 \\\n    --hash=sha256:{hashes['alpha'][0]}\n" in lock.read_text()

    done = pip_install(lock, wheels, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "alpha.py").read_text() == "VERSION = '1.0'\n"

    make_wheel(wheels, "alpha", "1.0", code="import os  # changed after the lock was written\n")
    done = pip_install(lock, wheels, tmp_path / "site-2")
    assert done.returncode != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in done.stderr
    assert not (tmp_path / "site-2" / "alpha.py").exists()


def test_a_pin_without_a_wheel_is_one_line_of_bad_input(tmp_path):
    with pytest.raises(BadInput, match="pip could not download the wheels to hash"):
        wheel_hashes({"alpha": "9.9"}, ["--no-index", "--find-links", str(tmp_path)])


def test_pins_follow_perfbots_requirements_as_installed():
    pins = installed_pins()
    for name in ("gitpython", "gitdb", "pygithub", "libcst", "jinja2", "markupsafe", "scipy", "numpy"):
        assert name in pins  # direct requirements and what they need
    assert "setuptools" in pins  # the build backend, for the install without build isolation
    assert "torch" not in pins and "pytest" not in pins  # extras are not perfbot's to pin
