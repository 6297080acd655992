"""The effective configuration of each run of each training entry point, every value with its source.

A run is an entry point as one launch command starts it (an entry point no command starts runs as written:
``python <entry>``). A value is taken from the sources below in this order, each later one winning:

1. the library default, where the code trains through a ``transformers``/TRL trainer (:data:`TRAINER_DEFAULTS`,
   then :data:`TRL_DEFAULTS` where a TRL trainer config is used and the requirements admit a TRL that has them);
2. dataclass field defaults of the files the entry point loads (a ``TrainingArguments`` subclass's ``optim``);
3. the launcher's config: an ``accelerate config`` YAML, then the DeepSpeed config it or a flag names;
4. the YAML recipes the launch passes (``--config recipe.yaml``), or the configs a Hydra script no command
   launches composes by default;
5. the launch's flags for the script (``--bf16 True``), the values the code reads from config keys
   (``torch_dtype=getattr(torch, config.model.policy_dtype)``) as the flags or recipes give them, then the
   launcher's own flags (``--mixed_precision bf16``);
6. literal values in the code (``Accelerator(mixed_precision="bf16")`` overrides the launcher's flag);
7. a DeepSpeed ``optimizer`` block or ZeRO optimizer offload, which replace whatever optimizer the trainer
   would build.

A framework's console script run with a recipe (``llamafactory-cli train recipe.yaml``) reads no code of the
library it runs: the library sets values under conditions the recipe decides.
"""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass

from optimizations.program.reachability import program_of
from optimizations.program.recipes import runs_code_of
from optimizations.program.repository import RepoContext
from optimizations.program.requirements import excludes
from optimizations.program.run_calls import runs_training
from optimizations.program.runs.code_settings import CodeSettings, ConfigRead, code_settings, precision_of
from optimizations.program.runs.commands import LaunchCommand, launch_commands
from optimizations.program.runs.hydra import run_recipes
from optimizations.program.runs.launcher_configs import (
    accelerate_config,
    deepspeed_config,
    deepspeed_settings,
)
from optimizations.program.runs.settings import BF16, FP32, NAMES, SETTINGS, Setting, reading
from optimizations.program.yaml_settings import settings as yaml_settings

# Text that shows a file trains: a backward pass, a trainer or a framework's fit.
TRAINING_MARKERS = (".backward(", "Trainer(", ".fit(", "deepspeed.initialize(", ".train(")
TRAINER_WORDS = ("TrainingArguments", "SFTConfig", "DPOConfig", "GRPOConfig", "TrlParser", "HfArgumentParser")
TRAINER = "default of transformers' TrainingArguments"
TRAINER_DEFAULTS = (
    Setting("mixed_precision", FP32, TRAINER, "bf16=False, fp16=False"),
    Setting(
        "optimizer",
        "adamw_torch_fused",
        TRAINER,
        "optim: adamw_torch_fused on torch >= 2.8, else adamw_torch",
    ),
    Setting("loader_workers", "0", TRAINER, "dataloader_num_workers=0"),
    Setting("pin_memory", "on", TRAINER, "dataloader_pin_memory=True"),
    Setting("compile", "off", TRAINER, "torch_compile=False"),
    Setting("gradient_checkpointing", "off", TRAINER, "gradient_checkpointing=False"),
    Setting(
        "attention", "sdpa", "default of transformers' from_pretrained", "sdpa where the model supports it"
    ),
)
# TRL's trainer configs (SFTConfig, DPOConfig, ...) train in bf16 and checkpoint activations unless told otherwise,
# since trl 0.19 (huggingface/trl#3515 and #3510), where TrainingArguments does neither.
TRL_CONFIGS = (
    "SFTConfig",
    "DPOConfig",
    "GRPOConfig",
    "KTOConfig",
    "RewardConfig",
    "RLOOConfig",
    "ORPOConfig",
)
TRL_DEFAULTS_SINCE = "0.19.0"
TRL = "default of TRL's trainer configs (trl >= 0.19)"
TRL_DEFAULTS = (
    Setting("mixed_precision", BF16, TRL, "bf16=True unless fp16=True"),
    Setting("gradient_checkpointing", "on", TRL, "gradient_checkpointing=True"),
)
NOTHING = "nothing in the code or its launch sets it"
# Keys of a recipe YAML that are settings (a recipe's ``num_workers``/``compile`` may be anything else's).
RECIPE_KEYS = tuple(
    name for name in NAMES if name not in ("num_workers", "pin_memory", "precision", "compile")
)
# Keys of a recipe YAML that are settings only beside other run settings (lingua's ``distributed:`` mapping holds
# ``compile: true`` with ``model_dtype`` and ``fsdp_type``), not in an evaluation's or a tool's own mapping.
BESIDE_SETTINGS = ("compile",)
ONE_PROCESS = "one process"
PLAIN_DEFAULTS = (
    Setting("mixed_precision", FP32, NOTHING),
    Setting("compile", "off", NOTHING),
    Setting("distribution", ONE_PROCESS, NOTHING),
    Setting("peft", "off", NOTHING),
    Setting("quantization", "off", NOTHING),
)
# Keys of a recipe that trains (an inference or export recipe has none of them).
TRAINING_KEYS = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "micro_batch_size",
    "gradient_accumulation_steps",
)
LAUNCHER_SETTINGS = ("mixed_precision", "dynamo_backend")
# Distributions that shard the parameters themselves.
SHARDED = ("FSDP", "DeepSpeed ZeRO-3")
DEEPSPEED_FLAGS = ("deepspeed", "deepspeed_config", "deepspeed_config_file")


