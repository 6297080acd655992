"""The reviewer verdict: computed from the commits, ruff and the bench results, never typed by hand.

For a commit range it checks plan adherence (each plan item's status, with its commits), lints the Python
files each commit touched with ruff (at that commit, against the same files at its parent, so only errors the
commit introduced count), measures the diff of each commit, sweeps the added lines for credentials and risky
code (:mod:`bot.security`), checks the plan's success criteria against the measured numbers, and lists
measured regressions. Any new lint error or a credential → FAIL; an unmet criterion, a regression, a failed
transform or benchmark, or risky code → CONCERNS; else PASS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import git

from benchmarks.results import Results
from benchmarks.stats import WIN
from bot import measures
from bot.errors import BadInput
from bot.plan import Criterion, Plan, PlanItem
from bot.progress import Progress
from bot.regressions import TRAILER_REVERT_OF, reverted_commits, slowdowns
from bot.security import SecurityHit, scan_added_lines, scan_python
from bot.workspace import TRAILER_ITEM, TRAILER_OPTIMIZATION, Workspace

PASS, CONCERNS, FAIL = "PASS", "CONCERNS", "FAIL"
BLOCKER, MAJOR, MINOR = "blocker", "major", "minor"
SEVERITY_ORDER = (BLOCKER, MAJOR, MINOR)

LANDED = "LANDED"
NOT_APPLICABLE = "NOT APPLICABLE"
FAILED = "FAILED"
NEEDS_HUMAN = "NEEDS A HUMAN"
BEHAVIOURAL = "NOT APPLIED (behavioural)"
BEHAVIOURAL_CHANGED = "CHANGED (behavioural, not approved)"
REVERTED = "REVERTED (regression)"
NOT_RUN = "NOT RUN"
NOT_LANDED = "NOT LANDED"
_PROGRESS_STATUS = {
    "landed": LANDED,
    "resumed": LANDED,
    "not_applicable": NOT_APPLICABLE,
    "failed": FAILED,
    "needs_human": NEEDS_HUMAN,
    "reverted": REVERTED,
    "pending": NOT_RUN,
    "applying": NOT_RUN,
}

MET, NOT_MET, UNMEASURED = "MET", "NOT MET", "NOT MEASURED"
PYTHON_SUFFIXES = (".py", ".pyi")
RUFF_CONFIGS = ("pyproject.toml", "ruff.toml", ".ruff.toml")
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
LINT_EVIDENCE_LINES = 10


@dataclass(frozen=True)
class Finding:
    """One thing the reviewer says: how serious, what, the evidence, and what to do about it."""

    severity: str
    category: str
    title: str
    evidence: tuple[str, ...]
    fix: str
    commit: str = ""


@dataclass(frozen=True)
class LintError:
    """A ruff diagnostic a commit introduced."""

    path: str
    line: int
    column: int
    code: str
    message: str
    fixable: bool

    def describe(self) -> str:
        """``path:line:column CODE message``."""
        return f"{self.path}:{self.line}:{self.column} {self.code} {self.message}"


@dataclass
class CommitReview:
    """What the review found in one commit."""

    sha: str
    subject: str
    optimization: str | None = None
    plan_items: tuple[str, ...] = ()
    revert_of: str | None = None
    files: list[str] = field(default_factory=list)
    added: int = 0
    deleted: int = 0
    lint: list[LintError] = field(default_factory=list)
    preexisting_lint: int = 0
    security: list[SecurityHit] = field(default_factory=list)


@dataclass(frozen=True)
class Adherence:
    """Where one plan item stands on the branch."""

    key: str
    change: str
    status: str
    commits: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class CriterionCheck:
    """A success criterion against the measured number."""

    text: str
    kind: str
    target: str
    observed: str
    status: str


@dataclass
class Verdict:
    """PASS / CONCERNS / FAIL with everything it was computed from."""

    outcome: str
    base: str
    head: str
    commits: list[CommitReview]
    adherence: list[Adherence]
    criteria: list[CriterionCheck]
    findings: list[Finding]
    measured_head: str = ""
    lint_error: str = ""

    @property
    def added(self) -> int:
        return sum(c.added for c in self.commits)

    @property
    def deleted(self) -> int:
        return sum(c.deleted for c in self.commits)

    @property
    def files(self) -> list[str]:
        return sorted({path for c in self.commits for path in c.files})

    @property
    def lint_new(self) -> int:
        return sum(len(c.lint) for c in self.commits)

    @property
    def lint_preexisting(self) -> int:
        return sum(c.preexisting_lint for c in self.commits)

    @property
    def security_hits(self) -> list[SecurityHit]:
        return [hit for c in self.commits for hit in c.security]

    @property
    def exit_code(self) -> int:
        """0 for PASS, 1 otherwise (the CLI contract: the run finished but something failed)."""
        return 0 if self.outcome == PASS else 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "added": self.added,
            "deleted": self.deleted,
            "files": self.files,
            "lint_new": self.lint_new,
        }


def outcome(findings: list[Finding]) -> str:
    """FAIL on any blocker, CONCERNS on any major finding, else PASS."""
    severities = {f.severity for f in findings}
    return FAIL if BLOCKER in severities else CONCERNS if MAJOR in severities else PASS


# --- git --------------------------------------------------------------------------------------------------


def _git(repo: git.Repo, *args: str, stdin: bytes | None = None) -> bytes:
    completed = subprocess.run(
        ["git", "-c", "core.quotePath=false", *args],
        cwd=repo.working_tree_dir or repo.git_dir,
        input=stdin,
        capture_output=True,
        check=False,
    )
    if completed.returncode != 0:
        raise git.GitCommandError(["git", *args], completed.returncode, completed.stderr)
    return completed.stdout


def _numstat(repo: git.Repo, parent: str, sha: str) -> list[tuple[int, int, str, str | None]]:
    """``(added, deleted, path, old path when renamed)`` per file; binary files count 0 lines."""
    fields = _git(repo, "diff", "--numstat", "-z", "-M", parent, sha).decode("utf-8", "replace").split("\0")
    rows, index = [], 0
    while index < len(fields) and fields[index]:
        added, deleted, path = fields[index].split("\t", 2)
        old = None
        if not path:  # a rename: the old and new paths follow as their own fields
            old, path = fields[index + 1], fields[index + 2]
            index += 2
        rows.append((int(added) if added != "-" else 0, int(deleted) if deleted != "-" else 0, path, old))
        index += 1
    return rows


def _hunks(
    repo: git.Repo, parent: str, sha: str, *paths: str
) -> dict[str, tuple[dict[int, str], list[range]]]:
    """Per new path: the added lines ``{line: text}`` and the old-side line ranges the diff replaced."""
    text = _git(
        repo,
        "diff",
        "-U0",
        "--no-color",
        "--no-ext-diff",
        "-M",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        parent,
        sha,
        "--",
        *paths,
    )
    files: dict[str, tuple[dict[int, str], list[range]]] = {}
    current: tuple[dict[int, str], list[range]] | None = None
    old_path = ""
    line_number = 0
    for raw in text.decode("utf-8", "replace").splitlines():
        if raw.startswith("--- "):
            old_path = _diff_path(raw[4:])
        elif raw.startswith("+++ "):
            path = _diff_path(raw[4:]) or old_path
            current = files.setdefault(path, ({}, []))
        elif raw.startswith("@@") and current is not None:
            old_side, new_side = raw.split(" ")[1:3]
            start, _, count = old_side[1:].partition(",")
            length = int(count) if count else 1
            current[1].append(range(int(start), int(start) + length))
            line_number = int(new_side[1:].partition(",")[0])
        elif raw.startswith("+") and current is not None:
            current[0][line_number] = raw[1:]
            line_number += 1
    return files


def _diff_path(text: str) -> str:
    """``b/src/x.py`` → ``src/x.py``; ``/dev/null`` → empty."""
    text = text.strip().strip('"')
    return "" if text == "/dev/null" else text.split("/", 1)[1] if "/" in text else text


def _read_blobs(repo: git.Repo, specs: list[str]) -> dict[str, bytes]:
    """``rev:path`` → content, for the specs that exist, in one ``git cat-file --batch``."""
    if not specs:
        return {}
    output = _git(repo, "cat-file", "--batch", stdin="".join(f"{spec}\n" for spec in specs).encode())
    blobs, position = {}, 0
    for spec in specs:
        end = output.index(b"\n", position)
        header = output[position:end].split()
        position = end + 1
        if header[-1] in (b"missing", b"ambiguous"):
            continue
        kind, size = header[1], int(header[2])
        if kind == b"blob":
            blobs[spec] = output[position : position + size]
        position += size + 1
    return blobs


# --- lint -------------------------------------------------------------------------------------------------


def _ruff(root: Path, files: list[Path]) -> list[dict[str, Any]]:
    """ruff's JSON diagnostics for ``files`` (each file governed by the config files beside it)."""
    diagnostics = []
    for start in range(0, len(files), 200):
        completed = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--no-cache", "--force-exclude", "--exit-zero"]
            + ["--output-format", "json", *map(str, files[start : start + 200])],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        if completed.returncode != 0:
            raise RuntimeError(measures.clip(completed.stderr.strip() or "ruff exited abnormally", 300))
        diagnostics.extend(json.loads(completed.stdout or "[]"))
    return diagnostics


