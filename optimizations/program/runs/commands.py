"""Every command in a repository that launches one of its Python files, and the flags it passes.

Commands are read from shell scripts, Slurm batch files, Makefiles and the code blocks of Markdown documents,
line continuations joined, split into words with :mod:`shlex` (never run). A command is a launcher (``python``,
``accelerate launch``, ``torchrun``, ``deepspeed``, ``srun``...), the launcher's own flags, the target (a
``.py`` file of the repository, or ``-m`` one of its modules) and the target's flags. A console script of the
repository's own project (``axolotl train recipe.yml``) is a launch of the file it runs. A ``cd DIR`` earlier in
the same command line (``cd trainer && python train.py``) is where the command runs: its script is found there,
and the launch keeps the folder.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath

from optimizations.program.launch_modes import PYTHON, launch_modes
from optimizations.program.reachability import LAUNCHERS
from optimizations.program.recipes import (
    RECIPE_SUFFIXES,
    code_blocks,
    expand_braces,
    flag_arguments,
    shell_commands,
    shell_words,
)
from optimizations.program.repository import SOURCE_ROOTS, RepoContext, module_paths

SHELL_FILES = ("*.sh", "*.bash", "*.slurm", "*.sbatch", "Makefile", "*.mk")
DOCUMENT_FILES = ("*.md",)
# ``python -m torch.distributed.run`` and its older name are torchrun.
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


@dataclass(frozen=True)
class LaunchCommand:
    """One command that runs a file of the repository: where it is written, how, and with which flags."""

    path: str  # the shell script or document
    line: int  # first physical line of the command
    launcher: str  # ``python``, ``accelerate``, ``torchrun``, ``deepspeed``...
    target: str  # the repository file it runs
    as_module: bool  # ``python -m pkg.mod`` (else the file by path)
    launcher_flags: dict[str, str] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)
    positional: tuple[str, ...] = ()
    words: tuple[str, ...] = ()  # the command as written, split into shell words (variable assignments too)
    # The folder it runs in, from the repository root, when a ``cd`` before it on its line moves there.
    directory: str = ""

    @property
    def where(self) -> str:
        """``path:line`` of the command."""
        return f"{self.path}:{self.line}"

    @property
    def console(self) -> bool:
        """A console script of the repository's project, not a launcher of a file (``axolotl train ...``)."""
        return not _is_launcher(self.launcher)

    @property
    def documented(self) -> bool:
        """Shown in a document, not run by a script of the repository."""
        return self.path.endswith(DOCUMENT_FILES[0][1:])

    @property
    def recipes(self) -> list[str]:
        """The YAML recipes it passes (``--config``, a positional ``.yaml``, or one given as ``config=x.yaml``
        as OmegaConf command lines do), braces expanded."""
        given = [self.flags["config"]] if "config" in self.flags else []
        given += [word.rpartition("=")[2] for word in self.positional if word.endswith(RECIPE_SUFFIXES)]
        return [posixpath.normpath(p) for word in given for p in expand_braces(word)]


def launch_commands(repo: RepoContext) -> list[LaunchCommand]:
    """Every command of the repository's launch files and documents that runs one of its Python files, once
    per run of perfbot (``repo.sources`` keeps them)."""
    key = (repo.root, "launch commands")
    if key not in repo.sources.facts:
        repo.sources.facts[key] = _read_all(repo.whole())
    return list(repo.sources.facts[key])


def _read_all(repo: RepoContext) -> list[LaunchCommand]:
    files = set(repo.files("*.py"))
    consoles = launch_modes(repo).console_scripts()
    found = []
    for path in [*repo.files(*SHELL_FILES), *repo.documents(*DOCUMENT_FILES)]:
        try:
            text = repo.read(path)
        except (OSError, UnicodeDecodeError):
            continue
        found += commands_in(path, text, files, consoles)
    return found


def commands_in(
    path: str, text: str, files: set[str], consoles: dict[str, str] | None = None
) -> list[LaunchCommand]:
    """The launch commands of one shell script or document (``path``, holding ``text``) that run one of the
    repository's Python ``files`` (or one of its ``consoles``: console script name -> the file it runs)."""
    consoles = consoles or {}
    if not any(word in text for word in (".py", "-m ", *consoles)):
        return []
    body = code_blocks(text) if path.endswith(".md") else text
    found = []
    for line, _start, _end, command in shell_commands(body):
        directory: str | None = ""  # where a ``cd`` of this line moved; None: somewhere that cannot be told
        for words in _simple_commands(shell_words(command)):
            if words[0] == "cd":
                directory = _moved(directory, words[1:])
                continue
            launch = _launch(path, line, words, files, directory or "") or _console_launch(
                path, line, words, consoles
            )
            if launch is not None:
                found.append(launch)
    return found


