"""The bench spec: which workloads to run on every commit, built from the ``[tool.bot]`` table of the target's
``pyproject.toml`` (the table as :func:`bot.conventions.tool_settings` reads it):

```toml
[tool.bot]
size = "tiny"              # substituted for {size}; "gpu" on a GPU box
seed = 0                   # substituted for {seed}; the same at every commit

[tool.bot.workloads.sft]
command = "python train_sft.py --size {size} --max-steps {steps} --seed {seed}"
steps = 40                 # at least this many optimizer steps (calibration may add more)
warmup_steps = 5           # excluded from timing
min_time_s = 10            # measured steps last at least this long (default: 10 on a GPU, 3 on CPU)
repeats = 4                # rounds at least (each commit once per round, ABBA order)
max_repeats = 20           # rounds at most, while effects are still wider than the minimum effect
primary = "tokens_per_s"   # the metric a win or a regression is judged on
higher_is_better = true
timeout_s = 1800
gpus = 1
stop_after_steps = true    # the launcher ends the program after `steps` steps (a program with no step option)
inputs = ["data/sft"]      # files git ignores that the program reads: linked into every commit's checkout
directory = "trainer"      # run the command in this folder of the checkout (default: its root)

[tool.bot.workloads.dpo]   # a command read from a launch file at every commit benched, flags set on top
launch = "scripts/train.sh"
program = "train_dpo.py"   # the launch file's first command that runs it (occurrence = 2: the second)
flags = { "--max_steps" = "{steps}", "--report_to" = "none" }
command = "python train_dpo.py --max_steps {steps} --report_to none"   # as the launch read when drafted
steps = 40

[tool.bot.workloads.sft.models."Qwen/Qwen2.5-7B-Instruct"]
model_type = "qwen2"       # a model the runner cannot download: built from this config, random weights
hidden_size = 64           # (any other key of the model's config; see benchmarks.offline_models)
```

``time_budget_s`` in ``[tool.bot]`` bounds a whole bench: no round starts that would end after it (default:
30 min on a GPU, 10 min on CPU, where the calibration run shows which). ``--steps``, ``--repeats``,
``--max-repeats``, ``--min-time`` and ``--time-budget`` override these.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

DEFAULT_SIZE = "tiny"
DEFAULT_SEED = 0
DEFAULT_REPEATS = 4
DEFAULT_MAX_REPEATS = 20
DEFAULT_TIME_BUDGET_GPU_S = 1800.0
DEFAULT_TIME_BUDGET_CPU_S = 600.0
# Measured time per run a calibration aims for when the workload sets none, by where it runs.
DEFAULT_MIN_TIME_GPU_S = 10.0
DEFAULT_MIN_TIME_CPU_S = 3.0
DEFAULT_PRIMARY = "tokens_per_s"
DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_WARMUP_STEPS = 2

WORKLOADS_KEY = "tool.bot.workloads"
# A size is a name (``tiny``, ``gpu``, ``0.5b``): it fills one argument of a command, never starts an option.
SIZE_SHAPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_size(size: str) -> str:
    """``size`` when it is a name :data:`SIZE_SHAPE` allows; else ValueError saying what a size may be."""
    if not isinstance(size, str) or not SIZE_SHAPE.fullmatch(size):
        raise ValueError(
            f"a size is a name of letters, digits, '_', '.' and '-' that starts with a letter or digit "
            f"(tiny, gpu, 0.5b), got {size!r}"
        )
    return size


class BenchSpecError(ValueError):
    """The bench spec is missing or malformed; names the file and the offending key."""

    def __init__(self, path: Path | str, key: str, problem: str):
        self.path = Path(path)
        self.key = key
        self.problem = problem
        super().__init__(f"{path}: [{key}] {problem}")


class BenchOptionError(ValueError):
    """A command-line override the bench spec cannot take; the message names the option (``--steps``), not the
    file, which is not at fault."""


@dataclass(frozen=True)
class Workload:
    """One benchmark workload: a training command run for a fixed number of steps."""

    name: str
    command: str
    steps: int
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    repeats: int = DEFAULT_REPEATS
    primary: str = DEFAULT_PRIMARY
    higher_is_better: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S
    gpus: int = 1
    max_repeats: int = DEFAULT_MAX_REPEATS
    min_time_s: float | None = None  # None: the device's default (calibrated on the first run)
    stop_after_steps: bool = False  # the launcher ends the program after ``steps`` steps
    # Models the program names that the runner cannot download, by id: the config each is built from.
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    # A command read from the repository's launch file at each commit: the command there that runs
    # ``program``, with ``flags`` set on top; ``commands`` holds it by commit once read (bot.workload_drafts).
    launch: str | None = None
    program: str | None = None
    occurrence: int = 1  # the launch file's n-th command that runs the program
    flags: Mapping[str, str] = field(default_factory=dict, hash=False)
    commands: Mapping[str, str] = field(default_factory=dict, hash=False)
    # Paths (from the repository root) that git ignores and the program reads, such as local data: each commit's
    # checkout gets a link to the working tree's copy.
    inputs: tuple[str, ...] = ()
    # The checkout's folder the command runs in (its launch's ``cd DIR &&``); None: the checkout's root.
    directory: str | None = None

    def render(self, size: str, seed: int, commit: str | None = None) -> str:
        """The command (at ``commit``, for one read from a launch file) with ``{size}``, ``{steps}`` and
        ``{seed}`` filled in as data: checked (a size by :func:`check_size`, steps and seed integers) and
        shell-quoted, so each is one argument whatever it holds (other braces are left alone)."""
        if isinstance(self.steps, bool) or not isinstance(self.steps, int):
            raise ValueError(f"steps must be an integer, got {self.steps!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"a seed must be an integer, got {seed!r}")
        command = self.commands.get(commit, self.command) if commit is not None else self.command
        return (
            command.replace("{size}", shlex.quote(check_size(size)))
            .replace("{steps}", shlex.quote(str(self.steps)))
            .replace("{seed}", shlex.quote(str(seed)))
        )


@dataclass(frozen=True)
class BenchSpec:
    """Every workload of a target repository, plus the size and seed shared by all of them."""

    workloads: Mapping[str, Workload]
    size: str = DEFAULT_SIZE
    seed: int = DEFAULT_SEED
    # Whole rounds run before the measured ones and discarded: a machine that has been idle (GPU clocks, a VM
    # growing its memory on first touch) runs its first round slower, whatever the commit.
    warmup_rounds: int = 0
    time_budget_s: float | None = None  # None: the device's default (see the module docstring)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], path: Path | str) -> BenchSpec:
        """Build the spec from a parsed ``[tool.bot]`` table; ``path`` (its ``pyproject.toml``) names it in errors.

        An empty table (no ``pyproject.toml``, or no ``[tool.bot]`` in it) is an error that says to run
        ``bot init``.
        """
        path = Path(path)
        if not table:
            raise BenchSpecError(
                path, "tool.bot", "missing (no file or no table); run `bot init` to add bench settings"
            )
        size = _typed(table, "size", str, DEFAULT_SIZE, path, "tool.bot")
        try:
            check_size(size)
        except ValueError as error:
            raise BenchSpecError(path, "tool.bot.size", str(error)) from error
        seed = _typed(table, "seed", int, DEFAULT_SEED, path, "tool.bot")
        warmup_rounds = _typed(table, "warmup_rounds", int, 0, path, "tool.bot")
        if warmup_rounds < 0:
            raise BenchSpecError(path, "tool.bot.warmup_rounds", "must be 0 or more")
        budget = _typed(table, "time_budget_s", float, None, path, "tool.bot")
        if budget is not None and budget <= 0:
            raise BenchSpecError(path, "tool.bot.time_budget_s", f"must be positive, got {budget:g}")
        raw = table.get("workloads")
        if not isinstance(raw, dict) or not raw:
            raise BenchSpecError(
                path, WORKLOADS_KEY, "missing or empty; add at least one [tool.bot.workloads.<name>]"
            )
        workloads = {name: _workload(name, body, path) for name, body in raw.items()}
        return cls(
            workloads=workloads,
            size=size,
            seed=seed,
            warmup_rounds=warmup_rounds,
            time_budget_s=None if budget is None else float(budget),
        )

    def override(
        self,
        workloads: Iterable[str] | None = None,
        size: str | None = None,
        steps: int | None = None,
        repeats: int | None = None,
        warmup_steps: int | None = None,
        seed: int | None = None,
        warmup_rounds: int | None = None,
        max_repeats: int | None = None,
        min_time_s: float | None = None,
        time_budget_s: float | None = None,
    ) -> BenchSpec:
        """A copy with command-line overrides applied; ``workloads`` keeps only the named ones, in that order.
        ``repeats`` above a workload's ``max_repeats`` raises the maximum with it. An override that does not fit
        is a :class:`BenchOptionError` naming the option."""
        selected = dict(self.workloads)
        if workloads is not None:
            names = list(workloads)
            unknown = [name for name in names if name not in self.workloads]
            if unknown:
                known = ", ".join(self.workloads)
                raise BenchOptionError(
                    f"--workload: unknown workload(s) {', '.join(unknown)}; known: {known}"
                )
            selected = {name: self.workloads[name] for name in names}
        changes: dict[str, Any] = {
            key: value
            for key, value in (
                ("steps", steps),
                ("repeats", repeats),
                ("warmup_steps", warmup_steps),
                ("max_repeats", max_repeats),
                ("min_time_s", min_time_s),
            )
            if value is not None
        }
        if changes:
            selected = {name: replace(workload, **changes) for name, workload in selected.items()}
            if max_repeats is None:
                selected = {
                    name: replace(workload, max_repeats=max(workload.max_repeats, workload.repeats))
                    for name, workload in selected.items()
                }
            for workload in selected.values():
                _check_overrides(workload, changes)
        if time_budget_s is not None and time_budget_s <= 0:
            raise BenchOptionError(f"--time-budget must be positive, got {time_budget_s:g}")
        if size is not None:
            try:
                check_size(size)
            except ValueError as error:
                raise BenchOptionError(f"--size: {error}") from error
        return replace(
            self,
            workloads=selected,
            size=self.size if size is None else size,
            seed=self.seed if seed is None else seed,
            warmup_rounds=self.warmup_rounds if warmup_rounds is None else max(0, warmup_rounds),
            time_budget_s=self.time_budget_s if time_budget_s is None else time_budget_s,
        )


_WORKLOAD_KEYS = {
    "command",
    "steps",
    "warmup_steps",
    "repeats",
    "primary",
    "higher_is_better",
    "timeout_s",
    "gpus",
    "max_repeats",
    "min_time_s",
    "stop_after_steps",
    "models",
    "launch",
    "program",
    "occurrence",
    "flags",
    "inputs",
    "directory",
}


def _workload(name: str, body: Any, path: Path) -> Workload:
    key = f"{WORKLOADS_KEY}.{name}"
    if not isinstance(body, dict):
        raise BenchSpecError(path, key, f"must be a table, got {type(body).__name__}")
    unknown = sorted(set(body) - _WORKLOAD_KEYS)
    if unknown:
        raise BenchSpecError(
            path, key, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_WORKLOAD_KEYS))}"
        )
    for required in ("command", "steps"):
        if required not in body:
            raise BenchSpecError(path, f"{key}.{required}", "is required")
    command = _typed(body, "command", str, None, path, key)
    if not command.strip():
        raise BenchSpecError(path, f"{key}.command", "is empty")
    steps = _typed(body, "steps", int, None, path, key)
    workload = Workload(
        name=name,
        command=command,
        steps=steps,
        warmup_steps=_typed(
            body, "warmup_steps", int, min(DEFAULT_WARMUP_STEPS, max(steps - 1, 0)), path, key
        ),
        repeats=_typed(body, "repeats", int, DEFAULT_REPEATS, path, key),
        primary=_typed(body, "primary", str, DEFAULT_PRIMARY, path, key),
        higher_is_better=_typed(body, "higher_is_better", bool, True, path, key),
        timeout_s=float(_typed(body, "timeout_s", float, DEFAULT_TIMEOUT_S, path, key)),
        gpus=_typed(body, "gpus", int, 1, path, key),
        max_repeats=_typed(body, "max_repeats", int, DEFAULT_MAX_REPEATS, path, key),
        min_time_s=None
        if "min_time_s" not in body
        else float(_typed(body, "min_time_s", float, 0, path, key)),
        stop_after_steps=_typed(body, "stop_after_steps", bool, False, path, key),
        models=_models(_typed(body, "models", dict, {}, path, key), path, f"{key}.models"),
        launch=_typed(body, "launch", str, None, path, key),
        program=_typed(body, "program", str, None, path, key),
        occurrence=_typed(body, "occurrence", int, 1, path, key),
        flags={flag: str(value) for flag, value in _typed(body, "flags", dict, {}, path, key).items()},
        inputs=_inputs(_typed(body, "inputs", list, [], path, key), path, f"{key}.inputs"),
        directory=_directory(_typed(body, "directory", str, None, path, key), path, f"{key}.directory"),
    )
    if (workload.launch is None) != (workload.program is None):
        raise BenchSpecError(
            path, key, "launch and program go together: the launch file and the program it runs"
        )
    if "max_repeats" not in body:  # a table that asks for more repeats than the default maximum gets them
        workload = replace(workload, max_repeats=max(workload.max_repeats, workload.repeats))
    _check_counts(workload, path, key)
    return workload


def _inputs(paths: list[Any], path: Path, key: str) -> tuple[str, ...]:
    """The ``inputs`` list: relative paths inside the repository, each a string."""
    for item in paths:
        if not isinstance(item, str) or not item.strip():
            raise BenchSpecError(path, key, f"must list paths as strings, got {item!r}")
        parts = PurePosixPath(item).parts
        if PurePosixPath(item).is_absolute() or ".." in parts:
            raise BenchSpecError(path, key, f"{item!r} must be a path inside the repository, from its root")
    return tuple(paths)


def _directory(value: str | None, path: Path, key: str) -> str | None:
    """A folder of the checkout, relative, in git's form (``trainer``); None for the root."""
    if value is None:
        return None
    normal = posixpath.normpath(value)
    if posixpath.isabs(normal) or normal == ".." or normal.startswith("../"):
        raise BenchSpecError(
            path, key, f"must be a folder inside the repository, relative to its root, got {value!r}"
        )
    return None if normal == "." else normal


