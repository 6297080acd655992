"""The ``bot`` console script: parse the command line, run the command, map errors to exit codes.

Exit codes: 0 done, 1 the run finished but something failed, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import os
import signal
import sys

from bot.commands import build_parser, run, selected_command
from bot.errors import BotError
from bot.redact import install_log_redaction
from optimizations.registry import RegistryError

INTERRUPTED = 130  # the shell's code for a run stopped by SIGINT
BAD_INPUT = 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bot`` console script."""
    install_log_redaction()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        selected = selected_command(argv)
        parser = build_parser(filled=[selected] if selected else [])
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return BAD_INPUT
        code = run(args)
        sys.stdout.flush()  # inside the try: a reader that went away is handled below, not at exit
        return code
    except BotError as exc:
        print(f"bot: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except RegistryError as exc:  # a broken plugin or install: the run cannot start
        print(f"bot: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bot: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`bot list | head -1`): stop quietly, as other command-line tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
