"""Run an unmodified Python training program in-process and write its metrics as one JSON file.

Usage::

    python -m benchmarks.launch [--out FILE] [--warmup-steps N] -- python train.py [ARGS...]
    python -m benchmarks.launch [--out FILE] [--warmup-steps N] -- python -m package.train [ARGS...]
    python -m benchmarks.launch [--out FILE] [--warmup-steps N] -- torchrun --nproc-per-node 2 train.py [ARGS...]
    python -m benchmarks.launch --stop-after-steps 40 -- python train.py [ARGS...]
    python -m benchmarks.launch --chdir trainer -- python train_pretrain.py [ARGS...]

The program runs in this interpreter (``runpy``, with ``sys.argv`` and ``sys.path[0]`` set as ``python`` would
set them), so the :class:`benchmarks.metrics.Meter` hooks see its training loop. Every ``transformers.Trainer``
it creates (TRL's trainers included) gets a callback that ends steps at ``on_step_end`` and reads the tokenizer's
pad id, and its ``evaluate``/``predict`` calls are left out of the measurement. Hand-written loops are measured
through the global hooks alone (see :mod:`benchmarks.metrics`).

``--stop-after-steps N`` ends the program after its ``N``-th step (:class:`benchmarks.metrics.StepLimitReached`),
for a program that has no step option of its own; the run's status is ``ok``.

``--chdir DIR`` runs the program in the folder ``DIR`` of the working directory, as a launch that starts with
``cd DIR &&`` does; the files it loaded are still named from the working directory (every rank's too).

A ``torchrun`` or ``accelerate launch`` command is run through its launcher with this wrapper on every rank, and
the ranks' records are merged into one (:mod:`benchmarks.distributed`).

A ``.perfbot-plant.json`` file in the working directory (``{"slowdown": 0.1}``) plants a known slowdown: the meter
waits that fraction of every step (:class:`benchmarks.metrics.Meter`), and the record says so. Only the planted
commits of ``bot calibrate`` carry one.

The JSON (schema ``perfbot.run/v1``) is written atomically, also when the program fails: ``status`` is ``ok``,
``crashed`` (an exception or a non-zero exit, with ``error``) or ``oom`` (out of memory). The exit status is the
program's (1 for an exception), or 2 when the command is not a Python program. ``files_loaded`` lists the
files of the working directory the program executed or read (:mod:`benchmarks.files_loaded`; every rank's,
merged).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.abc
import importlib.util
import json
import math
import os
import re
import runpy
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from benchmarks import offline_models
from benchmarks.distributed import (
    DistributedLaunch,
    LauncherError,
    aggregate_ranks,
    parse_launcher,
    rank_path,
    read_rank_records,
)
from benchmarks.environment import collect_environment, peak_tflops
from benchmarks.files_loaded import FILES_LOADED, FilesLoaded
from benchmarks.metrics import Meter, StepLimitReached
from benchmarks.status import RunStatus
from benchmarks.steps import PHASES
from benchmarks.turns import client_from_environment

SCHEMA = "perfbot.run/v1"
DEFAULT_OUT = "perfbot-metrics.json"
PLANT_FILE = ".perfbot-plant.json"
# The checkout a run started in, for a program run in one of its folders (``--chdir``): its ranks name the
# files they load from there.
CHECKOUT_ENVIRONMENT = "PERFBOT_CHECKOUT"
_PYTHON_EXECUTABLE = re.compile(r"python[0-9.]*")
_IGNORED_INTERPRETER_FLAGS = {"-u", "-B"}


class CommandError(ValueError):
    """The command cannot be run in-process."""


@dataclass(frozen=True)
class PythonProgram:
    """A Python program to run: a script path or a module name, with its arguments."""

    target: str
    is_module: bool
    args: tuple[str, ...]

    def run(self) -> None:
        """Run it as ``__main__`` with ``sys.argv`` and ``sys.path[0]`` as ``python`` would set them."""
        sys.argv = [self.target, *self.args]
        if self.is_module:
            sys.path[0] = os.getcwd()
            runpy.run_module(self.target, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(self.target))
            runpy.run_path(self.target, run_name="__main__")


def parse_command(command: Sequence[str]) -> PythonProgram:
    """Read ``python [-u] script.py ARGS`` / ``python -m module ARGS`` / ``script.py ARGS``."""
    if not command:
        raise CommandError("no command given: put the training command after `--`")
    executable, *rest = command
    if executable.endswith(".py"):
        return PythonProgram(executable, False, tuple(rest))
    if not (_PYTHON_EXECUTABLE.fullmatch(os.path.basename(executable)) or executable == sys.executable):
        raise CommandError(
            f"{executable!r} is not a Python interpreter. benchmarks.launch runs the training program inside its "
            "own interpreter so its hooks see the loop: give `python script.py ...`, `python -m module ...`, "
            "`torchrun [OPTIONS] script.py ...` or `accelerate launch [OPTIONS] script.py ...`."
        )
    while rest and rest[0] in _IGNORED_INTERPRETER_FLAGS:
        rest = rest[1:]
    if not rest:
        raise CommandError("the python command names no script or module")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise CommandError("`python -m` needs a module name")
        return PythonProgram(rest[1], True, tuple(rest[2:]))
    if rest[0].startswith("-"):
        raise CommandError(f"interpreter option {rest[0]!r} is not supported; give a script or `-m module`")
    return PythonProgram(rest[0], False, tuple(rest[1:]))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` right after the module named ``name`` is first executed."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]):
        self._name = name
        self._callback = callback
        self._searching = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self._name or self._searching:
            return None
        self._searching = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._searching = False
        if spec is None or spec.loader is None:
            return None
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            self._callback(module)

        # This spec's loader instance runs the callback too; its class, shared by other modules, is left alone.
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _pad_token_id(processing_class: Any) -> int | None:
    """The pad id of a tokenizer, or of a processor's tokenizer."""
    for candidate in (processing_class, getattr(processing_class, "tokenizer", None)):
        pad = getattr(candidate, "pad_token_id", None)
        if isinstance(pad, int):
            return pad
    return None