def _models(table: Mapping[str, Any], path: Path, key: str) -> dict[str, dict[str, Any]]:
    """The ``models`` table: each model id maps to a table of its config with a ``model_type``."""
    for model, config in table.items():
        if not isinstance(config, dict):
            raise BenchSpecError(path, f'{key}."{model}"', f"must be a table, got {type(config).__name__}")
        if not isinstance(config.get("model_type"), str):
            raise BenchSpecError(
                path,
                f'{key}."{model}".model_type',
                "is required: the architecture to build (qwen2, llama...)",
            )
    return {model: dict(config) for model, config in table.items()}


def _check_overrides(workload: Workload, changes: Mapping[str, Any]) -> None:
    """A workload's counts after the command line's ``changes``, checked as :func:`_check_counts` checks the
    file's; what does not fit names the option at fault (the file's own values were checked when read)."""
    name, steps, warmup, repeats = workload.name, workload.steps, workload.warmup_steps, workload.repeats
    if "steps" in changes and steps < 1:
        raise BenchOptionError(f"--steps must be at least 1, got {steps}")
    if "warmup_steps" in changes and not 0 <= warmup < steps:
        raise BenchOptionError(f"warmup_steps must be >= 0 and below steps ({steps}), got {warmup}")
    if warmup >= steps:
        raise BenchOptionError(
            f"--steps {steps} leaves workload {name} no step to measure: it warms up for {warmup} steps; use "
            f"--steps {warmup + 1} or more (or lower its warmup_steps in pyproject.toml)"
        )
    if "repeats" in changes and repeats < 1:
        raise BenchOptionError(f"--repeats must be at least 1, got {repeats}")
    if workload.max_repeats < repeats:  # only an explicit --max-repeats: the maximum follows --repeats
        below = (
            f"--repeats {repeats}" if "repeats" in changes else f"the {repeats} repeats of workload {name}"
        )
        raise BenchOptionError(f"--max-repeats {workload.max_repeats} is below {below}")
    if workload.min_time_s is not None and workload.min_time_s < 0:
        raise BenchOptionError(f"--min-time must be 0 or more, got {workload.min_time_s:g}")