def _config_specs(rev: str, path: str) -> list[str]:
    parts = path.split("/")[:-1]
    folders = ["/".join(parts[:depth]) for depth in range(len(parts) + 1)]
    return [f"{rev}:{folder + '/' if folder else ''}{name}" for folder in folders for name in RUFF_CONFIGS]


@dataclass(frozen=True)
class _Touched:
    sha: str
    parent: str
    path: str
    old_path: str | None  # None: added by the commit


def _lint(
    repo: git.Repo, touched: list[_Touched], blobs: dict[str, bytes]
) -> dict[tuple[str, str], list[dict]]:
    """Diagnostics of every touched Python file at its commit and of its old version at the parent."""
    blobs = dict(blobs)
    configs = [spec for t in touched for rev in (t.sha, t.parent) for spec in _config_specs(rev, t.path)]
    blobs.update(_read_blobs(repo, [spec for spec in dict.fromkeys(configs) if spec not in blobs]))
    wanted = {(t.sha, t.path) for t in touched} | {(t.parent, t.old_path) for t in touched if t.old_path}
    with tempfile.TemporaryDirectory(prefix="perfbot-lint-") as tmp:
        root = Path(tmp)
        files = []
        for spec, content in blobs.items():
            rev, _, path = spec.partition(":")
            target = root / rev / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            if (rev, path) in wanted:
                files.append(target)
        diagnostics: dict[tuple[str, str], list[dict]] = {}
        for item in _ruff(root, sorted(files)):
            rev, _, path = (
                Path(item["filename"]).resolve().relative_to(root.resolve()).as_posix().partition("/")
            )
            diagnostics.setdefault((rev, path), []).append(item)
    return diagnostics


