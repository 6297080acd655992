"""How fast the ``bot`` command line answers on the bundled example repository (``examples/trainer_repo``).

    python -m benchmarks.cli_speed [--repeats N] [--warmup N] [--json]

The example is committed into a temporary git repository; each command runs there as a subprocess
(``python -m bot.cli ...``), ``--warmup`` times untimed and ``--repeats`` times timed, ``bot apply`` in a fresh
copy of that repository each time. The table gives the median, min and max wall time beside the target, and
the median CPU time (user + system) of the command's processes: on a shared machine, wall time well above it
means the command waited for a core. Exit code 0 when every command succeeded and met its target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "trainer_repo"
EXAMPLE_IGNORE = ("__pycache__", "outputs", ".bot", ".cache")  # leftovers of running the example
IDENTITY = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


@dataclass(frozen=True)
class Command:
    """A ``bot`` command line, its target wall time, and whether it writes to the repository."""

    args: tuple[str, ...]
    target_s: float
    writes: bool = False

    @property
    def label(self) -> str:
        return " ".join(("bot", *self.args))


COMMANDS = (
    Command(("--help",), 0.3),
    Command(("list",), 0.5),
    Command(("scan", "."), 3.0),
    Command(("apply", "--tier", "1"), 3.0, writes=True),
    Command(("apply", "--tier", "2"), 5.0, writes=True),
)


@dataclass
class Timing:
    """One command's timed runs (seconds) and exit codes."""

    command: str
    target_s: float
    runs: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)
    error: str = ""

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs)

    @property
    def passed(self) -> bool:
        return not any(self.exit_codes) and self.median_s < self.target_s


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, env={**os.environ, **IDENTITY}, check=True, capture_output=True)


def committed_example(destination: Path) -> Path:
    """A copy of the example repository at ``destination``, committed as one commit on ``main``."""
    shutil.copytree(EXAMPLE, destination, ignore=shutil.ignore_patterns(*EXAMPLE_IGNORE))
    _git(destination, "init", "-q", "--initial-branch", "main")
    _git(destination, "add", "-A")
    _git(destination, "commit", "-qm", "example trainer")
    return destination


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(argv: list[str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess]:
    """``python <argv>`` in ``cwd`` with this checkout first on PYTHONPATH: its wall seconds, the CPU seconds
    it used, and the finished process."""
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    cpu, start = _cpu_of_children(), time.perf_counter()
    done = subprocess.run([sys.executable, *argv], cwd=cwd, env=environment, capture_output=True, text=True)
    return time.perf_counter() - start, _cpu_of_children() - cpu, done


def measure(command: Command, base: Path, scratch: Path, repeats: int, warmup: int) -> Timing:
    """Run ``command`` ``warmup`` + ``repeats`` times in the example repository ``base`` (a copy of it when the
    command writes); the timed runs."""
    timing = Timing(command.label, command.target_s)
    for number in range(warmup + repeats):
        repo = base
        if command.writes:
            repo = scratch / f"{'-'.join(command.args)}-{number}"
            shutil.copytree(base, repo, symlinks=True)
        elapsed, cpu, done = timed_run(["-m", "bot.cli", *command.args], repo)
        if number >= warmup:
            timing.runs.append(elapsed)
            timing.cpu.append(cpu)
            timing.exit_codes.append(done.returncode)
        if done.returncode and not timing.error:
            timing.error = (done.stderr or done.stdout).strip()[-2000:]
        if command.writes:
            shutil.rmtree(repo)
    return timing


def render(timings: list[Timing]) -> str:
    """The timings as an aligned table: median, min and max wall seconds, median CPU seconds, target, PASS/FAIL."""
    header = ("command", "median s", "min s", "max s", "cpu s", "target s", "result")
    rows = [
        (
            t.command,
            f"{t.median_s:.2f}",
            f"{min(t.runs):.2f}",
            f"{max(t.runs):.2f}",
            f"{statistics.median(t.cpu):.2f}",
            f"< {t.target_s:g}",
            "PASS" if t.passed else ("FAIL" if not any(t.exit_codes) else f"FAIL (exit {max(t.exit_codes)})"),
        )
        for t in timings
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cli_speed", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per command (default: 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per command first (default: 1)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be at least 1 and --warmup at least 0")
    with tempfile.TemporaryDirectory(prefix="perfbot-cli-speed-") as scratch:
        base = committed_example(Path(scratch) / "example")
        timings = [measure(c, base, Path(scratch), args.repeats, args.warmup) for c in COMMANDS]
    if args.json:
        print(
            json.dumps([{**asdict(t), "median_s": t.median_s, "passed": t.passed} for t in timings], indent=2)
        )
    else:
        print(render(timings))
        for t in timings:
            if t.error:
                print(f"\n{t.command} failed:\n{t.error}", file=sys.stderr)
    return 0 if all(t.passed for t in timings) else 1


if __name__ == "__main__":
    sys.exit(main())
