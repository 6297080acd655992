"""``bot serve``: the webhook server for ``/bot`` comments."""

from __future__ import annotations

import argparse
import logging

from bot import credentials
from bot.commands.table import FromComment
from bot.errors import BadInput
from bot.service.dispatch import configured_repository, run_request
from bot.service.server import MAX_CONNECTIONS, REQUEST_TIMEOUT_S, check_secret, serve


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Where to listen, and the limits on connections."""
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: %(default)s, this machine only; 0.0.0.0: every interface)",
    )
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default: %(default)s)")
    parser.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        help="connections open at once; more are answered 503 (default: %(default)s)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=REQUEST_TIMEOUT_S,
        help="seconds a connection has to send its whole request (default: %(default)s)",
    )


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Serve until SIGTERM or Ctrl-C; the secret comes from ``$PERFBOT_WEBHOOK_SECRET`` (or its ``_FILE``/
    ``_COMMAND`` form: :mod:`bot.credentials`; 16 characters at least), the one repository served from
    ``$PERFBOT_REPOSITORY`` or the checkout's ``origin``."""
    secret = check_secret(credentials.get(credentials.WEBHOOK_SECRET))
    repository = configured_repository()
    if repository is None:
        raise BadInput(
            "set PERFBOT_REPOSITORY=owner/name, or serve from a clone whose origin is that repository: "
            "comments on any other repository are ignored"
        )
    if args.max_connections < 1 or args.request_timeout <= 0:
        raise BadInput("--max-connections and --request-timeout must be positive")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import github  # here, not at the top: the CLI's other commands do without it

    # PyGithub notes each retried request at INFO, on its own handler besides; each delivery's line in the log
    # says how its requests ended.
    github.set_log_level(logging.WARNING)
    serve(
        args.host,
        args.port,
        secret,
        run_request,
        repository=repository,
        max_connections=args.max_connections,
        request_timeout=args.request_timeout,
    )
    return 0