def _new_lint(
    at_commit: list[dict], at_parent: list[dict], path: str, added_lines: set[int]
) -> tuple[list[LintError], int]:
    """The diagnostics the commit introduced (by code and message), and how many were there before."""
    before = Counter((d.get("code") or "syntax", d["message"]) for d in at_parent)
    remaining = Counter(before)
    ordered = sorted(at_commit, key=lambda d: d["location"]["row"] not in added_lines)  # added lines first
    new = []
    for item in ordered:
        key = (item.get("code") or "syntax", item["message"])
        if remaining[key] > 0:
            remaining[key] -= 1
            continue
        location = item["location"]
        new.append(
            LintError(
                path, location["row"], location["column"], key[0], item["message"], bool(item.get("fix"))
            )
        )
    return sorted(new, key=lambda e: (e.line, e.column)), sum(before.values())


# --- commits ----------------------------------------------------------------------------------------------


def _trailer_values(repo: git.Repo, base: str, head: str) -> dict[str, dict[str, str]]:
    """Per commit in ``base..head``: its trailers as git parses them (keys lower-cased, values comma-joined)."""
    output = _git(repo, "log", "--format=%H%x00%(trailers:only,unfold)%x1e", f"{base}..{head}")
    found: dict[str, dict[str, str]] = {}
    for record in output.decode("utf-8", "replace").split("\x1e"):
        sha, _, block = record.strip().partition("\0")
        values: dict[str, list[str]] = {}
        for line in block.splitlines():
            key, _, value = line.partition(":")
            if value.strip():
                values.setdefault(key.strip().lower(), []).append(value.strip())
        if sha:
            found[sha] = {key: ", ".join(parts) for key, parts in values.items()}
    return found


