"""How busy the rest of the host is: the share of its CPUs that processes other than the benchmark kept busy.

Read from ``/proc`` (Linux): the whole machine's busy time from ``/proc/stat`` (everything but idle and I/O
wait, stolen time counted as busy), less the CPU time of the processes of one session (a benchmark job runs in
its own session, so its data-loader workers and ranks count as its own). Elsewhere nothing is known (None).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Reading:
    """Wall time, busy CPU seconds of the host, and CPU seconds of one session's processes, at one moment."""

    wall: float
    busy: float
    session: float


def read(session: int | None = None) -> Reading | None:
    """Now, for ``session`` (default: this process's); None where ``/proc`` cannot be read."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:9]]
        session = os.getsid(0) if session is None else session
    except (OSError, ValueError):
        return None
    busy = sum(fields) - fields[3] - fields[4]  # user nice system [idle iowait] irq softirq steal
    ours = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as stat:
                rest = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(rest[3]) == session:
            ours += sum(int(v) for v in rest[11:15])  # utime stime cutime cstime
    return Reading(time.perf_counter(), busy / tick, ours / tick)


def others_share(start: Reading | None, end: Reading | None) -> float | None:
    """The share of all the host's CPUs that processes outside the session used between two readings, in
    [0, 1]: the counters tick in hundredths of a second and a reading is not atomic, so over a short window
    the raw difference can fall outside that range."""
    return others_share_over([(start, end)])


def others_share_over(spans: Sequence[tuple[Reading | None, Reading | None]]) -> float | None:
    """:func:`others_share` over several spans of time together (the windows of a turn-taking run); None
    when there are none, or one of them could not be read."""
    others = wall = 0.0
    for start, end in spans:
        if start is None or end is None or end.wall <= start.wall:
            return None
        others += max(0.0, (end.busy - start.busy) - (end.session - start.session))
        wall += end.wall - start.wall
    if wall <= 0:
        return None
    return min(1.0, others / ((os.cpu_count() or 1) * wall))


def wait_until_quiet(below: float, limit_s: float, sample_s: float = 0.5) -> float:
    """Wait (up to ``limit_s``) until other processes keep at most ``below`` of the CPUs busy over a
    ``sample_s`` sample; returns the seconds waited. Returns at once where the load cannot be read."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        first = read()
        time.sleep(sample_s)
        share = others_share(first, read())
        if share is None or share <= below:
            break
    return time.monotonic() - started


class MeasuredSpans:
    """The spans of time a run measured (its measured steps, or each window of a turn-taking run), read as the
    share of the host that other processes kept busy over all of them together."""

    def __init__(self) -> None:
        self._start: Reading | None = None
        self._spans: list[tuple[Reading | None, Reading | None]] = []

    def open(self) -> None:
        """Start a span now."""
        self._start = read()

    def close(self) -> None:
        """End the open span now, if there is one."""
        if self._start is not None:
            self._spans.append((self._start, read()))
            self._start = None

    def others_share(self) -> float | None:
        """:func:`others_share_over` the closed spans."""
        return others_share_over(self._spans)