@dataclass(frozen=True)
class Run:
    """One way an entry point is run, and the value of each setting in it."""

    entry: str
    launch: LaunchCommand | None
    settings: dict[str, Setting]

    @property
    def name(self) -> str:
        """The launch's ``path:line``, or that the entry point runs as written."""
        return self.launch.where if self.launch else f"python {self.entry} (no launch command found)"

    @property
    def precision(self) -> str | None:
        """``bf16``/``fp16`` where the run computes in that precision, else None."""
        return precision_of(self.settings)


@dataclass(frozen=True)
class EntryRuns:
    """A training entry point and its runs."""

    entry: str
    files: frozenset[str]  # the repository files its imports load
    runs: tuple[Run, ...]

    def disagreements(self) -> dict[str, list[Setting]]:
        """The settings whose value differs between its runs, with each run's value."""
        found = {}
        for name in SETTINGS:
            values = [run.settings[name] for run in self.runs if name in run.settings]
            if len({v.value for v in values}) > 1:
                found[name] = values
        return found

    def every_run_in(self, precision: str) -> list[Setting]:
        """Where each run sets ``precision`` (``bf16``), or empty when one run does not."""
        places = []
        for run in self.runs:
            if run.precision != precision:
                return []
            places += [
                setting
                for name in ("mixed_precision", "weights_dtype")
                if (setting := run.settings.get(name)) is not None and setting.value.startswith(precision)
            ][:1]
        return places


def effective_runs(repo: RepoContext) -> list[EntryRuns]:
    """Every training entry point of the repository with the configuration of each of its runs, once per run
    of perfbot (``repo.sources`` keeps it)."""
    key = (repo.root, "effective runs")
    if key not in repo.sources.facts:
        repo.sources.facts[key] = _resolve_all(repo.whole())
    return list(repo.sources.facts[key])


def _resolve_all(repo: RepoContext) -> list[EntryRuns]:
    program = program_of(repo)
    commands = launch_commands(repo)
    found = []
    launched = {command.target for command in commands}
    for entry in sorted({*program.entry_points, *launched}):
        files = program.imported_from(entry)
        texts = {path: repo.text(path) for path in files if _own(entry, path)}
        with_recipe = any(c.target == entry and c.console and _trains_by_recipe(repo, c) for c in commands)
        if not (with_recipe or _trains(repo, entry, texts)):
            continue
        trees = {path: repo.sources.syntax(path, text) for path, text in texts.items() if text}
        mine = [c for c in commands if c.target == entry and (not c.console or _trains_by_recipe(repo, c))]
        if not mine and any(c.target == entry for c in commands) and entry not in program.entry_points:
            continue  # a framework's console script that no command trains with (``chat``, ``export``)
        launches: list[LaunchCommand | None] = list(mine) or [None]
        runs = tuple(_run(repo, entry, launch, texts, trees) for launch in launches)
        found.append(EntryRuns(entry, files, runs))
    return found