def review_commits(repo: git.Repo, base: str, head: str) -> tuple[list[CommitReview], str]:
    """Diff size, new lint errors and security hits of every commit in ``base..head``; and a lint error text
    when ruff could not run."""
    trailers = _trailer_values(repo, base, head)
    reviews, touched, added_by_file = [], [], {}
    for commit in repo.iter_commits(f"{base}..{head}", reverse=True):
        parent = commit.parents[0].hexsha if commit.parents else EMPTY_TREE
        own = trailers.get(commit.hexsha, {})
        review = CommitReview(
            sha=commit.hexsha,
            subject=str(commit.summary),
            optimization=own.get(TRAILER_OPTIMIZATION.lower()),
            plan_items=tuple(k.strip() for k in own.get(TRAILER_ITEM.lower(), "").split(",") if k.strip()),
            revert_of=own.get(TRAILER_REVERT_OF.lower()),
        )
        hunks = _hunks(repo, parent, commit.hexsha)
        for added, deleted, path, old in _numstat(repo, parent, commit.hexsha):
            review.files.append(path)
            review.added += added
            review.deleted += deleted
            lines = hunks.get(path, ({}, []))[0]
            added_by_file[(commit.hexsha, path)] = lines
            review.security.extend(scan_added_lines(path, lines))
            if path.endswith(PYTHON_SUFFIXES):
                touched.append(_Touched(commit.hexsha, parent, path, old or path))
        reviews.append(review)
    specs = [f"{t.sha}:{t.path}" for t in touched] + [f"{t.parent}:{t.old_path}" for t in touched]
    blobs = _read_blobs(repo, list(dict.fromkeys(specs)))
    touched = [  # deleted files are not linted; files the commit added have no old version
        _Touched(t.sha, t.parent, t.path, t.old_path if f"{t.parent}:{t.old_path}" in blobs else None)
        for t in touched
        if f"{t.sha}:{t.path}" in blobs
    ]
    by_sha = {r.sha: r for r in reviews}
    for t in touched:
        source = blobs[f"{t.sha}:{t.path}"].decode("utf-8", "replace")
        by_sha[t.sha].security.extend(scan_python(t.path, source, added_by_file[(t.sha, t.path)]))
    try:
        diagnostics = _lint(repo, touched, blobs)
    except RuntimeError as error:
        return reviews, str(error)
    for t in touched:
        new, before = _new_lint(
            diagnostics.get((t.sha, t.path), []),
            diagnostics.get((t.parent, t.old_path), []) if t.old_path else [],
            t.path,
            set(added_by_file[(t.sha, t.path)]),
        )
        by_sha[t.sha].lint.extend(new)
        by_sha[t.sha].preexisting_lint += before
    return reviews, ""


def commit_findings(reviews: list[CommitReview], lint_error: str) -> list[Finding]:
    """Blockers for new lint errors and credentials; concerns for risky code."""
    findings = []
    if lint_error:
        findings.append(
            Finding(
                MAJOR,
                "lint",
                "ruff could not check the touched files",
                (lint_error,),
                "Fix the ruff configuration "
                "of the repository (run `ruff check` on the touched files by hand), then run `bot review` again",
            )
        )
    for review in reviews:
        label = f"`{measures.short(review.sha)}` ({measures.clip(review.subject, 60)})"
        if review.lint:
            evidence = tuple(error.describe() for error in review.lint[:LINT_EVIDENCE_LINES])
            if len(review.lint) > LINT_EVIDENCE_LINES:
                evidence += (f"… and {len(review.lint) - LINT_EVIDENCE_LINES} more",)
            fixable = sum(error.fixable for error in review.lint)
            fix = "Fix the listed lines"
            fix += f"; {fixable} can be fixed automatically with `ruff check --fix`" if fixable else ""
            findings.append(
                Finding(
                    BLOCKER,
                    "lint",
                    f"{len(review.lint)} new ruff error(s) in {label}",
                    evidence,
                    fix + ", in a follow-up commit on the branch",
                    review.sha,
                )
            )
        credentials = [hit for hit in review.security if hit.blocking]
        if credentials:
            findings.append(
                Finding(
                    BLOCKER,
                    "security",
                    f"Credential committed in {label}",
                    tuple(f"{hit.path}:{hit.line} {hit.detail}" for hit in credentials),
                    "Revoke and rotate the credential now (history keeps it even after a revert), then read it "
                    "from the environment or a secret store instead of the source",
                    review.sha,
                )
            )
        risky = [hit for hit in review.security if not hit.blocking]
        if risky:
            kinds = sorted({hit.kind for hit in risky})
            findings.append(
                Finding(
                    MAJOR,
                    "security",
                    f"Risky code added in {label}: {', '.join(kinds)}",
                    tuple(f"{hit.path}:{hit.line} {hit.detail}" for hit in risky),
                    "Pass argument lists without a shell, avoid eval/exec, and fetch models and data ahead of "
                    "the run (pinned revision and checksum) rather than downloading during training",
                    review.sha,
                )
            )
    return findings


