"""Errors that end a command, with the exit code the CLI contract gives them."""

from __future__ import annotations


class BotError(Exception):
    """An error whose message tells the user what to do; ``exit_code`` follows the CLI contract."""

    exit_code = 1


class BadInput(BotError):
    """Bad input: an unparseable plan, a dirty tree, an unknown option. Exit code 2; nothing was changed."""

    exit_code = 2


# The optional extras of pyproject.toml and the top-level modules each one installs.
EXTRAS = {
    "ml": ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers"),
    "ray": ("ray",),
}


def extra_providing(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name: its top-level package counts), if any."""
    top = (module or "").partition(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


class MissingExtra(BadInput):
    """An optional dependency is not installed; the message names the extra that installs it."""

    def __init__(self, module: str, needed_for: str):
        extra = extra_providing(module)
        super().__init__(
            f"{needed_for} needs {module}, which is not installed; "
            f"install perfbot's {extra} extra: pip install 'perfbot[{extra}]' (in a checkout: pip install -e '.[{extra}]')"
        )


def require(module: str, needed_for: str) -> None:
    """Raise :class:`MissingExtra` unless ``module`` can be imported (checked without importing it)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or the module blocked in sys.modules
        found = False
    if not found:
        raise MissingExtra(module, needed_for)
