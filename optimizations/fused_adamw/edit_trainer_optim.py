"""The fused AdamW of a ``transformers`` Trainer: ``optim="adamw_torch_fused"`` wherever the repository pins the
unfused ``adamw_torch`` (or the older ``adamw_hf``) -- in a ``TrainingArguments`` subclass's field default, a
config call's literal keyword, a recipe YAML's ``optim:`` key or a launch script's ``--optim`` flag.

``adamw_torch_fused`` is the Trainer's own default from transformers 4.56 on torch 2.8, so a repository that
sets nothing gets no edit: only an explicit unfused choice is one -- unless its requirements keep torch below
2.8, where the default is the unfused ``adamw_torch``: then a recipe its launches pass that sets no ``optim``
gets ``optim: adamw_torch_fused``. A value with a comment on its line is kept
as chosen on purpose; a run whose DeepSpeed config builds its own optimizer (an ``optimizer`` block, or ZeRO's
CPU offload) ignores ``optim``, so the site is refused naming that config line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst

from optimizations.edits.planned import PlannedCodemod
from optimizations.edits.yaml_text import add_keys
from optimizations.program.hf import HF_CONFIGS, is_training_config
from optimizations.program.recipes import launches
from optimizations.program.repository import RepoContext, Site
from optimizations.program.requirements import excludes
from optimizations.program.runs.every_run import runs_of
from optimizations.program.runs.settings import memory_saving
from optimizations.program.syntax import code_of, keyword
from optimizations.program.yaml_settings import settings

FUSED = "adamw_torch_fused"
# The torch release from which transformers' Trainer defaults to the fused AdamW (with transformers >= 4.56).
FUSED_DEFAULT_SINCE = "2.8"
UNFUSED = ("adamw_torch", "adamw_hf")
# Keys that mark a YAML mapping as a recipe of TrainingArguments (two of them beside ``optim``).
TRAINING_KEYS = frozenset(
    {
        "learning_rate",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "num_train_epochs",
        "max_steps",
        "output_dir",
        "bf16",
        "lr_scheduler_type",
        "warmup_ratio",
        "logging_steps",
    }
)
MESSAGE = f'optim="{FUSED}": the same AdamW update in one fused kernel'


MEMORY_SAVING = "an optimizer chosen to save memory; the fused AdamW would give that saving up"


def deepspeed_optimizer(repo: RepoContext, path: str) -> str | None:
    """Why ``optim`` chooses the optimizer of no run that loads ``path``: the DeepSpeed config line that builds
    one in each of them; ``None`` when some run builds the Trainer's (a README's FSDP commands beside a ZeRO
    offload one: the default still matters to those)."""
    runs = runs_of(repo, path)
    settings = [run.settings.get("optimizer") for run in runs]
    if not runs or not all(s is not None and s.value.startswith("DeepSpeed") for s in settings):
        return None
    places = "; ".join(dict.fromkeys(f"{s.source} (`{s.written}`)" for s in settings if s is not None))
    return (
        f"every run's DeepSpeed config builds its own optimizer, which replaces the Trainer's optim: {places}"
    )


class TrainerOptim(PlannedCodemod):
    """The Python sites: a ``TrainingArguments`` subclass's ``optim`` default, and ``optim=`` keywords of
    TrainingArguments-family calls, set to an unfused AdamW."""

    def plan_trainer_optim(self) -> None:
        """Switch every unfused ``optim`` literal of the file to the fused one, or say why not."""
        for value, owner in self._optim_literals():
            written = code_of(value)
            if isinstance(value, cst.SimpleString) and memory_saving(str(value.evaluated_value)):
                self.kept(self.line(value), f"optim {written}", MEMORY_SAVING)
                continue
            if self._commented(value):
                self.kept(self.line(value), f"optim {written}", "a comment on its line gives the reason")
                continue
            if (reason := deepspeed_optimizer(self.repo, self.path)) is not None:
                self.refused(value, MESSAGE, reason)
                continue
            self.replacements[value] = _fused_in_quotes_of(written)
            self.changed(value, f"{owner}: {MESSAGE}")

    def _optim_literals(self) -> Iterator[tuple[cst.SimpleString, str]]:
        for cls in self.nodes(cst.ClassDef):
            if not any(is_training_config(self.names(base.value)) for base in cls.bases):
                continue
            for statement in cls.body.body:
                for small in getattr(statement, "body", ()):
                    if not isinstance(small, cst.AnnAssign) or not isinstance(small.target, cst.Name):
                        continue
                    if small.target.value != "optim" or small.value is None:
                        continue
                    value = small.value
                    if isinstance(value, cst.Call) and (default := keyword(value, "default")) is not None:
                        value = default.value
                    if self._unfused(value):
                        yield value, f"the optim default of {cls.name.value}"  # type: ignore[misc]
        for call in self.nodes(cst.Call):
            argument = keyword(call, "optim")
            if (
                argument is not None
                and self._unfused(argument.value)
                and is_training_config(self.names(call.func))
            ):
                yield argument.value, f"{code_of(call.func)}(optim=...)"  # type: ignore[misc]

    @staticmethod
    def _unfused(value: cst.BaseExpression) -> bool:
        """An unfused AdamW, or a memory-saving optimizer (reported as kept)."""
        if not isinstance(value, cst.SimpleString):
            return False
        chosen = str(value.evaluated_value)
        return chosen in UNFUSED or memory_saving(chosen)

    def _commented(self, value: cst.CSTNode) -> bool:
        line = self.line(value)
        text = self.repo.read(self.path).splitlines()
        return 0 < line <= len(text) and "#" in text[line - 1].split(code_of(value), 1)[-1]


def _fused_in_quotes_of(written: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A replacement writing the fused optimizer's name in the quotes of the string it replaces."""
    quote = written[0] if written[:1] in ("'", '"') else '"'
    return lambda _node: cst.SimpleString(f"{quote}{FUSED}{quote}")