# --- plan adherence ---------------------------------------------------------------------------------------


def _items_in_scope(plan: Plan, tier: int | None, reviews: list[CommitReview]) -> list[PlanItem]:
    keyed = {key for review in reviews for key in review.plan_items}
    tiers = {tier} if tier is not None else {i.tier for i in plan.items if i.key in keyed}
    return [i for i in plan.items if not i.follow_on and (not i.auto_apply or not tiers or i.tier in tiers)]


def plan_adherence(
    repo: git.Repo,
    base: str,
    head: str,
    plan: Plan,
    progress: Progress | None,
    reviews: list[CommitReview],
    reverted: dict[str, str],
    tier: int | None = None,
) -> tuple[list[Adherence], list[Finding]]:
    """Each plan item's status (from the progress rows when given, else from the commits' trailers)."""
    tier = tier if tier is not None else (progress.tier if progress else None)
    rows_by_key: dict[str, list] = {}
    for row in progress.rows if progress else []:
        for key in row.keys:
            rows_by_key.setdefault(key, []).append(row)
    commits_by_key: dict[str, list[str]] = {}
    for review in reviews:
        for key in review.plan_items:
            commits_by_key.setdefault(key, []).append(review.sha)
    rows, findings = [], []
    for item in _items_in_scope(plan, tier, reviews):
        if not item.auto_apply:
            rows.append(_behavioural(repo, base, head, item, findings))
            continue
        commits = tuple(commits_by_key.get(item.key, ()))
        if item.key in rows_by_key:
            found = rows_by_key[item.key]
            statuses = [REVERTED if row.commit in reverted else _PROGRESS_STATUS[row.status] for row in found]
            commits = tuple(dict.fromkeys([*commits, *(row.commit for row in found if row.commit)]))
            if len(set(statuses)) == 1:
                status = statuses[0]
            else:
                status = "; ".join(
                    f"{row.optimization or 'none'}: {s}" for row, s in zip(found, statuses, strict=True)
                )
            note = "; ".join(row.note for row in found if row.note)
        elif item.needs_human:
            status, note = NEEDS_HUMAN, "no registered optimization matches this item"
        elif commits:
            status = REVERTED if all(sha in reverted for sha in commits) else LANDED
            note = ""
        else:
            status, note = NOT_LANDED, "no commit in the range names this item"
        rows.append(Adherence(item.key, item.change, status, commits, note))
        if FAILED in status:
            findings.append(
                Finding(
                    MAJOR,
                    "adherence",
                    f"Plan item {item.key} failed to apply",
                    (note or status,),
                    "Fix the transform (or make the change by hand); `bot apply` resumes and skips what landed",
                )
            )
        elif status in (NEEDS_HUMAN, NOT_LANDED):
            findings.append(
                Finding(
                    MINOR,
                    "adherence",
                    f"Plan item {item.key}: {status.lower()}",
                    (item.change,),
                    "Make the change by hand, or name an optimization for it with `opt:<id>` in the plan",
                )
            )
    return rows, findings


def _behavioural(repo: git.Repo, base: str, head: str, item: PlanItem, findings: list[Finding]) -> Adherence:
    """A behavioural item must be left alone: is its line (or, without a line, its file) unchanged?"""
    hint = item.target_hint
    if hint is None:
        return Adherence(item.key, item.change, BEHAVIOURAL, (), item.why_not)
    path, line = hint
    hunks = _hunks(repo, base, head, path).get(path)
    changed = hunks is not None and any(line in replaced for replaced in hunks[1])
    if not changed:
        return Adherence(item.key, item.change, BEHAVIOURAL, (), f"confirmed unchanged: {path}:{line}")
    touching = tuple(c.hexsha for c in repo.iter_commits(f"{base}..{head}", paths=path, reverse=True))
    findings.append(
        Finding(
            MAJOR,
            "adherence",
            f"Behavioural item {item.key} was changed without approval",
            (
                f"{path}:{line} differs between {measures.short(base)} and {measures.short(head)}",
                f"commits touching {path}: " + ", ".join(measures.short(sha) for sha in touching),
            ),
            "Revert that line: behavioural changes need the user's approval in the issue first",
        )
    )
    return Adherence(item.key, item.change, BEHAVIOURAL_CHANGED, touching, item.why_not)


# --- criteria and measured regressions --------------------------------------------------------------------


