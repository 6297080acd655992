"""How long ``bot scan`` takes on a repository, beside the time libcst needs to parse every one of its files.

    python -m benchmarks.scan_speed REPO [--repeats N] [--json]

``REPO`` is a git repository (it is only read). Each repeat runs, as separate subprocesses, a libcst parse of
every tracked Python file once (``cst.parse_module`` on each ``git ls-files '*.py'``) plus a YAML parse of every
tracked config (``yaml.compose_all`` on each ``*.yaml``/``*.yml``), and ``python -m bot.cli scan REPO``. The table gives the median, min and max wall time and the median CPU time (user + system) of
each, and the ratio of the scan's median to the parse's, wall and CPU: on a shared machine, wall time well
above CPU time means the command waited for a core, so the CPU ratio is the steadier one. Exit code 0 when
every scan succeeded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.cli_speed import ROOT, timed_run

PARSE_EVERY_FILE = """\
import subprocess, sys
import libcst as cst
import yaml
root = sys.argv[1]
paths = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, check=True)
for path in paths.stdout.split():
    with open(f"{root}/{path}", encoding="utf-8") as file:
        cst.parse_module(file.read())
configs = subprocess.run(["git", "ls-files", "*.yaml", "*.yml"], cwd=root, capture_output=True, text=True, check=True)
for path in configs.stdout.split():
    with open(f"{root}/{path}", encoding="utf-8") as file:
        try:
            list(yaml.compose_all(file.read(), Loader=yaml.SafeLoader))
        except yaml.YAMLError:
            pass
"""


@dataclass
class Timing:
    """One measured command's runs: wall and CPU seconds, exit codes."""

    label: str
    runs: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)
    error: str = ""

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(self.cpu)


def _timed(timing: Timing, argv: list[str]) -> None:
    wall, cpu, done = timed_run(argv, ROOT)
    timing.runs.append(wall)
    timing.cpu.append(cpu)
    timing.exit_codes.append(done.returncode)
    if done.returncode and not timing.error:
        timing.error = (done.stderr or done.stdout).strip()[-2000:]


def measure(repo: Path, repeats: int) -> tuple[Timing, Timing]:
    """``repeats`` alternating runs of the parse of every file and of ``bot scan``: the two timings."""
    parse, scan = Timing("libcst parse of every file"), Timing("bot scan")
    for _ in range(repeats):
        _timed(parse, ["-c", PARSE_EVERY_FILE, str(repo)])
        _timed(scan, ["-m", "bot.cli", "scan", str(repo)])
    return parse, scan


def render(parse: Timing, scan: Timing) -> str:
    """The two timings as an aligned table, and the scan-to-parse ratios."""
    header = ("command", "median s", "min s", "max s", "cpu s")
    rows = [
        (t.label, f"{t.median_s:.1f}", f"{min(t.runs):.1f}", f"{max(t.runs):.1f}", f"{t.median_cpu_s:.1f}")
        for t in (parse, scan)
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    table = "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )
    wall, cpu = scan.median_s / parse.median_s, scan.median_cpu_s / parse.median_cpu_s
    return f"{table}\nscan / parse: {wall:.1f}x wall, {cpu:.1f}x cpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scan_speed", description=__doc__.splitlines()[0]
    )
    parser.add_argument("repo", type=Path, help="the git repository to scan (only read)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each (default: 3)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    parse, scan = measure(args.repo.resolve(), args.repeats)
    if args.json:
        print(json.dumps([{**asdict(t), "median_s": t.median_s} for t in (parse, scan)], indent=2))
    else:
        print(render(parse, scan))
    for timing in (parse, scan):
        if timing.error:
            print(f"\n{timing.label} failed:\n{timing.error}", file=sys.stderr)
    return 0 if not any(parse.exit_codes + scan.exit_codes) else 1


if __name__ == "__main__":
    sys.exit(main())
