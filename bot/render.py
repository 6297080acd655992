"""Rendering comments and generated files from the Jinja2 templates in ``templates/``."""

from __future__ import annotations

from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined


@cache
def environment() -> Environment:
    """The template environment: strict about undefined names, markdown-friendly whitespace."""
    env = Environment(
        loader=PackageLoader("templates", ""),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
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
