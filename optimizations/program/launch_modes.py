"""The ways each file of a repository runs, as facts: launched as a script by path, as a module, installed as
a console script, or imported by another file that runs some way.

Launches are read from the commands of shell scripts, Makefiles, Markdown documents (code blocks and inline
code) and perfbot's own workloads (``[tool.bot.workloads]``): ``python path/file.py``, ``accelerate launch
path/file.py``, ``torchrun [-m] ...``, ``deepspeed ...``, ``python -m pkg.mod`` (``python -m
torch.distributed.run`` too); console scripts from the project file (``[project.scripts]``,
``entry_points``). Each launch's :class:`Mode` follows the imports of the file it runs, with the same
``sys.path``, so a module imported by a script run by path runs as a top-level module of that script's
folder. A file no launch reaches is taken to run the plain way: a package's module imported from the folder
its package chain starts in, any other file as a script by path.

:meth:`LaunchModes.first_break` says which way of running a file an import would break
(:mod:`optimizations.program.import_resolution`); :mod:`optimizations.edits.vendoring` places helpers by it,
and apply checks each commit with it.
"""

from __future__ import annotations

import configparser
import posixpath
import re
import tomllib
import weakref
from collections import deque
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from optimizations.program.import_resolution import (
    ASSUMED,
    CONSOLE,
    EXTERNAL,
    IMPORTED,
    MODULE,
    SCRIPT,
    Found,
    Mode,
    ModeKey,
    Resolver,
    package_root,
)
from optimizations.program.installation import Installation, installation
from optimizations.program.recipes import OPERATORS, code_blocks, shell_commands, shell_words
from optimizations.program.repository import DEFAULT_EXCLUDES, RepoContext

__all__ = ["ASSUMED", "CONSOLE", "IMPORTED", "MODULE", "SCRIPT", "LaunchModes", "Mode", "launch_modes"]

