"""Turns: the runs of one round live at once on one device and take turns measuring, in ABBA order.

A benchmark run pays its start-up (interpreter, imports, model load, compilation) before its first measured
step, and runs of one commit started at different times land on a machine in different states: on a GPU
machine identical programs measured 6–10% apart run to run, and whole rounds drifted together by 20%. With
turns, the runner starts every run of a round together (their start-ups overlap) and a :class:`TurnTaker`
lets exactly one of them run at a time:

- each run's first turn covers its warm-up steps; the warm-up turns go in the round's order, so no window is
  measured while another run still compiles. With ``warm_up_together`` the runs warm up (compile, capture
  graphs) at the same time instead, each asking for its first turn once warmed up, and their compilations
  overlap as their start-ups do;
- the first turn goes out only once every run of the round has asked for one (or ended), so no window, and
  no warm-up taken in turns, runs beside another run's loading or compiling;
- then each run measures ``windows`` windows of ``window_steps`` steps, one window per turn, in ABBA order
  (A B C, C B A, A B C, …): every commit is measured in every stretch of the round, early and late alike;
- a run that has measured its last window keeps the turn until it exits, so its saving and teardown do not
  overlap another run's window.

The measured process side is :class:`TurnClient`, made from the environment the runner sets
(:func:`client_from_environment`); the meter (:mod:`benchmarks.metrics`) calls it at step boundaries, after
synchronising the device, so no queued work of one run overlaps the next run's window. The wire protocol is
one line per message on a Unix socket: the client sends ``ready KEY`` when it wants the next turn (handing
back the one it holds), the taker answers ``go``. Only the runner seeing the process end hands its turn back
for good: a connection closes while the interpreter shuts down, and that teardown (freeing the model, joining
threads) would otherwise overlap the next run's window.

Measured on two H100s (benchmarks/results/journal.md, "Runs that take turns on one GPU"): a round of three runs took
1.1–1.8× less time than three runs one after another; the spread between rounds was not lower.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass

SOCKET_ENV = "PERFBOT_TURN_SOCKET"
KEY_ENV = "PERFBOT_TURN_KEY"
WINDOWS_ENV = "PERFBOT_TURN_WINDOWS"
WINDOW_STEPS_ENV = "PERFBOT_TURN_WINDOW_STEPS"
WARM_UP_TOGETHER_ENV = "PERFBOT_TURN_WARM_UP_TOGETHER"
_READY, _GO = "ready", "go"


@dataclass(frozen=True)
class TurnPlan:
    """How one run's steps fall into turns: its warm-up steps (in a turn of their own, or outside the turns when
    ``warm_up_together``), then ``windows`` windows of ``window_steps``."""

    warmup_steps: int
    windows: int
    window_steps: int
    warm_up_together: bool = False

    def __post_init__(self) -> None:
        if self.warmup_steps < 0 or self.windows < 1 or self.window_steps < 1:
            raise ValueError(f"not a turn plan: {self}")

    @property
    def measured_steps(self) -> int:
        """Steps measured in all: the windows' steps."""
        return self.windows * self.window_steps

    def turn_ends_after(self, steps_done: int) -> bool:
        """Whether the turn ends once ``steps_done`` steps have closed: the warm-up's last step, or a window's
        last step other than the final window's (that turn is kept to the end of the process)."""
        measured = steps_done - self.warmup_steps
        if measured < 0 or measured >= self.measured_steps:
            return False
        return measured % self.window_steps == 0 and (measured > 0 or self.warmup_steps > 0)

    @property
    def first_turn_at_start(self) -> bool:
        """Whether the run asks for its first turn before its first step (else once its warm-up is done)."""
        return not (self.warm_up_together and self.warmup_steps > 0)

    def done_after(self, steps_done: int) -> bool:
        """Whether ``steps_done`` closed steps complete the last window."""
        return steps_done >= self.warmup_steps + self.measured_steps


