"""A corpus repository's file (`repos/<name>.toml`, schema in README.md): loaded, validated, frozen.

Every problem is a :class:`ManifestError` whose message starts with the file's path, so that a typo in one of
many files is found at once: an unknown table or key, a missing field, an optimization id `bot list` does not
know, a verdict outside :data:`VERDICTS`, a source that is neither `github:owner/name` nor `pypi:pkg==version`,
a commit that is not 40 hex digits (or one given for a wheel)."""

from __future__ import annotations

import datetime
import fnmatch
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizations.registry import listings

REPOS = Path(__file__).resolve().parent / "repos"
VERDICTS = ("change", "already", "refuse", "keep", "proposal")
SHAPES = (
    "hf-trainer",
    "trl-script",
    "trl-recipes",
    "accelerate-loop",
    "lightning",
    "deepspeed-framework",
    "yaml-framework",
    "gpt-loop",
    "rl-preference",
    "torchrun-fsdp",
)
_SOURCE = re.compile(
    r"(?P<kind>github):(?P<owner>[\w.-]+)/(?P<name>[\w.-]+)|(?P<pypi>pypi):(?P<req>[\w.-]+==[\w.+!-]+)"
)
_COMMIT = re.compile(r"[0-9a-f]{40}")


class ManifestError(ValueError):
    """A corpus file that does not follow the schema; the message names the file and the field."""


def matches(path: str, pattern: str) -> bool:
    """Whether the repository path `path` matches the glob `pattern` part by part: `*` never crosses a `/`,
    a part `**` matches any number of folders (none included)."""
    return _match(path.split("/"), pattern.split("/"))


