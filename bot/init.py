"""``bot init``: install the bot on a target repository (the Actions workflow and a ``[tool.bot]`` skeleton).

The workflow installs perfbot pinned: to a git commit or an archive's sha256, given with ``--install`` or
read from how this perfbot was installed (PEP 610 ``direct_url.json``). A bare ``pip install perfbot`` would
run, on the GPU runner, whatever an index serves under that name. Its dependencies come from a lock written
beside the workflow (:mod:`bot.lock`: each one pinned with its wheel's sha256, installed with
``--require-hashes``), and perfbot itself is then installed without dependencies and without build isolation.
The gate job refuses a public repository unless the workflow's ``PERFBOT_ALLOW_PUBLIC_REPOSITORY`` is edited
to ``"true"``.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.conventions import pyproject_document
from bot.errors import BadInput
from bot.lock import dependency_lock
from bot.render import render
from bot.workload_drafts import WorkloadDraft, draft_workloads, tool_bot_table

WORKFLOW = Path(".github/workflows/perfbot.yml")
LOCK = Path(".github/perfbot-requirements.txt")
PYPROJECT = Path("pyproject.toml")
RUNNER_LABELS = ("self-hosted", "gpu")
DISTRIBUTION = "perfbot"
PUBLIC_REPOSITORY_WARNING = (
    "warning: the workflow runs on a self-hosted runner; its gate refuses a public repository (anyone can "
    "comment there, and a self-hosted runner keeps its machine, files and network between jobs) unless you set "
    'PERFBOT_ALLOW_PUBLIC_REPOSITORY to "true" in it'
)
# A requirement pinned to a commit or to an archive's hash, with nothing that could end the workflow's quotes.
_PINNED = (
    re.compile(r"[A-Za-z0-9._-]+ @ git\+(?:https|ssh)://[^\s'\"$`{}\\]+@[0-9a-f]{40}"),
    re.compile(r"[A-Za-z0-9._-]+ @ https://[^\s'\"$`{}\\#]+#sha256=[0-9a-f]{64}"),
)

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
    drafts: list[WorkloadDraft] = field(default_factory=list)  # workloads drafted from the launch commands


def init_repository(
    path: str | Path = ".",
    *,
    install: str | None = None,
    runner_labels: Sequence[str] = RUNNER_LABELS,
    timeout_minutes: int = 360,
    force: bool = False,
    lock: str | None = None,
    size: str = "tiny",
    workflow: bool = True,
) -> InitResult:
    """Write the workflow and the dependency lock (each kept when present, unless ``force``) and append
    ``[tool.bot]`` when it is missing: one workload per launch command of the repository's training programs
    (:mod:`bot.workload_drafts`, models built at ``size``), or a skeleton to edit where none is found.

    ``install``: the pinned requirement the workflow installs perfbot from (default: :func:`installed_from`);
    ``lock``: the lock's text (default: :func:`bot.lock.dependency_lock`, which downloads and hashes wheels);
    ``workflow=False``: only ``[tool.bot]``, for running perfbot on this machine (no workflow, lock or install).
    """
    root = Path(path)
    if not root.is_dir():
        raise BadInput(f"{root} is not a directory; pass the target repository's path")
    result = InitResult()
    has_settings = "bot" in pyproject_document(root).get("tool", {})  # a broken pyproject stops us here
    if workflow:
        _install_workflow(root, install, runner_labels, timeout_minutes, force, lock, result)

    pyproject = root / PYPROJECT
    if has_settings:
        result.kept.append(pyproject)
    else:
        result.drafts = draft_workloads(root, size)
        table = tool_bot_table(result.drafts, size) if result.drafts else TOOL_BOT_SKELETON
        existing = pyproject.read_text(encoding="utf-8") if pyproject.exists() else ""
        separator = "" if not existing else ("\n" if existing.endswith("\n") else "\n\n")
        pyproject.write_text(existing + separator + table, encoding="utf-8")
        result.written.append(pyproject)
    return result


def _install_workflow(
    root: Path,
    install: str | None,
    runner_labels: Sequence[str],
    timeout_minutes: int,
    force: bool,
    lock: str | None,
    result: InitResult,
) -> None:
    """Write the Actions workflow, which installs perfbot pinned, and the lock of its dependencies."""
    text = render(
        "workflow.yml.j2",
        runner_labels=list(runner_labels),
        install=pinned(install if install is not None else installed_from()),
        lock=LOCK.as_posix(),
        timeout_minutes=timeout_minutes,
    )
    _write(root / WORKFLOW, text, force, result)
    if lock is None and (force or not (root / LOCK).exists()):
        lock = dependency_lock()
    if lock is not None:
        _write(root / LOCK, lock, force, result)


def _write(path: Path, text: str, force: bool, result: InitResult) -> None:
    """Write ``path`` unless it exists (and ``force`` is off, or it already holds ``text``)."""
    if path.exists() and (not force or path.read_text(encoding="utf-8") == text):
        result.kept.append(path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    result.written.append(path)


def installed_from(distribution: str = DISTRIBUTION) -> str | None:
    """This perfbot's source as a pinned requirement, from PEP 610 ``direct_url.json``: a git commit or an
    https archive with its sha256. None when it was installed otherwise (from an index, a local directory)."""
    try:
        text = importlib.metadata.distribution(distribution).read_text("direct_url.json")
        source = json.loads(text) if text else {}
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    url, vcs, archive = source.get("url", ""), source.get("vcs_info") or {}, source.get("archive_info") or {}
    if vcs.get("vcs") == "git" and vcs.get("commit_id"):
        return f"{distribution} @ git+{url}@{vcs['commit_id']}"
    digest = (archive.get("hashes") or {}).get("sha256")
    return f"{distribution} @ {url}#sha256={digest}" if digest else None


def pinned(install: str | None) -> str:
    """``install`` when it pins perfbot to a commit or a hash; else :class:`BadInput` saying what to pass."""
    example = f"--install '{DISTRIBUTION} @ git+https://github.com/OWNER/perfbot@<40-character commit sha>'"
    if install is None:
        raise BadInput(
            f"cannot tell where the runner should install perfbot from; pass {example} (or an https archive "
            "URL ending in #sha256=<hash>): a bare `pip install perfbot` runs whatever an index serves under "
            "that name"
        )
    if not any(shape.fullmatch(install) for shape in _PINNED):
        raise BadInput(f"{install!r} is not pinned to a commit or a sha256; pass {example}")
    return install
