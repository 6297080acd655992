"""Errors that end a command, with the exit code the CLI contract gives them."""

from __future__ import annotations

import errno


class BotError(Exception):
    """An error whose message tells the user what to do; ``exit_code`` follows the CLI contract."""

    exit_code = 1


class BadInput(BotError):
    """Bad input: an unparseable plan, a dirty tree, an unknown option. Exit code 2; nothing was changed."""

    exit_code = 2


# What to do about an operating-system error, by its errno: the bot writes in the checkout (its state in .bot/,
# git's files, its commits), so a file it cannot write is about the checkout.
_WHAT_TO_DO = {
    errno.EROFS: (
        "cannot write {path}: the file system is read-only; the bot writes its state (.bot/) and its commits "
        "in the checkout, so run the bot in a writable clone of it"
    ),
    errno.EACCES: (
        "no permission for {path}: give this user read and write access to the checkout (the bot writes its "
        "state in .bot/ and its commits there), then re-run"
    ),
    errno.ENOSPC: "cannot write {path}: no space left on the device; free some space, then re-run",
}
_WHAT_TO_DO[errno.EPERM] = _WHAT_TO_DO[errno.EACCES]
_WHAT_TO_DO[errno.EDQUOT] = _WHAT_TO_DO[errno.ENOSPC]


def bad_input_from(error: OSError) -> BadInput:
    """An operating-system error (a read-only checkout, a full disk, a file that went away) as one line of bad
    input: the path, what is wrong in words, and what to do, never the raw ``[Errno 30] ...``."""
    path = error.filename if error.filename is not None else "a file"
    advice = _WHAT_TO_DO.get(error.errno) if error.errno is not None else None
    if advice is not None:
        return BadInput(advice.format(path=path))
    what = (error.strerror or str(error) or type(error).__name__).rstrip(".")
    where = f"{error.filename}: " if error.filename is not None else ""
    return BadInput(f"{where}{what[:1].lower()}{what[1:]}; check it, then re-run")


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
