"""Which repository files a benchmark workload's run loads: as its runs recorded them (the launch wrapper
keeps every file of the checkout they executed or read, :mod:`benchmarks.files_loaded`), else as far as its
command reaches (the scripts and ``-m`` modules it starts and the repository modules they import: the
program model's reachability, started from that command alone). A claim is judged only on a workload whose
run loads a file its commit changed."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from pathlib import Path

from benchmarks.files_loaded import FILES_LOADED
from benchmarks.results import Results
from optimizations.program.reachability import Program
from optimizations.program.repository import RepoContext


def executed_files(root: Path, command: str) -> set[str] | None:
    """The Python files (relative to ``root``) a run of ``command`` executes; None when the command starts no
    file of the repository that can be told (a shell script, an installed console script)."""
    program = Program(RepoContext(Path(root)), command)
    return set(program.reached) if program.entry_points else None


def loaded_files(results: Results, workload: str, shas: Iterable[str]) -> set[str] | None:
    """The files the runs of ``workload`` at the commits ``shas`` recorded as loaded, together; None when
    none of those runs recorded any (a run that wrote no metrics, a results file from before runs recorded
    them)."""
    wanted = set(shas)
    recorded = [
        files
        for run in results.runs
        if run.workload == workload
        and run.commit in wanted
        and isinstance(files := (run.metrics or {}).get(FILES_LOADED), list)
    ]
    return {path for files in recorded for path in files} if recorded else None


def runs_changes(
    commands: Mapping[str, str],
    changed: Iterable[str],
    executed: Mapping[str, set[str] | None],
    loaded: Mapping[str, set[str] | None] | None = None,
) -> dict[str, bool]:
    """Per workload: whether its run loads one of the ``changed`` files. Where its runs recorded what they
    loaded (``loaded``), every changed file counts, a config as much as a module; else its Python files are
    set against what the command reaches (``executed``), and a commit that changes no Python file, or a
    workload whose files cannot be told, counts as running the change."""
    files = {posixpath.normpath(path) for path in changed}
    python = {path for path in files if path.endswith(".py")}

    def runs(name: str) -> bool:
        recorded = (loaded or {}).get(name)
        if recorded is not None:
            return bool(files & recorded)
        reached = executed.get(name)
        return not python or reached is None or bool(python & reached)

    return {name: runs(name) for name in commands}
