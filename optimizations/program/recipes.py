"""Where the settings of an argument-parser script come from: the launch scripts that run it and their recipes.

TRL's own scripts (``trl/scripts/sft.py``) build ``TrlParser((ScriptArguments, SFTConfig, ModelConfig))`` and
read every setting from the command line or a ``--config recipe.yaml``; a shell script launches them
(``accelerate launch --num_processes 1 sft.py --config recipes/sft.yaml --packing false``), or a README shows
the command in a code block (``accelerate launch scripts/sft.py --config recipes/zephyr/sft/config_full.yaml``,
as recipe repositories document each recipe). Each launch gives its ``--<setting> <value>`` flags and the
recipes it passes (``--config``, or a positional YAML; ``config_{a,b}.yaml`` names both recipes, as the shell
expands it); :mod:`optimizations.edits.recipe_switch` switches a setting where its value really comes from.

Shell lines are read with :mod:`shlex` (line continuations joined), never run.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import libcst as cst

from optimizations.program.hf import SCRIPT_ARGUMENT_DEFAULTS, is_argument_parser
from optimizations.program.queries import FileQuery
from optimizations.program.repository import RepoContext
from optimizations.program.run_calls import run_statements
from optimizations.program.syntax import keyword, qualified_under
from optimizations.program.yaml_settings import settings

# Commands that run a Python training script given as a path argument.
LAUNCHERS = ("python", "python3", "accelerate", "torchrun", "deepspeed")
# Characters of the shell's control operators, which end a command's arguments.
OPERATORS = ";&|"
# A recipe given as a positional argument: a YAML file.
RECIPE_SUFFIXES = (".yaml", ".yml")
# Files whose commands launch scripts: shell scripts (edited), and Markdown code blocks (read only).
SHELL_FILES = ("*.sh",)
DOCUMENT_FILES = ("*.md",)
# A fenced code block's opening or closing line in Markdown.
FENCES = ("```", "~~~")


@dataclass(frozen=True)
class Launch:
    """One shell command that runs a script: where it is, its ``--flag value`` arguments, and its text span."""

    path: str  # the shell script
    line: int  # first physical line of the command
    start: int  # character span of the command (continuations included) in the shell script
    end: int
    flags: dict[str, str] = field(default_factory=dict)
    positional: tuple[str, ...] = ()  # the arguments that are no flag's value

    @property
    def configs(self) -> list[str]:
        """The recipes passed with ``--config`` or as a positional YAML file (``dpo.py recipes/dpo.yaml``, as
        HfArgumentParser scripts read ``sys.argv[1]``), relative to the repository root, ``{a,b}`` expanded."""
        given = [self.flags["config"]] if "config" in self.flags else []
        given += [word for word in self.positional if word.endswith(RECIPE_SUFFIXES)]
        return [str(PurePosixPath(p)) for word in given for p in expand_braces(word)]

    @property
    def documented(self) -> bool:
        """The command is shown in a document (a README's code block), not run by a script of the repository."""
        return not self.path.endswith(".sh")


def expand_braces(word: str) -> list[str]:
    """The words the shell's brace expansion makes of ``word`` (``c_{a,b}.yaml``: ``c_a.yaml``, ``c_b.yaml``)."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if match is None:
        return [word]
    head, tail = word[: match.start()], word[match.end() :]
    return [w for part in match.group(1).split(",") for w in expand_braces(head + part + tail)]


def code_blocks(text: str) -> str:
    """A Markdown text with every line outside code blocks blanked, so offsets and lines still hold. Code blocks
    are fenced ones, and indented ones (four spaces, after a blank line) whose line starts with a launcher
    (``    python -u train.py model=pythia69``): an indented line of prose, in a list item say, is no command."""
    kept, fenced, after_blank = [], False, False
    for raw in text.splitlines(keepends=True):
        is_fence = raw.lstrip().startswith(FENCES)
        indented = not fenced and after_blank and raw.startswith(("    ", "\t")) and _launches(raw)
        body = raw if (fenced and not is_fence) or indented else ""
        fenced = fenced != is_fence
        after_blank = not raw.strip() or (after_blank and raw.startswith(("    ", "\t")))
        kept.append(body or ("\n" if raw.endswith("\n") else ""))
    return "".join(kept)


def _launches(line: str) -> bool:
    """Whether a line's first word (past a ``$`` prompt) is a launcher: ``python -u train.py``."""
    words = line.strip().removeprefix("$ ").split()
    return (
        bool(words)
        and re.fullmatch(r"(python[\d.]*|torchrun|accelerate|deepspeed|srun)", words[0]) is not None
    )


def parser_types(call: cst.Call, assigns: list[cst.Assign]) -> list[cst.BaseExpression]:
    """The dataclasses an argument parser call fills: its tuple, or the tuple a name passed to it is assigned
    (``dataclass_types = (ScriptArguments, SFTConfig, ModelConfig)``, as TRL's scripts write it)."""
    given = keyword(call, "dataclass_types")
    first = call.args[0] if call.args and call.args[0].keyword is None else None
    types = given.value if given else first.value if first else None
    if isinstance(types, cst.Name):
        named = [
            a.value
            for a in assigns
            if isinstance(a.value, (cst.Tuple, cst.List))
            and any(isinstance(t.target, cst.Name) and t.target.value == types.value for t in a.targets)
        ]
        types = named[0] if len(named) == 1 else types
    if isinstance(types, (cst.Tuple, cst.List)):
        return [e.value for e in types.elements]
    return [] if types is None else [types]


def shell_commands(text: str) -> list[tuple[int, int, int, str]]:
    """``(line, start, end, command)`` for each logical line of a shell script, continuations joined."""
    commands = []
    pending, first_line, first_start, offset = "", 1, 0, 0
    for number, raw in enumerate(text.splitlines(keepends=True), start=1):
        if not pending:
            first_line, first_start = number, offset
        offset += len(raw)
        body = raw.rstrip("\n")
        if body.endswith("\\"):
            pending += body[:-1] + " "
            continue
        commands.append((first_line, first_start, offset, pending + body))
        pending = ""
    if pending:
        commands.append((first_line, first_start, offset, pending))
    return commands


def flag_arguments(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """The ``--key value`` and ``--key=value`` arguments (a flag followed by another flag is ``"true"``), and the
    words that are no flag's value (positional arguments)."""
    flags: dict[str, str] = {}
    positional: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("--"):
            positional.append(word)
            continue
        name, equals, value = word[2:].partition("=")
        if not equals:
            follows = index < len(words) and not words[index].startswith("--")
            value = words[index] if follows else "true"
            index += follows
        flags[name.replace("-", "_")] = value
    return flags, positional


def shell_words(command: str) -> list[str]:
    """The shell words of a command, control operators (``&&``, ``;``, ``|``) as words of their own."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=OPERATORS)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return []


def launches(repo: RepoContext, script: str) -> list[Launch]:
    """The commands that run ``script`` with python/accelerate/torchrun, or a script that imports and calls
    its code (:func:`runs_code_of`): those of the repository's shell scripts, and those its Markdown documents
    show in code blocks."""
    found = []
    entries: dict[str, bool] = {}
    for path in [*repo.files(*SHELL_FILES), *repo.documents(*DOCUMENT_FILES)]:
        try:
            text = repo.read(path)
        except (OSError, UnicodeDecodeError):
            continue
        for line, start, end, command in shell_commands(text if path.endswith(".sh") else code_blocks(text)):
            words = shell_words(command)
            runs = next((i for i, w in enumerate(words) if _runs(repo, w, script, path, entries)), None)
            if runs is None or not any(PurePosixPath(w).name in LAUNCHERS for w in words[:runs]):
                continue
            arguments = words[runs + 1 :]
            ends = next(
                (i for i, w in enumerate(arguments) if w and set(w) <= set(OPERATORS)), len(arguments)
            )
            flags, positional = flag_arguments(arguments[:ends])
            found.append(Launch(path, line, start, end, flags, tuple(positional)))
    return found


def _runs(repo: RepoContext, word: str, script: str, shell: str, entries: dict[str, bool]) -> bool:
    """True when the shell word runs ``script``'s code: names it, or names an entry script that calls it."""
    if _same_script(word, script, shell):
        return True
    if not word.endswith(".py"):
        return False
    entry = next(
        (p for p in (word, str(PurePosixPath(shell).parent / word)) if (repo.root / p).is_file()), None
    )
    if entry is None or entry == script:
        return False
    if entry not in entries:
        entries[entry] = runs_code_of(repo, entry, script)
    return entries[entry]


def runs_code_of(repo: RepoContext, entry: str, script: str) -> bool:
    """Whether the script ``entry`` imports a function of ``script``'s module and calls it when run (at its top
    level, or under ``if __name__ == "__main__":``), as lm-sys/FastChat's ``train_mem.py`` runs ``train()`` of
    ``fastchat/train/train.py`` after patching attention."""
    try:
        tree = ast.parse(repo.read(entry))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    path, folder = PurePosixPath(script).with_suffix(""), PurePosixPath(entry).parent
    modules = {".".join(path.parts)}  # from the repository root, or from the entry's own folder
    if path.is_relative_to(folder):
        modules.add(".".join(path.relative_to(folder).parts))
    imported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules
        for alias in node.names
    }
    return any(
        isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in imported
        for statement in run_statements(tree)
        if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If))
        for call in ast.walk(statement)
    )


