"""Which files of a target repository the bot works on: those ``[tool.bot] exclude`` leaves in, less the ones
that do not parse (real repositories carry Python 2 leftovers and templated files), which are skipped and named
before anything is changed."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

from bot.conventions import tool_settings
from bot.errors import BadInput
from optimizations.program.collector import collector_paused
from optimizations.program.repository import RepoContext, SourceCache, TransformError, check_parses
from optimizations.registry import registry


def excluded(root: Path) -> tuple[str, ...]:
    """The ``[tool.bot] exclude`` globs: files no transform touches."""
    globs = tool_settings(root).get("exclude", ())
    if not isinstance(globs, list | tuple) or not all(isinstance(g, str) for g in globs):
        raise BadInput(f"{Path(root) / 'pyproject.toml'}: [tool.bot] exclude must be a list of glob strings")
    return tuple(globs)


@dataclass(frozen=True)
class Unparsed:
    """A file in scope that the run skips, and why: ``reason`` starts with the path (and the line that fails)."""

    path: str
    reason: str

    def describe(self) -> str:
        return f"skipped {self.reason}"


@dataclass(frozen=True)
class Scope:
    """The files a run works on: ``exclude`` holds the ``[tool.bot] exclude`` globs and the ``skipped`` files."""

    exclude: tuple[str, ...]
    skipped: tuple[Unparsed, ...] = ()

    @classmethod
    def of(cls, root: Path, sources: SourceCache | None = None) -> Scope:
        """The repository's scope, checked file by file with :func:`preflight` (parses go into ``sources``)."""
        exclude = excluded(root)
        skipped = tuple(preflight(root, exclude, sources))
        return cls(exclude + tuple(glob.escape(s.path) for s in skipped), skipped)


def preflight(root: Path, exclude: tuple[str, ...], sources: SourceCache | None = None) -> list[Unparsed]:
    """The files in scope that do not parse or are not UTF-8 text, each with the reason (the line that fails):
    a run skips them, and changes nothing in them.

    A file that some registered optimization might change (:meth:`Optimization.might_apply` of its text) is
    parsed with libcst into ``sources``, for the rest of the run to share; any other file no transform
    parses, so it is only compiled, which takes a fraction of a parse."""
    ctx = RepoContext(root, exclude, sources=sources)
    optimizations = registry().values()
    skipped = []
    with collector_paused():
        for path in ctx.python_files():
            try:
                source = ctx.read(path)
                if any(optimization.might_apply(source) for optimization in optimizations):
                    ctx.sources.parse(path, source)
                else:
                    check_parses(source, path)
            except TransformError as exc:
                skipped.append(Unparsed(path, str(exc)))
            except UnicodeDecodeError as exc:
                reason = f"{path}: not UTF-8 text (byte {exc.start}); exclude it with [tool.bot] exclude"
                skipped.append(Unparsed(path, reason))
    return skipped
