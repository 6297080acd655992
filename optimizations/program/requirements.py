"""What the repository declares it installs: the file that names a distribution among its requirements, and
whether those requirements admit a release older than the one a setting came in.

Read from ``setup.py``, ``setup.cfg``, ``pyproject.toml`` and ``*requirements*.txt`` (``exp_requirements.txt`` too) as text: a requirement
(``transformers>=4.31.0``, ``"trl[peft]==0.9.6"``) is found wherever a file spells one, whatever builds the list
around it. A setting an older release does not know must stay out where the repository still allows that
release: its argument parser would stop at the unknown flag, and the config class at the unknown keyword.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from optimizations.program.repository import RepoContext

REQUIREMENT_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "*requirements*.txt")
# A bound that names the oldest release a specifier admits, and one that names the newest.
LOWER_BOUNDS = frozenset({">=", ">", "==", "~=", "==="})
UPPER_BOUNDS = frozenset({"<", "<="})


def _requirement(distribution: str) -> re.Pattern[str]:
    """A requirement naming ``distribution`` (``-``, ``_`` and ``.`` alike, any case), its specifiers in the
    group ``specifiers``."""
    spelled = "[-_.]".join(map(re.escape, re.split(r"[-_.]", distribution)))
    return re.compile(
        rf"(?:^|[\"'\s])(?:{spelled})\s*(?:\[[^\]]*\])?\s*"
        r"(?P<specifiers>(?:[<>=!~]=?=?\s*[\w.*+!-]+\s*,?\s*)*)(?=[;\"',\s#]|$)",
        re.I | re.M,
    )


def _declarations(repo: RepoContext) -> list[tuple[str, str]]:
    """Each requirement file's path and text, its comments (``#`` at a line's start or after a space) removed:
    huggingface/trl notes ``# transformers < 5.1.0`` beside an extra, which requires nothing."""
    return [
        (path, re.sub(r"(^|\s)#.*$", "", repo.read(path), flags=re.M))
        for path in repo.files(*REQUIREMENT_FILES)
    ]


def declares_dependency(repo: RepoContext, distribution: str) -> str | None:
    """The file that lists ``distribution`` among the repository's requirements, if one does: a recipe can only
    turn on a setting whose package the repository installs, as it cannot check at run time that it imports."""
    pattern = _requirement(distribution)
    for path, text in _declarations(repo):
        if pattern.search(text):
            return path
    return None


def _specified(repo: RepoContext, distribution: str) -> Iterator[tuple[str, str, SpecifierSet]]:
    """``(file:line, specifiers as written, parsed)`` for each requirement of ``distribution`` the repository
    declares (one whose specifiers do not parse is left out)."""
    pattern = _requirement(distribution)
    for path, text in _declarations(repo):
        for match in pattern.finditer(text):
            written = re.sub(r"\s+", "", match.group("specifiers")).rstrip(",")
            line = text.count("\n", 0, match.start("specifiers")) + 1
            try:
                yield f"{path}:{line}", written, SpecifierSet(written)
            except InvalidSpecifier:
                continue


def admits_older(repo: RepoContext, distribution: str, release: str) -> str | None:
    """``<file:line>: <requirement>`` for a requirement of ``distribution`` that admits a release older than
    ``release``: its lower bound is older, or it has only an upper bound. A bare requirement admits the newest
    release, which is what an installation gets: None, as for no requirement."""
    needed = Version(release)
    for path, written, specifiers in _specified(repo, distribution):
        try:
            lower = [Version(s.version.removesuffix(".*")) for s in specifiers if s.operator in LOWER_BOUNDS]
        except InvalidVersion:
            continue
        upper = [s for s in specifiers if s.operator in UPPER_BOUNDS]
        if (lower and max(lower) < needed) or (upper and not lower):
            return f"{path}: {distribution}{written}"
    return None


def excludes(repo: RepoContext, distribution: str, release: str) -> str | None:
    """``<file:line>: <requirement>`` for a requirement of ``distribution`` that admits neither ``release`` nor any
    newer one: a pin below it (``==4.31.0``) or an upper bound below it (``<4.36``). A lower bound alone
    (``>=4.28``) lets an installation take the newest release: None."""
    needed = Version(release)
    for path, written, specifiers in _specified(repo, distribution):
        capped = any(s.operator in ("==", "===", "~=", "<", "<=") for s in specifiers)
        if (
            written
            and capped
            and not any(
                specifiers.contains(version, prereleases=True) for version in _candidates(specifiers, needed)
            )
        ):
            return f"{path}: {distribution}{written}"
    return None


def _candidates(specifiers: SpecifierSet, needed: Version) -> list[Version]:
    """``needed`` and the releases at or after it that ``specifiers`` name (``==2.2`` admits 2.2, newer than
    2.0): what a requirement that admits ``needed`` or a newer release must contain one of."""
    named = []
    for specifier in specifiers:
        try:
            named.append(Version(specifier.version.removesuffix(".*")))
        except InvalidVersion:
            continue
    return [needed, *(version for version in named if version >= needed)]
