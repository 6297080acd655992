"""Frameworks that drive training, and where each takes its settings: the setting is the site.

A loop stepped by Accelerate (``accelerator.backward(loss)``), a Lightning ``Trainer``/``Fabric`` or a DeepSpeed
engine gets its precision from the framework, not from an autocast the script nests inside it:

| framework | the call | bf16 mixed precision is |
| --- | --- | --- |
| Accelerate | ``Accelerator(...)`` | ``mixed_precision="bf16"`` |
| Lightning | ``Trainer(...)``, ``Fabric(...)`` | ``precision="bf16-mixed"`` |
| DeepSpeed | ``deepspeed.initialize(config=...)`` | the config's ``"bf16": {"enabled": true}`` |

:func:`framework_calls` finds these calls in a file; :func:`framework_backward` tells a loop whose backward
goes through a framework object (``accelerator.backward(loss)``, ``fabric.backward(loss)``,
``engine.backward(loss)``) from a plain ``loss.backward()``.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import libcst as cst

from optimizations.program.repository import RepoContext
from optimizations.program.syntax import keyword, qualified_under

# Words a file holding one of these calls contains (an optimization's ``needs``).
FRAMEWORK_WORDS = ("Accelerator", "lightning", "deepspeed")


@dataclass(frozen=True)
class Framework:
    """A framework's entry call and the keyword that takes its precision."""

    name: str
    packages: tuple[str, ...]
    classes: tuple[str, ...]
    precision: str  # the keyword argument that sets mixed precision
    bf16: tuple[object, ...]  # values of that keyword that mean bf16
    float16: tuple[object, ...]  # values that mean float16 mixed precision


ACCELERATE = Framework(
    "Accelerate", ("accelerate",), ("Accelerator",), "mixed_precision", ("bf16",), ("fp16",)
)
LIGHTNING = Framework(
    "Lightning",
    ("lightning", "pytorch_lightning"),
    ("Trainer", "Fabric"),
    "precision",
    ("bf16-mixed", "bf16", "bf16-true"),
    ("16-mixed", "16", 16, "16-true"),
)
DEEPSPEED = Framework("DeepSpeed", ("deepspeed",), ("initialize",), "config", (), ())
FRAMEWORKS = (ACCELERATE, LIGHTNING, DEEPSPEED)


@dataclass(frozen=True)
class FrameworkCall:
    """One call that sets a framework up (``Accelerator(...)``, ``Trainer(...)``, ``deepspeed.initialize``)."""

    framework: Framework
    call: cst.Call

    @property
    def setting(self) -> cst.Arg | None:
        """The precision argument, if given: ``mixed_precision=``/``precision=``, DeepSpeed's ``config=``
        (or its older name ``config_params=``)."""
        found = keyword(self.call, self.framework.precision)
        if found is None and self.framework is DEEPSPEED:
            found = keyword(self.call, "config_params")
        return found


def framework_calls(
    calls: Iterable[cst.Call], names: Callable[[cst.CSTNode], set[str]]
) -> list[FrameworkCall]:
    """The framework set-up calls among ``calls``, ``names`` giving a callee's qualified names."""
    found = []
    for call in calls:
        callee = names(call.func)
        for framework in FRAMEWORKS:
            if qualified_under(callee, framework.packages, framework.classes):
                found.append(FrameworkCall(framework, call))
                break
    return found


def framework_backward(backward: cst.Call) -> bool:
    """``<framework object>.backward(loss)``: the loss is the argument, not the receiver (a tensor's own
    ``loss.backward()`` takes no positional argument in a training loop)."""
    return bool(backward.args) and backward.args[0].keyword is None and not backward.args[0].star


# Files that launch a program or configure a launcher (``accelerate launch --mixed_precision``, an ``accelerate
# config`` YAML).
LAUNCH_FILES = ("*.sh", "*.yaml", "*.yml", "*.json", "*.toml", "*.cfg", "Makefile")


def launch_setting(repo: RepoContext, setting: str, script: str) -> str | None:
    """Why a launch file owns ``setting`` for ``script``, naming the line; ``None`` when none does. A command
    that runs the script with the setting (``accelerate launch --mixed_precision fp16 train.py``) comes first,
    then a config file that sets it (an ``accelerate config`` YAML with ``mixed_precision: fp16``): one in the
    script's folder, above it or below it (``configs/``), or one a command that runs the script names. A config
    beside another example of a repository of examples launches that example, not this one."""
    spellings = (setting, setting.replace("_", "-"))
    name = PurePosixPath(script).name
    launches: list[str] = []  # the lines of launch files that run the script
    configs: list[tuple[str, int, str]] = []
    for path in repo.files(*LAUNCH_FILES):
        try:
            text = repo.read(path)
        except (OSError, UnicodeDecodeError):
            continue
        if name not in text and not any(spelling in text for spelling in spellings):
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if line.lstrip().startswith("#"):
                continue
            if name in line:
                launches.append(line)
                if any(spelling in line for spelling in spellings):
                    return f"the launch command at {path}:{number} sets it (`{line.strip()}`)"
            elif line.lstrip().startswith(f"{setting}:"):
                configs.append((path, number, line.strip()))
    folder = PurePosixPath(script).parent
    for path, number, line in configs:
        config = PurePosixPath(path)
        related = config.parent in (folder, *folder.parents) or folder in config.parents
        if related or any(config.name in launch for launch in launches):
            return (
                f"a launch config of the repository sets it at {path}:{number} (`{line}`), and a keyword here "
                "would override it"
            )
    return None


def json_config(repo: RepoContext, script: str, name: str) -> tuple[str, dict[str, Any]] | None:
    """``(path, contents)`` of the JSON config file ``name`` that ``script`` opens: beside the script, or from
    the repository root; ``None`` when neither holds a JSON object by that name."""
    for candidate in (PurePosixPath(script).parent / name, PurePosixPath(name)):
        path = posixpath.normpath(candidate.as_posix())
        try:
            contents = json.loads(repo.read(path))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(contents, dict):
            return path, contents
    return None
