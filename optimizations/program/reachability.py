"""What the program runs: the code reached from its entry points, so that a library's own training loop that
the program never calls is no site.

Entry points are the scripts a person starts: Python files with ``if __name__ == "__main__":``, scripts outside
any package that no file imports (nanoGPT's ``train.py``, a snippet: all of their code taken to run), the console
scripts of ``pyproject.toml``, and the ``.py`` files or ``-m`` modules that commands in launch files (shell
scripts, a Makefile, ``[tool.bot]`` workloads, YAML, a README) run: ``python``, ``torchrun``, ``accelerate
launch``, .... A vendored library -- a folder with its own ``setup.py``/``pyproject.toml``, or one named
``third_party``, ``vendor``, ``external`` -- contributes no entry points of its own; no optimization edits a file
in a folder so named that no entry point reaches (:meth:`Program.edits`). Neither does a snapshot folder, one of
kept copies (``records``, ``legacy``, ``archive``..., or named from a date: KellerJordan/modded-nanogpt keeps each
record's script under ``records/<track>/2024-10-09_SOAP/``), unless a launch file outside it runs its script.
From the entry points, imports are followed through the repository's modules (the script's folder, the root and
``src/`` on the path, relative imports, packages' ``__init__``); a top-level function or class of a reached file
runs when some reached file uses its name (a call, an attribute, a decorator's registration), or when it is
decorated.

A repository with no entry point found (a library, a snippet) is taken to run everything. Files are read with
``ast``, once per run and only when an optimization asks (:func:`program_of`).
"""

from __future__ import annotations

import ast
import posixpath
import re
import shlex
import tomllib
import weakref
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from optimizations.program.repository import RepoContext, SourceCache, module_paths

VENDOR_FOLDERS = frozenset(
    {"third_party", "thirdparty", "3rdparty", "vendor", "vendored", "external", "extern"}
)
# Folders of kept copies: scripts that ran once and are kept as they ran, not programs to speed up.
SNAPSHOT_FOLDERS = frozenset({"records", "archive", "archived", "legacy", "deprecated", "attic", "old"})
DATED = re.compile(r"(19|20)\d\d[-_]?[01]\d[-_]?[0-3]\d(\D|$)")
PROJECT_FILES = ("setup.py", "pyproject.toml", "setup.cfg")
LAUNCH_FILES = ("*.sh", "*.bash", "Makefile", "*.mk", "*.toml", "*.yaml", "*.yml", "*.md", "*.cfg")
# Commands that run a Python file or module named after them.
LAUNCHERS = ("python", "torchrun", "accelerate", "deepspeed", "uv", "srun", "mpirun", "lightning", "composer")
MAIN_GUARD = re.compile(r"""^if\s+__name__\s*==\s*['"]__main__['"]""", re.MULTILINE)
# ``import a.b, c`` and ``from .a import (b, c)``: the names a file imports.
IMPORTED = re.compile(r"^\s*(?:from\s+([\w.]+)\s+)?import\s+([\w., ()]+)", re.MULTILINE)
MODULE_FLAG = re.compile(r"(?:^|\s)-m\s+([A-Za-z_][\w.]*)")


def in_snapshot_folder(path: str) -> bool:
    """Whether ``path`` lies under a folder of kept copies: one named like ``records`` or ``legacy``, or one
    named from a date (``2024-10-09_SOAP``, ``20260430_muonh``: KellerJordan/modded-nanogpt keeps every record's
    script so)."""
    folders = PurePosixPath(path).parts[:-1]
    return any(part.lower() in SNAPSHOT_FOLDERS or DATED.match(part) for part in folders)


def in_vendor_folder(path: str) -> bool:
    """Whether ``path`` lies under a folder named like ``external`` or ``third_party``."""
    return any(part in VENDOR_FOLDERS for part in PurePosixPath(path).parts[:-1])


def is_vendored(root: Path, path: str) -> bool:
    """Whether ``path`` lies in a vendored library: in a vendor folder (:func:`in_vendor_folder`), or in a folder
    below ``root`` with its own ``setup.py``/``pyproject.toml``/``setup.cfg``."""
    if in_vendor_folder(path):
        return True
    parts = PurePosixPath(path).parts[:-1]
    return any(
        (root.joinpath(*parts[:depth]) / name).exists()
        for depth in range(1, len(parts) + 1)
        for name in PROJECT_FILES
    )


class _FileUse(NamedTuple):
    """One file's direct imports (repository files) and the names it uses."""

    imports: frozenset[str]
    names: frozenset[str]


