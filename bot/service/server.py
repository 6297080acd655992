"""``bot serve``: the webhook server. Verifies GitHub's signature, drops replays, queues the delivery durably,
answers at once, works later.

An asynchronous HTTP server (aiohttp's low-level server on one event loop thread), so idle and slow
connections cost a little memory each, never a thread, and signed deliveries get through while slow clients
wait. ``POST /webhook`` answers 401 to an unsigned or mis-signed request (before reading a body that carries no
signature), 411/400/413 to a missing, malformed or too large ``Content-Length``, 400 to a signed body that is
not a well-formed event, 200 ``ignored`` to an event that is not a new ``/bot`` comment on the configured
repository (its name, and its id once known) or whose comment was already accepted, and 202 ``accepted`` to the
rest, once it is committed to the :class:`~bot.service.queue.DeliveryQueue` that :class:`~bot.service.queue.
Workers` work off.

Replays are recognised by what the signature covers, the comment (``repository.id``, ``comment.id``,
``action``), never by the unsigned ``X-GitHub-Delivery`` header: the same signed body under a new delivery id
is ignored, while GitHub's redelivery of an event whose checks failed runs.

Every connection has ``request_timeout`` seconds, in all, from when it opens to send its request (for the
headers, aiohttp's keep-alive timer, which starts with the connection and is not moved by data); beyond
``max_connections`` open at once, a new one is answered 503 and closed. SIGTERM (or Ctrl-C) stops taking
connections and work, interrupts a run in progress (it records where it stopped, and the next start resumes it
from the queue) and exits within :data:`STOP_DEADLINE_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple, TypedDict, Unpack

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from bot.errors import BadInput
from bot.redact import install_log_redaction, register_secret
from bot.service.delivery_log import Outcome, log_delivery
from bot.service.dispatch import Dispatcher, MalformedEvent, Runner, command_from_event, default_state_dir
from bot.service.queue import CHECKERS, DeliveryQueue, TrackerFactory, Workers
from bot.trackers.base import Tracker

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/webhook"
# An issue_comment payload holds two bodies of at most 65,536 characters and some metadata: far below this.
MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_CONNECTIONS = 1000
REQUEST_TIMEOUT_S = 10.0  # GitHub sends a delivery at once, and gives up on it after 10 s
MIN_SECRET_CHARS = 16
STOP_DEADLINE_S = 9.0
SIGNATURE_PREFIX = "sha256="
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def verify_signature(secret: str | bytes, body: bytes, header: str | None) -> bool:
    """True when ``header`` (``X-Hub-Signature-256``) is the HMAC-SHA256 of ``body`` under ``secret``."""
    if not secret or not header or not header.startswith(SIGNATURE_PREFIX):
        return False
    key = secret.encode() if isinstance(secret, str) else secret
    expected = SIGNATURE_PREFIX + hmac.new(key, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.encode())


def check_secret(secret: str | None) -> str:
    """``secret`` when it is long enough to sign webhooks with; else :class:`BadInput` saying what to do."""
    if not secret:
        raise BadInput(
            "set PERFBOT_WEBHOOK_SECRET (or PERFBOT_WEBHOOK_SECRET_FILE, PERFBOT_WEBHOOK_SECRET_COMMAND) to the "
            "webhook's secret; unsigned deliveries are refused"
        )
    if len(secret) < MIN_SECRET_CHARS:
        raise BadInput(
            f"PERFBOT_WEBHOOK_SECRET has {len(secret)} characters; use at least {MIN_SECRET_CHARS} "
            "(e.g. `openssl rand -hex 32`) and set the same on the webhook"
        )
    return secret


class Answer(NamedTuple):
    """What ``POST /webhook`` answers; for the log, whose delivery it was (once the body says), the reason
    when the answer does not say it all, and the exception of a bug."""

    status: int
    text: str
    repo: str = ""
    user: str = ""
    reason: str = ""
    bug: Exception | None = None

    @property
    def outcome(self) -> Outcome:
        """202 accepted, another 2xx ignored (a ping: done), 4xx refused, 5xx failed."""
        if self.status == 202:
            return Outcome.ACCEPTED
        if self.status < 300:
            return Outcome.DONE if self.text == "pong" else Outcome.IGNORED
        return Outcome.REFUSED if self.status < 500 else Outcome.FAILED


class _ParserRefusals(logging.LoggerAdapter):
    """aiohttp's log, where a request its HTTP parser refuses (a ``Content-Length: -1``; answered 400) is a
    delivery line instead of a traceback; any other error keeps its traceback."""

    def exception(self, msg: object, *args: object, exc_info: object = True, **kwargs: object) -> None:
        if isinstance(exc_info, HttpProcessingError) and exc_info.code < 500:
            first = (exc_info.message.strip().splitlines() or [""])[0].rstrip(":")
            log_delivery(Outcome.REFUSED, f"malformed HTTP request: {first}")
        else:
            super().exception(msg, *args, exc_info=exc_info, **kwargs)  # type: ignore[arg-type]


class _Connections(web.Server):
    """aiohttp's low-level server, counting connections: one beyond ``max_connections`` is answered 503 and
    closed at once."""

    def __init__(self, handler, *, max_connections: int, **kwargs) -> None:
        super().__init__(handler, **kwargs)
        self.max_connections = max_connections
        self.opened: dict[RequestHandler, float] = {}

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self.opened[handler] = time.monotonic()
        if len(self.opened) > self.max_connections:
            log.warning("%s connections open already: answered 503", self.max_connections)
            transport.write(_BUSY)
            # Once aiohttp's handler has started: closed before, the handler's task fails an assertion.
            asyncio.get_running_loop().call_soon(transport.close)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self.opened.pop(handler, None)
        super().connection_lost(handler, exc)


class WebhookServer:
    """The HTTP side of ``bot serve`` on ``host:port`` (0 picks a free port), for one ``repository``; the
    socket is bound at once, so :attr:`address` is known before :meth:`serve_forever`."""

    def __init__(
        self,
        host: str,
        port: int,
        secret: str,
        workers: Workers,
        repository: str,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        check_secret(secret)
        if not repository:
            raise BadInput("no repository: set PERFBOT_REPOSITORY=owner/name (or serve from a clone of it)")
        register_secret(secret)
        install_log_redaction()
        self.workers = workers
        self.repository = repository
        self.max_body_bytes = max_body_bytes
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self._secret = secret
        self._socket = socket.create_server((host, port), backlog=1024)
        self._connections: _Connections | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._http: threading.Thread | None = None
        self._started = threading.Event()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._socket.getsockname()[:2]
        return str(host), int(port)

    async def receive(self, headers: Mapping[str, str], body: bytes) -> Answer:
        """Decide about one delivery whose body has arrived."""
        if not verify_signature(self._secret, body, headers.get("x-hub-signature-256")):
            return Answer(401, "invalid or missing X-Hub-Signature-256")
        event = headers.get("x-github-event", "")
        if event == "ping":
            return Answer(200, "pong")
        if event != "issue_comment":
            return Answer(200, f"ignored: {event or 'no'} event")
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            return Answer(400, "malformed event: the body is not JSON")
        try:
            command = command_from_event(payload)
        except MalformedEvent as error:
            return Answer(400, f"malformed event: {error}", *_named_in(payload))
        if command is None:
            return Answer(200, "ignored: not a new /bot comment on an issue", *_named_in(payload))
        command = dataclasses.replace(command, delivery=headers.get("x-github-delivery", ""))
        known = self.workers.repository_id
        if command.repo.lower() != self.repository.lower() or known not in (None, command.repo_id):
            served = f"this server serves {self.repository}" + ("" if known is None else f", id {known}")
            reason = f"repository id {command.repo_id}: {served}"
            text = f"ignored: this server serves {self.repository}"
            return Answer(200, text, command.repo, command.author, reason)
        added = await asyncio.get_running_loop().run_in_executor(None, self.workers.deliveries.add, command)
        if not added:
            return Answer(200, "ignored: this comment was already handled", command.repo, command.author)
        return Answer(202, "accepted", command.repo, command.author, f"queued for #{command.issue}")

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        answer = await self._answer(request)
        log_delivery(
            answer.outcome,
            answer.reason or answer.text.removeprefix("ignored: "),
            delivery=request.headers.get("X-GitHub-Delivery", ""),
            repo=answer.repo,
            user=answer.user,
            event=request.headers.get("X-GitHub-Event", ""),
            bug=answer.bug,
        )
        response = web.Response(
            status=answer.status, text=answer.text + "\n", headers={"Connection": "close"}
        )
        response.force_close()
        return response

    async def _answer(self, request: web.BaseRequest) -> Answer:
        if request.path != WEBHOOK_PATH:
            return Answer(404, "not found")
        if request.method != "POST":
            return Answer(405, "POST the delivery")
        if not request.headers.get("X-Hub-Signature-256"):
            return Answer(401, "invalid or missing X-Hub-Signature-256")
        declared = request.headers.get("Content-Length")
        if request.headers.get("Transfer-Encoding") or declared is None:
            return Answer(411, "send the body with a Content-Length")
        declared = declared.strip()
        if not (declared.isascii() and declared.isdigit() and len(declared) <= 12):
            return Answer(400, "Content-Length is not a byte count")
        if int(declared) > self.max_body_bytes:
            return Answer(413, "payload too large")
        assert self._connections is not None
        opened = self._connections.opened.get(request.protocol, time.monotonic())
        remaining = max(opened + self.request_timeout - time.monotonic(), 0.001)
        try:
            body = await asyncio.wait_for(request.content.readexactly(int(declared)), remaining)
        except asyncio.IncompleteReadError:
            return Answer(400, "the body is shorter than its Content-Length")
        except TimeoutError:
            return Answer(408, "the request took too long")
        try:
            return await self.receive(request.headers, body)
        except Exception as error:  # a bug: its traceback goes with the delivery's line
            return Answer(500, f"error: {type(error).__name__}", bug=error)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        if self.workers.stopping.is_set():  # shut down before the loop was there to tell
            self._stopped.set()
        self._connections = server = _Connections(
            self._handle,
            max_connections=self.max_connections,
            keepalive_timeout=self.request_timeout,  # starts with the connection: the deadline for headers
            lingering_time=0,
            access_log=None,
            logger=_ParserRefusals(logging.getLogger("aiohttp.server")),
        )
        runner = web.ServerRunner(server, shutdown_timeout=1.0, handle_signals=False)
        await runner.setup()
        await web.SockSite(runner, self._socket).start()
        self._started.set()
        try:
            await self._stopped.wait()
        finally:
            await runner.cleanup()

    def serve_forever(self) -> None:
        """Serve (HTTP on its own thread) and run the accepted commands on this thread, until :meth:`shutdown`
        or an interrupt."""
        self._http = threading.Thread(target=asyncio.run, args=(self._serve(),), name="bot-http", daemon=True)
        self._http.start()
        self._started.wait(30)
        self.workers.start()
        try:
            self.workers.run_forever()
        finally:
            self.shutdown()
            self._http.join(5)

    def shutdown(self) -> None:
        """Stop taking connections and work (from any thread); a run in progress finishes."""
        self.workers.stop()
        if self._loop is not None and self._stopped is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed already
                self._loop.call_soon_threadsafe(self._stopped.set)


def _named_in(payload: object) -> tuple[str, str]:
    """The repository and sender an event names, as far as it names them with strings (for the log)."""
    repository = payload.get("repository") if isinstance(payload, dict) else None
    sender = payload.get("sender") if isinstance(payload, dict) else None
    name = repository.get("full_name") if isinstance(repository, dict) else None
    login = sender.get("login") if isinstance(sender, dict) else None
    return (name if isinstance(name, str) else ""), (login if isinstance(login, str) else "")


def github_trackers() -> TrackerFactory:
    """:meth:`GitHubTracker.from_env` for each check, asking the API who the bot is only the first time."""
    from bot.trackers.github import GitHubTracker

    learnt: dict[str, str] = {}

    def tracker_for(repository: str) -> Tracker:
        tracker = GitHubTracker.from_env(repository, {**os.environ, **learnt})
        learnt.setdefault("PERFBOT_LOGIN", tracker.bot_login)
        return tracker

    return tracker_for


def make_server(
    host: str,
    port: int,
    secret: str,
    runner: Runner,
    *,
    repository: str,
    tracker_factory: TrackerFactory | None = None,
    state_dir: str | Path | None = None,
    checkers: int = CHECKERS,
    retry_delay: float | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_connections: int = MAX_CONNECTIONS,
    request_timeout: float = REQUEST_TIMEOUT_S,
) -> WebhookServer:
    """A :class:`WebhookServer` for ``repository`` with its queue in ``state_dir`` (default:
    :func:`default_state_dir`) and its :class:`Workers`; trackers default to :func:`github_trackers`; the
    limits are :class:`WebhookServer`'s."""
    state = Path(state_dir) if state_dir is not None else default_state_dir()
    deliveries = DeliveryQueue(state) if retry_delay is None else DeliveryQueue(state, retry_delay)
    workers = Workers(deliveries, Dispatcher(runner, state), tracker_factory or github_trackers(), checkers)
    return WebhookServer(
        host,
        port,
        secret,
        workers,
        repository,
        max_body_bytes=max_body_bytes,
        max_connections=max_connections,
        request_timeout=request_timeout,
    )