def launched_first(repo: RepoContext, paths: list[str]) -> list[str]:
    """``paths`` with the files a launched training program loads first: a run-time helper's one copy goes where
    the first file that needs it can import it, so a launched program's file places it, not an unlaunched script
    beside it that the program cannot import from."""
    launched = {
        path
        for entry in effective_runs(repo)
        if any(run.launch is not None for run in entry.runs)
        for path in entry.files
    }
    return sorted(paths, key=lambda path: path not in launched)


def _trains(repo: RepoContext, entry: str, texts: dict[str, str]) -> bool:
    """Whether the entry point trains: it holds a backward pass, a trainer or a fit itself, or it calls a function
    of a file that does when it runs (FastChat's ``train_mem.py`` runs ``train()`` of ``train.py``), or reaches
    one through the package it imports (:func:`runs_training`); a tool that imports a helper of the training
    script (stanford_alpaca's ``weight_diff.py``) does not."""
    training = [path for path, text in texts.items() if any(marker in text for marker in TRAINING_MARKERS)]
    return (
        entry in training
        or any(runs_code_of(repo, entry, path) for path in training)
        or runs_training(repo, entry, TRAINING_MARKERS)
    )


def _trains_by_recipe(repo: RepoContext, launch: LaunchCommand) -> bool:
    """A framework's console script run with a recipe that sets how to train (``learning_rate``...)."""
    for recipe in launch.recipes:
        try:
            text = repo.read(recipe)
        except (OSError, UnicodeDecodeError):
            continue
        if any(yaml_settings(recipe, text, key) for key in TRAINING_KEYS):
            return True
    return False


def _own(entry: str, path: str) -> bool:
    """Whether ``path`` is the entry point's own code: the entry, or a file in its folder or below (a library
    the entry imports from elsewhere in the repository sets its values under conditions of its own)."""
    folder = posixpath.dirname(entry)
    return path == entry or not folder or path.startswith(folder + "/")


def _run(
    repo: RepoContext,
    entry: str,
    launch: LaunchCommand | None,
    texts: dict[str, str],
    trees: dict[str, ast.Module | None],
) -> Run:
    values: dict[str, Setting] = {}

    def put(settings: list[Setting] | tuple[Setting, ...]) -> None:
        for setting in settings:
            values[setting.name] = setting

    trainer = any(word in text for text in texts.values() for word in TRAINER_WORDS)
    put(PLAIN_DEFAULTS)
    if trainer:
        put(TRAINER_DEFAULTS)
    if _trl_config(repo, texts):
        put(TRL_DEFAULTS)
    # A framework's console script (``llamafactory-cli train recipe.yaml``) runs its library, whose code sets
    # values under conditions its recipe decides: the recipe, not the library's code, is the run's setting.
    framework = launch is not None and launch.console
    read = {} if framework else {p: _code_settings(repo, p, t) for p, t in trees.items() if t is not None}
    for path in sorted(read):
        put(read[path].defaults)
    late: list[Setting] = []
    reads = [r for path in sorted(read) for r in read[path].reads]
    recipes = run_recipes(repo, entry, launch)
    if launch is None:  # a Hydra script no command launches runs with its configs' defaults
        for recipe in recipes:
            put(_recipe(repo, recipe))
        put(_config_reads(repo, recipes, None, reads))
    else:
        late = _launch_configs(repo, launch, values)
        put([s for s in late if s.name != "optimizer"])
        for recipe in recipes:
            put(_recipe(repo, recipe))
        put(_flags(launch.flags, launch.where))
        put(_config_reads(repo, recipes, launch, reads))
        configured = values["distribution"].value != PLAIN_DEFAULTS[2].value
        # A launcher's processes are DDP, or DeepSpeed, unless a config already says how they are spread.
        put([s for s in _launcher_flags(launch) if not (configured and s.name == "distribution")])
    for path in sorted(read):
        # A `deepspeed.initialize(...)` in the code says DeepSpeed, not which stage: the launch's config does; a
        # launch or recipe that sets the value the code sets stays its source.
        put(
            [
                c
                for c in read[path].code
                if not _vaguer(c, values.get(c.name)) and not _same(c, values.get(c.name))
            ]
        )
    for path, text in texts.items():
        put(_deepspeed_in_code(path, text, trees.get(path)))
    put([s for s in late if s.name == "optimizer"])
    return Run(entry, launch, values)


