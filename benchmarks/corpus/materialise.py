"""A corpus repository's snapshot as a throwaway git repository in a temporary folder: from a `fetch` mirror
(`github:`) at the pinned commit through `git archive`, or from the package's wheel (`pypi:`, `pip download
--no-deps`: never its dependencies). Only the files `include` keeps are committed, in one commit on main.
A snapshot that cannot be had raises :class:`Unavailable`; the scorer reports the repository "not available"
and goes on."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import git

from benchmarks.corpus.manifest import Manifest

PROJECT = Path(__file__).resolve().parents[2]
# Wheels kept beside the project (the workplace's shared/wheels), tried before the registry.
LOCAL_WHEELS = (PROJECT.parent / "shared" / "wheels",)
DEFAULT_MIRRORS = Path("/work/.mirror")
IDENTITY = {
    "GIT_AUTHOR_NAME": "corpus",
    "GIT_AUTHOR_EMAIL": "corpus@localhost",
    "GIT_COMMITTER_NAME": "corpus",
    "GIT_COMMITTER_EMAIL": "corpus@localhost",
}


class Unavailable(Exception):
    """The snapshot could not be had (no mirror, the commit not in it, no wheel); the message says why."""


def mirrors() -> Path:
    """Where `fetch` mirrors live: `$PERFBOT_MIRRORS`, default /work/.mirror."""
    return Path(os.environ.get("PERFBOT_MIRRORS", DEFAULT_MIRRORS))


@dataclass(frozen=True)
class File:
    """One file of a snapshot: its path in the repository, its bytes, and whether it is executable or a link
    (then `data` is the link's target)."""

    path: str
    data: bytes
    executable: bool = False
    link: bool = False


@dataclass(frozen=True)
class Snapshot:
    """The materialised repository, and the kept files the mirror lacks (large files it lists but has not)."""

    repo: git.Repo
    left_out: tuple[str, ...] = ()


def materialise(
    manifest: Manifest, destination: Path, cache: Path, mirror_root: Path | None = None
) -> Snapshot:
    """The snapshot of `manifest` committed as a new repository at `destination` (which must not exist);
    `cache` keeps downloaded wheels. Raises :class:`Unavailable`."""
    left_out: tuple[str, ...] = ()
    if manifest.kind == "github":
        files, left_out = github_files(manifest, mirror_root or mirrors())
    else:
        files = wheel_files(manifest, wheel_for(manifest.target, cache))
    if not files:
        raise Unavailable(f"no file of the snapshot matches include {list(manifest.include)}")
    for file in files:
        target = destination / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if file.link:
            target.symlink_to(file.data.decode())
        else:
            target.write_bytes(file.data)
            if file.executable:
                target.chmod(0o755)
    repo = git.Repo.init(destination, initial_branch="main")
    repo.git.add("-A", "--force")
    message = f"{manifest.source} {manifest.commit} as published".replace("  ", " ").strip()
    if left_out:
        message += f"\n\nLeft out, absent from the mirror: {', '.join(left_out)}"
    repo.git.commit("-qm", message, env=IDENTITY)
    return Snapshot(repo, left_out)


def _under_root(manifest: Manifest, member: str) -> str | None:
    """`member`'s path relative to `root`, or None when it is outside it or not kept by `include`."""
    prefix = manifest.root + "/" if manifest.root else ""
    if not member.startswith(prefix) or member.endswith("/"):
        return None
    relative = member[len(prefix) :]
    return relative if relative and manifest.includes(relative) else None


def _git(mirror: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(mirror), *args], input=data, capture_output=True)


def github_files(manifest: Manifest, mirror_root: Path) -> tuple[list[File], tuple[str, ...]]:
    """The kept files of the mirror `mirror_root/owner+name/repo` at the pinned commit (`git archive` of those
    paths), and the kept files the mirror lacks, left out. A lacking Python file makes it unavailable."""
    mirror = mirror_root / manifest.target.replace("/", "+") / "repo"
    if not mirror.is_dir():
        raise Unavailable(f"no mirror at {mirror} (fetch github:{manifest.target} first)")
    if _git(mirror, "cat-file", "-e", f"{manifest.commit}^{{commit}}").returncode != 0:
        raise Unavailable(f"the mirror {mirror} lacks commit {manifest.commit}")
    listing = _git(mirror, "ls-tree", "-r", "-z", "--full-tree", manifest.commit).stdout.decode()
    kept: dict[str, str] = {}  # path in the snapshot -> blob sha
    for entry in filter(None, listing.split("\0")):
        info, path = entry.split("\t", 1)
        _, kind, sha = info.split()
        if kind == "blob" and _under_root(manifest, path):
            kept[path] = sha
    checked = _git(mirror, "cat-file", "--batch-check", data="\n".join(kept.values()).encode() + b"\n")
    missing = {line.split()[0] for line in checked.stdout.decode().splitlines() if line.endswith(" missing")}
    absent = tuple(sorted(path for path, sha in kept.items() if sha in missing))
    python = [path for path in absent if path.endswith(".py")]
    if python:
        raise Unavailable(f"the mirror lacks kept Python files at {manifest.commit}: {', '.join(python[:5])}")
    paths = sorted(path for path in kept if path not in absent)
    files = []
    for start in range(0, len(paths), 500):
        archive = _git(mirror, "archive", "--format=tar", manifest.commit, "--", *paths[start : start + 500])
        if archive.returncode != 0:
            raise Unavailable(
                f"git archive {manifest.commit} failed: {archive.stderr.decode(errors='replace')}"
            )
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            for member in tar.getmembers():
                relative = _under_root(manifest, member.name)
                extracted = tar.extractfile(member) if relative and member.isfile() else None
                if relative and member.issym():
                    files.append(File(relative, member.linkname.encode(), link=True))
                elif relative and extracted is not None:
                    files.append(File(relative, extracted.read(), executable=bool(member.mode & 0o100)))
    return files, tuple(_relative(manifest, path) for path in absent)


def _relative(manifest: Manifest, path: str) -> str:
    return path[len(manifest.root) + 1 :] if manifest.root else path


def wheel_for(requirement: str, cache: Path, local: tuple[Path, ...] = LOCAL_WHEELS) -> Path:
    """The wheel of `requirement` (`pkg==version`): from `cache`, else a local wheel folder, else downloaded
    into `cache` with `pip download --no-deps`. Raises :class:`Unavailable` with pip's words."""
    name, version = requirement.split("==")
    prefix = f"{name.replace('-', '_').lower()}-{version}-"
    for folder in (cache, *local):
        found = sorted(folder.glob(f"{prefix}*.whl")) if folder.is_dir() else []
        if found:
            return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    command += ["--timeout", "30", "--retries", "1", "-q", "-d", str(cache), requirement]
    done = subprocess.run(command, capture_output=True, text=True)
    found = sorted(cache.glob(f"{prefix}*.whl"))
    if done.returncode != 0 or not found:
        lines = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or ["no wheel"]
        raise Unavailable(f"pip download {requirement} failed: {lines[-1]}")
    return found[0]


def wheel_files(manifest: Manifest, wheel: Path) -> list[File]:
    """The kept files of `wheel` under `root`."""
    with zipfile.ZipFile(wheel) as archive:
        kept = ((member, _under_root(manifest, member)) for member in archive.namelist())
        return [File(relative, archive.read(member)) for member, relative in kept if relative]