def check_criteria(plan: Plan | None, results: Results | None) -> list[CriterionCheck]:
    """Each success criterion of the plan against the head of ``results`` (the re-measured head if any)."""
    checks = []
    for criterion in plan.criteria if plan else []:
        target = (
            f"{criterion.workload or 'every workload'} throughput ≥ +{criterion.threshold:.0%} vs baseline"
            if criterion.kind == "throughput"
            else f"loss within ±{criterion.threshold:.0%} of baseline (equal tokens seen)"
        )
        if results is None:
            checks.append(
                CriterionCheck(criterion.text, criterion.kind, target, "no benchmark results", UNMEASURED)
            )
            continue
        observed, status = (_throughput if criterion.kind == "throughput" else _loss)(criterion, results)
        checks.append(CriterionCheck(criterion.text, criterion.kind, target, observed, status))
    return checks


def _throughput(criterion: Criterion, results: Results) -> tuple[str, str]:
    workloads = measures.matching_workloads(results, criterion.workload)
    if not workloads:
        return f"no workload named {criterion.workload!r} was benchmarked", UNMEASURED
    parts, statuses = [], []
    for workload in workloads:
        cumulative = (measures.entry(results, workload, measures.head(results)) or {}).get("cumulative")
        metric = measures.primary(results, workload)
        if not cumulative or cumulative.get("ratio") is None:
            parts.append(f"{workload} {metric}: {measures.NOT_MEASURED}")
            statuses.append(UNMEASURED)
            continue
        gained = measures.gain(cumulative["ratio"], measures.higher_is_better(results, workload))
        met = gained >= criterion.threshold - 1e-12 and cumulative["verdict"] == WIN
        statuses.append(MET if met else NOT_MET)
        parts.append(f"{workload} {metric} {measures.effect_evidence(cumulative)}")
    status = UNMEASURED if UNMEASURED in statuses else NOT_MET if NOT_MET in statuses else MET
    return "; ".join(parts), status


def _loss(criterion: Criterion, results: Results) -> tuple[str, str]:
    parts, statuses = [], []
    for workload in results.summary:
        parity = (measures.entry(results, workload, measures.head(results)) or {}).get("loss")
        if not parity:
            parts.append(f"{workload}: {measures.NOT_MEASURED}")
            continue
        within = abs(parity["delta"]) <= criterion.threshold + 1e-12
        statuses.append(MET if within else NOT_MET)
        parts.append(f"{workload} {parity['delta']:+.2%}")
    status = UNMEASURED if not statuses else NOT_MET if NOT_MET in statuses else MET
    return "; ".join(parts), status


def criteria_findings(checks: list[CriterionCheck], measured: bool) -> list[Finding]:
    """A concern per unmet criterion, and per unmeasured one when results were given (minor otherwise)."""
    findings = []
    for check in checks:
        if check.status == NOT_MET:
            findings.append(
                Finding(
                    MAJOR,
                    "criterion",
                    f"Success criterion not met: {check.text}",
                    (f"target: {check.target}", f"observed: {check.observed}"),
                    "See the attribution table for which change fell short; re-measure at a realistic size or "
                    "move the target to a later tier in the plan",
                )
            )
        elif check.status == UNMEASURED:
            findings.append(
                Finding(
                    MAJOR if measured else MINOR,
                    "criterion",
                    f"Success criterion not measured: {check.text}",
                    (f"target: {check.target}", f"observed: {check.observed}"),
                    "Benchmark the workload the criterion names (`bot bench`), then review again",
                )
            )
    return findings


