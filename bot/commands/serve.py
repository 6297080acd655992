"""``bot serve``: the webhook server for ``/bot`` comments."""

from __future__ import annotations

import argparse
import os

from bot.commands import FromComment
from bot.errors import BadInput
from bot.trigger import run_request
from bot.webhook import serve


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Where to listen."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Serve until interrupted; the secret comes from ``$PERFBOT_WEBHOOK_SECRET``."""
    secret = os.environ.get("PERFBOT_WEBHOOK_SECRET")
    if not secret:
        raise BadInput("set PERFBOT_WEBHOOK_SECRET to the webhook's secret; unsigned deliveries are refused")
    serve(args.host, args.port, secret, run_request)
    return 0