def _check_counts(workload: Workload, path: Path, key: str) -> None:
    if workload.steps < 1:
        raise BenchSpecError(path, f"{key}.steps", f"must be at least 1, got {workload.steps}")
    if not 0 <= workload.warmup_steps < workload.steps:
        raise BenchSpecError(
            path,
            f"{key}.warmup_steps",
            f"must be >= 0 and below steps ({workload.steps}), got {workload.warmup_steps}",
        )
    if workload.repeats < 1:
        raise BenchSpecError(path, f"{key}.repeats", f"must be at least 1, got {workload.repeats}")
    if workload.max_repeats < workload.repeats:
        raise BenchSpecError(
            path,
            f"{key}.max_repeats",
            f"must be at least repeats ({workload.repeats}), got {workload.max_repeats}",
        )
    if workload.min_time_s is not None and workload.min_time_s < 0:
        raise BenchSpecError(path, f"{key}.min_time_s", f"must be 0 or more, got {workload.min_time_s:g}")
    if workload.gpus < 1:
        raise BenchSpecError(path, f"{key}.gpus", f"must be at least 1, got {workload.gpus}")
    if workload.timeout_s <= 0:
        raise BenchSpecError(path, f"{key}.timeout_s", f"must be positive, got {workload.timeout_s}")


def _typed(table: Mapping[str, Any], name: str, kind: type, default: Any, path: Path, key: str) -> Any:
    """``table[name]`` checked against ``kind`` (an int is accepted for a float; a bool never for a number)."""
    if name not in table:
        return default
    value = table[name]
    accepted = (int, float) if kind is float else kind
    if (kind is not bool and isinstance(value, bool)) or not isinstance(value, accepted):
        raise BenchSpecError(
            path, f"{key}.{name}", f"must be {kind.__name__}, got {type(value).__name__} {value!r}"
        )
    return value