def measured_findings(
    results: Results, loss_tolerance: float, reverted: dict[str, str], remeasured: bool = False
) -> list[Finding]:
    """Slowdowns, memory growth, loss outside tolerance and failed runs, per commit; minor once reverted."""
    findings = []
    subjects = {info.sha: info.subject for info in results.commits}
    where = " (re-measured head)" if remeasured else ""

    def add(sha: str, title: str, evidence: list[str], fix: str) -> None:
        title = f"{title} at `{measures.short(sha)}` ({measures.clip(subjects[sha], 60)}){where}"
        severity = MAJOR
        if sha in reverted:
            severity, title = MINOR, f"{title}, reverted in `{measures.short(reverted[sha])}`"
        findings.append(Finding(severity, "regression", title, tuple(evidence), fix, sha))

    slow = slowdowns(results)
    for index, info in enumerate(results.commits):
        sha = info.sha
        if sha in slow:
            add(
                sha,
                "Significant slowdown",
                [s.evidence for s in slow[sha]],
                "Revert it (`--drop-regressions` does so as a new revert commit) or guard the change off where "
                "it slows the run down",
            )
        grew, lost, failed = [], [], []
        for workload in results.summary:
            item = measures.entry(results, workload, sha) or {}
            peak = item.get("memory") or {}
            if peak.get("regression"):
                before = measures.entry(results, workload, results.commits[index - 1].sha) or {}
                grew.append(
                    f"{workload} peak memory {measures.memory(peak['peak_bytes'])} vs "
                    f"{measures.memory((before.get('memory') or {}).get('peak_bytes'))} at the commit before "
                    f"({measures.percent(peak['vs_previous'])}; threshold +{results.thresholds['memory_threshold']:.0%})"
                )
            parity = item.get("loss")
            if parity and abs(parity["delta"]) > loss_tolerance:
                previous = (measures.entry(results, workload, results.commits[index - 1].sha) or {}).get(
                    "loss"
                )
                if index == 1 or not previous or abs(previous["delta"]) <= loss_tolerance:
                    lost.append(
                        f"{workload} loss {parity['candidate_loss']:.4g} vs baseline {parity['reference_loss']:.4g} "
                        f"({parity['delta']:+.2%} at equal tokens seen; tolerance ±{loss_tolerance:.0%})"
                    )
            for status, count in (item.get("failed") or {}).items():
                failed.append(f"{workload}: {count} run(s) {status}")
        if grew:
            add(
                sha,
                "Peak memory up beyond the threshold",
                grew,
                "If the change trades memory for speed on purpose, say so in its commit and docs; else gate it",
            )
        if lost:
            add(
                sha,
                "Loss outside the tolerance",
                lost,
                "Compare the loss curves at equal tokens seen in the results JSON; fix or revert before merging",
            )
        if failed:
            add(
                sha,
                "Benchmark runs failed",
                failed,
                "Read the log tails in the results comment, fix the crash (OOM: smaller batch or gradient "
                "checkpointing) and run `bot bench` again",
            )
    return findings


# --- the verdict ------------------------------------------------------------------------------------------


def review(
    repo: git.Repo,
    base: str,
    head: str,
    *,
    plan: Plan | None = None,
    progress: Progress | None = None,
    results: Results | None = None,
    final_results: Results | None = None,
    tier: int | None = None,
) -> Verdict:
    """The verdict on ``base..head``; ``final_results`` is the head re-measured after dropped regressions."""
    base, head = repo.commit(base).hexsha, repo.commit(head).hexsha
    reviews, lint_error = review_commits(repo, base, head)
    findings = commit_findings(reviews, lint_error)
    reverted = reverted_commits(repo, f"{base}..{head}")
    adherence: list[Adherence] = []
    if plan is not None:
        adherence, found = plan_adherence(repo, base, head, plan, progress, reviews, reverted, tier)
        findings += found
    measured = final_results or results
    checks = check_criteria(plan, measured)
    findings += criteria_findings(checks, measured is not None)
    tolerance = plan.loss_tolerance if plan else None
    if results is not None:
        findings += measured_findings(results, measures.loss_tolerance(results, tolerance), reverted)
        measured_shas = {info.sha for info in results.commits}
        unmeasured = [r for r in reviews if r.optimization and r.sha not in measured_shas]
        if unmeasured:
            findings.append(
                Finding(
                    MINOR,
                    "regression",
                    "Commits in the range were not benchmarked",
                    tuple(f"`{measures.short(r.sha)}` {r.subject}" for r in unmeasured),
                    "Run `bot bench` on the range to measure them",
                )
            )
    if measured is not None and measures.head(measured) != head:
        findings.append(
            Finding(
                MINOR,
                "criterion",
                f"The numbers speak for `{measures.short(measures.head(measured))}`, not the reviewed head "
                f"`{measures.short(head)}`",
                (f"the last benchmarked commit is {measures.head(measured)}",),
                "Benchmark the head (`bot bench BASE HEAD`) so the criteria are judged on what ships",
            )
        )
    if final_results is not None:
        findings += measured_findings(
            final_results, measures.loss_tolerance(final_results, tolerance), {}, remeasured=True
        )
    findings.sort(key=lambda f: SEVERITY_ORDER.index(f.severity))
    return Verdict(
        outcome=outcome(findings),
        base=base,
        head=head,
        commits=reviews,
        adherence=adherence,
        criteria=checks,
        findings=findings,
        measured_head=measures.head(measured) if measured else "",
        lint_error=lint_error,
    )