def _match(parts: list[str], wanted: list[str]) -> bool:
    if not wanted:
        return not parts
    if wanted[0] == "**":
        return any(_match(parts[i:], wanted[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], wanted[0]) and _match(parts[1:], wanted[1:])


def matches_any(path: str, patterns: Iterable[str]) -> bool:
    """Whether `path` matches one of `patterns` (:func:`matches`)."""
    return any(matches(path, pattern) for pattern in patterns)


@dataclass(frozen=True)
class Launch:
    """One documented way the program is run: the command as written, where it is written, the file it runs."""

    command: str
    runs: str
    where: str = ""


@dataclass(frozen=True)
class Expect:
    """One site a maintainer would act on: the optimization, the verdict, the globs of its files, the line(s)
    it rests on (`where`, file:line) and a note saying what and why."""

    optimization: str
    verdict: str
    files: tuple[str, ...]
    where: str = ""
    note: str = ""

    def covers(self, path: str) -> bool:
        """Whether `path` is one of this expectation's files."""
        return matches_any(path, self.files)


@dataclass(frozen=True)
class Manifest:
    """A corpus repository: where its snapshot comes from, how it is run, and what a maintainer would do."""

    name: str
    path: Path
    source: str
    commit: str
    shape: str
    read_on: str
    root: str = ""
    include: tuple[str, ...] = ()
    installed_from_registry: tuple[str, ...] = ()
    never_edit: tuple[str, ...] = ()
    launches: tuple[Launch, ...] = ()
    run: tuple[tuple[str, str], ...] = ()
    expects: tuple[Expect, ...] = ()

    @property
    def kind(self) -> str:
        """`github` or `pypi`."""
        return self.source.split(":", 1)[0]

    @property
    def target(self) -> str:
        """The part after `github:` or `pypi:` (`owner/name`, or `pkg==version`)."""
        return self.source.split(":", 1)[1]

    def includes(self, path: str) -> bool:
        """Whether the snapshot's file `path` (relative to `root`) is kept (every file without `include`)."""
        return not self.include or matches_any(path, self.include)


_REPOSITORY_KEYS = {
    "source": True,
    "commit": False,
    "shape": True,
    "read_on": True,
    "root": False,
    "include": False,
    "installed_from_registry": False,
    "never_edit": False,
}
_LAUNCH_KEYS = {"command": True, "runs": True, "where": False}
_EXPECT_KEYS = {"optimization": True, "verdict": True, "files": True, "where": False, "note": False}
_TABLES = {"repository", "launch", "run", "expect"}


class _Reader:
    """Checks on one file's parsed tables; every error is prefixed with the file's path."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, message: str) -> ManifestError:
        return ManifestError(f"{self.path}: {message}")

    def table(self, data: Any, keys: Mapping[str, bool], where: str) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.error(f"{where} must be a table")
        unknown = sorted(set(data) - set(keys))
        if unknown:
            raise self.error(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(keys)}")
        missing = [key for key, required in keys.items() if required and key not in data]
        if missing:
            raise self.error(f"{where}: missing field(s) {', '.join(missing)}")
        return data

    def text(self, data: dict[str, Any], key: str, where: str, default: str = "") -> str:
        value = data.get(key, default)
        if isinstance(value, datetime.date):
            return value.isoformat()
        if not isinstance(value, str):
            raise self.error(f"{where}.{key} must be a string, not {type(value).__name__}")
        return value

    def globs(self, data: dict[str, Any], key: str, where: str, required: bool = False) -> tuple[str, ...]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(f"{where}.{key} must be a list of non-empty strings")
        if required and not value:
            raise self.error(f"{where}.{key} is empty: name at least one glob")
        return tuple(value)


def load(path: Path, known: Iterable[str] | None = None) -> Manifest:
    """The corpus file at `path`, validated; `known`: the optimization ids (default: `bot list`'s)."""
    reader = _Reader(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise reader.error(f"not valid TOML: {error}") from None
    unknown = sorted(set(data) - _TABLES)
    if unknown:
        raise reader.error(f"unknown table(s) {', '.join(unknown)}; known: {', '.join(sorted(_TABLES))}")
    if "repository" not in data:
        raise reader.error("missing the [repository] table")
    repo = reader.table(data["repository"], _REPOSITORY_KEYS, "[repository]")
    source = reader.text(repo, "source", "[repository]")
    found = _SOURCE.fullmatch(source)
    if found is None:
        raise reader.error(
            f"[repository].source {source!r} is neither github:owner/name nor pypi:pkg==version"
        )
    commit = reader.text(repo, "commit", "[repository]")
    if found["kind"] == "github" and not _COMMIT.fullmatch(commit):
        raise reader.error(f"[repository].commit {commit!r} is not 40 lower-case hex digits")
    if found["pypi"] and commit:
        raise reader.error("[repository].commit must be empty for a pypi source (the version pins it)")
    shape = reader.text(repo, "shape", "[repository]")
    if shape not in SHAPES:
        raise reader.error(f"[repository].shape {shape!r} is not one of {', '.join(SHAPES)}")
    read_on = reader.text(repo, "read_on", "[repository]")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", read_on):
        raise reader.error(f"[repository].read_on {read_on!r} is not a date (YYYY-MM-DD)")
    include = reader.globs(repo, "include", "[repository]")
    if found["pypi"] and not include:
        raise reader.error("[repository].include is required for a pypi source (which files of the wheel)")
    launches = tuple(_launch(reader, entry, i) for i, entry in enumerate(_array(reader, data, "launch")))
    run = data.get("run", {})
    if not isinstance(run, dict) or not all(isinstance(v, str) for v in run.values()):
        raise reader.error("[run] must be a table of strings (value, then its source in parentheses)")
    ids = set(known) if known is not None else {listing.id for listing in listings()}
    expects = tuple(_expect(reader, entry, i, ids) for i, entry in enumerate(_array(reader, data, "expect")))
    return Manifest(
        name=path.stem,
        path=path,
        source=source,
        commit=commit,
        shape=shape,
        read_on=read_on,
        root=reader.text(repo, "root", "[repository]").strip("/"),
        include=include,
        installed_from_registry=reader.globs(repo, "installed_from_registry", "[repository]"),
        never_edit=reader.globs(repo, "never_edit", "[repository]"),
        launches=launches,
        run=tuple(run.items()),
        expects=expects,
    )


def _array(reader: _Reader, data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise reader.error(f"[[{key}]] must be an array of tables ([[{key}]], not [{key}])")
    return value


def _launch(reader: _Reader, entry: Any, index: int) -> Launch:
    where = f"[[launch]] #{index + 1}"
    table = reader.table(entry, _LAUNCH_KEYS, where)
    return Launch(
        command=reader.text(table, "command", where),
        runs=reader.text(table, "runs", where),
        where=reader.text(table, "where", where),
    )


def _expect(reader: _Reader, entry: Any, index: int, known: set[str]) -> Expect:
    where = f"[[expect]] #{index + 1}"
    table = reader.table(entry, _EXPECT_KEYS, where)
    optimization = reader.text(table, "optimization", where)
    if optimization not in known:
        raise reader.error(
            f"{where}: unknown optimization {optimization!r}; `bot list` has {', '.join(sorted(known))}"
        )
    verdict = reader.text(table, "verdict", where)
    if verdict not in VERDICTS:
        raise reader.error(f"{where}: unknown verdict {verdict!r}; one of {', '.join(VERDICTS)}")
    return Expect(
        optimization=optimization,
        verdict=verdict,
        files=reader.globs(table, "files", where, required=True),
        where=reader.text(table, "where", where),
        note=reader.text(table, "note", where),
    )


def load_all(folder: Path = REPOS, only: Iterable[str] = ()) -> list[Manifest]:
    """Every `*.toml` in `folder`, by name (those named in `only`, by file stem or source, when given)."""
    wanted = set(only)
    known = {listing.id for listing in listings()}
    manifests = [load(path, known) for path in sorted(folder.glob("*.toml"))]
    return [m for m in manifests if not wanted or m.name in wanted or m.source in wanted]
