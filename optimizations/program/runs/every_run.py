"""What an optimization asks of every run that loads a file (:mod:`.resolve` builds the runs): whether each does
it already, shards or quantizes it, runs it in one process, leaves a setting to a framework's recipe, or where
its launches set a precision.
"""

from __future__ import annotations

from dataclasses import replace

from optimizations.program.repository import RepoContext
from optimizations.program.runs.hydra import launch_recipes
from optimizations.program.runs.resolve import NOTHING, ONE_PROCESS, SHARDED, Run, effective_runs
from optimizations.program.runs.settings import DONE, Setting


def runs_of(repo: RepoContext, path: str) -> list[Run]:
    """Every run of every training entry point that loads the file ``path``."""
    return [run for entry in effective_runs(repo) if path in entry.files for run in entry.runs]


def launched_in(repo: RepoContext, path: str, precision: str) -> list[Setting]:
    """Where each run that loads ``path`` sets ``precision`` (``bf16``) outside the file's own code -- a launch
    flag, a recipe, a launcher or DeepSpeed config, another file; empty when some run does not, or no run
    launched by a command loads the file."""
    runs = runs_of(repo, path)
    if not runs or any(run.launch is None for run in runs):
        return []
    places = []
    for run in runs:
        setting = run.settings.get("mixed_precision")
        if run.precision != precision or setting is None or setting.source.startswith(f"{path}:"):
            return []
        if not setting.value.startswith(precision):
            return []
        places.append(setting)
    return places


def sharded_in_every_run(repo: RepoContext, path: str) -> str | None:
    """Why compiling code of ``path`` is no tier-level edit: every run that loads it shards the model (FSDP, or
    DeepSpeed ZeRO-3) or loads it quantized (4- or 8-bit layers, which the compile helper leaves as they are),
    each named where it is set; ``None`` when some run does neither, or none is known. A launch whose recipe is
    a shell parameter (``finetune.py "$2"``) has settings no one can read here: it counts for neither."""
    runs = [run for run in runs_of(repo, path) if not _recipe_unknown(run)]
    found = [_sharded_or_quantized(run) for run in runs]
    if not runs or not all(found):
        return None
    places = "; ".join(dict.fromkeys(place for place in found if place))
    return (
        f"every run shards the model or loads it quantized ({places}): compiling its layers inside the sharding "
        "wrapper is a change to test on that setup first, and quantized layers stay uncompiled; not a tier-level "
        "edit"
    )


def _recipe_unknown(run: Run) -> bool:
    """Whether the run's launch passes its recipe as a shell parameter (``"$2"``, ``$CONFIG``), unread here."""
    return run.launch is not None and any(word.startswith("$") for word in run.launch.positional)


def _sharded_or_quantized(run: Run) -> str:
    """``DeepSpeed ZeRO-3 at file:line`` or ``4-bit at file:line`` for a run that shards or quantizes its model;
    empty for one that does neither."""
    sharding, bits = run.settings.get("distribution"), run.settings.get("quantization")
    if sharding is not None and sharding.value.startswith(SHARDED):
        return f"{sharding.value} at {sharding.source}"
    if bits is not None and bits.value.endswith("-bit"):
        return f"{bits.value} at {bits.source}"
    return ""


def sharding_of_every_run(repo: RepoContext, path: str) -> str | None:
    """Where each run that loads ``path`` shards the model (FSDP, DeepSpeed ZeRO-3), as ``FSDP at file:line;
    ...``, where every one does; ``None`` when some run does not, or none is known."""
    runs = runs_of(repo, path)
    settings = [run.settings.get("distribution") for run in runs]
    if not runs or not all(s is not None and s.value.startswith(SHARDED) for s in settings):
        return None
    return "; ".join(dict.fromkeys(f"{s.value} at {s.source}" for s in settings if s is not None))


def one_process_in_every_run(repo: RepoContext, path: str) -> str | None:
    """Where each run that loads ``path`` is launched as one process (``python``, no launcher or config that
    starts more), as ``file:line; ...``, where every run is launched by a command and every one is; ``None``
    otherwise (a run with no launch may be started any way)."""
    runs = runs_of(repo, path)
    if not runs or any(run.launch is None for run in runs):
        return None
    settings = [run.settings.get("distribution") for run in runs]
    if not all(s is not None and s.value == ONE_PROCESS for s in settings):
        return None
    return "; ".join(dict.fromkeys(run.launch.where for run in runs if run.launch is not None))


def _passes(run: Run, tests: tuple[tuple[str, str], ...]) -> bool:
    """Whether the run's value of each named setting passes its test (:data:`DONE`)."""
    return all((s := run.settings.get(name)) is not None and DONE[done](s.value) for name, done in tests)