class Program:
    """The files and top-level definitions a repository's entry points reach."""

    def __init__(self, repo: RepoContext, command: str | None = None):
        """``command``: the program as that one shell command starts it (its scripts and ``-m`` modules are the
        only entry points), not as the repository's launch files, scripts and console scripts start it."""
        self.repo = repo
        self.files = set(repo.python_files())
        self.vendored = {path for path in self.files if is_vendored(repo.root, path)}
        self.standalone = self._standalone() if command is None else set()
        self.entry_points = sorted(self._entry_points() if command is None else self._started_by(command, ""))
        self.reached: set[str] = set()
        self.used_names: set[str] = set()
        self._closures: dict[str, frozenset[str]] = {}
        self._uses: dict[str, _FileUse] = {}
        if self.entry_points:
            self._follow()

    def edits(self, path: str) -> bool:
        """Whether an optimization may change file ``path``: any file but one in a vendor or snapshot folder that
        no entry point of the program reaches (a reference codebase kept under ``external/``, a record's script
        kept under ``records/2024-10-09_SOAP/``). A folder with a project file of its own may be the repository's
        own package (a workspace member), so it stays editable."""
        return not (in_vendor_folder(path) or in_snapshot_folder(path)) or path in self.reached

    def runs(self, path: str, definition: str | None = None) -> bool:
        """Whether the program reaches file ``path`` and, when given, its top-level function or class
        ``definition``."""
        if not self.entry_points or path not in self.files:
            return True
        if path not in self.reached:
            return False
        if definition is None or path in self.standalone:
            return True
        return definition in self.used_names or definition in self._decorated(path)

    def shares_code(self, path: str, other: str) -> bool:
        """Whether two files run some repository file in common: one imports the other, directly or not, or
        both import a third (nanoGPT's ``train.py`` and ``sample.py`` share ``model.py``; two standalone
        record scripts share nothing)."""
        return bool(self.imported_from(path) & self.imported_from(other))

    def same_run(self, path: str, other: str) -> bool:
        """Whether one run of the program loads both files: some entry point's imports reach both
        (pytorch/examples' FSDP ``T5_training.py`` loads its precision policies and its training loop from two
        modules that do not import each other). Everything runs together where no entry point was found."""
        if not self.entry_points:
            return True
        return any(
            path in closure and other in closure for closure in map(self.imported_from, self.entry_points)
        )

    def imported_from(self, path: str) -> frozenset[str]:
        """``path`` and the repository files its imports load, transitively."""
        if path not in self._closures:
            found: set[str] = set()
            pending = [path]
            while pending:
                current = pending.pop()
                if current not in found:
                    found.add(current)
                    pending.extend(self._read(current).imports - found)
            self._closures[path] = frozenset(found)
        return self._closures[path]

    # -- entry points ---------------------------------------------------------------------------------
    def _standalone(self) -> set[str]:
        """Scripts outside any package that no file of the repository imports and that have no ``__main__``
        guard to start from: the program a person runs (``python train.py``), all of their code taken to run."""
        imported: set[str] = set()
        texts = {path: self._text(path) or "" for path in self.files}
        for text in texts.values():
            for names in IMPORTED.findall(text):
                imported |= {
                    part for name in re.split(r"[\s,()]+", " ".join(names)) for part in name.split(".")
                }
        return {
            path
            for path in self.files - self.vendored
            if not (self.repo.root / posixpath.dirname(path) / "__init__.py").exists()
            and PurePosixPath(path).stem not in imported
            and not MAIN_GUARD.search(texts[path])
        }

    def _entry_points(self) -> set[str]:
        """Scripts with a ``__main__`` guard and standalone scripts, but those kept in a snapshot folder; the
        console scripts; and what launch files outside vendored and snapshot folders start."""
        found = set()
        for path in self.files - self.vendored:
            text = self._text(path)
            if text is not None and "__main__" in text and MAIN_GUARD.search(text):
                found.add(path)
        found = {path for path in found | self.standalone if not in_snapshot_folder(path)}
        for path in self.repo.files(*LAUNCH_FILES):
            if path.endswith("pyproject.toml"):
                found |= self._console_scripts(path)
            if not (is_vendored(self.repo.root, path) or in_snapshot_folder(path)):
                found |= self._launched(path)
        return found

    def _console_scripts(self, path: str) -> set[str]:
        try:
            project = tomllib.loads(self.repo.read(path)).get("project", {})
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return set()
        targets = [*project.get("scripts", {}).values(), *project.get("gui-scripts", {}).values()]
        base = posixpath.dirname(path)
        return {
            module
            for target in targets
            if isinstance(target, str)
            for module in [self._module_file(target.partition(":")[0], [base, posixpath.join(base, "src")])]
            if module is not None
        }

    def _launched(self, path: str) -> set[str]:
        """The Python files and ``-m`` modules a launch file's commands name."""
        try:
            text = self.repo.read(path)
        except (OSError, UnicodeDecodeError):
            return set()
        if ".py" not in text and "-m " not in text:
            return set()
        base = posixpath.dirname(path)
        commands = (line for line in text.splitlines() if ".py" in line or "-m" in line)
        return {found for line in commands for found in self._started_by(line, base)}

    def _started_by(self, line: str, base: str) -> set[str]:
        """The Python files and ``-m`` modules one command line runs (paths relative to ``base``); none for
        prose that names a file without a launcher (``python``, ``torchrun``, ...) to run it."""
        tokens = [token.strip("\"'`,;()[]") for token in _tokens(line)]
        if not any(PurePosixPath(token).name.startswith(LAUNCHERS) for token in tokens):
            return set()
        found = set()
        for token in tokens:
            if token.endswith(".py"):
                found |= self._script_file(token, base)
        for module in MODULE_FLAG.findall(line):
            resolved = self._module_file(module, [base, "", "src"])
            if resolved is not None:
                found.add(resolved)
        return found

    def _script_file(self, token: str, base: str) -> set[str]:
        for candidate in (posixpath.join(base, token), token):
            path = posixpath.normpath(candidate)
            if path in self.files:
                return {path}
        name = "/" + token.lstrip("./")
        return {path for path in self.files - self.vendored if path.endswith(name)}

    # -- following imports ----------------------------------------------------------------------------
    def _follow(self) -> None:
        """What the entry points reach (their import closures), and the names the reached files use."""
        for entry_point in self.entry_points:
            self.reached |= self.imported_from(entry_point)
        for path in self.reached:
            self.used_names |= self._read(path).names

    def _read(self, path: str) -> _FileUse:
        """The repository files ``path`` imports directly and the names it uses (a name, an attribute, an
        identifier-like string, a name imported from a module), from one walk of its syntax tree."""
        if path not in self._uses:
            imports: set[str] = set()
            names: set[str] = set()
            tree = self.syntax(path) if path in self.files else None
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, ast.Name):
                    names.add(node.id)
                elif isinstance(node, ast.Attribute):
                    names.add(node.attr)
                elif (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and node.value.isidentifier()
                ):
                    names.add(node.value)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    if isinstance(node, ast.ImportFrom):
                        names.update(alias.name for alias in node.names)
                    imports |= self._resolved(path, node)
            self._uses[path] = _FileUse(frozenset(imports), frozenset(names))
        return self._uses[path]

    def _resolved(self, path: str, node: ast.Import | ast.ImportFrom) -> set[str]:
        """The repository files an import in file ``path`` loads."""
        folder = posixpath.dirname(path)
        roots = [folder, "", "src"]
        found = set()
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= self._module_chain(alias.name, roots)
            return found
        if node.level:
            package = folder
            for _ in range(node.level - 1):
                package = posixpath.dirname(package)
            module = node.module.replace(".", "/") if node.module else ""
            base, roots = posixpath.join(package, module).strip("/"), [""]
            dotted = base.replace("/", ".")
        else:
            dotted = node.module or ""
        for alias in node.names:
            found |= self._module_chain(f"{dotted}.{alias.name}" if dotted else alias.name, roots)
        found |= self._module_chain(dotted, roots) if dotted else set()
        return found

    def _module_chain(self, dotted: str, roots: list[str]) -> set[str]:
        """The module ``dotted`` and the ``__init__`` of each package above it, as repository files."""
        parts = dotted.split(".")
        found = set()
        for depth in range(1, len(parts) + 1):
            resolved = self._module_file(".".join(parts[:depth]), roots)
            if resolved is not None:
                found.add(resolved)
        return found

    def _module_file(self, dotted: str, roots: list[str]) -> str | None:
        return next((path for path in module_paths(dotted, roots) if path in self.files), None)

    # -- reading --------------------------------------------------------------------------------------
    def _text(self, path: str) -> str | None:
        try:
            return self.repo.read(path)
        except (OSError, UnicodeDecodeError):
            return None

    def syntax(self, path: str) -> ast.Module | None:
        """The file's syntax tree (the run's shared parse); None where it cannot be read or parsed."""
        text = self._text(path)
        return None if text is None else self.repo.sources.syntax(path, text)

    def _decorated(self, path: str) -> set[str]:
        tree = self.syntax(path)
        return {
            node.name
            for node in (tree.body if tree is not None else [])
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.decorator_list
        }


def _tokens(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return line.split()


_PROGRAMS: weakref.WeakKeyDictionary[SourceCache, dict[str, Program]] = weakref.WeakKeyDictionary()


def program_of(repo: RepoContext) -> Program:
    """The :class:`Program` of ``repo``, built once per run (per shared ``SourceCache``) over every file in
    scope, whatever files a plan focuses on."""
    programs = _PROGRAMS.setdefault(repo.sources, {})
    key = str(repo.root)
    if key not in programs:
        programs[key] = Program(repo.whole())
    return programs[key]
