"""Which repository files a benchmark workload's run executes: the scripts and ``-m`` modules its command
starts, and the repository modules they import (the program model's reachability, started from that command
alone). A claim is judged only on a workload whose run executes a file its commit changed."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from pathlib import Path

from optimizations.program.reachability import Program
from optimizations.program.repository import RepoContext


def executed_files(root: Path, command: str) -> set[str] | None:
    """The Python files (relative to ``root``) a run of ``command`` executes; None when the command starts no
    file of the repository that can be told (a shell script, an installed console script)."""
    program = Program(RepoContext(Path(root)), command)
    return set(program.reached) if program.entry_points else None


def runs_changes(
    commands: Mapping[str, str], changed: Iterable[str], executed: Mapping[str, set[str] | None]
) -> dict[str, bool]:
    """Per workload: whether its run executes one of the ``changed`` files. A commit that changes no Python
    file, or a workload whose files cannot be told, counts as running the change."""
    python = {posixpath.normpath(path) for path in changed if path.endswith(".py")}
    return {
        name: not python or (files := executed.get(name)) is None or bool(python & files) for name in commands
    }