def recipe_and_flag_sites(repo: RepoContext, optimization: str) -> list[Site]:
    """The launch flags and recipe YAMLs that pin an unfused AdamW for a Trainer, switched to the fused one."""
    sites: list[Site] = []
    parsers = [p for p in repo.python_files() if _fills_training_config(repo, p)]
    if not parsers:
        return sites
    for path in repo.files("*.yaml", "*.yml"):
        sites += _recipe_sites(repo, path, optimization, parsers[0])
    if (pinned := excludes(repo, "torch", FUSED_DEFAULT_SINCE)) is not None:
        sites += _unset_recipe_sites(repo, parsers, optimization, pinned)
    for script in parsers:
        for launch in launches(repo, script):
            value = launch.flags.get("optim")
            if value in UNFUSED:
                reason = deepspeed_optimizer(repo, script) or (
                    "a documented command: change `--optim` where the run is launched"
                    if launch.documented
                    else None
                )
                sites.append(
                    Site(launch.path, launch.line, optimization, f"--optim {FUSED}", False, reason or "")
                )
                if reason is None:
                    sites[-1] = _flip(repo, launch.path, launch.line, value, optimization)
    return sites


def _unset_recipe_sites(repo: RepoContext, parsers: list[str], optimization: str, pinned: str) -> list[Site]:
    """``optim: adamw_torch_fused`` added to each recipe the parsers' launches pass that sets no ``optim``
    (where the requirement ``pinned`` keeps the Trainer's default unfused), or why not."""
    sites: list[Site] = []
    done: set[str] = set()
    for script in parsers:
        for path in (c for launch in launches(repo, script) for c in launch.configs if c not in done):
            done.add(path)
            try:
                text = repo.read(path)
            except (OSError, UnicodeDecodeError):
                continue
            keys = {s.key for key in TRAINING_KEYS for s in settings(path, text, key)}
            if settings(path, text, "optim") or len(keys) < 2:
                continue
            message = (
                f"recipe optim: {FUSED} ({pinned} keeps torch below {FUSED_DEFAULT_SINCE}, where the default is "
                "unfused)"
            )
            reason = deepspeed_optimizer(repo, script)
            added = None if reason else add_keys(text, {"optim": FUSED})
            if added is None:
                reason = reason or "the recipe is not a plain YAML mapping"
                sites.append(Site(path, 1, optimization, message, False, reason))
                continue
            repo.edit(path, added[0])
            sites.append(Site(path, added[1], optimization, message))
    return sites


def _fills_training_config(repo: RepoContext, path: str) -> bool:
    try:
        text = repo.read(path)
    except (OSError, UnicodeDecodeError):
        return False
    return ("HfArgumentParser" in text or "TrlParser" in text) and any(c in text for c in HF_CONFIGS)


def _recipe_sites(repo: RepoContext, path: str, optimization: str, script: str) -> list[Site]:
    try:
        text = repo.read(path)
    except (OSError, UnicodeDecodeError):
        return []
    if "optim" not in text:
        return []
    found = [
        s
        for s in settings(path, text, "optim")
        if len(TRAINING_KEYS & s.siblings.keys()) >= 2 and (s.value in UNFUSED or memory_saving(str(s.value)))
    ]
    sites = []
    for setting in reversed(found):  # later spans first, so earlier ones stay where they are
        comment = text[setting.end :].split("\n", 1)[0].strip()
        evidence = (
            MEMORY_SAVING if memory_saving(str(setting.value)) else comment if comment.startswith("#") else ""
        )
        if evidence:
            sites.append(
                Site(path, setting.line, optimization, f"optim: {setting.text}", False, evidence, kept=True)
            )
            continue
        reason = deepspeed_optimizer(repo, script)
        if reason is not None:
            sites.append(Site(path, setting.line, optimization, f"recipe optim: {FUSED}", False, reason))
            continue
        text = text[: setting.start] + FUSED + text[setting.end :]
        sites.append(Site(path, setting.line, optimization, f"recipe optim: {FUSED} (was {setting.text})"))
    if any(s.applicable for s in sites):
        repo.edit(path, text)
    return sorted(sites, key=lambda s: s.line)


def _flip(repo: RepoContext, path: str, line: int, value: str, optimization: str) -> Site:
    """The launch line's ``--optim <value>`` set to the fused AdamW (the shell text is not Python: its words are
    replaced on their line only)."""
    lines = repo.read(path).splitlines(keepends=True)
    for number in range(line - 1, len(lines)):
        for spelling in (f"--optim {value}", f"--optim={value}", f'--optim "{value}"'):
            if spelling in lines[number]:
                lines[number] = lines[number].replace(spelling, spelling.replace(value, FUSED), 1)
                repo.edit(path, "".join(lines))
                return Site(path, number + 1, optimization, f"launch flag --optim {FUSED} (was {value})")
        if not lines[number].rstrip().endswith("\\"):
            break
    return Site(
        path, line, optimization, f"--optim {FUSED}", False, "the flag is not written on the command's lines"
    )