def _same_script(word: str, script: str, shell: str) -> bool:
    """True when the shell word names ``script`` (relative to the repository root or to the shell script)."""
    if not word.endswith(".py"):
        return False
    candidate = PurePosixPath(word)
    beside = PurePosixPath(shell).parent / candidate
    return script in (str(candidate), str(beside))


def turned_on_at(repo: RepoContext, script: str, key: str) -> str | None:
    """``path:line`` of a launch flag of ``script``, or of a recipe a launch passes, that sets ``key`` true."""
    for launch in launches(repo, script):
        if key in launch.flags:
            if yaml_value(launch.flags[key]) is True:
                return f"{launch.path}:{launch.line}"
            continue  # the flag wins over the recipe
        for config in launch.configs:
            if where := _setting_on(repo, config, key):
                return where
    return None


def set_by_every_launch(repo: RepoContext, script: str, key: str) -> list[str]:
    """``path:line`` of where each launch of ``script`` sets ``key`` true: its flag, else every recipe it passes.
    Empty when the script has no launch, or one launch leaves ``key`` unset or false."""
    found = []
    for launch in launches(repo, script):
        if key in launch.flags:
            where = f"{launch.path}:{launch.line}" if yaml_value(launch.flags[key]) is True else None
        else:
            places = [_setting_on(repo, config, key) for config in launch.configs]
            where = places[0] if places and all(places) else None
        if where is None:
            return []
        found.append(where)
    return found


