"""Is a run's speed a property of its process? Runs of the example's ``loop``, alternating a fresh process (as
``bot bench`` starts every run) and a child forked from this one warm interpreter (torch and transformers
imported once, CUDA not initialised: each child initialises its own). If the forked runs spread less than the
fresh ones, what differs between fresh processes (their memory layout, their imports, their threads' placement)
is where the spread comes from, and a bench that forks its runs from a warm parent would remove it.

Run inside a copy of the example (``process_spread.sh SIZE forked`` does), writing each run's metrics JSON,
log and start/end times under OUT, for ``spread.py``:

    python -m experiments.calibration.warm_fork OUT SIZE PAIRS
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def launch_arguments(out: Path, label: str, size: str) -> list[str]:
    """``benchmarks.launch``'s arguments for one run of the loop, as ``process_spread.sh`` measures it."""
    program = ["python3", "train_loop.py", "--size", size, "--max-steps", "47", "--seed", "0"]
    return ["--out", str(out / f"{label}.json"), "--warmup-steps", "2", "--", *program]


def timed(out: Path, label: str, run: Callable[[], None]) -> None:
    """``run()``, with its start and end times written beside its metrics (for ``spread.py``'s telemetry)."""
    (out / f"{label}.start").write_text(f"{time.time():.6f}")
    run()
    (out / f"{label}.end").write_text(f"{time.time():.6f}")


def fresh(out: Path, label: str, size: str) -> None:
    """One run in a new interpreter."""
    with open(out / f"{label}.log", "w") as log:
        command = [sys.executable, "-m", "benchmarks.launch", *launch_arguments(out, label, size)]
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)


def forked(out: Path, label: str, size: str) -> None:
    """One run in a child of this interpreter."""
    from benchmarks import launch

    pid = os.fork()
    if pid == 0:  # the child: its output to the log, the run in-process, then out without the parent's exit
        code = 1
        try:
            log = os.open(out / f"{label}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(log, 1)
            os.dup2(log, 2)
            code = launch.main(launch_arguments(out, label, size))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.waitpid(pid, 0)


def main(out: str, size: str, pairs: str) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, os.getcwd())  # the example's modules, as the launch wrapper's programs see them
    import torch
    import transformers  # noqa: F401  (imported once, for every forked run)

    if torch.cuda.is_initialized():
        raise SystemExit("CUDA is initialised in the parent: a forked child could not use it")
    for pair in range(1, int(pairs) + 1):
        for kind, run in (("fresh", fresh), ("forked", forked)):
            label = f"{kind}-{pair}"
            timed(folder, label, lambda: run(folder, label, size))  # noqa: B023 (called at once)


if __name__ == "__main__":
    main(*sys.argv[1:])
