"""Which files of the repository a run loaded: the Python files it executed (the script, every module it
imported, a recipe run by path through ``runpy``) and the files it opened for reading (a YAML config, say),
seen through the interpreter's audit events (``exec``, ``open``) while the program runs. The launch wrapper
keeps them in the run's record as ``files_loaded``, so a commit's claimed win is judged only on a workload
whose run loaded a file the commit changed.

Paths are relative to the run's working directory (the checkout of the measured commit), in git's form;
files outside it, installed packages, compiled caches and names that are no file are left out."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import CodeType, TracebackType
from typing import Any

FILES_LOADED = "files_loaded"
_SKIPPED_PARTS = frozenset({"__pycache__", "site-packages", "dist-packages", ".git"})
_WRITE_MODES = frozenset("wax+")
_recording: list[FilesLoaded] = []
_hooked = False


class FilesLoaded:
    """Records, while entered, the files under ``root`` that the process executes or opens for reading."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = os.path.realpath(root)
        self._seen: set[str] = set()
        self._files: set[str] = set()

    def __enter__(self) -> FilesLoaded:
        global _hooked
        if not _hooked:  # an audit hook cannot be removed: one per process, recording for whoever is entered
            sys.addaudithook(_on_audit_event)
            _hooked = True
        _recording.append(self)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        _recording.remove(self)

    def paths(self) -> list[str]:
        """The files recorded, relative to the root with ``/`` separators, sorted."""
        return sorted(self._files)

    def saw(self, filename: str) -> None:
        """Record ``filename`` (relative names are read against the current directory) when it is the
        repository's own."""
        if filename in self._seen:
            return
        self._seen.add(filename)
        resolved = os.path.realpath(filename)
        relative = os.path.relpath(resolved, self.root)
        parts = Path(relative).parts
        if parts[:1] == (os.pardir,) or _SKIPPED_PARTS.intersection(parts) or not os.path.isfile(resolved):
            return  # outside the checkout, installed or cached, or no file (a directory, a path hook's name)
        self._files.add("/".join(parts))


def _on_audit_event(event: str, args: tuple[Any, ...]) -> None:
    if not _recording:
        return
    if event == "exec":
        code = args[0]
        filename = code.co_filename if isinstance(code, CodeType) else None
    elif event == "open":
        path, mode, flags = args
        if isinstance(mode, str):
            reads = not _WRITE_MODES.intersection(mode)
        else:  # os.open: the flags say
            reads = not (flags or 0) & (os.O_WRONLY | os.O_RDWR)
        path = os.fspath(path) if isinstance(path, os.PathLike) else path
        filename = os.fsdecode(path) if reads and isinstance(path, str | bytes) else None
    else:
        return
    if filename and not filename.startswith("<"):
        for recorder in _recording:
            recorder.saw(filename)