def _setting_on(repo: RepoContext, config: str, key: str) -> str | None:
    """``path:line`` where the recipe ``config`` sets ``key`` true, or ``None`` (unset, false, unreadable)."""
    try:
        text = repo.read(config)
    except OSError:
        return None
    on = [s for s in settings(config, text, key) if s.value is True]
    return f"{config}:{on[0].line}" if on else None


def parsed_flag_off(codemod: FileQuery, value: cst.BaseExpression) -> bool:
    """True when ``value`` reads a boolean field of TRL's ``ScriptArguments`` that an argument parser of the
    file fills (``streaming=script_args.dataset_streaming``), off by default, and that no launch of the script
    (its flags, the recipes it passes) turns on."""
    if not isinstance(value, cst.Attribute) or SCRIPT_ARGUMENT_DEFAULTS.get(value.attr.value) is not False:
        return False
    parsed = any(
        qualified_under(codemod.names(element), ("trl",), ("ScriptArguments",))
        for call in codemod.nodes(cst.Call)
        if is_argument_parser(codemod.names(call.func))
        for element in parser_types(call, codemod.nodes(cst.Assign))
    )
    return parsed and turned_on_at(codemod.repo, codemod.path, value.attr.value) is None


def yaml_value(text: str) -> object:
    """A flag's value as the parsers read booleans and numbers (``false``, ``4``)."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return int(text) if text.isdigit() else text
