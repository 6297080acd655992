"""perfbot on a materialised repository, as a user runs it: `bot scan --json`, `bot scan --plan` (the plan kept
outside the repository), then `bot apply --tier 1` and `--tier 2` with that plan, each its own process with a
time limit. What comes back: the scan's sites, the plan, the apply rows and the commits they made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git

from benchmarks.corpus.materialise import PROJECT

TIERS = (1, 2)
TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Step:
    """One bot command: its arguments, exit code (None: killed at the time limit), output and duration."""

    args: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def command(self) -> str:
        """The command line as a user would type it."""
        return " ".join(["bot", *self.args])

    @property
    def traceback(self) -> bool:
        """Whether its output holds a Python traceback."""
        return "Traceback (most recent call last)" in self.stdout + self.stderr

    def to_dict(self) -> dict[str, Any]:
        """For the JSON report (the output left out)."""
        return {"command": self.command, "returncode": self.returncode, "seconds": round(self.seconds, 2)}


def bot(args: list[str], cwd: Path, timeout: float = TIMEOUT_S) -> Step:
    """`python -m bot.cli ARGS` in a fresh process with this project first on the path."""
    path = os.pathsep.join(p for p in (str(PROJECT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bot.cli", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as expired:
        out, err = (
            x.decode(errors="replace") if isinstance(x, bytes) else x or ""
            for x in (expired.stdout, expired.stderr)
        )
        return Step(
            tuple(args), None, out, err + f"\ntimed out after {timeout:.0f} s", time.perf_counter() - start
        )
    return Step(tuple(args), done.returncode, done.stdout, done.stderr, time.perf_counter() - start)


@dataclass(frozen=True)
class Site:
    """A site of `bot scan --json`: its kind is `change`, `already`, `refused`, `kept` or `proposal`."""

    optimization: str
    path: str
    line: int
    message: str
    reason: str
    kind: str

    @classmethod
    def of(cls, optimization: str, data: dict[str, Any]) -> Site:
        """From one JSON object of the scan."""
        kinds = ("kept", "proposal", "already")
        kind = next((k for k in kinds if data.get(k)), "change" if data.get("applicable") else "refused")
        return cls(
            optimization, data["path"], int(data["line"]), data["message"], data.get("reason", ""), kind
        )

    @property
    def text(self) -> str:
        """What perfbot says there: the message and the reason."""
        return f"{self.message} {self.reason}".strip()

    @property
    def proposal(self) -> bool:
        """A proposal for a person (no commit), or a refused site worded as one."""
        return self.kind == "proposal" or (self.kind == "refused" and "proposal" in self.text.lower())


@dataclass(frozen=True)
class Commit:
    """A commit an apply made: its sha, the optimization of its row, the tier and the row's status."""

    sha: str
    optimization: str
    tier: int
    status: str


@dataclass
class Run:
    """What perfbot did on one repository."""

    root: Path
    base: str
    steps: list[Step]
    sites: list[Site]
    plan: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)

    @property
    def tracebacks(self) -> list[str]:
        """The commands whose output holds a traceback."""
        return [s.command for s in self.steps if s.traceback]

    @property
    def timeouts(self) -> list[str]:
        """The commands killed at the time limit."""
        return [s.command for s in self.steps if s.returncode is None]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {}


def run_perfbot(
    repo: git.Repo, workdir: Path, timeout: float = TIMEOUT_S, tiers: tuple[int, ...] = TIERS
) -> Run:
    """Scan, draft the plan (into `workdir`), apply each of `tiers` with it; the commits are those of the apply
    rows, in order, then any other commit the applies left on a branch (optimization "?")."""
    root = Path(str(repo.working_tree_dir))
    base = repo.head.commit.hexsha
    scan = bot(["scan", str(root), "--json"], workdir, timeout)
    found = _json(scan.stdout)
    sites = [
        Site.of(opt, data)
        for opt, items in (found.items() if isinstance(found, dict) else [])
        for data in items
    ]
    drafted = bot(["scan", "--plan", str(root)], workdir, timeout)
    plan = workdir / f"{root.name}-plan.md"
    plan.write_text(drafted.stdout, encoding="utf-8")
    run = Run(root, base, [scan, drafted], sites, drafted.stdout)
    for tier in tiers:
        step = bot(
            ["apply", "--tier", str(tier), "--plan", str(plan), "--repo", str(root), "--json"],
            workdir,
            timeout,
        )
        run.steps.append(step)
        progress = _json(step.stdout)
        for row in progress.get("rows", []) if isinstance(progress, dict) else []:
            run.rows.append({**row, "tier": tier})
            if row.get("commit") and row["commit"] not in {c.sha for c in run.commits}:
                run.commits.append(Commit(row["commit"], row["optimization"], tier, row.get("status", "")))
    known = {c.sha for c in run.commits}
    for sha in repo.git.rev_list("--reverse", "--topo-order", "--all", f"^{base}").split():
        if sha not in known:
            run.commits.append(Commit(sha, "?", 0, "no row"))
    return run