LAUNCH_FILES = ("*.sh", "*.bash", "Makefile", "*/Makefile", "*.mk")
DOCUMENTS = ("*.md",)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
# Launchers that take a script (or ``-m`` module) after their own options.
SCRIPT_LAUNCHERS = ("torchrun", "deepspeed")
# ``python -m <one of these>`` is a launcher itself: the script it runs follows.
LAUNCHER_MODULES = frozenset(
    {
        "torch.distributed.run",
        "torch.distributed.launch",
        "accelerate.commands.launch",
        "deepspeed.launcher.runner",
    }
)
MODULE_FLAGS = ("-m", "--module")
CONSOLE_TABLES = (("project", "scripts"), ("project", "gui-scripts"), ("tool", "poetry", "scripts"))
ENTRY_POINT = re.compile(r"""["']\s*([\w.-]+)\s*=\s*([\w.]+\s*:\s*[\w.]+)\s*["']""")
# An import statement at the start of a line: ``from <dots><module> import <names>`` or ``import <names>``.
IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)|import[ \t]+([^\n#;]*))",
    re.MULTILINE,
)
# ``(line, level, module, names)`` of one import statement.
Imported = tuple[int, int, str, tuple[str, ...]]
# How many (file, way of running) pairs the import walk visits at most.
MOST_STEPS = 200_000


@dataclass(frozen=True)
class Started:
    """What one command starts: a script by path or a module (``kind``), named as written (``target``), and the
    folder it changes to first (``cd x && ...``)."""

    kind: str
    target: str
    cwd: str
    text: str


def started(words: list[str]) -> Iterator[Started]:
    """The scripts and modules a command's shell words start with python, torchrun, deepspeed or accelerate."""
    cwd, index = "", 0
    while index < len(words):
        name = PurePosixPath(words[index].lstrip("@")).name
        if words[index] == "cd" and index + 1 < len(words):
            cwd, index = words[index + 1], index + 2
            continue
        accelerate = name == "accelerate" and words[index + 1 : index + 2] == ["launch"]
        python = PYTHON.match(name) is not None
        if not (python or accelerate or name in SCRIPT_LAUNCHERS):
            index += 1
            continue
        position = index + (2 if accelerate else 1)
        while position < len(words) and not set(words[position]) <= set(OPERATORS):
            word = words[position]
            text = " ".join(words[index : position + 2])
            if word in MODULE_FLAGS and position + 1 < len(words):
                if python and words[position + 1] in LAUNCHER_MODULES:
                    python, position = False, position + 2
                    continue
                yield Started(MODULE, words[position + 1], cwd, text)
                break
            if word == "-c":
                break
            if word.endswith(".py") and not word.startswith("-"):
                yield Started(SCRIPT, word, cwd, " ".join(words[index : position + 1]))
                break
            position += 1
        index = position + 1


class LaunchModes:
    """The ways the files of one repository run (:meth:`of`), and what an import would break (:meth:`first_break`).
    ``new``: files the registry's copy of the repository's package lacks (added by the change being checked)."""

    def __init__(self, repo: RepoContext, new: Collection[str] = ()):
        self.repo = RepoContext(repo.root, repo.exclude[len(DEFAULT_EXCLUDES) :], (), repo.sources)
        self.installation: Installation = installation(self.repo)
        pythonpath = any("PYTHONPATH" in command for _, _, command in self._commands())
        self.resolver = Resolver(repo.root, self.installation, new=new, pythonpath=pythonpath)
        self._modes: dict[str, dict[ModeKey, Mode]] | None = None
        self._imports: dict[str, list[Imported]] = {}

    def of(self, path: str) -> list[Mode]:
        """Every way file ``path`` runs; the plain way (:meth:`assumed`) when no launch reaches it."""
        if self._modes is None:
            self._modes = self._walk()
        found = self._modes.get(path)
        return list(found.values()) if found else [self.assumed(path)]

    def first_break(
        self, path: str, level: int, module: str, known: frozenset[str], planned: Collection[str] = ()
    ) -> str | None:
        """The first way file ``path`` runs that ``from <level dots><module> import ...`` (``import <module>``
        at level 0) would not resolve in, said as ``<launch>: <why>``; None when it resolves in every one.
        ``known``: what the file imports at module level as it stands; ``planned``: files about to be
        written."""
        resolver = self.resolver.with_planned(planned) if planned else self.resolver
        for mode in self.of(path):
            if level:
                found = resolver.relative(mode, path, level, module)
            else:
                found = resolver.absolute(mode, module, path, known)
            if isinstance(found, str):
                return f"{mode.describe()}: {found}"
        return None

    def assumed(self, path: str) -> Mode:
        """How a file no launch reaches runs: imported as its package's module, or as a script by path."""
        folder = posixpath.dirname(path)
        chain = package_root(self.resolver.exists, folder)
        if chain is None:
            return Mode(ASSUMED, "", "as a script by path", (folder,), None, launched=False)
        base, package = chain
        return Mode(ASSUMED, "", f"as a module of package `{package}`", (base,), package, launched=False)

    # -- launches ---------------------------------------------------------------------------------------
    def launched(self) -> Iterator[tuple[str, Mode]]:
        """The files the repository's commands and console scripts start, with how."""
        for where, folder, command in self._commands():
            for start in started(shell_words(command)):
                found = self._script(start, folder) if start.kind == SCRIPT else self._module(start, folder)
                if found is not None:
                    path, path_entries, package, installed = found
                    yield path, Mode(start.kind, where, start.text, path_entries, package or None, installed)
        yield from self._console_scripts()

    def _commands(self) -> Iterator[tuple[str, str, str]]:
        """``(path:line, folder of the file, command)`` for each command of a launch file or a document."""
        for path in self.repo.files(*LAUNCH_FILES):
            for line, _, _, command in shell_commands(self._read(path)):
                yield f"{path}:{line}", posixpath.dirname(path), command
        yield from self._workloads()
        for path in self.repo.documents(*DOCUMENTS):
            text = self._read(path)
            blocks = code_blocks(text)
            for line, _, _, command in shell_commands(blocks):
                yield f"{path}:{line}", posixpath.dirname(path), command
            for number, (raw, fenced) in enumerate(
                zip(text.splitlines(), blocks.splitlines(), strict=False), start=1
            ):
                for span in [] if fenced.strip() else INLINE_CODE.findall(raw):
                    yield f"{path}:{number}", posixpath.dirname(path), span

    def _workloads(self) -> Iterator[tuple[str, str, str]]:
        """The commands of the workloads perfbot benchmarks (``[tool.bot.workloads.<name>] command``)."""
        text = self._read("pyproject.toml")
        try:
            workloads = tomllib.loads(text).get("tool", {}).get("bot", {}).get("workloads", {})
        except tomllib.TOMLDecodeError:
            return
        lines = text.splitlines()
        for workload in workloads.values() if isinstance(workloads, dict) else ():
            command = workload.get("command") if isinstance(workload, dict) else None
            if isinstance(command, str):
                line = next((n for n, raw in enumerate(lines, start=1) if command in raw), 0)
                yield f"pyproject.toml:{line}", "", command

    def _script(self, start: Started, folder: str) -> tuple[str, tuple[str, ...], None, bool] | None:
        for base in dict.fromkeys((start.cwd, posixpath.join(folder, start.cwd), "")):
            path = posixpath.normpath(posixpath.join(base, start.target))
            if not path.startswith("../") and self.resolver.exists(path):
                return path, (posixpath.dirname(path),), None, False
        return None

    def _module(self, start: Started, folder: str) -> tuple[str, tuple[str, ...], str, bool] | None:
        """The file ``python -m <module>`` runs, found from the working folder (the command's ``cd``, the
        launch file's folder, the root), else in the repository's installed packages."""
        dotted = start.target
        if not all(part.isidentifier() for part in dotted.split(".")):
            return None
        for base in dict.fromkeys(_folder(f) for f in (start.cwd, posixpath.join(folder, start.cwd), "")):
            found = self._module_file(base, dotted)
            if found is not None:
                return found[0], (base,), found[1], False
        top = dotted.partition(".")[0]
        if top in self.installation.packages:
            found = self._module_file(self.installation.packages[top], dotted)
            if found is not None:
                return found[0], (_folder(start.cwd),), found[1], bool(self.installation.registry)
        return None

    def _module_file(self, base: str, dotted: str) -> tuple[str, str] | None:
        """The file module ``dotted`` runs from folder ``base`` (a package's ``__main__.py``), and its package."""
        relative = posixpath.join(base, dotted.replace(".", "/"))
        if self.resolver.exists(f"{relative}.py"):
            return f"{relative}.py", dotted.rpartition(".")[0]
        if self.resolver.exists(posixpath.join(relative, "__main__.py")):
            return posixpath.join(relative, "__main__.py"), dotted
        return None

    def console_scripts(self) -> dict[str, str]:
        """Each console script of the root project (``axolotl``, ``llamafactory-cli``) and the file it runs."""
        found = {}
        for path, mode in self._console_scripts():
            found[mode.command.partition(" = ")[0]] = path
        return found

    def _console_scripts(self) -> Iterator[tuple[str, Mode]]:
        """The modules the root project's console scripts run, each as its installed package's module."""
        registry = bool(self.installation.registry)
        for where, name, target in self._entry_points():
            dotted = target.partition(":")[0]
            for base in ("", "src"):
                path = posixpath.join(base, dotted.replace(".", "/")) + ".py"
                init = posixpath.join(base, dotted.replace(".", "/"), "__init__.py")
                found = next((p for p in (path, init) if self.resolver.exists(p)), None)
                if found is not None:
                    package = dotted if found == init else dotted.rpartition(".")[0]
                    yield found, Mode(CONSOLE, where, f"{name} = {target}", (), package or None, registry)
                    break

    def _entry_points(self) -> Iterator[tuple[str, str, str]]:
        """``(file, name, module:function)`` of each console script of the root project."""
        try:
            project = tomllib.loads(self._read("pyproject.toml"))
        except tomllib.TOMLDecodeError:
            project = {}
        for keys in CONSOLE_TABLES:
            table: object = project
            for key in keys:
                table = table.get(key, {}) if isinstance(table, dict) else {}
            for name, target in table.items() if isinstance(table, dict) else ():
                if isinstance(target, str):
                    yield "pyproject.toml", name, target
        setup = self._read("setup.py")
        for name, module in ENTRY_POINT.findall(setup.partition("console_scripts")[2]):
            yield "setup.py", name, module
        config = configparser.ConfigParser(interpolation=None)
        try:
            config.read_string(self._read("setup.cfg"))
        except configparser.Error:
            return
        for line in config.get("options.entry_points", "console_scripts", fallback="").splitlines():
            name, equals, target = line.partition("=")
            if equals:
                yield "setup.cfg", name.strip(), target.strip()

    # -- following imports ----------------------------------------------------------------------------
    def _walk(self) -> dict[str, dict[ModeKey, Mode]]:
        """Every file's ways of running: the launched files', then those of files nothing launches but that
        look run (a ``__main__`` guard, or a script outside any package), carried along their imports."""
        modes: dict[str, dict[ModeKey, Mode]] = {}
        pending: deque[tuple[str, Mode]] = deque()

        def add(path: str, mode: Mode) -> None:
            known = modes.setdefault(path, {})
            if mode.key not in known:
                known[mode.key] = mode
                pending.append((path, mode))

        steps = 0
        for phase in range(2):
            if phase == 0:
                for path, mode in self.launched():
                    add(path, mode)
            else:
                for path in self.repo.python_files():
                    if path not in modes and self._looks_run(path):
                        add(path, self.assumed(path))
            while pending and steps < MOST_STEPS:
                steps += 1
                path, mode = pending.popleft()
                for target, derived in self._imported(path, mode):
                    add(target, derived)
        return modes

    def _looks_run(self, path: str) -> bool:
        text = self._read(path)
        return "__main__" in text or package_root(self.resolver.exists, posixpath.dirname(path)) is None

    def _imported(self, path: str, mode: Mode) -> Iterator[tuple[str, Mode]]:
        """The repository files ``path``'s imports load when it runs in ``mode``, each with its own mode."""
        # Every package the file imports counts as importable by it (a function's import too: a superset).
        known = frozenset(
            module.partition(".")[0] for _, level, module, _ in self._imports_of(path) if not level
        )
        origin = mode.origin(path)
        for line, level, module, names in self._imports_of(path):
            candidates = [module, *(f"{module}.{n}" if module else n for n in names)]
            if not level:
                candidates = [
                    ".".join(module.split(".")[:n]) for n in range(1, module.count(".") + 1)
                ] + candidates
            for dotted in dict.fromkeys(c for c in candidates if c):
                if level:
                    found = self.resolver.relative(mode, path, level, dotted)
                    base = (mode.package or "").split(".")
                    name = ".".join([*base[: len(base) - level + 1], dotted])
                else:
                    found = self.resolver.absolute(mode, dotted, path, known)
                    name = dotted
                if isinstance(found, Found) and found is not EXTERNAL and found.path.endswith(".py"):
                    package = name if found.path.endswith("__init__.py") else name.rpartition(".")[0]
                    yield (
                        found.path,
                        Mode(
                            IMPORTED,
                            f"{path}:{line}",
                            origin,
                            mode.path,
                            package or None,
                            found.installed,
                            mode.launched,
                        ),
                    )

    def _imports_of(self, path: str) -> list[Imported]:
        """``(line, level, module, names)`` of each import of ``path`` (``import a.b``: module ``a.b``), read
        from its lines (a repository's every file parsed would cost more than the walk itself)."""
        if path not in self._imports:
            text = self._read(path)
            found: list[Imported] = []
            line, counted = 1, 0
            for match in IMPORT.finditer(text if "import" in text else ""):
                line, counted = line + text.count("\n", counted, match.start()), match.start()
                dots, module, names, plain = match.group(1, 2, 3, 4)
                if plain is not None:
                    found += [(line, 0, name, ()) for name in _names(plain)]
                elif module or dots:
                    found.append((line, len(dots), module, tuple(n for n in _names(names) if n != "*")))
            self._imports[path] = found
        return self._imports[path]

    def _read(self, path: str) -> str:
        try:
            return self.repo.read(path)
        except (OSError, UnicodeDecodeError):
            return ""


def _names(text: str) -> list[str]:
    """The dotted names an import lists (``(a as b,\n c)``: ``a``, ``c``)."""
    words = (
        part.split()[0] for part in text.strip("()\\ \t\n").replace("\\", " ").split(",") if part.split()
    )
    return [word for word in words if all(piece.isidentifier() for piece in word.split(".")) or word == "*"]


def _folder(path: str) -> str:
    """A folder as the tree's paths name it: normalized, the root as ``""``."""
    normal = posixpath.normpath(path) if path else ""
    return "" if normal == "." else normal


_MODES: weakref.WeakKeyDictionary[RepoContext, LaunchModes] = weakref.WeakKeyDictionary()


def launch_modes(repo: RepoContext) -> LaunchModes:
    """The :class:`LaunchModes` of ``repo``, read once for the transform run over it."""
    if repo not in _MODES:
        _MODES[repo] = LaunchModes(repo)
    return _MODES[repo]
