"""``bot serve``: the webhook server. Verifies GitHub's signature, drops replays, answers at once, works later.

``POST /webhook`` answers 401 to an unsigned or mis-signed request, 200 ``ignored`` to a replayed delivery or
an event that is not a new ``/bot`` comment, and 202 ``accepted`` to the rest, which a background worker then
checks (:meth:`bot.trigger.Dispatcher.intake`) and runs, ``parallel_runs`` at a time; the issue lock keeps it
to one run per issue.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import queue
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bot.errors import BadInput
from bot.redact import install_log_redaction, redact, register_secret
from bot.tracker import Tracker
from bot.trigger import Accepted, CommentCommand, Dispatcher, Runner, command_from_event, default_state_dir

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/webhook"
MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB
SIGNATURE_PREFIX = "sha256="

TrackerFactory = Callable[[str], Tracker]


def verify_signature(secret: str | bytes, body: bytes, header: str | None) -> bool:
    """True when ``header`` (``X-Hub-Signature-256``) is the HMAC-SHA256 of ``body`` under ``secret``."""
    if not secret or not header or not header.startswith(SIGNATURE_PREFIX):
        return False
    key = secret.encode() if isinstance(secret, str) else secret
    expected = SIGNATURE_PREFIX + hmac.new(key, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.encode())


class DeliveryLog:
    """The last ``capacity`` ``X-GitHub-Delivery`` ids, kept in a small JSON file so a restart remembers them."""

    def __init__(self, path: str | Path, capacity: int = 2000) -> None:
        self.path = Path(path)
        self.capacity = capacity
        self._lock = threading.Lock()
        try:
            self._ids: list[str] = json.loads(self.path.read_text())[-capacity:]
        except FileNotFoundError:
            self._ids = []
        self._seen = set(self._ids)

    def first_time(self, delivery: str) -> bool:
        """Record ``delivery``; False when it had been seen before (a replay)."""
        with self._lock:
            if delivery in self._seen:
                return False
            self._ids.append(delivery)
            self._seen.add(delivery)
            if len(self._ids) > self.capacity:
                self._seen.discard(self._ids.pop(0))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            scratch = self.path.with_suffix(".tmp")
            scratch.write_text(json.dumps(self._ids))
            os.replace(scratch, self.path)
            return True


class Worker:
    """Checks accepted events one by one, then runs them on ``parallel_runs`` threads."""

    def __init__(
        self, dispatcher: Dispatcher, tracker_factory: TrackerFactory, parallel_runs: int = 1
    ) -> None:
        self.dispatcher = dispatcher
        self.tracker_factory = tracker_factory
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
                continue
            if accepted is not None:
                self._runs.put(accepted)
        for _ in self._threads[1:]:
            self._runs.put(None)

    def _run_loop(self) -> None:
        while (accepted := self._runs.get()) is not None:
            self.dispatcher.run(accepted)


class WebhookServer:
    """The HTTP side of ``bot serve``: ``ThreadingHTTPServer`` on ``host:port`` (0 picks a free port)."""

    def __init__(
        self,
        host: str,
        port: int,
        secret: str,
        worker: Worker,
        deliveries: DeliveryLog,
    ) -> None:
        if not secret:
            raise BadInput("no webhook secret: set PERFBOT_WEBHOOK_SECRET to the secret configured on GitHub")
        register_secret(secret)
        install_log_redaction()
        self.worker = worker
        self.deliveries = deliveries
        self._secret = secret
        self.httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self.httpd.daemon_threads = True

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def receive(self, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        """Decide about one delivery: (HTTP status, short answer)."""
        if not verify_signature(self._secret, body, headers.get("x-hub-signature-256")):
            return 401, "invalid or missing X-Hub-Signature-256"
        delivery = headers.get("x-github-delivery", "")
        if not delivery:
            return 400, "missing X-GitHub-Delivery"
        if not self.deliveries.first_time(delivery):
            return 200, "ignored: delivery already received"
        event = headers.get("x-github-event", "")
        if event == "ping":
            return 200, "pong"
        try:
            payload = json.loads(body)
        except ValueError:
            return 400, "the body is not JSON"
        command = (
            command_from_event(payload) if event == "issue_comment" and isinstance(payload, dict) else None
        )
        if command is None:
            return 200, "ignored: not a new /bot comment on an issue"
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
    tracker_factory: TrackerFactory | None = None,
    state_dir: str | Path | None = None,
    parallel_runs: int = 1,
) -> WebhookServer:
    """A :class:`WebhookServer` wired to a :class:`Dispatcher`; trackers default to ``GitHubTracker.from_env``."""
    if tracker_factory is None:
        from bot.github_tracker import GitHubTracker

        tracker_factory = GitHubTracker.from_env
    state = Path(state_dir) if state_dir is not None else default_state_dir()
    worker = Worker(Dispatcher(runner, state), tracker_factory, parallel_runs)
    return WebhookServer(host, port, secret, worker, DeliveryLog(state / "deliveries.json"))


def serve(host: str, port: int, secret: str, runner: Runner, **options: object) -> None:
    """Run the webhook server until interrupted; ``options`` as for :func:`make_server`."""
    server = make_server(host, port, secret, runner, **options)
    log.info("listening on http://%s:%s%s", *server.address, WEBHOOK_PATH)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopping")


def _handler_for(server: WebhookServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != WEBHOOK_PATH:
                return self._answer(404, "not found")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                return self._answer(413, "payload too large")
            body = self.rfile.read(length)
            headers = {key.lower(): value for key, value in self.headers.items()}
            try:
                status, text = server.receive(headers, body)
            except Exception as error:
                log.exception("webhook delivery failed")
                status, text = 500, f"error: {type(error).__name__}"
            self._answer(status, text)

        def _answer(self, status: int, text: str) -> None:
            data = (redact(text) + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            log.info("%s %s", self.address_string(), format % args)

    return Handler
