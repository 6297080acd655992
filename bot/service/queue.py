"""The durable delivery queue of ``bot serve``, and the workers that work it off.

Every accepted delivery is committed to SQLite (``deliveries.sqlite3`` in the bot's state directory) before the
server answers 202, keyed by what the signature covers (``<repository id>/<comment id>/created``), so the key
that drops replays is the same row that carries the work. A delivery goes ``queued`` → ``checking`` → ``ready``
→ ``running`` → ``done``; one whose check met an error of GitHub's API or the network is tried again after a
delay and ends ``failed`` after :data:`MAX_ATTEMPTS`, one whose check hit a bug ends ``failed`` at once (its
traceback in the log); GitHub's redelivery of a failed one queues it again. A restart puts every unfinished
delivery back to ``queued``: nothing accepted is lost, and a command that never started runs once.

:class:`Workers` checks ``checkers`` deliveries at once (a permission API that answers slowly holds one thread,
not the others), each sender's first waiting delivery before anyone's second (a flood waits behind itself), and
runs the checked commands one at a time on the thread that calls :meth:`Workers.run_forever`: the server serves
one repository, whose checkout every run shares.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path

from bot.service.delivery_log import Outcome, describe, is_expected, log_command
from bot.service.dispatch import Accepted, CommandRequest, CommentCommand, Dispatcher
from bot.trackers.base import Tracker

log = logging.getLogger(__name__)

DATABASE = "deliveries.sqlite3"
CHECKERS = 8
MAX_ATTEMPTS = 3
RETRY_DELAY_S = 5.0  # doubled per attempt
CHECK_JOIN_S = 30.0  # how long a stopping server waits for a permission check in progress

TrackerFactory = Callable[[str], Tracker]


class State(StrEnum):
    """Where a delivery is on its way."""

    QUEUED = "queued"
    CHECKING = "checking"
    READY = "ready"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


_UNFINISHED = (State.CHECKING, State.READY, State.RUNNING)


class DeliveryQueue:
    """Accepted deliveries in SQLite; safe to use from several threads."""

    def __init__(
        self, state_dir: str | Path, retry_delay: float = RETRY_DELAY_S, max_attempts: int = MAX_ATTEMPTS
    ) -> None:
        self.path = Path(state_dir) / DATABASE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.retry_delay = retry_delay
        self.max_attempts = max_attempts
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a 202 promises the delivery survives a power cut too
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS deliveries ("
            " seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, command TEXT NOT NULL,"
            " author TEXT NOT NULL, turn INTEGER NOT NULL, state TEXT NOT NULL,"
            " attempts INTEGER NOT NULL DEFAULT 0, not_before REAL NOT NULL DEFAULT 0,"
            " accepted REAL NOT NULL, updated REAL NOT NULL)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS waiting ON deliveries (state, turn, seq)")
        marks = ",".join("?" * len(_UNFINISHED))
        self.resumed = self._db.execute(
            f"UPDATE deliveries SET state = ?, updated = ? WHERE state IN ({marks})",
            (State.QUEUED, time.time(), *_UNFINISHED),
        ).rowcount
        if self.resumed:
            log.info("resuming %s deliveries a stopped server had not finished", self.resumed)

    def add(self, command: CommentCommand) -> bool:
        """Commit ``command`` as queued; False when its comment is queued or was handled already."""
        now, author = time.time(), command.author.lower()
        with self._lock:
            (turn,) = self._db.execute(
                "SELECT count(*) FROM deliveries WHERE author = ? AND state IN (?, ?)",
                (author, State.QUEUED, State.CHECKING),
            ).fetchone()
            added = self._db.execute(
                "INSERT INTO deliveries (key, command, author, turn, state, accepted, updated)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET command = excluded.command,"
                " state = excluded.state, attempts = 0, not_before = 0, updated = excluded.updated"
                " WHERE deliveries.state = ?",
                (
                    command.key,
                    json.dumps(asdict(command)),
                    author,
                    turn,
                    State.QUEUED,
                    now,
                    now,
                    State.FAILED,
                ),
            ).rowcount
            if added:
                self._arrived.notify()
        return added == 1

    def take(self, wait: float = 0.0) -> CommentCommand | None:
        """The next queued delivery, now ``checking`` (each sender's first before anyone's second); None when
        none is due within ``wait`` seconds."""
        deadline = time.monotonic() + wait
        with self._lock:
            while True:
                now = time.time()
                row = self._db.execute(
                    "SELECT seq, command FROM deliveries WHERE state = ? AND not_before <= ?"
                    " ORDER BY turn, seq LIMIT 1",
                    (State.QUEUED, now),
                ).fetchone()
                if row is not None:
                    self._db.execute(
                        "UPDATE deliveries SET state = ?, attempts = attempts + 1, updated = ? WHERE seq = ?",
                        (State.CHECKING, now, row[0]),
                    )
                    return CommentCommand(**json.loads(row[1]))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._arrived.wait(min(remaining, 1.0))  # 1 s: deliveries waiting to be tried again come due

    def mark(self, key: str, state: State) -> None:
        """Move the delivery ``key`` to ``state``."""
        with self._lock:
            self._db.execute(
                "UPDATE deliveries SET state = ?, updated = ? WHERE key = ?", (state, time.time(), key)
            )
            if state is State.QUEUED:
                self._arrived.notify()

    def retry(self, key: str) -> State:
        """A check of ``key`` failed: queue it again after a delay, or give up after ``max_attempts``."""
        with self._lock:
            (attempts,) = self._db.execute("SELECT attempts FROM deliveries WHERE key = ?", (key,)).fetchone()
            state = State.QUEUED if attempts < self.max_attempts else State.FAILED
            not_before = time.time() + self.retry_delay * 2 ** (attempts - 1)
            self._db.execute(
                "UPDATE deliveries SET state = ?, not_before = ?, updated = ? WHERE key = ?",
                (state, not_before, time.time(), key),
            )
        return state

    def states(self) -> dict[str, int]:
        """How many deliveries are in each state."""
        with self._lock:
            return dict(self._db.execute("SELECT state, count(*) FROM deliveries GROUP BY state").fetchall())


class Workers:
    """Checks queued deliveries on ``checkers`` threads and runs the accepted commands one at a time."""

    def __init__(
        self,
        deliveries: DeliveryQueue,
        dispatcher: Dispatcher,
        tracker_factory: TrackerFactory,
        checkers: int = CHECKERS,
    ) -> None:
        self.deliveries = deliveries
        self.dispatcher = dispatcher
        self.tracker_factory = tracker_factory
        self.stopping = threading.Event()
        self.repository_id: int | None = None  # learnt from the first check
        self.in_runner = False  # a command's own code is running: an interrupt now stops it cleanly
        self._runner = dispatcher.runner
        dispatcher.runner = self._run_command
        self._ready: queue.Queue[tuple[str, Accepted]] = queue.Queue()
        self._checkers = [
            threading.Thread(target=self._check_loop, name=f"bot-check-{n}", daemon=True)
            for n in range(checkers)
        ]

    def start(self) -> None:
        """Start the checking threads, and load the command parser meanwhile (the first check needs it)."""
        threading.Thread(target=self._load_parser, name="bot-parser", daemon=True).start()
        for thread in self._checkers:
            thread.start()

    def stop(self) -> None:
        """Take no more work: a check in progress finishes or goes back to the queue, the run loop ends."""
        self.stopping.set()

    def run_forever(self) -> None:
        """Run checked commands on this thread until :meth:`stop`. A run interrupted by ``KeyboardInterrupt``
        (SIGTERM, Ctrl-C) goes back to the queue and the next start resumes it; what was checked but not run
        gives its issue lock back and is queued again. It returns once the checking threads have stopped, so
        that nothing of this server changes a delivery afterwards."""
        try:
            while not self.stopping.is_set():
                try:
                    key, accepted = self._ready.get(timeout=0.2)
                except queue.Empty:
                    continue
                self.deliveries.mark(key, State.RUNNING)
                try:
                    self.dispatcher.run(accepted)
                except KeyboardInterrupt:
                    self.deliveries.mark(key, State.QUEUED)
                    log_command(accepted.command, Outcome.REQUEUED, "interrupted; the next start resumes it")
                    return
                self.deliveries.mark(key, State.DONE)
        finally:
            self.stopping.set()
            for thread in self._checkers:  # a check in progress puts its delivery back before this returns
                if thread.is_alive():
                    thread.join(CHECK_JOIN_S)
            while not self._ready.empty():
                key, accepted = self._ready.get_nowait()
                accepted.lock.release()
                self.deliveries.mark(key, State.QUEUED)
                log_command(accepted.command, Outcome.REQUEUED, "stopped before it ran")

    def _load_parser(self) -> None:
        started = time.monotonic()
        self.dispatcher.parser  # noqa: B018 - built on first use
        log.info("command parser loaded in %.1f s", time.monotonic() - started)

    def _run_command(self, request: CommandRequest) -> int:
        self.in_runner = True
        try:
            return self._runner(request)
        finally:
            self.in_runner = False

    def _check_loop(self) -> None:
        while not self.stopping.is_set():
            command = self.deliveries.take(wait=0.5)
            if command is not None:
                self._check(command)

    def _check(self, command: CommentCommand) -> None:
        try:
            tracker = self.tracker_factory(command.repo)
            accepted = self.dispatcher.intake(command, tracker, self.repository_id)
            if self.repository_id is None:
                self.repository_id = tracker.repository_id
        except Exception as error:
            self._check_failed(command, error)
            return
        if accepted is None:
            self.deliveries.mark(command.key, State.DONE)
        elif self.stopping.is_set():
            accepted.lock.release()
            self.deliveries.mark(command.key, State.QUEUED)
            log_command(command, Outcome.REQUEUED, "the server is stopping")
        else:
            self.deliveries.mark(command.key, State.READY)
            self._ready.put((command.key, accepted))

    def _check_failed(self, command: CommentCommand, error: Exception) -> None:
        """Queue a check that met GitHub's API or the network failing again, up to the queue's limit; a bug
        fails at once, with its traceback: the same bug on a retry helps nobody, and GitHub's redelivery can
        still queue the comment again."""
        if not is_expected(error):
            self.deliveries.mark(command.key, State.FAILED)
            log_command(command, Outcome.FAILED, f"a bug in the check: {describe(error)}", bug=error)
        elif self.deliveries.retry(command.key) is State.QUEUED:
            log_command(command, Outcome.REQUEUED, f"the check failed: {describe(error)}; trying again later")
        else:
            tries = self.deliveries.max_attempts
            log_command(
                command, Outcome.FAILED, f"the check failed {tries} times, the last: {describe(error)}"
            )
