"""``bot serve``: the webhook server. Verifies GitHub's signature, drops replays, answers at once, works
later.

``POST /webhook`` answers 401 to an unsigned or mis-signed request (before reading a body that carries no
signature), 411/400/413 to a missing, malformed or too large ``Content-Length``, 400 to a signed body that is
not a well-formed event, 200 ``ignored`` to an event that is not a new ``/bot`` comment on the configured
repository or whose comment was already handled, and 202 ``accepted`` to the rest, which a background worker
then checks (:meth:`bot.service.dispatch.Dispatcher.intake`) and runs, ``parallel_runs`` at a time; the issue lock keeps
it to one run per issue.

Replays are recognised by what the signature covers, the comment (``repository.id``, ``comment.id``,
``action``), never by the unsigned ``X-GitHub-Delivery`` header: the same signed body under a new delivery id
is ignored, while GitHub's redelivery of an event that was not handled yet runs.

Every connection has ``request_timeout`` seconds, in all, to send its request, and at most
``max_connections`` are served at once; the ones beyond are answered 503 and closed without a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import logging
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bot.errors import BadInput
from bot.redact import install_log_redaction, redact, register_secret
from bot.service.dispatch import (
    Accepted,
    CommentCommand,
    Dispatcher,
    MalformedEvent,
    Runner,
    command_from_event,
    default_state_dir,
)
from bot.trackers.base import Tracker

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/webhook"
# An issue_comment payload holds two bodies of at most 65,536 characters and some metadata: far below this.
MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_CONNECTIONS = 32
REQUEST_TIMEOUT_S = 10.0  # GitHub sends a delivery at once, and gives up on it after 10 s
SIGNATURE_PREFIX = "sha256="
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

TrackerFactory = Callable[[str], Tracker]


def verify_signature(secret: str | bytes, body: bytes, header: str | None) -> bool:
    """True when ``header`` (``X-Hub-Signature-256``) is the HMAC-SHA256 of ``body`` under ``secret``."""
    if not secret or not header or not header.startswith(SIGNATURE_PREFIX):
        return False
    key = secret.encode() if isinstance(secret, str) else secret
    expected = SIGNATURE_PREFIX + hmac.new(key, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.encode())


class HandledLog:
    """Which comments were handled, keyed ``<repository id>/<comment id>/<action>`` (all covered by the
    signature); the last ``capacity`` keys are kept in a small JSON file so a restart remembers them.

    A key is claimed when its delivery is accepted and recorded once the worker has handled it; a claim
    whose handling failed is released, so a redelivery of that event runs.
    """

    def __init__(self, path: str | Path, capacity: int = 10_000) -> None:
        self.path = Path(path)
        self.capacity = capacity
        self._lock = threading.Lock()
        try:
            self._keys: list[str] = json.loads(self.path.read_text())[-capacity:]
        except FileNotFoundError:
            self._keys = []
        self._handled = set(self._keys)
        self._pending: set[str] = set()

    def claim(self, key: str) -> bool:
        """Take ``key`` for handling; False when it was handled already or is being handled."""
        with self._lock:
            if key in self._handled or key in self._pending:
                return False
            self._pending.add(key)
            return True

    def done(self, key: str) -> None:
        """Record ``key`` as handled, on disk too."""
        with self._lock:
            self._pending.discard(key)
            if key in self._handled:
                return
            self._keys.append(key)
            self._handled.add(key)
            if len(self._keys) > self.capacity:
                self._handled.discard(self._keys.pop(0))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            scratch = self.path.with_suffix(".tmp")
            scratch.write_text(json.dumps(self._keys))
            os.replace(scratch, self.path)

    def release(self, key: str) -> None:
        """Give ``key`` up unhandled: a later delivery of the same event may run."""
        with self._lock:
            self._pending.discard(key)


class Worker:
    """Checks accepted events one by one, then runs them on ``parallel_runs`` threads."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        tracker_factory: TrackerFactory,
        handled: HandledLog,
        parallel_runs: int = 1,
    ) -> None:
        self.dispatcher = dispatcher
        self.tracker_factory = tracker_factory
        self.handled = handled
        self._incoming: queue.Queue[CommentCommand | None] = queue.Queue()
        self._runs: queue.Queue[Accepted | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._intake_loop, name="bot-intake", daemon=True)]
        self._threads += [
            threading.Thread(target=self._run_loop, name=f"bot-run-{n}", daemon=True)
            for n in range(parallel_runs)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, command: CommentCommand) -> None:
        self._incoming.put(command)

    def stop(self) -> None:
        """Finish what was accepted, then stop the threads."""
        self._incoming.put(None)
        for thread in self._threads:
            thread.join()

    def _intake_loop(self) -> None:
        while (command := self._incoming.get()) is not None:
            try:
                accepted = self.dispatcher.intake(command, self.tracker_factory(command.repo))
            except Exception:
                log.exception("could not take %s on %s#%s", command.line, command.repo, command.issue)
                self.handled.release(command.key)
                continue
            try:
                self.handled.done(command.key)
            except OSError:
                log.exception("could not record comment %s as handled", command.key)
            if accepted is not None:
                self._runs.put(accepted)
        for _ in self._threads[1:]:
            self._runs.put(None)

    def _run_loop(self) -> None:
        while (accepted := self._runs.get()) is not None:
            self.dispatcher.run(accepted)


