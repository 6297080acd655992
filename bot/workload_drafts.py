"""Benchmark workloads drafted from how the repository runs its training programs.

Each launch command the program model finds (:mod:`optimizations.program.runs`: shell and Slurm scripts,
Makefiles, README code blocks) becomes one workload that runs the repository's own command, with its own flags and
config files, plus the overrides a short measured run needs. Every override is listed with its reason, and
written into ``[tool.bot]`` where the user can read and change it:

- the step count: the program's own step option where it has one (``--max_steps`` of a ``TrainingArguments``
  parser, an argparse ``--max-steps``/``--max_iters``, a module-level ``max_iters = ...`` that a configurator
  file the program runs (``exec``) overrides from ``--max_iters=N`` words), and always the launcher's step limit
  (``stop_after_steps``), which ends the run after its last measured step without editing the code, so what the
  program does after training (saving, evaluating, uploading) is not run;
- no experiment tracker and no checkpoint saving on a ``Trainer`` script (the runner has no network);
- at the CPU size, a hand-written loop's own options (argparse or configurator) set for a CPU: its device, no
  ``compile``, and the model it builds from its options shrunk to the shapes a tiny Hub model is built at
  (width, depth, heads, sequence length);
- a model the runner cannot download, built from its architecture config at the bench's size
  (:mod:`benchmarks.architectures`, :mod:`benchmarks.offline_models`);
- a ``deepspeed`` launch run as ``torchrun`` with as many processes, the launcher the bench measures through;
- a launch that moves to a folder first (``cd trainer && python train.py``) run in that folder (``directory``).

A flag spelled with a trailing ``=`` in ``flags`` (``"--max_iters=" = "{steps}"``) is passed joined to its value
(``--max_iters=20``), as a configurator that reads ``--name=value`` words needs.

A drafted workload names its launch file and program, and the bench reads the command from that file again at
every commit it measures (:func:`launched_at`), so a commit that changes the launch is measured with it.

What a draft cannot fix is said as a blocker (a dataset fetched from the Hub, a shell variable with no value
in its script), with the override that would fix it.
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

import git
import yaml

from benchmarks.architectures import architecture
from benchmarks.spec import BenchSpec, Workload
from bot.errors import BadInput
from optimizations.program.recipes import flag_arguments, shell_commands, shell_words
from optimizations.program.repository import RepoContext
from optimizations.program.run_calls import called_name
from optimizations.program.runs.commands import LaunchCommand, commands_in, launch_commands
from optimizations.program.runs.hydra import composed_files, hydra_app, launch_recipes
from optimizations.program.runs.options import Option, cpu_settings, program_options
from optimizations.program.runs.resolve import EntryRuns, effective_runs
from optimizations.program.yaml_settings import settings as yaml_settings

STEPS = 20
CPU_SIZE = "tiny"  # the bench size that runs on a CPU
WARMUP_STEPS = 5
REPEATS = 3
# A parser that fills ``TrainingArguments`` from the command line takes every one of its fields as a flag.
TRAINER_PARSERS = ("HfArgumentParser", "TrlParser")
# Argparse options that bound a hand-written loop's steps, by their name with dashes read as underscores.
STEP_OPTIONS = (
    "max_steps",
    "max_train_steps",
    "max_iters",
    "max_iterations",
    "num_iterations",
    "num_steps",
    "total_steps",
    "train_steps",
    "steps",
)
MODEL_KEYS = (
    "model_name_or_path",
    "pretrained_model_name_or_path",
    "base_model",
    "model_name",
    "model_id",
    "model_path",
    "model",
)
DATASET_KEYS = ("dataset_name", "dataset_name_or_path", "dataset", "dataset_path", "data_path", "train_file")
DATA_SUFFIXES = (".json", ".jsonl", ".csv", ".tsv", ".parquet", ".arrow", ".txt", ".bin", ".npy", ".pkl")
# Keys of a Hydra config that turn an experiment tracker on, and the value that turns it off.
TRACKERS_OFF = {"wandb_project": "null", "report_to": "none", "use_wandb": "false", "log_with": "null"}
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
SHELL_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
# Launchers the bench measures through (``benchmarks.launch``), and the options that count their processes.
PROCESS_OPTIONS = {
    "accelerate": ("num_processes",),
    "torchrun": ("nproc_per_node",),
    "deepspeed": ("num_gpus",),
}


@dataclass
class WorkloadDraft:
    """One drafted workload: the command, what was changed to measure it, and what still stands in its way."""

    name: str
    drafted_from: str  # ``path:line`` of the command, or that no launch was found
    command: list[str]  # shell words; ``{steps}``/``{seed}`` placeholders stay unquoted
    gpus: int = 1
    directory: str = ""  # the folder the command runs in (its launch's ``cd``); empty: the repository root
    source: LaunchCommand | None = None  # the launch it was drafted from, read again at every commit benched
    flags: dict[str, str] = field(default_factory=dict)  # the flags set on top of the launch's own
    occurrence: int = 1  # which of the launch file's commands that run the program it is
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)  # git-ignored paths the run reads
    overrides: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)

    @property
    def command_line(self) -> str:
        """The command as one shell line."""
        return " ".join(word if word in ("{steps}", "{seed}") else shlex.quote(word) for word in self.command)

    def toml(self) -> str:
        """The ``[tool.bot.workloads.<name>]`` table, its overrides and blockers as comments above it."""
        lines = [f"# Drafted from {self.drafted_from} by `bot init`."]
        lines += [f"# override: {line}" for line in self.overrides]
        lines += [f"# blocker: {line}" for line in self.blockers]
        lines.append(f"[tool.bot.workloads.{self.name}]")
        if self.source is not None:  # the command is read from the launch at each commit; this is today's
            lines += [
                f"launch = {_toml_value(self.source.path)}",
                f"program = {_toml_value(self.source.target)}",
                *([f"occurrence = {self.occurrence}"] if self.occurrence > 1 else []),
                *([f"directory = {_toml_value(self.directory)}"] if self.directory else []),
                "flags = {"
                + ", ".join(f"{_toml_value(k)} = {_toml_value(v)}" for k, v in self.flags.items())
                + "}",
            ]
        lines += [
            f"command = {_toml_value(self.command_line)}",
            f"steps = {STEPS}",
            f"warmup_steps = {WARMUP_STEPS}",
            f"repeats = {REPEATS}",
            "stop_after_steps = true",
        ]
        if self.inputs:
            lines.append("inputs = [" + ", ".join(_toml_value(path) for path in self.inputs) + "]")
        if self.gpus != 1:
            lines.append(f"gpus = {self.gpus}")
        for model, config in self.models.items():
            lines.append(f"\n[tool.bot.workloads.{self.name}.models.{_toml_value(model)}]")
            lines += [f"{key} = {_toml_value(value)}" for key, value in config.items()]
        return "\n".join(lines) + "\n"


def draft_workloads(root: Path, size: str) -> list[WorkloadDraft]:
    """One draft per distinct launch of each training entry point of the repository at ``root``; models are
    built at ``size`` (``tiny`` on a CPU)."""
    repo = RepoContext(Path(root))
    drafts: list[WorkloadDraft] = []
    seen: set[str] = set()
    for entry in effective_runs(repo):
        for run in entry.runs:
            draft = _draft(repo, entry, run.launch, size)
            if draft is None or draft.command_line in seen:
                continue
            seen.add(draft.command_line)
            draft.name = _unique(draft.name, {d.name for d in drafts})
            drafts.append(draft)
    return drafts


def tool_bot_table(drafts: Iterable[WorkloadDraft], size: str) -> str:
    """The ``[tool.bot]`` table holding the drafts."""
    head = (
        "[tool.bot]\n"
        "# Written by `bot init` from the repository's launch commands: read every override below.\n"
        f"size = {_toml_value(size)}\n"
        "seed = 0\n"
    )
    return head + "".join("\n" + draft.toml() for draft in drafts)


def _draft(
    repo: RepoContext, entry: EntryRuns, launch: LaunchCommand | None, size: str
) -> WorkloadDraft | None:
    name = posixpath.splitext(posixpath.basename(entry.entry))[0].replace(".", "_")
    if launch is None:
        draft = WorkloadDraft(name, f"{entry.entry} (no launch command found)", ["python", entry.entry])
        draft.overrides.append(f"runs `python {entry.entry}` as written: no script or document launches it")
    elif launch.console:
        return None  # a framework's console script: the bench launches Python programs
    else:
        draft = WorkloadDraft(name, launch.where, [], source=launch)
        draft.command = _command(launch, repo.text(launch.path), draft)
        same = [c for c in launch_commands(repo) if (c.path, c.target) == (launch.path, launch.target)]
        draft.occurrence = same.index(launch) + 1
    texts = {path: repo.text(path) for path in sorted(entry.files) if path.endswith(".py")}
    options = program_options(repo, entry.entry, texts.get(entry.entry, ""))
    _steps(texts, options, size, draft)
    _hydra_overrides(repo, launch, size, draft)
    _models(repo, launch, texts, size, draft)
    _datasets(repo, launch, texts, draft, options)
    draft.overrides.append(
        "stop_after_steps: the launcher ends the run after its last measured step; nothing after training runs"
    )
    draft.blockers = list(dict.fromkeys(draft.blockers))
    return draft


def _command(launch: LaunchCommand, script: str, draft: WorkloadDraft) -> list[str]:
    """The launch's words from its launcher on: variables of its ``script`` (the launch file's text) filled in,
    the program named from the repository root, a ``deepspeed`` launch turned into ``torchrun``."""
    values = _script_variables(launch.path, script)
    words = [_filled(word, values, draft) for word in launch.words]
    target = _target_index(words)
    start = max((i for i, word in enumerate(words[:target]) if _launcher(word) is not None), default=0)
    for word in words[:start]:
        if _assignment(word):
            draft.overrides.append(f"leaves out `{word}`: the runner sets the environment and picks the GPUs")
    words, target = words[start:], target - start
    launcher = _launcher(words[0]) or "python"
    words[0] = launcher
    if launch.directory:
        draft.directory = launch.directory
        draft.overrides.append(
            f"directory {launch.directory}: the command runs in that folder, as its launch's "
            f"`cd {launch.directory}` has it"
        )
    elif not launch.as_module and words[target] != launch.target:
        draft.overrides.append(f"names the script from the repository root: {launch.target}")
        words[target] = launch.target
    processes = next(
        (
            launch.launcher_flags[option]
            for option in PROCESS_OPTIONS.get(launcher, ())
            if option in launch.launcher_flags
        ),
        "1",
    )
    if processes.isdigit():
        draft.gpus = int(processes)
    if launcher == "deepspeed":
        draft.overrides.append(
            f"runs `deepspeed` as `torchrun --nproc-per-node {processes}`: the bench measures through torchrun, "
            "which starts the same processes on one node"
        )
        words = ["torchrun", "--nproc-per-node", processes, *words[target:]]
    return words


def _assignment(word: str) -> bool:
    name, equals, _ = word.partition("=")
    return bool(equals) and name.isidentifier()


def _launcher(word: str) -> str | None:
    name = posixpath.basename(word)
    if re.fullmatch(r"python[0-9.]*", name):
        return "python"
    return name if name in ("accelerate", "torchrun", "deepspeed") else None


def _target_index(words: list[str]) -> int:
    """Where the program starts: the first ``.py`` word, or the module after ``-m``."""
    for index, word in enumerate(words):
        if word.endswith(".py"):
            return index
        if word == "-m" and index + 1 < len(words) and not words[index + 1].startswith("torch.distributed"):
            return index
    return len(words) - 1


def _script_variables(path: str, script: str) -> dict[str, str]:
    """``NAME=value`` lines of a shell script (the last one wins); empty for a document."""
    if path.endswith(".md"):
        return {}
    values: dict[str, str] = {}
    for _line, _start, _end, command in shell_commands(script):
        words = shell_words(command.strip().removeprefix("export "))
        if len(words) == 1 and "=" in words[0]:
            name, _, value = words[0].partition("=")
            if name.isidentifier():
                values[name] = SHELL_VARIABLE.sub(lambda m: values.get(m.group(1), m.group(0)), value)
    return values


def _filled(word: str, values: dict[str, str], draft: WorkloadDraft) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in values:
            return values[name]
        draft.blockers.append(f"`${name}` has no value in the script; replace it in the command")
        return match.group(0)

    return SHELL_VARIABLE.sub(value, word)


def _steps(texts: dict[str, str], options: dict[str, Option], size: str, draft: WorkloadDraft) -> None:
    """The program's own step option set to ``{steps}``; on a Trainer, the tracker and checkpoints off, and
    the CPU asked for at the CPU size (a bf16 config refuses to start on a CPU otherwise); on a hand-written
    loop at the CPU size, its own options set for a CPU (:func:`cpu_settings`)."""
    if any(parser in text for text in texts.values() for parser in TRAINER_PARSERS):
        repeat = "so a short dataset repeats until the measured steps are run"
        _set_flag(draft, "--max_steps", "{steps}", repeat)
        _set_flag(draft, "--report_to", "none", "no experiment tracker: the runner has no network")
        _set_flag(draft, "--save_strategy", "no", "no checkpoints: saving is not training")
        if size == CPU_SIZE:
            _set_flag(
                draft, "--use_cpu", "True", f"size {CPU_SIZE!r} runs on the CPU, in the run's own precision"
            )
        return
    step = next((options[name] for name in STEP_OPTIONS if name in options), None)
    if step is not None:
        _set_flag(draft, step.flag, "{steps}", "the program's own step limit")
    if size == CPU_SIZE:  # a hand-written loop's own options, as a run on the CPU needs them
        for flag, value, why in cpu_settings(options):
            _set_flag(draft, flag, value, f"size {CPU_SIZE!r} runs on the CPU: {why}")


def _hydra_overrides(
    repo: RepoContext, launch: LaunchCommand | None, size: str, draft: WorkloadDraft
) -> None:
    """On a Hydra script, set as ``key=value``: a tracker its composed config turns on, off; at the CPU size,
    bf16/fp16 training off."""
    app = hydra_app(launch.target, repo.text(launch.target)) if launch is not None else None
    if launch is None or app is None:
        return
    for path in composed_files(repo, app, launch.positional):
        text = repo.text(path)
        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if not isinstance(config, dict):
            continue
        group = posixpath.relpath(posixpath.dirname(path), app.config_dir)
        global_package = path == app.primary or text.lstrip().startswith("# @package _global_")
        prefix = "" if global_package else group.replace("/", ".") + "."
        for key, off in TRACKERS_OFF.items():
            if config.get(key) not in (None, False, off):
                _set_flag(draft, prefix + key, off, "no experiment tracker: the runner has no network")
        for key in ("bf16", "fp16"):
            if size == CPU_SIZE and config.get(key) is True:
                _set_flag(
                    draft, prefix + key, "false", f"size {CPU_SIZE!r} runs on the CPU, without {key} training"
                )


def _set_flag(draft: WorkloadDraft, flag: str, value: str, why: str) -> None:
    """Give ``flag`` the value ``value`` in the command (replacing its value where it is already passed); a
    Hydra override (``key``, no dashes) is set as ``key=value``, or passed alone when ``value`` is empty
    (``~key``); a flag ending in ``=`` (``--max_iters=``) is passed joined to its value, one word."""
    words = draft.command
    if not flag.startswith("-"):
        setting = f"{flag}={value}" if value else flag
        at = next((i for i, word in enumerate(words) if word.partition("=")[0] == flag), None)
        if at is None:
            words.append(setting)
        else:
            words[at] = setting
        draft.flags[flag] = value
        draft.overrides.append(f"{setting}: {why}")
        return
    joined = flag.endswith("=")
    bare = flag.removesuffix("=")
    names = {bare, bare.replace("_", "-")}
    for index, word in enumerate(words):
        name, equals, _ = word.partition("=")
        if name in names:
            if equals or joined:
                words[index] = f"{name}={value}"
            elif index + 1 < len(words) and not words[index + 1].startswith("--"):
                words[index + 1] = value
            else:
                words.insert(index + 1, value)
            bare = name
            break
    else:
        words += [f"{bare}={value}"] if joined else [bare, value]
    flag = f"{bare}=" if joined else bare
    draft.flags[flag] = value
    draft.overrides.append(f"{bare}={value}: {why}" if joined else f"{bare} {value}: {why}")


def _named_values(
    draft: WorkloadDraft, launch: LaunchCommand | None, repo: RepoContext, keys: tuple[str, ...]
) -> list[str]:
    """The values the drafted command gives ``keys`` (its script's variables filled in), then the keys of the
    launch's YAML recipes (those it passes, or a Hydra script composes)."""
    if launch is None:
        return []
    flags, _ = flag_arguments(draft.command)
    found = [flags[key] for key in keys if key in flags]
    for recipe in launch_recipes(repo, launch):
        text = repo.text(recipe)
        for key in keys:
            found += [str(setting.value) for setting in yaml_settings(recipe, text, key)]
    return found


def _literal_ids(texts: dict[str, str], function: str) -> list[str]:
    """String literals passed first to ``function`` (``from_pretrained``, ``load_dataset``), and the string
    defaults of dataclass fields named like a model, in the files the entry point loads."""
    found = []
    for text in texts.values():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and called_name(node) == function and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found.append(first.value)
            if function == "from_pretrained" and isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
                if isinstance(target, ast.Name) and target.id in MODEL_KEYS:
                    default = _field_default(value)
                    if default is not None:
                        found.append(default)
    return found


def _field_default(value: ast.expr | None) -> str | None:
    """The default of ``x: str = "..."`` or ``x: str = field(default="...")``."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if isinstance(value, ast.Call):
        for keyword in value.keywords:
            if keyword.arg == "default" and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
    return None


def _models(
    repo: RepoContext, launch: LaunchCommand | None, texts: dict[str, str], size: str, draft: WorkloadDraft
) -> None:
    """A config for each Hub model the run names, to build it with random weights on a runner that cannot
    download it."""
    named = _named_values(draft, launch, repo, MODEL_KEYS) or _literal_ids(texts, "from_pretrained")
    for model in dict.fromkeys(named):
        if not HUB_ID.fullmatch(model) or (repo.root / model).exists():
            continue
        config = architecture(model, size)
        if config is None:
            draft.blockers.append(
                f"model {model} is downloaded at run time and its architecture is not one perfbot knows; add "
                f'[tool.bot.workloads.{draft.name}.models."{model}"] with its config (model_type, sizes)'
            )
            continue
        draft.models[model] = config
        draft.overrides.append(
            f"model {model}: built from its {config['model_type']} config at size {size!r} with random weights "
            "(the runner cannot download it); the models table below is that config"
        )


def _datasets(
    repo: RepoContext,
    launch: LaunchCommand | None,
    texts: dict[str, str],
    draft: WorkloadDraft,
    options: dict[str, Option] | None = None,
) -> None:
    """Each local data file the run reads that git ignores, as an input linked into every checkout; a blocker
    for one that is not on disk, and for each dataset the run fetches from the Hub. The run reads what its
    command (or recipe) names, else the default of a hand-written loop's data option (``--data_path``)."""
    named = _named_values(draft, launch, repo, DATASET_KEYS)
    passed = {key.replace("-", "_") for key in flag_arguments(draft.command)[0]}
    for key in DATASET_KEYS:
        option = (options or {}).get(key)
        if option is not None and isinstance(option.default, str) and key not in passed:
            named.append(option.default)
    named = named or _literal_ids(texts, "load_dataset")
    for dataset in dict.fromkeys(named):
        if _local_data(dataset):
            path = posixpath.normpath(
                posixpath.join(draft.directory, dataset)
            )  # as the run in its folder reads it
            if path.startswith("../"):
                continue  # outside the repository: nothing to link into a checkout
            if not (repo.root / path).exists():
                draft.blockers.append(
                    f"{dataset} is read by the run and is not here: put data there in the format the program "
                    "reads, and list it in the workload's inputs (the bench links them into every checkout)"
                )
            elif not _tracked(repo.root, path):
                draft.inputs.append(path)
                draft.overrides.append(
                    f"inputs: {path} is git-ignored; the bench links it into every commit's checkout"
                )
            continue
        if HUB_ID.fullmatch(dataset) and not (repo.root / dataset).exists():
            draft.blockers.append(
                f"dataset {dataset} is fetched from the Hub: the runner needs it in its Hugging Face cache, or "
                "pass a local copy in its place in the command"
            )


def _local_data(value: str) -> bool:
    """A relative path to data in the repository (``data/sft/train.jsonl``, ``./data``), not a Hub id."""
    path = PurePosixPath(value)
    return (
        not path.is_absolute()
        and "$" not in value
        and (value.startswith(("./", "../")) or path.suffix in DATA_SUFFIXES or len(path.parts) > 2)
    )


def _tracked(root: Path, path: str) -> bool:
    """Whether git holds ``path`` (a file, or files under a folder) in the repository at ``root``."""
    try:
        return bool(git.Repo(root).git.ls_files("--", path).strip())
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError):
        return (root / path).exists()


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    number = 2
    while f"{name}-{number}" in taken:
        number += 1
    return f"{name}-{number}"