def _instrument_trainer(meter: Meter, trainer_module: ModuleType) -> Callable[[], None]:
    """Give every Trainer a metrics callback and pause the meter in evaluate/predict; returns the undo."""
    from transformers.trainer_callback import TrainerCallback

    class MetricsCallback(TrainerCallback):
        """Ends meter steps at the Trainer's step ends and passes on the tokenizer's pad id."""

        def on_train_begin(self, args: Any, state: Any, control: Any, processing_class: Any = None, **_: Any):
            meter.use_explicit_steps()
            meter.set_pad_token_id(_pad_token_id(processing_class))

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any):
            meter.end_step()

    trainer = trainer_module.Trainer
    originals = {name: trainer.__dict__[name] for name in ("__init__", "evaluate", "predict")}

    @functools.wraps(originals["__init__"])
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        originals["__init__"](self, *args, **kwargs)
        self.add_callback(MetricsCallback())

    def paused(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def run_paused(*args: Any, **kwargs: Any) -> Any:
            with meter.paused():
                return method(*args, **kwargs)

        return run_paused

    trainer.__init__ = __init__
    trainer.evaluate = paused(originals["evaluate"])
    trainer.predict = paused(originals["predict"])

    def undo() -> None:
        for name, original in originals.items():
            setattr(trainer, name, original)

    return undo


@contextlib.contextmanager
def instrumented(meter: Meter) -> Iterator[Meter]:
    """Attach ``meter`` to the process and to every Trainer created (now, or once transformers is imported)."""
    undo: list[Callable[[], None]] = []

    def instrument(module: ModuleType) -> None:
        undo.append(_instrument_trainer(meter, module))

    finder = _AfterImport("transformers.trainer", instrument)
    if "transformers.trainer" in sys.modules:
        instrument(sys.modules["transformers.trainer"])
    else:
        sys.meta_path.insert(0, finder)
    try:
        with meter.attached():
            yield meter
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for step in undo:
            step()


def _is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError | MemoryError) or "out of memory" in str(error).lower()


