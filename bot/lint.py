"""ruff on the Python files a commit touched, at the commit and at its parent: only the errors the commit
introduced count.

Each revision is checked out in full into a scratch tree (``git archive``), so each version of a file is checked
as it is in a checkout of that commit: under the config files it had (black's and isort's settings handed to
ruff where those configure the style, as :mod:`bot.tidy` does), with the repository's own modules and packages
beside it (ruff's isort tells first-party imports by them), whatever the working tree holds. ``bot review``
of a range and of one commit in it therefore lint that commit alike.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import tempfile
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from bot.formatting import clip
from bot.ruff_pin import ruff_for
from bot.tidy import style_settings

PYTHON_SUFFIXES = (".py", ".pyi")
_BATCH = 200


@dataclass(frozen=True)
class LintError:
    """A ruff diagnostic a commit introduced."""

    path: str
    line: int
    column: int
    code: str
    message: str
    fixable: bool

    def describe(self) -> str:
        """``path:line:column CODE message``."""
        return f"{self.path}:{self.line}:{self.column} {self.code} {self.message}"


@dataclass(frozen=True)
class Touched:
    """A Python file a commit left in place: its path at the commit, and at the parent (None: added)."""

    sha: str
    parent: str
    path: str
    old_path: str | None


def _ruff(root: Path, files: list[Path], style: list[str]) -> list[dict[str, Any]]:
    """ruff's JSON diagnostics for ``files`` (each file governed by the config files beside it), with the
    ``style`` arguments of :func:`bot.tidy.style_settings`."""
    diagnostics = []
    for start in range(0, len(files), _BATCH):
        completed = subprocess.run(
            [ruff_for(root), "check", "--no-cache", "--force-exclude", "--exit-zero", *style]
            + ["--output-format", "json", *map(str, files[start : start + _BATCH])],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        if completed.returncode != 0:
            raise RuntimeError(clip(completed.stderr.strip() or "ruff exited abnormally", 300))
        diagnostics.extend(json.loads(completed.stdout or "[]"))
    return diagnostics


def _checkout(repo: git.Repo, rev: str, target: Path) -> None:
    """Every file of ``rev``, written under ``target`` as a checkout of that commit would hold it."""
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(
        ["git", "archive", "--format=tar", rev],
        cwd=repo.git_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
        tar.extractall(target, filter="data")
    _, error = archive.communicate()
    if archive.returncode != 0:
        raise RuntimeError(clip(error.decode("utf-8", "replace").strip() or f"git archive {rev} failed", 300))


def _diagnostics(repo: git.Repo, touched: list[Touched]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """ruff's diagnostics of every touched file at its commit and of its old version at the parent, each in a
    full checkout of its revision."""
    wanted = {(t.sha, t.path) for t in touched} | {(t.parent, t.old_path) for t in touched if t.old_path}
    with tempfile.TemporaryDirectory(prefix="perfbot-lint-") as tmp:
        root = Path(tmp)
        diagnostics: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for rev in sorted({rev for rev, _ in wanted}):
            _checkout(repo, rev, root / rev)
            files = sorted(
                root / rev / path for r, path in wanted if r == rev and (root / rev / path).is_file()
            )
            # a target that configures black or isort and not ruff: under their settings, as edits are tidied;
            # run from the checkout, whose folder ruff takes for the project's where no config names one (its
            # isort tells first-party modules, a vendored helper among them, by what lies there)
            for item in _ruff(root / rev, files, style_settings(root / rev) or []):
                path = Path(item["filename"]).resolve().relative_to((root / rev).resolve()).as_posix()
                diagnostics.setdefault((rev, path), []).append(item)
    return diagnostics


def _introduced(
    at_commit: list[dict[str, Any]], at_parent: list[dict[str, Any]], path: str, added_lines: Collection[int]
) -> tuple[list[LintError], int]:
    """The diagnostics the commit introduced (by code and message), and how many were there before."""
    before = Counter((d.get("code") or "syntax", d["message"]) for d in at_parent)
    remaining = Counter(before)
    ordered = sorted(at_commit, key=lambda d: d["location"]["row"] not in added_lines)  # added lines first
    new = []
    for item in ordered:
        key = (item.get("code") or "syntax", item["message"])
        if remaining[key] > 0:
            remaining[key] -= 1
            continue
        location = item["location"]
        new.append(
            LintError(
                path, location["row"], location["column"], key[0], item["message"], bool(item.get("fix"))
            )
        )
    return sorted(new, key=lambda e: (e.line, e.column)), sum(before.values())


def new_lint(
    repo: git.Repo, touched: list[Touched], added_lines: dict[tuple[str, str], Collection[int]]
) -> dict[Touched, tuple[list[LintError], int]]:
    """Per touched file: the ruff errors its commit introduced, and how many diagnostics were there before.

    ``added_lines`` holds the lines each commit added per ``(sha, path)``. Raises RuntimeError, with ruff's or
    git's message, when ruff cannot check the files.
    """
    diagnostics = _diagnostics(repo, touched)
    return {
        t: _introduced(
            diagnostics.get((t.sha, t.path), []),
            diagnostics.get((t.parent, t.old_path), []) if t.old_path else [],
            t.path,
            added_lines[(t.sha, t.path)],
        )
        for t in touched
    }