def _moved(directory: str | None, arguments: list[str]) -> str | None:
    """The folder (from the repository root) that ``cd ARGUMENTS`` run in ``directory`` moves to; None where
    that cannot be told from the words (a variable, ``cd`` home, a folder outside the repository), and the
    command after it is read as if there were no ``cd``."""
    if directory is None or len(arguments) != 1 or arguments[0] in ("-", "") or arguments[0][0] in "/~":
        return None
    if any(c in arguments[0] for c in "$`*?"):
        return None
    moved = posixpath.normpath(posixpath.join(directory, arguments[0]))
    if moved == os.curdir:
        return ""
    return None if moved == os.pardir or moved.startswith(os.pardir + "/") else moved


def _simple_commands(words: list[str]) -> list[list[str]]:
    """The words of each simple command, split at the control operators (``&&``, ``;``, ``|``)."""
    commands: list[list[str]] = [[]]
    for word in words:
        if word and set(word) <= set(";&|"):
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def _launch(
    path: str, line: int, written: list[str], files: set[str], directory: str = ""
) -> LaunchCommand | None:
    """The command as a launch of a repository file, or ``None`` (not a launcher, or nothing of ours run); run
    in ``directory`` (a ``cd`` before it on its line), where its script is looked for first."""
    words = [w for w in written if not _assignment(w)]  # ``CUDA_VISIBLE_DEVICES=0 python ...``
    start = next((i for i, w in enumerate(words) if _is_launcher(w)), None)
    if start is None:
        return None
    launcher = _launcher_name(words[start])
    base = posixpath.dirname(path)
    index = start + 1
    while index < len(words):
        word = words[index]
        if _is_launcher(word):  # ``srun torchrun ...``: the inner launcher
            launcher, start = _launcher_name(word), index
        elif word == "-m" and index + 1 < len(words):
            module = words[index + 1]
            if module in TORCHRUN_MODULES:
                launcher, index = "torchrun", index + 2
                continue
            target = _module_file(module, files, directory)
            if target is None:
                return None
            made = _made(
                path, line, launcher, words[start + 1 : index], target, True, words[index + 2 :], written
            )
            return replace(made, directory=directory) if directory else made
        elif word.endswith(".py"):
            target = _script_file(word, base, files, directory)
            if target is None:
                return None
            made = _made(
                path, line, launcher, words[start + 1 : index], target, False, words[index + 1 :], written
            )
            return replace(made, directory=directory) if directory else made
        index += 1
    return None


def _is_launcher(word: str) -> bool:
    """``python``, ``python3.11``, ``/usr/bin/python3``, ``torchrun``... (not ``python_out``)."""
    name = PurePosixPath(word).name
    return name in LAUNCHERS or PYTHON.fullmatch(name) is not None


def _launcher_name(word: str) -> str:
    name = PurePosixPath(word).name
    return "python" if name.startswith("python") else name


def _console_launch(path: str, line: int, words: list[str], consoles: dict[str, str]) -> LaunchCommand | None:
    """A console script of the repository run with a recipe (``axolotl train examples/lora.yml``,
    ``llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml``): its subcommand words are positional."""
    command = [w for w in words if not _assignment(w)]
    if not command or command[0] not in consoles:
        return None
    flags, positional = flag_arguments(command[1:])
    return LaunchCommand(
        path, line, command[0], consoles[command[0]], False, {}, flags, tuple(positional), tuple(words)
    )


def _made(
    path: str,
    line: int,
    launcher: str,
    before: list[str],
    target: str,
    as_module: bool,
    after: list[str],
    written: list[str],
) -> LaunchCommand:
    launcher_flags, _ = flag_arguments([w for w in before if w != "launch"])
    flags, positional = flag_arguments(after)
    return LaunchCommand(
        path, line, launcher, target, as_module, launcher_flags, flags, tuple(positional), tuple(written)
    )


def _assignment(word: str) -> bool:
    name, equals, _ = word.partition("=")
    return bool(equals) and name.isidentifier() and name.isupper()


def _script_file(word: str, base: str, files: set[str], directory: str = "") -> str | None:
    candidates = (posixpath.join(directory, word),) if directory else (posixpath.join(base, word), word)
    for candidate in candidates:
        normal = posixpath.normpath(candidate)
        if normal in files:
            return normal
    return None


def _module_file(module: str, files: set[str], directory: str = "") -> str | None:
    roots = (directory,) if directory else SOURCE_ROOTS
    return next((p for p in module_paths(module, roots) if p in files), None)
