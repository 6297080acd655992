"""Hydra applications: the config files a launch of one composes, and how its command line sets a value.

``@hydra.main(config_path="../configs", config_name="config")`` on a script's function composes the run's config
from ``config_path/config_name.yaml``, the option its ``defaults:`` list picks in each config group
(``- training: default`` reads ``training/default.yaml``), and the command line's overrides: ``group=option``
picks another option of a group, ``key=value`` sets a value, ``~key`` deletes one. Its words are not
``--flags``: a value is set as ``key=value``.
"""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass

import yaml

from optimizations.program.repository import RepoContext
from optimizations.program.runs.commands import LaunchCommand


@dataclass(frozen=True)
class HydraApp:
    """Where a Hydra script's configs are: the folder (from the repository root) and the primary config's name."""

    config_dir: str
    config_name: str

    @property
    def primary(self) -> str:
        """The primary config file."""
        name = (
            self.config_name if self.config_name.endswith((".yaml", ".yml")) else f"{self.config_name}.yaml"
        )
        return posixpath.join(self.config_dir, name)


def hydra_app(path: str, text: str) -> HydraApp | None:
    """The Hydra app the script ``path`` (holding ``text``) runs, or ``None`` when no function of it is decorated
    ``@hydra.main(config_path=..., config_name=...)`` with literal arguments."""
    if "hydra" not in text:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) in ("hydra.main", "main"):
                options = {
                    k.arg: k.value.value
                    for k in decorator.keywords
                    if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)
                }
                if "config_name" in options:
                    folder = posixpath.join(posixpath.dirname(path), options.get("config_path", "."))
                    return HydraApp(posixpath.normpath(folder), options["config_name"])
    return None


def composed_files(repo: RepoContext, app: HydraApp, overrides: tuple[str, ...]) -> list[str]:
    """The repository's config files a run with ``overrides`` composes: the primary config, then the option of
    each group its ``defaults:`` list picks, or the one a ``group=option`` override picks instead (after the
    configs of its group that the option's own ``defaults:`` list names)."""
    try:
        primary = yaml.safe_load(repo.read(app.primary))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    chosen = _defaults(primary.get("defaults") if isinstance(primary, dict) else None)
    for word in overrides:
        group, equals, option = word.lstrip("+").partition("=")
        if equals and (repo.root / app.config_dir / group).is_dir():
            chosen[group] = option
    files = [app.primary]
    for group, option in chosen.items():
        files += _with_bases(repo, posixpath.join(app.config_dir, group), option, depth=4)
    return files


def _with_bases(repo: RepoContext, folder: str, option: str, depth: int) -> list[str]:
    """The option's config file of a group folder, after the configs of the same group its own ``defaults:`` list
    names (``defaults: [base_model]`` in ``model/llama.yaml``), which Hydra composes before it."""
    path = posixpath.join(folder, f"{option}.yaml")
    if not (repo.root / path).is_file():
        return []
    try:
        data = yaml.safe_load(repo.read(path))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return [path]
    listed = data.get("defaults") if isinstance(data, dict) else None
    bases = (
        [item for item in listed if isinstance(item, str) and item != "_self_"]
        if isinstance(listed, list)
        else []
    )
    found = [base for item in bases if depth > 0 for base in _with_bases(repo, folder, item, depth - 1)]
    return [*found, path]


def run_recipes(repo: RepoContext, entry: str, launch: LaunchCommand | None) -> list[str]:
    """The config files a run of ``entry`` reads: its launch's recipes (:func:`launch_recipes`), or, where no
    command launches it, what its Hydra script composes with no overrides."""
    if launch is not None:
        return launch_recipes(repo, launch)
    app = hydra_app(entry, repo.text(entry))
    return composed_files(repo, app, ()) if app is not None else []


def launch_recipes(repo: RepoContext, launch: LaunchCommand) -> list[str]:
    """The config files a launch runs with: the YAML recipes it passes, and what a Hydra script composes."""
    app = hydra_app(launch.target, repo.text(launch.target))
    composed = composed_files(repo, app, launch.positional) if app is not None else []
    return list(dict.fromkeys([*launch.recipes, *composed]))


def _defaults(listed: object) -> dict[str, str]:
    """``group -> option`` of a ``defaults:`` list (``_self_`` and ``override`` prefixes read as Hydra does)."""
    chosen: dict[str, str] = {}
    for item in listed if isinstance(listed, list) else []:
        if isinstance(item, dict):
            for group, option in item.items():
                if isinstance(group, str) and isinstance(option, str):
                    chosen[group.removeprefix("override ").strip()] = option
    return chosen