def window_steps_for(measured_steps: int, windows: int) -> int:
    """Steps per window so that ``windows`` windows measure at least ``measured_steps`` steps."""
    return max(1, -(-measured_steps // windows))


class TurnClient:
    """The measured process's end: :meth:`take` blocks until this run has the turn (handing back the turn it
    held). Not thread-safe; the meter calls it from the training thread."""

    def __init__(self, path: str, key: str, plan: TurnPlan):
        self.key, self.plan = key, plan
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.connect(path)
        self._lines = self._socket.makefile("r", encoding="utf-8")

    def take(self) -> None:
        """Ask for the next turn and wait until it comes."""
        self._socket.sendall(f"{_READY} {self.key}\n".encode())
        answer = self._lines.readline().strip()
        if answer != _GO:
            raise ConnectionError(f"turn taker answered {answer!r} instead of {_GO!r}")

    def close(self) -> None:
        """Close the connection (the turn stays held until the runner sees the process end)."""
        with contextlib.suppress(OSError):
            self._lines.close()
            self._socket.close()


def client_from_environment(warmup_steps: int) -> TurnClient | None:
    """The client the runner asked for through the ``PERFBOT_TURN_*`` variables, or None (a run of its own)."""
    path = os.environ.get(SOCKET_ENV)
    if not path:
        return None
    plan = TurnPlan(
        warmup_steps=warmup_steps,
        windows=int(os.environ[WINDOWS_ENV]),
        window_steps=int(os.environ[WINDOW_STEPS_ENV]),
        warm_up_together=os.environ.get(WARM_UP_TOGETHER_ENV) == "1",
    )
    return TurnClient(path, os.environ[KEY_ENV], plan)


def client_environment(path: str, key: str, plan: TurnPlan) -> dict[str, str]:
    """The variables that make the run under ``key`` a turn-taking one."""
    return {
        SOCKET_ENV: path,
        KEY_ENV: key,
        WINDOWS_ENV: str(plan.windows),
        WINDOW_STEPS_ENV: str(plan.window_steps),
        WARM_UP_TOGETHER_ENV: "1" if plan.warm_up_together else "0",
    }


class TurnTaker:
    """The runner's end: gives turns to the runs under ``keys`` in ABBA order, one at a time, until every run
    has ended. :meth:`ended` is called by the runner when a run's process exits, whether it ever connected or
    not, so a run that crashes while loading never holds the others up. Use as a context manager."""

    def __init__(self, path: str, keys: Sequence[str]):
        if len(set(keys)) != len(keys):
            raise ValueError(f"turn keys must differ: {list(keys)}")
        self.path, self.keys = path, list(keys)
        self._events: queue.Queue[tuple[str, socket.socket | None]] = queue.Queue()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._server.bind(path)
        except OSError as error:
            self._server.close()
            raise OSError(
                f"cannot open the socket the round's runs take turns through, {path} ({error}); a Unix socket's "
                "path holds at most 107 bytes: set TMPDIR to a shorter folder"
            ) from error
        self._server.listen(len(keys))
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._scheduler = threading.Thread(target=self._schedule, daemon=True)

    def __enter__(self) -> TurnTaker:
        self._acceptor.start()
        self._scheduler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for key in self.keys:
            self.ended(key)
        self._scheduler.join()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def ended(self, key: str) -> None:
        """The run under ``key`` has ended: it takes no more turns, and the one it holds is handed back."""
        self._events.put((key, None))

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:  # the server was closed
                return
            threading.Thread(target=self._read, args=(connection,), daemon=True).start()

    def _read(self, connection: socket.socket) -> None:
        key = None
        with connection, connection.makefile("r", encoding="utf-8") as lines:
            for line in lines:
                word, _, named = line.strip().partition(" ")
                if word != _READY or named not in self.keys or key not in (None, named):
                    break  # not a client of this round: drop it
                key = named
                self._events.put((key, connection))

    def _schedule(self) -> None:
        waiting: dict[str, socket.socket] = {}
        ended: set[str] = set()
        holder: str | None = None

        def absorb(key: str, connection: socket.socket | None) -> None:
            nonlocal holder
            if connection is None:
                ended.add(key)
                waiting.pop(key, None)
            elif key not in ended:
                waiting[key] = connection
            if holder == key:
                holder = None

        while not all(key in waiting or key in ended for key in self.keys):
            absorb(*self._events.get())  # every run has loaded (and warmed up, when together) or ended
        forward = True
        while len(ended) < len(self.keys):
            for key in self.keys if forward else reversed(self.keys):
                while key not in ended and key not in waiting:
                    absorb(*self._events.get())
                if key in ended:
                    continue
                connection = waiting.pop(key)
                holder = key
                try:
                    connection.sendall(f"{_GO}\n".encode())
                except OSError:
                    absorb(key, None)
                    continue
                while holder == key:
                    absorb(*self._events.get())
            forward = not forward
