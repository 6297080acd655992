"""The ``bot`` console script: parse the command line, run the command, map errors to exit codes.

Exit codes: 0 done, 1 the run finished but something failed, 2 bad input, 130 interrupted (Ctrl-C, or SIGTERM
from a scheduler or a machine shutting down: both stop a command the same way, so a bench keeps its finished
runs).

Every error is one line, ``bot: error: ...`` on stderr, or with ``--json`` a ``{"error": ..., "exit_code": ...}``
object on stdout: bad input, an operating-system error (a read-only checkout, a full disk) and an optional
dependency that is not installed (the line names the extra to install) alike; never a traceback.

``bot --version`` prints ``perfbot <version>``: the version the installed package was built with, from its git
tag (setuptools-scm).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator

from bot import credentials
from bot.commands import build_parser, run, selected_command
from bot.errors import BotError, MissingExtra, bad_input_from, extra_providing
from bot.redact import install_log_redaction
from optimizations.registry import RegistryError

INTERRUPTED = 130  # the shell's code for a run stopped by SIGINT
BAD_INPUT = 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bot`` console script."""
    install_log_redaction()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        credentials.secure()  # before anything else runs: nothing the bot starts later can read them
        with _terminate_as_interrupt():
            selected = selected_command(argv)
            parser = build_parser(filled=[selected] if selected else [])
            parser.add_argument("--version", action="version", version=f"perfbot {installed_version()}")
            args = parser.parse_args(argv)
            if args.command is None:
                parser.print_help()
                return BAD_INPUT
            code = run(args)
            sys.stdout.flush()  # inside the try: a reader that went away is handled below, not at exit
            return code
    except BotError as exc:
        return _error(argv, str(exc), exc.exit_code)
    except RegistryError as exc:  # a broken plugin or install: the run cannot start
        return _error(argv, str(exc), 1)
    except ModuleNotFoundError as exc:
        if exc.name is None or extra_providing(exc.name) is None:
            raise  # not an optional dependency: a bug to see in full
        command = selected_command(argv)
        missing = MissingExtra(exc.name.partition(".")[0], f"bot {command}" if command else "bot")
        return _error(argv, str(missing), missing.exit_code)
    except KeyboardInterrupt as exc:
        print(f"bot: interrupted{f'; {exc}' if str(exc) else ''}", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`bot list | head -1`): stop quietly, as other command-line tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:  # a read-only checkout, a full disk, a file that went away
        bad = bad_input_from(exc)
        return _error(argv, str(bad), bad.exit_code)


def installed_version() -> str:
    """perfbot's version as installed (derived from the git tag it was built at); a checkout run without
    installing it has no metadata to read, and says so."""
    try:
        return importlib.metadata.version("perfbot")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e . reads it from git)"


def _error(argv: list[str], message: str, code: int) -> int:
    """Report an error in one line: JSON on stdout under ``--json``, else ``bot: error: ...`` on stderr."""
    if "--json" in argv:
        print(json.dumps({"error": " ".join(message.split()), "exit_code": code}))
    else:
        print(f"bot: error: {message}", file=sys.stderr)
    return code


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM raises KeyboardInterrupt as Ctrl-C does (in the main thread only, where
    Python delivers signals); the previous handler comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
