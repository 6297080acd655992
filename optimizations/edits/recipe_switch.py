"""Turning a setting on where an argument-parser script's launches take it from
(:func:`optimizations.program.recipes.launches`): a ``--<setting> <value>`` flag of the launch line flipped
(the flag wins over the recipe; a README's line is documentation, so a flag there that keeps the setting off is
refused for a human), else the recipe YAML the line passes with ``--config`` (keys added, comments and order
kept), else flags added to a shell script's command. A value the repository set on purpose is respected: a flag
or recipe key that already turns the setting on is left alone, and a recipe whose value carries a comment (the
reason it is off) is kept as chosen on purpose, quoting the comment.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import yaml

from optimizations.edits.yaml_text import add_keys
from optimizations.program.recipes import OPERATORS, Launch, launches, shell_words, yaml_value
from optimizations.program.repository import RepoContext, Site
from optimizations.program.yaml_settings import settings


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
    words = shell_words(" ".join(line.removesuffix("\\") for line in lines))
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
            sites.extend(switch_recipe(repo, config, setting, optimization))
        return sites
    if launch.documented:
        reason = (
            f"the documented command ({launch.path}:{launch.line}) passes no recipe; add `{_flags(setting)}` to it "
            "where the run is launched"
        )
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


def switch_recipe(repo: RepoContext, path: str, setting: RecipeSetting, optimization: str) -> list[Site]:
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
            why = f"the recipe sets {setting.key}: {current.text} with a comment: `{comment}`"
            return [
                Site(path, line, optimization, f"recipe {setting.key}: {current.text}", False, why, kept=True)
            ]
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