def _same(setting: Setting, current: Setting | None) -> bool:
    """Whether ``current``, a launch's or recipe's setting (written outside Python), already holds ``setting``'s
    value."""
    return (
        current is not None
        and current.value == setting.value
        and ":" in current.source
        and not current.source.rpartition(":")[0].endswith(".py")
    )


def _vaguer(setting: Setting, current: Setting | None) -> bool:
    """Whether the distribution ``setting`` says less than ``current`` (``DeepSpeed`` beside ``DeepSpeed
    ZeRO-3``); an optimizer ``adamw_torch`` is no vaguer ``adamw_torch_fused``."""
    return (
        setting.name == "distribution"
        and current is not None
        and current.value != setting.value
        and current.value.startswith(setting.value)
    )


def _trl_config(repo: RepoContext, texts: dict[str, str]) -> bool:
    """Whether the run's code builds a TRL trainer config and the requirements admit a TRL whose configs
    default to bf16 (a pin below 0.19 keeps TrainingArguments' defaults)."""
    uses = any(name in text for text in texts.values() for name in TRL_CONFIGS)
    return uses and excludes(repo, "trl", TRL_DEFAULTS_SINCE) is None


def _code_settings(repo: RepoContext, path: str, tree: ast.Module) -> CodeSettings:
    """:func:`code_settings` of a file, once per parse."""
    key = (repo.root, f"code settings of {path}")
    kept = repo.sources.facts.get(key)
    if kept is None or kept[0] is not tree:
        kept = repo.sources.facts[key] = (tree, code_settings(path, tree))
    return kept[1]


def _launch_configs(repo: RepoContext, launch: LaunchCommand, values: dict[str, Setting]) -> list[Setting]:
    """The settings of the accelerate config and DeepSpeed config this launch names."""
    found: list[Setting] = []
    named = None
    config_file = launch.launcher_flags.get("config_file")
    if launch.launcher == "accelerate" and config_file:
        found, named = accelerate_config(repo, config_file)
    ds_file = (
        next(
            (
                launch.flags.get(f) or launch.launcher_flags.get(f)
                for f in DEEPSPEED_FLAGS
                if f in launch.flags or f in launch.launcher_flags
            ),
            None,
        )
        or named
    )
    if ds_file:  # JSON whatever its name (open-instruct's `stage3_no_offloading_accelerate.conf`)
        ds_file = posixpath.normpath(ds_file)
        flags = _flags(launch.flags, launch.where)
        trainer = precision_of({s.name: s for s in flags}) or precision_of(values)
        found += deepspeed_config(repo, ds_file, trainer)
        if not any(s.name == "distribution" for s in found):
            found.append(Setting("distribution", "DeepSpeed", launch.where, f"--deepspeed {ds_file}"))
    return found


def _recipe(repo: RepoContext, recipe: str) -> list[Setting]:
    try:
        text = repo.read(recipe)
    except (OSError, UnicodeDecodeError):
        return []
    found = []
    for name in (*RECIPE_KEYS, *BESIDE_SETTINGS):
        for setting in yaml_settings(recipe, text, name):
            read = reading(name, setting.value)
            beside = name not in BESIDE_SETTINGS or any(k in RECIPE_KEYS for k in setting.siblings)
            if read is not None and beside:
                found.append(Setting(read[0], read[1], f"{recipe}:{setting.line}", f"{name}: {setting.text}"))
    return found