def run_program(program: PythonProgram, meter: Meter) -> tuple[RunStatus, str | None, int]:
    """Run ``program`` under ``meter``; returns (status, error, exit code)."""
    try:
        with offline_models.from_environment(), instrumented(meter):
            program.run()
    except StepLimitReached:
        return RunStatus.OK, None, 0
    except SystemExit as exit_:
        code = exit_.code
        if code is None or code == 0:
            return RunStatus.OK, None, 0
        if not isinstance(code, int):  # sys.exit("message"): python prints it and exits 1
            print(code, file=sys.stderr)
            return RunStatus.CRASHED, f"exited with message {code!r}", 1
        return RunStatus.CRASHED, f"exited with status {code}", code
    except BaseException as error:  # noqa: BLE001 - the run's outcome is recorded, whatever it was
        traceback.print_exc()
        status = RunStatus.OOM if _is_out_of_memory(error) else RunStatus.CRASHED
        code = 130 if isinstance(error, KeyboardInterrupt) else 1
        return status, f"{type(error).__name__}: {error}", code
    return RunStatus.OK, None, 0


def planted_slowdown(directory: str | os.PathLike[str] = ".") -> float:
    """The slowdown the plant file in ``directory`` asks for (0 without one); a malformed file is an error."""
    path = Path(directory) / PLANT_FILE
    if not path.is_file():
        return 0.0
    value = json.loads(path.read_text(encoding="utf-8")).get("slowdown")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 10:
        raise CommandError(f"{path}: 'slowdown' must be a fraction between 0 and 10, got {value!r}")
    return float(value)


def build_record(
    meter: Meter, warmup_steps: int, status: RunStatus, error: str | None, command: Sequence[str]
) -> dict[str, Any]:
    """The ``perfbot.run/v1`` record of a finished run."""
    env = collect_environment()
    peak = peak_tflops(env["gpu"])
    try:
        measured = meter.report(warmup_steps, peak)
    except Exception as failure:  # a run that broke the CUDA context cannot resolve its events
        measured = Meter().report(warmup_steps, peak)
        error = f"{error}; " if error else ""
        error += f"metrics could not be read back: {type(failure).__name__}: {failure}"
        status = RunStatus.CRASHED if status == RunStatus.OK else status
    record: dict[str, Any] = {"schema": SCHEMA, "status": status}
    if error is not None:
        record["error"] = error
    record.update(measured)
    if meter.planted_slowdown:
        record["planted_slowdown"] = meter.planted_slowdown
        record["planted_waited"] = round(meter.planted_waited, 4)
    record["env"] = env
    record["command"] = list(command)
    return record


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite_or_null(item) for item in value]
    return value


