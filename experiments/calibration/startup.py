"""Where a run's start-up goes: the training program run in this interpreter (as ``benchmarks.launch`` runs
it) with its main thread's stack sampled every few milliseconds, until its model's ``--forwards``-th training
forward begins (1: the end of start-up as the meter's timeline counts it; more: the first steps' warm-up too).

Each sample is weighted by the time since the one before, so a main thread holding the interpreter lock in a
long native call is not undercounted. Prints the wall time to the stop, then the functions that were on the
stack longest (cumulative seconds, the import machinery's frozen frames left out; then seconds as the innermost
Python frame), and writes the same as JSON:

    python -m experiments.calibration.startup --out startup.json [--forwards N] -- python3 train_sft.py ARGS
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

STARTED = time.monotonic()


class StackSampler:
    """Samples one thread's Python stack from a daemon thread; ``cumulative`` and ``innermost`` hold seconds
    per ``file:line(function)`` of each frame's code object."""

    def __init__(self, thread_id: int, interval_s: float = 0.005):
        self.thread_id, self.interval_s = thread_id, interval_s
        self.cumulative: Counter[str] = Counter()
        self.innermost: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="startup-sampler")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.interval_s):
            now = time.monotonic()
            frame = sys._current_frames().get(self.thread_id)
            if frame is not None:
                self._record(frame, now - last)
            last = now

    def _record(self, frame: FrameType | None, weight: float) -> None:
        names = []
        while frame is not None:
            code = frame.f_code
            names.append(f"{code.co_filename}:{code.co_firstlineno}({code.co_name})")
            frame = frame.f_back
        if names:
            self.innermost[names[0]] += weight
        for name in set(names):
            if not name.startswith("<frozen "):  # import and runpy machinery: on every stack, says nothing
                self.cumulative[name] += weight


class _StopAtForward(Exception):
    """Raised from the forward hook to end the program once the wanted forward begins."""


def _stop_at_forward(count: int) -> RemovableHandle:
    """Register a global forward pre-hook that raises at the ``count``-th forward of the first module to run
    a forward with gradients on and trainable parameters (the model being trained)."""
    import torch

    trained: list[torch.nn.Module] = []  # the model, once its first training forward is seen
    forwards = 0

    def hook(module: torch.nn.Module, _args: object) -> None:
        nonlocal forwards
        if not torch.is_grad_enabled():
            return
        if not trained:
            if not any(p.requires_grad for p in module.parameters()):
                return
            trained.append(module)
        if module is trained[0]:
            forwards += 1
            if forwards >= count:
                raise _StopAtForward

    return torch.nn.modules.module.register_module_forward_pre_hook(hook)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON file for the report")
    parser.add_argument("--forwards", type=int, default=1, help="stop when this training forward begins")
    parser.add_argument("--top", type=int, default=40, help="functions to print")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- python3 script.py ARGS")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    sampler = StackSampler(threading.get_ident())
    sampler.start()
    from benchmarks.launch import parse_command

    program = parse_command(command)
    hook = _stop_at_forward(args.forwards)
    outcome = "program ended before the forward"
    try:
        program.run()
    except _StopAtForward:
        outcome = f"training forward {args.forwards} began"
    finally:
        sampler.stop()
        hook.remove()
    wall = time.monotonic() - STARTED
    report = {
        "outcome": outcome,
        "wall_s": round(wall, 2),
        "cumulative_s": {k: round(v, 3) for k, v in sampler.cumulative.most_common(200)},
        "innermost_s": {k: round(v, 3) for k, v in sampler.innermost.most_common(200)},
    }
    with open(args.out, "w") as out:
        json.dump(report, out, indent=1)
    print(f"{outcome} after {wall:.1f} s (from this module's import; interpreter start not included)")
    for title, table in (("cumulative", sampler.cumulative), ("innermost", sampler.innermost)):
        print(f"\n{title} seconds:")
        for name, seconds in table.most_common(args.top):
            print(f"{seconds:8.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