class ServerOptions(TypedDict, total=False):
    """:func:`make_server`'s keywords besides the repository."""

    tracker_factory: TrackerFactory | None
    state_dir: str | Path | None
    checkers: int
    retry_delay: float | None
    max_body_bytes: int
    max_connections: int
    request_timeout: float


def serve(
    host: str, port: int, secret: str, runner: Runner, *, repository: str, **options: Unpack[ServerOptions]
) -> None:
    """Run the webhook server for ``repository`` until SIGTERM or Ctrl-C; ``options`` as for
    :func:`make_server`."""
    server = make_server(host, port, secret, runner, repository=repository, **options)

    def stop(signum: int, _frame: object) -> None:
        log.info("stopping on signal %s", signum)
        server.shutdown()
        deadline = threading.Timer(STOP_DEADLINE_S, _exit_late)
        deadline.daemon = True
        deadline.start()
        if server.workers.in_runner:
            raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("listening on http://%s:%s%s for %s", *server.address, WEBHOOK_PATH, server.repository)
    server.serve_forever()
    log.info("stopped; %s", server.workers.deliveries.states())


def _exit_late() -> None:
    """The run did not stop in time: exit anyway; the queue still holds it, and the next start resumes it."""
    log.error("the run did not stop within %s s; exiting, the next start resumes it", STOP_DEADLINE_S)
    logging.shutdown()
    os._exit(1)