def write_json_atomic(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` as JSON through a temporary file renamed into place (non-finite floats become null)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w") as handle:
            json.dump(_finite_or_null(data), handle, indent=2, allow_nan=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def format_summary(record: dict[str, Any]) -> str:
    """A short human-readable phase table, in the profiling guide's layout."""

    def ms(value: float | None) -> str:
        return f"{value:9.2f}ms" if value is not None else "        n/a"

    lines = [
        f"=========== benchmarks.launch: {record['status']}, {record['steps_measured']} steps measured "
        f"(warm-up {record['warmup_steps']}), timing={record['timing']} ===========",
        f"{'phase':<12}{'mean':>13}{'median':>13}{'p95':>13}{'share':>9}",
    ]
    for name in PHASES:
        phase = record["phases"][name]
        share = f"{phase['share'] * 100:8.1f}%" if phase["share"] is not None else "      n/a"
        lines.append(
            f"{name:<12} {ms(phase['mean_ms'])}  {ms(phase['median_ms'])}  {ms(phase['p95_ms'])}{share}"
        )
    facts = [f"tokens={record['tokens']}", f"samples={record['samples']}"]
    if record["tokens_per_s"] is not None:
        facts.append(f"tokens/s={record['tokens_per_s']:.1f}")
    if record["peak_memory_bytes"] is not None:
        facts.append(f"peak_mem={record['peak_memory_bytes'] / 2**30:.2f}GiB")
    if record["mfu"] is not None:
        facts.append(f"MFU={record['mfu'] * 100:.1f}%")
    if record.get("world_size"):
        facts.append(f"world_size={record['world_size']}")
    wait = record.get("allreduce_wait") or {}
    if wait.get("median_ms") is not None:
        facts.append(f"allreduce_wait={wait['median_ms']:.2f}ms/step (rank 0)")
    lines.append("  ".join(facts))
    return "\n".join(lines)


def run_distributed(
    launch: DistributedLaunch, out: str, warmup_steps: int, stop_after: int | None, command: Sequence[str]
) -> int:
    """Run a launcher with this wrapper on every rank, then merge the ranks' records into ``out``."""
    for stale in read_rank_records(out):
        with contextlib.suppress(OSError):
            os.unlink(rank_path(out, stale["rank"]))
    sys.stdout.flush()
    sys.stderr.flush()
    code = subprocess.run(launch.argv(out, warmup_steps, stop_after), stdin=subprocess.DEVNULL).returncode
    record = aggregate_ranks(read_rank_records(out), command, code)
    if record is None:
        error = f"no rank wrote metrics (the launcher exited with status {code})"
        record = build_record(Meter(), warmup_steps, RunStatus.CRASHED, error, command)
    write_json_atomic(out, record)
    print(format_summary(record), file=sys.stderr)
    return code if code != 0 or record["status"] == RunStatus.OK else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: parse, run the program under a meter, write the JSON; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.launch",
        usage="python -m benchmarks.launch [--out FILE] [--warmup-steps N] [--stop-after-steps N] -- python TRAIN.py "
        "[ARGS...]",
        description="Run a Python training program in-process and write its step metrics as JSON.",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"metrics JSON to write (default: {DEFAULT_OUT})")
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=1,
        help="leading steps left out of timings and throughput (default 1)",
    )
    parser.add_argument(
        "--stop-after-steps",
        type=int,
        metavar="N",
        help="end the program after N steps (for a program with no step option of its own)",
    )
    parser.add_argument(
        "--chdir",
        metavar="DIR",
        help="run the program in this folder of the working directory (its launch's `cd DIR`)",
    )
    parser.add_argument(
        "--per-rank",
        action="store_true",
        help="one rank of a distributed run: write FILE.rank<RANK> with the rank and world size in it",
    )
    options = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if options.warmup_steps < 0:
        parser.error("--warmup-steps must be >= 0")
    if options.stop_after_steps is not None and options.stop_after_steps <= options.warmup_steps:
        parser.error("--stop-after-steps must be above --warmup-steps, or no step is measured")
    try:
        launch = parse_launcher(command)
        program = parse_command(command) if launch is None else None
        slowdown = planted_slowdown(os.environ.get(CHECKOUT_ENVIRONMENT) or ".")
    except (CommandError, LauncherError, ValueError) as error:
        print(f"benchmarks.launch: {error}", file=sys.stderr)
        return 2
    checkout = os.environ.get(CHECKOUT_ENVIRONMENT) or os.getcwd()
    if options.chdir:
        out = os.path.abspath(options.out)
        try:
            os.chdir(options.chdir)
        except OSError as error:
            print(f"benchmarks.launch: --chdir {options.chdir}: {error}", file=sys.stderr)
            return 2
        options.out = out
        os.environ[CHECKOUT_ENVIRONMENT] = checkout
    if launch is not None:
        return run_distributed(launch, options.out, options.warmup_steps, options.stop_after_steps, command)
    try:
        turns = client_from_environment(options.warmup_steps)
    except (OSError, KeyError, ValueError) as error:
        print(f"benchmarks.launch: cannot take turns with the round's other runs: {error}", file=sys.stderr)
        return 2
    assert program is not None  # parsed above: the command has no launcher
    meter = Meter(
        planted_slowdown=slowdown,
        load_from_step=options.warmup_steps,
        turns=turns,
        stop_after=options.stop_after_steps,
    )
    with FilesLoaded(checkout) as loaded:
        status, failure, code = run_program(program, meter)
    record = build_record(meter, options.warmup_steps, status, failure, command)
    record[FILES_LOADED] = loaded.paths()
    out = options.out
    if options.per_rank:
        rank = int(os.environ.get("RANK", "0"))
        record.update(rank=rank, world_size=int(os.environ.get("WORLD_SIZE", "1")))
        out = rank_path(out, rank)
    write_json_atomic(out, record)
    sys.stdout.flush()
    print(format_summary(record), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