def _toml_value(value: Any) -> str:
    """A TOML literal of a string, number or boolean (a TOML basic string escapes as JSON does)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def launched_at(repo: git.Repo, spec: BenchSpec, revisions: Iterable[str]) -> BenchSpec:
    """``spec`` with the command of each workload read from a launch file (``launch``/``program``) as that file
    has it at each revision, with the workload's flags set on top: a commit that changes the launch (a flag
    perfbot sets there) is measured with its change. A revision whose launch file no longer runs the program is
    bad input, named."""
    shas = list(revisions)
    workloads = {
        name: replace(workload, commands={sha: _command_at(repo, sha, workload) for sha in shas})
        if workload.launch is not None
        else workload
        for name, workload in spec.workloads.items()
    }
    return replace(spec, workloads=workloads)


def _command_at(repo: git.Repo, sha: str, workload: Workload) -> str:
    assert workload.launch is not None and workload.program is not None
    tree = repo.commit(sha).tree
    where = f"{workload.launch} at {sha[:7]}"
    try:
        script = tree[workload.launch].data_stream.read().decode("utf-8")
    except (KeyError, UnicodeDecodeError) as error:
        raise BadInput(
            f"workload {workload.name} reads its command from {where}, which is missing"
        ) from error
    files = {path for path in repo.git.ls_tree("-r", "--name-only", sha).splitlines() if path.endswith(".py")}
    found = [c for c in commands_in(workload.launch, script, files) if c.target == workload.program]
    if len(found) < workload.occurrence:
        raise BadInput(
            f"workload {workload.name}: {where} has no command that runs {workload.program} (or fewer than "
            f"{workload.occurrence}); give the workload "
            "a command of its own in [tool.bot] (and drop its launch and program)"
        )
    launch = found[workload.occurrence - 1]
    draft = WorkloadDraft(workload.name, launch.where, [], source=launch)
    draft.command = _command(launch, script, draft)
    for flag, value in workload.flags.items():
        _set_flag(draft, flag, value, "set by the workload")
    return draft.command_line
