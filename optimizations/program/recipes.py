"""Where the settings of an argument-parser script come from: the launch scripts that run it and their recipes.

TRL's own scripts (``trl/scripts/sft.py``) build ``TrlParser((ScriptArguments, SFTConfig, ModelConfig))`` and
read every setting from the command line or a ``--config recipe.yaml``; a shell script launches them
(``accelerate launch --num_processes 1 sft.py --config recipes/sft.yaml --packing false``), or a README shows
the command in a code block (``accelerate launch scripts/sft.py --config recipes/zephyr/sft/config_full.yaml``,
as recipe repositories document each recipe). A setting is then switched where its value really comes from: a
``--<setting> <value>`` flag of the launch line (the flag wins over the recipe; a README's line is documentation,
so a flag there that keeps the setting off is refused for a human), else the recipe YAML the line passes with
``--config`` (keys added, comments and order kept; ``config_{a,b}.yaml`` names both recipes, as the shell
expands it). A recipe or flag that already turns the setting on is reported as already done.

Shell lines are read with :mod:`shlex` (line continuations joined), never run. A value the repository set on
purpose is respected: a flag or recipe key that already turns the setting on is left alone, and a recipe whose
``false`` carries a comment (the reason it is off) is refused for a human, quoting the comment.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import libcst as cst
import yaml

from optimizations.program.codemod import OptimizationCodemod, keyword, qualified_under
from optimizations.program.hf import SCRIPT_ARGUMENT_DEFAULTS, is_argument_parser
from optimizations.program.repository import RepoContext, Site
from optimizations.program.yaml_settings import add_keys, settings

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
        return [str(PurePosixPath(p)) for word in given for p in _expand_braces(word)]

    @property
    def documented(self) -> bool:
        """The command is shown in a document (a README's code block), not run by a script of the repository."""
        return not self.path.endswith(".sh")


def _expand_braces(word: str) -> list[str]:
    """The words the shell's brace expansion makes of ``word`` (``c_{a,b}.yaml``: ``c_a.yaml``, ``c_b.yaml``)."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if match is None:
        return [word]
    head, tail = word[: match.start()], word[match.end() :]
    return [w for part in match.group(1).split(",") for w in _expand_braces(head + part + tail)]


def _code_blocks(text: str) -> str:
    """A Markdown text with every line outside fenced code blocks blanked, so offsets and lines still hold."""
    kept, fenced = [], False
    for raw in text.splitlines(keepends=True):
        is_fence = raw.lstrip().startswith(FENCES)
        body = raw if fenced and not is_fence else ""
        fenced = fenced != is_fence
        kept.append(body or ("\n" if raw.endswith("\n") else ""))
    return "".join(kept)


@dataclass(frozen=True)
class RecipeSetting:
    """A setting to turn on in launch flags and recipes: its key, the value written, and what goes with it.

    ``is_on`` says whether a value the repository set already turns it on; ``blocked`` why a recipe with these
    keys and values must keep it off.
    """

    key: str
    value: str
    is_on: Callable[[object], bool]
    companions: dict[str, str] = field(default_factory=dict)
    comment: str = ""
    blocked: Callable[[dict[str, object]], str | None] = lambda siblings: None


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


def _commands(text: str) -> list[tuple[int, int, int, str]]:
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


def _arguments(words: list[str]) -> tuple[dict[str, str], list[str]]:
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


def _words(command: str) -> list[str]:
    """The shell words of a command, control operators (``&&``, ``;``, ``|``) as words of their own."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=OPERATORS)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return []


def launches(repo: RepoContext, script: str) -> list[Launch]:
    """The commands that run ``script`` with python/accelerate/torchrun, or a script that imports and calls
    its code (:func:`_runs_code_of`): those of the repository's shell scripts, and those its Markdown documents
    show in code blocks."""
    found = []
    entries: dict[str, bool] = {}
    for path in [*repo.files(*SHELL_FILES), *repo.documents(*DOCUMENT_FILES)]:
        try:
            text = repo.read(path)
        except (OSError, UnicodeDecodeError):
            continue
        for line, start, end, command in _commands(text if path.endswith(".sh") else _code_blocks(text)):
            words = _words(command)
            runs = next((i for i, w in enumerate(words) if _runs(repo, w, script, path, entries)), None)
            if runs is None or not any(PurePosixPath(w).name in LAUNCHERS for w in words[:runs]):
                continue
            arguments = words[runs + 1 :]
            ends = next(
                (i for i, w in enumerate(arguments) if w and set(w) <= set(OPERATORS)), len(arguments)
            )
            flags, positional = _arguments(arguments[:ends])
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
        entries[entry] = _runs_code_of(repo, entry, script)
    return entries[entry]


def _runs_code_of(repo: RepoContext, entry: str, script: str) -> bool:
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
    run = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            run += node.body
    return any(
        isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in imported
        for statement in run
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


def _flip_flag(text: str, launch: Launch, setting: RecipeSetting) -> tuple[str, int] | None:
    """The shell text with the command's ``--<key> <false value>`` set on, plus its companions; and its line."""
    span = text[launch.start : launch.end]
    name = "[-_]".join(map(re.escape, setting.key.split("_")))
    pattern = re.compile(rf"(--{name}(?:=|[ \t]+(?:\\\n[ \t]*)?))(['\"]?)([^\s'\";&|]+)\2")
    match = pattern.search(span)
    if match is None:
        return None
    extra = "".join(f" --{k} {v}" for k, v in setting.companions.items() if k not in launch.flags)
    edited = (
        span[: match.start(3)]
        + setting.value
        + span[match.end(3) : match.end()]
        + extra
        + span[match.end() :]
    )
    line = launch.line + span[: match.start()].count("\n")
    return text[: launch.start] + edited + text[launch.end :], line


def _append_flags(text: str, launch: Launch, setting: RecipeSetting) -> tuple[str, int] | None:
    """The shell text with ``--<key> <value>`` and its companions added after the command's last argument, in its
    layout (a continuation line each, or on its one line), and the line of the first; ``None`` where the command
    has no last argument to add them after (it pipes or chains on, or a comment ends it)."""
    span = text[launch.start : launch.end]
    body = span.rstrip("\n")
    lines = body.split("\n")
    words = _words(" ".join(line.removesuffix("\\") for line in lines))
    if "#" in lines[-1] or any(word and set(word) <= set(OPERATORS) for word in words):
        return None
    flags = {
        setting.key: setting.value,
        **{k: v for k, v in setting.companions.items() if k not in launch.flags},
    }
    if any(value in ("True", "False") for value in launch.flags.values()):  # the command's own spelling
        flags = {
            key: value.capitalize() if value in ("true", "false") else value for key, value in flags.items()
        }
    if len(lines) > 1:
        indent = lines[-1][: len(lines[-1]) - len(lines[-1].lstrip())]
        added, line = "".join(f" \\\n{indent}--{k} {v}" for k, v in flags.items()), launch.line + len(lines)
    else:
        added, line = "".join(f" --{k} {v}" for k, v in flags.items()), launch.line
    kept = body.rstrip()
    if kept.endswith("\\"):  # a continuation into the end of the file or a blank line, which ends the command
        kept = kept[:-1].rstrip()
    edited = kept + added + span[len(body) :]
    return text[: launch.start] + edited + text[launch.end :], line


def switch(repo: RepoContext, script: str, setting: RecipeSetting, optimization: str) -> list[Site] | None:
    """Turn ``setting`` on where each launch of ``script`` takes it from: its flag, the recipes it passes, else a
    flag added to a shell script's command (a document's is left as shown). The sites; ``None`` without a
    launch."""
    found = launches(repo, script)
    if not found:
        return None
    sites: list[Site] = []
    recipes: set[str] = set()
    # a file's later commands first, so that an edit leaves the spans of those before it where they were; each
    # command's sites go before those of the commands after it
    for launch in reversed(found):
        sites[:0] = _launch_sites(repo, launch, setting, optimization, recipes)
    return sites


def _launch_sites(
    repo: RepoContext, launch: Launch, setting: RecipeSetting, optimization: str, recipes: set[str]
) -> list[Site]:
    """``setting`` turned on for one launch: its flag flipped, else the recipes it passes that ``recipes`` (those
    done already) does not hold, else flags added to its command. None for a command that trains nothing
    (``--do_train False``: artidoro/qlora's ``generate.sh`` runs its script to predict)."""
    if yaml_value(launch.flags.get("do_train", "")) is False:
        return []
    message = f"{setting.key} {setting.value}" + "".join(f", {k} {v}" for k, v in setting.companions.items())
    if setting.key in launch.flags:
        flag = f"--{setting.key} {launch.flags[setting.key]}"
        if setting.is_on(yaml_value(launch.flags[setting.key])):
            return [Site(launch.path, launch.line, optimization, f"launch flag {flag}", False, already=True)]
        reason = setting.blocked({k: yaml_value(v) for k, v in launch.flags.items()})
        if reason is None and launch.documented:
            reason = f"the documented command passes {flag}, which wins over its recipe; change it there"
        if reason is not None:
            return [Site(launch.path, launch.line, optimization, f"launch flag --{message}", False, reason)]
        flipped = _flip_flag(repo.read(launch.path), launch, setting)
        if flipped is None:
            return []
        repo.edit(launch.path, flipped[0])
        return [Site(launch.path, flipped[1], optimization, f"launch flag --{message}")]
    if launch.configs:
        sites = []
        for config in (c for c in launch.configs if c not in recipes):
            recipes.add(config)
            sites.extend(_switch_recipe(repo, config, setting, optimization))
        return sites
    if launch.documented:
        reason = f"the documented command passes no recipe; add `{_flags(setting)}` to it where the run is launched"
        return [Site(launch.path, launch.line, optimization, f"launch flag --{message}", False, reason)]
    return [_add_flags(repo, launch, setting, optimization, message)]


def _add_flags(
    repo: RepoContext, launch: Launch, setting: RecipeSetting, optimization: str, message: str
) -> Site:
    """The site of a shell script's command that passes no recipe: ``setting`` added as flags, or why not."""
    reason = setting.blocked({k: yaml_value(v) for k, v in launch.flags.items()})
    appended = _append_flags(repo.read(launch.path), launch, setting) if reason is None else None
    if appended is None:
        reason = (
            reason
            or f"the command goes on after its arguments (a pipe, `&&`, `;`, a comment): add `{_flags(setting)}`"
        )
        return Site(launch.path, launch.line, optimization, f"launch flag --{message}", False, reason)
    repo.edit(launch.path, appended[0])
    return Site(launch.path, appended[1], optimization, f"launch flag --{message}")


def _flags(setting: RecipeSetting) -> str:
    """The setting and its companions as the flags a command passes: ``--packing true --packing_strategy bfd``."""
    return " ".join(f"--{k} {v}" for k, v in {setting.key: setting.value, **setting.companions}.items())


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


def parsed_flag_off(codemod: OptimizationCodemod, value: cst.BaseExpression) -> bool:
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


def _switch_recipe(repo: RepoContext, path: str, setting: RecipeSetting, optimization: str) -> list[Site]:
    """The recipe with the setting and its companions added, or its false value switched; the site."""
    try:
        text = repo.read(path)
    except OSError:
        return [
            Site(path, 1, optimization, f"{setting.key}: {setting.value}", False, "the recipe is missing")
        ]
    top = _top_keys(text)
    current = next(
        (
            s
            for s in settings(path, text, setting.key)
            if s.siblings.keys() <= top.keys() and setting.key in top
        ),
        None,
    )
    if current is not None and setting.is_on(current.value):
        return [
            Site(
                path, current.line, optimization, f"recipe {setting.key}: {current.text}", False, already=True
            )
        ]
    siblings = current.siblings if current is not None else top
    message = f"{setting.key}: {setting.value}" + "".join(
        f", {k}: {v}" for k, v in setting.companions.items()
    )
    line = current.line if current is not None else text.count("\n") + 1
    reason = setting.blocked(siblings)
    if reason is None and current is not None:
        comment = text[current.end :].split("\n", 1)[0].strip()
        if comment.startswith("#"):
            reason = (
                f"the recipe sets {setting.key}: {current.text} on purpose ({comment}); change it by hand"
            )
    if reason is not None:
        return [Site(path, line, optimization, message, False, reason)]
    values = {k: v for k, v in setting.companions.items() if k not in siblings}
    if current is not None:
        text = text[: current.start] + setting.value + text[current.end :]
    else:
        values = {setting.key: setting.value, **values}
    added = add_keys(text, values, setting.comment) if values else (text, line)
    if added is None:
        return [Site(path, line, optimization, message, False, "the recipe is not a plain YAML mapping")]
    repo.edit(path, added[0])
    return [Site(path, line if current is not None else added[1], optimization, f"recipe {message}")]


def _top_keys(text: str) -> dict[str, object]:
    """The top-level keys and values of a recipe (empty when it is not a mapping)."""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    return loaded if isinstance(loaded, dict) else {}