def _config_reads(
    repo: RepoContext, recipes: list[str], launch: LaunchCommand | None, reads: list[ConfigRead]
) -> list[Setting]:
    """The settings the code reads from config keys (``torch_dtype=getattr(torch, config.model.policy_dtype)``)
    that the run gives a value: its launch's flag or Hydra override, else the last of its ``recipes`` that sets
    the key (a later recipe overrides an earlier one), each where the value is written."""
    found = []
    for read in reads:
        given = []
        for recipe in recipes:
            try:
                text = repo.read(recipe)
            except (OSError, UnicodeDecodeError):
                continue
            given += [
                (f"{recipe}:{y.line}", f"{y.key}: {y.text}", y.value)
                for y in yaml_settings(recipe, text, read.key)
            ]
        if launch is not None:
            for word in launch.positional:  # a Hydra override: ``model.policy_dtype=float32``
                name, equals, value = word.lstrip("+").partition("=")
                if equals and name.rpartition(".")[2] == read.key:
                    given.append((launch.where, word, value))
            if read.key in launch.flags:
                given.append((launch.where, f"--{read.key} {launch.flags[read.key]}", launch.flags[read.key]))
        shown = reading(read.argument, given[-1][2]) if given else None
        if shown is not None:
            source, written, _ = given[-1]
            found.append(
                Setting(shown[0], shown[1], source, f"{written}, read by {read.written} at {read.source}")
            )
    return found


def _flags(flags: dict[str, str], where: str) -> list[Setting]:
    found = []
    for name, value in flags.items():
        read = reading(name, value)
        if read is not None:
            found.append(Setting(read[0], read[1], where, f"--{name} {value}"))
    return found


def _launcher_flags(launch: LaunchCommand) -> list[Setting]:
    flags = launch.launcher_flags
    found = [s for s in _flags({k: v for k, v in flags.items() if k in LAUNCHER_SETTINGS}, launch.where)]
    processes = flags.get("nproc_per_node") or flags.get("num_processes") or flags.get("num_gpus")
    if launch.launcher == "deepspeed" or "use_deepspeed" in flags:
        stage = flags.get("zero_stage")
        shown = f"DeepSpeed ZeRO-{stage}" if stage else "DeepSpeed"
        found.append(Setting("distribution", shown, launch.where, launch.launcher))
    elif "use_fsdp" in flags:
        found.append(Setting("distribution", "FSDP", launch.where, "--use_fsdp"))
    elif processes and processes not in ("1",) and launch.launcher in ("torchrun", "accelerate"):
        found.append(
            Setting(
                "distribution", f"DDP x{processes}", launch.where, f"{launch.launcher} {processes} processes"
            )
        )
    return found


def _deepspeed_in_code(path: str, text: str, tree: ast.Module | None) -> list[Setting]:
    """A DeepSpeed config written as a dict literal in code (``ds_config = {"zero_optimization": ...}``)."""
    if tree is None or "zero_optimization" not in text:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value == "zero_optimization" for k in node.keys
        ):
            data = _constants(node)
            if isinstance(data, dict):
                lines = text.splitlines(keepends=True)
                start = sum(len(line) for line in lines[: node.lineno - 1])
                shifted = deepspeed_settings(data, path, text[start:])
                found += [
                    Setting(
                        s.name,
                        s.value,
                        f"{path}:{node.lineno + int(s.source.rpartition(':')[2]) - 1}",
                        s.written,
                    )
                    for s in shifted
                ]
    return found


def _constants(node: ast.expr) -> object:
    """A dict/list literal's constant parts (anything else as None)."""
    if isinstance(node, ast.Dict):
        return {
            k.value: _constants(v)
            for k, v in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant)
        }
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_constants(e) for e in node.elts]
    return node.value if isinstance(node, ast.Constant) else None