class _BoundedHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that serves at most ``max_connections`` connections at once."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type, max_connections: int) -> None:
        self.max_connections = max_connections
        self._active: set[socket.socket] = set()
        self._active_lock = threading.Lock()
        super().__init__(address, handler)

    def verify_request(self, request: socket.socket, client_address: tuple[str, int]) -> bool:
        """Take the connection when there is room; else answer 503 (without a thread) and close it."""
        with self._active_lock:
            if len(self._active) < self.max_connections:
                self._active.add(request)
                return True
        log.warning("%s: %s connections open already, answered 503", client_address[0], self.max_connections)
        with contextlib.suppress(OSError):
            request.setblocking(False)
            request.send(_BUSY)
        return False

    def shutdown_request(self, request: socket.socket) -> None:
        with self._active_lock:
            self._active.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: socket.socket, client_address: tuple[str, int]) -> None:
        """A client that went away mid-request is routine here: one log line, no traceback on stderr."""
        log.info("%s: connection ended: %s", client_address[0], redact(sys.exc_info()[1]))


class _DeadlineReader(io.RawIOBase):
    """A socket's input that ends at ``deadline`` (raising TimeoutError) or after ``budget`` bytes (EOF)."""

    def __init__(self, sock: socket.socket, deadline: float, budget: int) -> None:
        self._sock, self._deadline, self._budget = sock, deadline, budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request took too long")
        if self._budget <= 0:
            return 0
        self._sock.settimeout(remaining)
        with memoryview(buffer) as view:
            count = self._sock.recv_into(view[: min(len(view), self._budget)])
        self._budget -= count
        return count


