"""Which files of a target repository the bot works on (``[tool.bot] exclude``), and the check that every one
of them parses before anything is changed."""

from __future__ import annotations

from pathlib import Path

from bot.conventions import tool_settings
from bot.errors import BadInput
from optimizations.program.repository import RepoContext, SourceCache, TransformError, check_parses
from optimizations.registry import registry


def excluded(root: Path) -> tuple[str, ...]:
    """The ``[tool.bot] exclude`` globs: files no transform touches."""
    globs = tool_settings(root).get("exclude", ())
    if not isinstance(globs, list | tuple) or not all(isinstance(g, str) for g in globs):
        raise BadInput(f"{Path(root) / 'pyproject.toml'}: [tool.bot] exclude must be a list of glob strings")
    return tuple(globs)


def preflight(root: Path, exclude: tuple[str, ...], sources: SourceCache | None = None) -> None:
    """Refuse to start when a file in scope does not parse: nothing is changed, and the message names it.

    A file that some registered optimization might change (:meth:`Optimization.might_apply` of its text) is
    parsed with libcst into ``sources``, for the rest of the run to share; any other file no transform
    parses, so it is only compiled, which takes a fraction of a parse."""
    ctx = RepoContext(root, exclude, sources=sources)
    optimizations = registry().values()
    for path in ctx.python_files():
        try:
            source = ctx.read(path)
            if any(optimization.might_apply(source) for optimization in optimizations):
                ctx.sources.parse(path, source)
            else:
                check_parses(source, path)
        except TransformError as exc:
            raise BadInput(str(exc)) from exc
        except UnicodeDecodeError as exc:
            raise BadInput(f"{path} is not UTF-8 text; exclude it with [tool.bot] exclude") from exc
