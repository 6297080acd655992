"""How the documented setup installs the repository's own code: the distribution its project file names, the
top-level packages it ships, and whether the README (or another document) has a person install it from the
package registry (``pip install <name>``) rather than from this tree (``pip install -e .``).

A package installed from the registry is the released copy: a module added to this tree (a vendored helper)
is not in it, so nothing that reaches the package through its installation can import the new module.
"""

from __future__ import annotations

import configparser
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from optimizations.program.recipes import OPERATORS, shell_words
from optimizations.program.repository import RepoContext

PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")
# Top-level folders that are packages of the tree but never what a distribution ships.
NOT_SHIPPED = frozenset({"tests", "test", "examples", "example", "docs", "scripts", "benchmarks", "recipes"})
DOCUMENTS = ("*.md", "*.rst")
PIP = re.compile(r"\bpip3?\s+install\s+([^`\n]*)")
# Commands that install the project from its own tree.
TREE_INSTALLS = re.compile(r"\b(?:poetry\s+install|uv\s+sync|pdm\s+install|hatch\s+env\s+create)\b")
# ``pip install`` options that take a value (``-r requirements.txt``): the value is no requirement.
VALUED = frozenset(
    {"-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url", "-f"}
)
EDITABLE = ("-e", "--editable")
SETUP_NAME = re.compile(r"""\bname\s*=\s*["']([A-Za-z0-9][\w.-]*)["']""")
REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def normalized(name: str) -> str:
    """A distribution name as the registry compares names (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Installation:
    """The repository's own distribution: its name, its top-level packages (name: the folder holding it) and
    ``registry``: where the documented setup installs it from the registry (``README.md:12 installs trl from
    the package registry (`pip install trl`)``), or empty when it installs the tree or nothing."""

    distribution: str | None = None
    packages: dict[str, str] = field(default_factory=dict)
    registry: str = ""


def installation(repo: RepoContext) -> Installation:
    """The :class:`Installation` of ``repo``'s root project (none without a project file)."""
    name = distribution_name(repo.root)
    if name is None:
        return Installation()
    return Installation(name, shipped_packages(repo.root), _registry_install(repo, name))


def distribution_name(root: Path) -> str | None:
    """The name the root project file gives the distribution (pyproject, setup.cfg, setup.py)."""
    for project in PROJECT_FILES:
        path = root / project
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        name = _name_in(project, text)
        if name:
            return name
    return None


def _name_in(project: str, text: str) -> str | None:
    if project == "pyproject.toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return None
        name = data.get("project", {}).get("name") or data.get("tool", {}).get("poetry", {}).get("name")
        return name if isinstance(name, str) else None
    if project == "setup.cfg":
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(text)
        except configparser.Error:
            return None
        return parser.get("metadata", "name", fallback=None)
    found = SETUP_NAME.search(text)
    return found.group(1) if found else None


def shipped_packages(root: Path) -> dict[str, str]:
    """The top-level packages a distribution of ``root`` ships, by name, with the folder each lies in (a
    ``src/`` layout's, else the root's, but tests, examples, docs and scripts)."""
    found: dict[str, str] = {}
    for base in ("src", ""):
        folder = root / base if base else root
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            if (
                entry.name.isidentifier()
                and entry.name not in NOT_SHIPPED
                and (entry / "__init__.py").is_file()
            ):
                found.setdefault(entry.name, base)
        if found:
            return found
    return found


def _registry_install(repo: RepoContext, name: str) -> str:
    """Where a document installs distribution ``name`` from the registry (or a remote git URL), when no
    document installs it from this tree; empty otherwise."""
    registry = ""
    for path in repo.documents(*DOCUMENTS):
        try:
            lines = repo.read(path).splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(lines, start=1):
            if TREE_INSTALLS.search(line):
                return ""
            for match in PIP.finditer(line):
                kind = _installs(shell_words(match.group(1)), name)
                if kind == "tree":
                    return ""
                if kind == "registry" and not registry:
                    command = f"pip install {match.group(1).strip()}"
                    registry = f"{path}:{number} installs {name} from the package registry (`{command}`)"
    return registry


def _installs(words: list[str], name: str) -> str:
    """``tree`` when a ``pip install`` command's arguments install this tree (``-e .``, ``.[dev]``),
    ``registry`` when they name distribution ``name`` (or a git URL of it), else empty."""
    found, index = "", 0
    while index < len(words):
        word = words[index]
        index += 1
        if word and set(word) <= set(OPERATORS):
            break
        if word in VALUED:
            index += 1
            continue
        if word in EDITABLE:
            continue
        if word.startswith("-"):
            continue
        if word == "." or word.startswith(("./", ".[", "-e.")):
            return "tree"
        if word.startswith("git+"):
            stem = PurePosixPath(word.split("@")[0].split("#")[0].rstrip("/")).name.removesuffix(".git")
            found = "registry" if normalized(stem) == normalized(name) else found
            continue
        requirement = REQUIREMENT.match(word)
        if requirement and normalized(requirement.group(0)) == normalized(name):
            found = "registry"
    return found
