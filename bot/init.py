"""``bot init``: install the bot on a target repository (the Actions workflow and a ``[tool.bot]`` skeleton)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.conventions import pyproject_document
from bot.errors import BadInput
from bot.render import render

WORKFLOW = Path(".github/workflows/perfbot.yml")
PYPROJECT = Path("pyproject.toml")
RUNNER_LABELS = ("self-hosted", "gpu")

# Read by benchmarks.spec.BenchSpec; every key is explained there.
TOOL_BOT_SKELETON = """\
[tool.bot]
# Written by `bot init`. The benchmark settings `bot apply --bench` and `bot bench` use.
size = "tiny"              # substituted for {size}; "gpu" on a GPU box
seed = 0                   # substituted for {seed}; the same at every commit

[tool.bot.workloads.train]
# Edit: the command that trains for {steps} optimizer steps and exits.
command = "python train.py --size {size} --max-steps {steps} --seed {seed}"
steps = 40                 # total optimizer steps the program runs
warmup_steps = 5           # excluded from timing
repeats = 3
primary = "tokens_per_s"   # the metric a win or a regression is judged on
higher_is_better = true
"""


@dataclass
class InitResult:
    """What ``bot init`` did: files written, and files left alone because they already had what it adds."""

    written: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)


def init_repository(
    path: str | Path = ".",
    *,
    runner_labels: Sequence[str] = RUNNER_LABELS,
    package: str = "perfbot",
    timeout_minutes: int = 360,
    force: bool = False,
) -> InitResult:
    """Write the workflow (kept when present, unless ``force``) and append ``[tool.bot]`` when it is missing."""
    root = Path(path)
    if not root.is_dir():
        raise BadInput(f"{root} is not a directory; pass the target repository's path")
    result = InitResult()
    has_settings = "bot" in pyproject_document(root).get("tool", {})  # a broken pyproject stops us here

    workflow = root / WORKFLOW
    text = render(
        "workflow.yml.j2", runner_labels=list(runner_labels), package=package, timeout_minutes=timeout_minutes
    )
    if workflow.exists() and (not force or workflow.read_text(encoding="utf-8") == text):
        result.kept.append(workflow)
    else:
        workflow.parent.mkdir(parents=True, exist_ok=True)
        workflow.write_text(text, encoding="utf-8")
        result.written.append(workflow)

    pyproject = root / PYPROJECT
    if has_settings:
        result.kept.append(pyproject)
    else:
        existing = pyproject.read_text(encoding="utf-8") if pyproject.exists() else ""
        separator = "" if not existing else ("\n" if existing.endswith("\n") else "\n\n")
        pyproject.write_text(existing + separator + TOOL_BOT_SKELETON, encoding="utf-8")
        result.written.append(pyproject)
    return result
