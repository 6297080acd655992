"""Errors that end a command, with the exit code the CLI contract gives them."""

from __future__ import annotations


class BotError(Exception):
    """An error whose message tells the user what to do; ``exit_code`` follows the CLI contract."""

    exit_code = 1


class BadInput(BotError):
    """Bad input: an unparseable plan, a dirty tree, an unknown option. Exit code 2; nothing was changed."""

    exit_code = 2