def resolve_range(repo: git.Repo, rev_range: str | None) -> tuple[str, str]:
    """``BASE..HEAD``, ``BASE..`` or ``..HEAD``, one ``REV`` (that commit alone), or the current bot branch's
    baseline..HEAD when None."""
    try:
        if not rev_range:
            workspace = Workspace(repo.working_tree_dir)
            if workspace.baseline() == workspace.head:
                raise BadInput(f"HEAD of {workspace.root} carries no bot commits; pass a RANGE (BASE..HEAD)")
            return workspace.baseline(), workspace.head
        if "..." in rev_range:
            raise BadInput(f"{rev_range}: a symmetric difference is not a review range; write BASE..HEAD")
        if ".." in rev_range:
            left, right = rev_range.split("..", 1)
            return repo.commit(left or "HEAD").hexsha, repo.commit(right or "HEAD").hexsha
        commit = repo.commit(rev_range)
        return (commit.parents[0].hexsha if commit.parents else EMPTY_TREE), commit.hexsha
    except (git.BadName, ValueError) as error:
        raise BadInput(f"{rev_range}: not a commit range in {repo.working_tree_dir} ({error})") from error


def review_range(
    repo_path: str | Path,
    rev_range: str | None = None,
    plan: Plan | None = None,
    results: Results | None = None,
    progress: Progress | None = None,
    tier: int | None = None,
) -> Verdict:
    """``bot review``: the verdict on a commit range of the repository at ``repo_path``."""
    repo = Workspace(repo_path).repo
    base, head = resolve_range(repo, rev_range)
    if base == EMPTY_TREE:
        raise BadInput(f"{rev_range} is a root commit; review a range that starts after it")
    return review(repo, base, head, plan=plan, progress=progress, results=results, tier=tier)


# --- command line -----------------------------------------------------------------------------------------


def add_review_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bot review``."""
    parser.add_argument(
        "range",
        nargs="?",
        metavar="RANGE",
        help="BASE..HEAD, BASE.. or one REV (default: baseline..HEAD of the current bot branch)",
    )
    parser.add_argument("--repo", default=".", help="target repository (default: .)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--plan", metavar="FILE", help="plan markdown (default: PLAN.md in the repository, if any)"
    )
    source.add_argument("--issue", metavar="N", help="read the plan and the progress comment from this issue")
    parser.add_argument(
        "--results", metavar="JSON", help="results file of `bot bench`: criteria and regressions"
    )
    parser.add_argument(
        "--tier", type=int, help="which tier's items to check (default: those the commits name)"
    )
    parser.add_argument(
        "--post", action="store_true", help="write (or update) the verdict comment on the issue"
    )


def cmd_review(args: argparse.Namespace, tracker=None) -> int:
    """``bot review``: print the verdict (markdown, or JSON with --json); exit 0 on PASS, 1 otherwise.

    ``tracker``: the tracker of a ``/bot review`` comment; the command line picks its own.
    """
    from bot.cli import load_plan, read_plan_file, tracker_for
    from bot.report import render_verdict
    from bot.tracker import PROGRESS, VERDICT

    root = Workspace(args.repo).root
    tracker = tracker or tracker_for(root)
    plan, progress, issue = None, None, None
    if args.issue is not None:
        issue = int(args.issue) if args.issue.isdigit() else args.issue
        plan = load_plan(tracker.issue(issue).body, f"issue {issue}")
        mine = [c for c in tracker.comments(issue) if c.has_marker(PROGRESS)]
        progress = Progress.from_comment(mine[-1].body) if mine else None
    elif args.plan or (root / "PLAN.md").is_file():
        text, name = read_plan_file(args.plan or str(root / "PLAN.md"))
        plan, issue = load_plan(text, name), Path(name).stem.lower()
    results = None
    if args.results:
        try:
            results = Results.load(args.results)
        except (OSError, ValueError, KeyError) as error:
            raise BadInput(
                f"{args.results}: not a readable results file ({error}); pass the JSON `bot bench` wrote"
            ) from error
    verdict = review_range(root, args.range, plan=plan, results=results, progress=progress, tier=args.tier)
    body = render_verdict(verdict, plan=plan, progress=progress)
    if args.post:
        if issue is None:
            raise BadInput("--post needs --issue N or a plan file to know where the comment goes")
        tracker.upsert_comment(issue, VERDICT, body)
    print(
        json.dumps(verdict.to_dict(), indent=2, default=str) if getattr(args, "json", False) else body, end=""
    )
    return verdict.exit_code
