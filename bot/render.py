"""Rendering comments and generated files from the Jinja2 templates in ``templates/``."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jinja2 import Environment

# perfbot's templates folder, beside the bot package (in a checkout and in an installed wheel alike): found by
# path, since a repository perfbot runs in may have a `templates` package of its own ahead of it on sys.path.
TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


@cache
def environment() -> Environment:
    """The template environment: strict about undefined names, markdown-friendly whitespace; HTML templates
    (``*.html.j2``) escape what they are given."""
    from jinja2 import (  # here: `bot list` renders no template
        Environment,
        FileSystemLoader,
        StrictUndefined,
        select_autoescape,
    )

    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
    )
    env.filters["cell"] = markdown_cell
    env.filters["short"] = lambda sha: (sha or "")[:7]
    return env


def markdown_cell(value: object) -> str:
    """Text safe inside a markdown table cell: pipes escaped, newlines folded."""
    return str(value if value is not None else "").replace("|", "\\|").replace("\r", "").replace("\n", " ")


def render(template: str, **context: object) -> str:
    """Render ``templates/<template>`` with ``context``."""
    return environment().get_template(template).render(**context)