class WebhookServer:
    """The HTTP side of ``bot serve`` on ``host:port`` (0 picks a free port), for one ``repository``."""

    def __init__(
        self,
        host: str,
        port: int,
        secret: str,
        worker: Worker,
        repository: str,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        if not secret:
            raise BadInput("no webhook secret: set PERFBOT_WEBHOOK_SECRET to the secret configured on GitHub")
        if not repository:
            raise BadInput("no repository: set PERFBOT_REPOSITORY=owner/name (or serve from a clone of it)")
        register_secret(secret)
        install_log_redaction()
        self.worker = worker
        self.repository = repository
        self.max_body_bytes = max_body_bytes
        self.request_timeout = request_timeout
        self._secret = secret
        self.httpd = _BoundedHTTPServer((host, port), _handler_for(self), max_connections)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def receive(self, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        """Decide about one delivery: (HTTP status, short answer)."""
        if not verify_signature(self._secret, body, headers.get("x-hub-signature-256")):
            return 401, "invalid or missing X-Hub-Signature-256"
        event = headers.get("x-github-event", "")
        if event == "ping":
            return 200, "pong"
        if event != "issue_comment":
            return 200, f"ignored: {event or 'no'} event"
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            return 400, "malformed event: the body is not JSON"
        try:
            command = command_from_event(payload)
        except MalformedEvent as error:
            return 400, f"malformed event: {error}"
        if command is None:
            return 200, "ignored: not a new /bot comment on an issue"
        if command.repo.lower() != self.repository.lower():
            log.warning("ignored a comment on %s: this server serves %s", command.repo, self.repository)
            return 200, f"ignored: this server serves {self.repository}"
        if not self.worker.handled.claim(command.key):
            return 200, "ignored: this comment was already handled"
        log.info("accepted %s from %s on %s#%s", command.line, command.author, command.repo, command.issue)
        self.worker.submit(command)
        return 202, "accepted"

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until :meth:`shutdown`; then finish the accepted work."""
        self.worker.start()
        try:
            self.httpd.serve_forever(poll_interval)
        finally:
            self.httpd.server_close()
            self.worker.stop()

    def shutdown(self) -> None:
        """Stop serving (from another thread); accepted work still finishes."""
        self.httpd.shutdown()


def make_server(
    host: str,
    port: int,
    secret: str,
    runner: Runner,
    *,
    repository: str,
    tracker_factory: TrackerFactory | None = None,
    state_dir: str | Path | None = None,
    parallel_runs: int = 1,
    **limits: float,
) -> WebhookServer:
    """A :class:`WebhookServer` for ``repository`` wired to a :class:`Dispatcher`; trackers default to
    ``GitHubTracker.from_env``; ``limits`` are :class:`WebhookServer`'s keywords."""
    if tracker_factory is None:
        from bot.trackers.github import GitHubTracker

        tracker_factory = GitHubTracker.from_env
    state = Path(state_dir) if state_dir is not None else default_state_dir()
    handled = HandledLog(state / "handled.json")
    worker = Worker(Dispatcher(runner, state), tracker_factory, handled, parallel_runs)
    return WebhookServer(host, port, secret, worker, repository, **limits)


def serve(host: str, port: int, secret: str, runner: Runner, **options: object) -> None:
    """Run the webhook server until interrupted; ``options`` as for :func:`make_server`."""
    server = make_server(host, port, secret, runner, **options)
    log.info("listening on http://%s:%s%s for %s", *server.address, WEBHOOK_PATH, server.repository)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopping")


def _handler_for(server: WebhookServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = server.request_timeout  # per read and write; the reader also keeps a deadline in all

        def setup(self) -> None:
            super().setup()
            self.rfile.close()
            deadline = time.monotonic() + server.request_timeout
            budget = MAX_HEADER_BYTES + server.max_body_bytes
            self.rfile = io.BufferedReader(_DeadlineReader(self.connection, deadline, budget))

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != WEBHOOK_PATH:
                return self._answer(404, "not found")
            if not self.headers.get("X-Hub-Signature-256"):
                return self._answer(401, "invalid or missing X-Hub-Signature-256")
            if self.headers.get("Transfer-Encoding") or self.headers.get("Content-Length") is None:
                return self._answer(411, "send the body with a Content-Length")
            declared = self.headers["Content-Length"].strip()
            if not (declared.isascii() and declared.isdigit() and len(declared) <= 12):
                return self._answer(400, "Content-Length is not a byte count")
            if int(declared) > server.max_body_bytes:
                return self._answer(413, "payload too large")
            body = self.rfile.read(int(declared))
            if len(body) != int(declared):
                return self._answer(400, "the body is shorter than its Content-Length")
            headers = {key.lower(): value for key, value in self.headers.items()}
            try:
                status, text = server.receive(headers, body)
            except Exception as error:
                log.exception("webhook delivery failed")
                status, text = 500, f"error: {type(error).__name__}"
            self._answer(status, text)

        def _answer(self, status: int, text: str) -> None:
            data = (redact(text) + "\n").encode()
            self.close_connection = True
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            log.info("%s %s", self.address_string(), format % args)

    return Handler