def done_by_runs(
    repo: RepoContext, tests: tuple[tuple[str, str], ...], in_code: bool = False, defaults: bool = False
) -> list[tuple[str, Setting]]:
    """``(entry, setting)`` for each run that passes every ``(setting, test)`` of ``tests``, the setting the
    first names, where it is written outside Python (a launch flag, a recipe, a launcher or DeepSpeed config) or
    as an option's default (``add_argument(..., default=...)``, a config dataclass field), or with ``in_code``
    anywhere in Python: that line says the optimization is done already (or chosen otherwise) for that run.
    With ``defaults``, a library's default (the Trainer's fused AdamW) is placed at the launch's first recipe,
    which leaves it unset, else at the launch."""
    found = []
    for entry in effective_runs(repo):
        for run in entry.runs:
            if not _passes(run, tests):
                continue
            setting = run.settings[tests[0][0]]
            path, _, line = setting.source.rpartition(":")
            outside_code = not path.endswith(".py") or setting.option_default
            if path and (in_code or outside_code) and line.isdigit():
                found.append((entry.entry, setting))
            elif defaults and not path and run.launch is not None and setting.source != NOTHING:
                recipes = launch_recipes(repo, run.launch)
                where = f"{recipes[0]}:1" if recipes else run.launch.where
                written = f"{setting.written}: the {setting.source}, which {where.rpartition(':')[0]} leaves"
                found.append((entry.entry, replace(setting, source=where, written=written)))
    return found


def unset_in_framework_recipes(repo: RepoContext, setting: str) -> list[tuple[Run, str]]:
    """``(run, recipe)`` for each run a framework's console script launches (``llamafactory-cli train
    recipe.yaml``) whose recipes leave ``setting`` to the framework's default: the first recipe, once each."""
    found: dict[str, tuple[Run, str]] = {}
    for entry in effective_runs(repo):
        for run in entry.runs:
            if run.launch is None or not run.launch.console:
                continue
            current = run.settings.get(setting)
            recipes = launch_recipes(repo, run.launch)
            if recipes and (current is None or ":" not in current.source):
                found.setdefault(recipes[0], (run, recipes[0]))
    return list(found.values())


def unset_beside_launched(repo: RepoContext, setting: str, value: str) -> list[tuple[Run, list[Setting]]]:
    """Each launched run that leaves ``setting`` unset (its default) where another launch of the same entry point
    sets it to ``value`` (``bf16``): launches that disagree, each with where the others set it."""
    found = []
    for entry in effective_runs(repo):
        chosen = [
            s
            for run in entry.runs
            if run.launch is not None
            and (s := run.settings.get(setting)) is not None
            and s.value.startswith(value)
            and ".py:" not in s.source  # a launch's flag, recipe or config, not the code's own literal
        ]
        for run in entry.runs if chosen else ():
            current = run.settings.get(setting)
            unset = current is None or current.source == NOTHING or current.source.startswith("default of")
            if run.launch is not None and unset:
                found.append((run, chosen))
    return found


def done_in_every_run(repo: RepoContext, path: str, tests: tuple[tuple[str, str], ...]) -> list[Setting]:
    """The first-named setting of each run that loads ``path``, where every one of them passes every
    ``(setting, test)`` of ``tests``; empty when one does not, or no run loads the file."""
    runs = runs_of(repo, path)
    if not runs or not all(_passes(run, tests) for run in runs):
        return []
    return [run.settings[tests[0][0]] for run in runs]


def entry_package(entry: str) -> str:
    """The top package folder of an entry point: ``src/axolotl`` for ``src/axolotl/cli/main.py``, ``fw`` for
    ``fw/cli.py``."""
    parts = entry.split("/")
    return "/".join(parts[:2] if parts[0] == "src" else parts[:1])


def framework_library(repo: RepoContext, path: str) -> str | None:
    """Why ``path`` is no place for an edit: it is the library of a framework that the repository's commands
    drive by its console script and recipes (``llamafactory-cli train examples/...yaml``), where a setting
    belongs in the recipes its schema validates, not in a patch of the library's code; else ``None``."""
    for entry in effective_runs(repo):
        launch = next((r.launch for r in entry.runs if r.launch is not None and r.launch.console), None)
        if launch is None:
            continue
        package = entry_package(entry.entry)
        if path.startswith(package + "/"):
            return (
                f"`{package}` is the library of a framework its commands drive by recipe (`{launch.launcher}` "
                f"at {launch.where}): set it in the recipes, not in a patch of the library"
            )
    return None
