"""ruff on the Python files a commit touched, at the commit and at its parent: only the errors the commit
introduced count.

Both versions of each file, and every ruff config file (``pyproject.toml``, ``ruff.toml``, ``.ruff.toml``)
on its path at that revision, are written into a scratch tree, so each version is checked under the config
it had, whatever the working tree holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from bot.formatting import clip
from bot.history import read_blobs

PYTHON_SUFFIXES = (".py", ".pyi")
RUFF_CONFIGS = ("pyproject.toml", "ruff.toml", ".ruff.toml")
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


def _ruff(root: Path, files: list[Path]) -> list[dict[str, Any]]:
    """ruff's JSON diagnostics for ``files`` (each file governed by the config files beside it)."""
    diagnostics = []
    for start in range(0, len(files), _BATCH):
        completed = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--no-cache", "--force-exclude", "--exit-zero"]
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


def _config_specs(rev: str, path: str) -> list[str]:
    """``rev:folder/config`` for every ruff config file that could govern ``path`` at ``rev``."""
    parts = path.split("/")[:-1]
    folders = ["/".join(parts[:depth]) for depth in range(len(parts) + 1)]
    return [f"{rev}:{folder + '/' if folder else ''}{name}" for folder in folders for name in RUFF_CONFIGS]


def _module_placeholders(repo: git.Repo, rev: str, root: Path) -> None:
    """Empty stand-ins, under ``root``, for the modules and packages at the top of ``rev`` and of its ``src/``:
    ruff's isort tells first-party imports by what exists there, so the scratch tree must show them too."""
    for folder in ("", "src/"):
        try:
            listing = repo.git.ls_tree(f"{rev}:{folder}")
        except git.GitCommandError:  # no src/ at this revision
            continue
        for line in listing.splitlines():
            meta, _, name = line.partition("\t")
            target = root / folder / name
            if meta.split()[1] == "tree":
                target.mkdir(parents=True, exist_ok=True)
            elif name.endswith(PYTHON_SUFFIXES) and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()


def _diagnostics(
    repo: git.Repo, touched: list[Touched], blobs: dict[str, bytes]
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """ruff's diagnostics of every touched file at its commit and of its old version at the parent."""
    blobs = dict(blobs)
    configs = [spec for t in touched for rev in (t.sha, t.parent) for spec in _config_specs(rev, t.path)]
    blobs.update(read_blobs(repo, [spec for spec in dict.fromkeys(configs) if spec not in blobs]))
    wanted = {(t.sha, t.path) for t in touched} | {(t.parent, t.old_path) for t in touched if t.old_path}
    with tempfile.TemporaryDirectory(prefix="perfbot-lint-") as tmp:
        root = Path(tmp)
        files = []
        for spec, content in blobs.items():
            rev, _, path = spec.partition(":")
            target = root / rev / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            if (rev, path) in wanted:
                files.append(target)
        for rev in {t.sha for t in touched} | {t.parent for t in touched}:
            _module_placeholders(repo, rev, root / rev)
        diagnostics: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for item in _ruff(root, sorted(files)):
            rev, _, path = (
                Path(item["filename"]).resolve().relative_to(root.resolve()).as_posix().partition("/")
            )
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
    repo: git.Repo,
    touched: list[Touched],
    blobs: dict[str, bytes],
    added_lines: dict[tuple[str, str], Collection[int]],
) -> dict[Touched, tuple[list[LintError], int]]:
    """Per touched file: the ruff errors its commit introduced, and how many diagnostics were there before.

    ``blobs`` holds the files' contents (``rev:path`` → bytes), ``added_lines`` the lines each commit added
    per ``(sha, path)``. Raises RuntimeError, with ruff's message, when ruff cannot check the files.
    """
    diagnostics = _diagnostics(repo, touched, blobs)
    return {
        t: _introduced(
            diagnostics.get((t.sha, t.path), []),
            diagnostics.get((t.parent, t.old_path), []) if t.old_path else [],
            t.path,
            added_lines[(t.sha, t.path)],
        )
        for t in touched
    }
