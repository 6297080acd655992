"""One repository's score: perfbot's run against what was written by reading the code.

* **expected found**: an `[[expect]]` counts as found when perfbot has a site for its optimization in one of its
  files, of the matching kind (:func:`judge`).
* **extra commits**: apply commits for an optimization and file with no `change` expectation.
* **launch-import failures**: commits whose changed `.py` files do not compile, or that add an import which does
  not resolve where a launch runs the file (:mod:`benchmarks.corpus.imports`).
* **deliberate choices overridden**: commits touching a `keep` expectation's cited line, or its files for its
  optimization.
* **new F lint**: ruff's F violations the last commit's changed files have that the snapshot did not.
* **never_edit**: files a commit changed under a `never_edit` glob.
* **false reasons**: refused or already sites whose text cites a `path:line` (or "line N" of its own file) that
  does not exist; refused sites citing no line at all are **unsourced**."""

from __future__ import annotations

import posixpath
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import git

from benchmarks.corpus.citations import LineCounts, citations, false_citations
from benchmarks.corpus.commits import CommitFacts, added_imports, compile_error
from benchmarks.corpus.imports import ImportFailure, Resolver, Tree, contexts
from benchmarks.corpus.lint import new_lint
from benchmarks.corpus.manifest import Expect, Manifest, matches_any
from benchmarks.corpus.perfbot import Run, Site
from optimizations.program.repository import VENDORED_PREFIX

KEPT = re.compile(r"\bkept\b|on purpose", re.IGNORECASE)


@dataclass(frozen=True)
class Judged:
    """One expectation and what perfbot did there: found or not, and how (the site or commit, in words)."""

    optimization: str
    verdict: str
    files: tuple[str, ...]
    found: bool
    how: str


@dataclass(frozen=True)
class Extra:
    """An apply commit for an optimization in files no `change` expectation names."""

    commit: str
    optimization: str
    files: tuple[str, ...]


@dataclass
class Score:
    """Everything counted for one repository (`available` False: its snapshot could not be had, `why`)."""

    name: str
    source: str
    available: bool = True
    why: str = ""
    judged: list[Judged] = field(default_factory=list)
    commits: int = 0
    extra: list[Extra] = field(default_factory=list)
    import_failures: list[ImportFailure] = field(default_factory=list)
    compile_errors: list[str] = field(default_factory=list)
    new_lint: list[str] = field(default_factory=list)
    overridden: list[str] = field(default_factory=list)
    never_edited: list[str] = field(default_factory=list)
    false_reasons: list[str] = field(default_factory=list)
    unsourced: list[str] = field(default_factory=list)
    refused: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # kept files the mirror lacks (large files)

    @property
    def found(self) -> int:
        """Expectations found."""
        return sum(j.found for j in self.judged)

    @property
    def failing_commits(self) -> int:
        """Commits that fail the launch-import check (a compile error or an import that does not resolve)."""
        failing = {f.commit for f in self.import_failures}
        failing |= {e.split(" ", 1)[0] for e in self.compile_errors}
        return len(failing)

    def to_dict(self) -> dict[str, Any]:
        """For `--json`: every field, and the counts."""
        data = asdict(self)
        data.update(found=self.found, expected=len(self.judged), failing_commits=self.failing_commits)
        data["import_failures"] = [asdict(f) | {"text": str(f)} for f in self.import_failures]
        return data


def _where(site: Site) -> str:
    return f"{site.path}:{site.line}"


def judge(expect: Expect, sites: list[Site], committed: set[str]) -> Judged:
    """Whether perfbot's `sites` (all of the run) and `committed` (files its commits for this optimization
    changed) meet `expect`, and how, in words."""
    mine = [s for s in sites if s.optimization == expect.optimization]
    there = [s for s in mine if expect.covers(s.path)]
    touched = sorted(f for f in committed if expect.covers(f))
    kinds = ("change", "already", "refused", "kept", "proposal")
    by_kind = {kind: [s for s in there if s.kind == kind] for kind in kinds}
    found, how = False, ""
    if expect.verdict == "change":
        if by_kind["change"]:
            found, how = True, f"change site {_where(by_kind['change'][0])}"
        elif touched:
            found, how = True, f"committed {touched[0]}"
    elif expect.verdict in ("already", "refuse"):
        kind = "already" if expect.verdict == "already" else "refused"
        if by_kind[kind]:
            found, how = True, f"{kind} site {_where(by_kind[kind][0])}"
    elif expect.verdict == "keep":
        worded = by_kind["kept"] + [s for s in by_kind["already"] + by_kind["refused"] if KEPT.search(s.text)]
        other = by_kind["already"] + by_kind["refused"]
        if worded:
            found, how = True, f"said kept: {_where(worded[0])}"
        elif other:
            found, how = True, f"{other[0].kind} site {_where(other[0])} (not worded as kept)"
    elif expect.verdict == "proposal":
        proposals = [s for s in by_kind["proposal"] + by_kind["refused"] if s.proposal]
        if touched:
            how = f"committed {touched[0]}"
        elif proposals or by_kind["refused"]:
            chosen = (proposals or by_kind["refused"])[0]
            found, how = True, f"{'proposal' if proposals else 'refused'} site {_where(chosen)}"
    if not how:
        how = _what_instead(there, mine, touched)
    return Judged(expect.optimization, expect.verdict, expect.files, found, how)


def _what_instead(there: list[Site], mine: list[Site], touched: list[str]) -> str:
    """What perfbot did instead of what was expected."""
    if touched and not there:
        return f"committed {touched[0]}"
    if there:
        kinds = sorted({s.kind for s in there})
        return f"{'/'.join(kinds)} there: {_where(there[0])}"
    if mine:
        return f"elsewhere only: {_where(mine[0])}" + (f" +{len(mine) - 1}" if len(mine) > 1 else "")
    return "no site"


def _kept_files(facts: CommitFacts) -> list[str]:
    """The files a commit changed, less the run-time helpers it vendored (new `_perfbot_*.py` files)."""
    return [
        f
        for f in facts.changed
        if not (f in facts.added and posixpath.basename(f).startswith(VENDORED_PREFIX))
    ]


def check_imports(
    facts: CommitFacts, optimization: str, manifest: Manifest, base: Tree
) -> tuple[list[ImportFailure], list[str]]:
    """The launch-import check of one commit: its import failures, and its files that do not compile."""
    now = Tree(facts.tree())
    resolver = Resolver(now, base, manifest.installed_from_registry)
    failures, errors = [], []
    for path in facts.changed:
        text = facts.text(path) if path.endswith(".py") else None
        if text is None:
            continue
        if error := compile_error(text, path):
            errors.append(f"{facts.sha[:10]} {error}")
            continue
        added = added_imports(facts.text(path, facts.parent), text)
        for context in contexts(path, manifest.launches, now) if added else []:
            for item in added:
                if why := resolver.check(item, context):
                    failures.append(
                        ImportFailure(
                            facts.sha[:10], optimization, path, item.line, str(item), context.label, why
                        )
                    )
    return list(dict.fromkeys(failures)), errors  # once, however many launches run the file alike


def _overrides(facts: CommitFacts, optimization: str, keeps: list[Expect]) -> list[str]:
    """How a commit overrides `keep` expectations: it touches a cited line, or their files for their optimization.
    Lines inserted next to a cited line touch it only for the kept optimization: another one's new line (a
    flag appended after a kept `--optim`) leaves the kept setting as it was."""
    found = []
    for keep in keeps:
        same = optimization == keep.optimization
        hits = [
            f"{c.path}:{line}"
            for c in citations(keep.where)
            if c.path in facts.changed
            for line in sorted(set(c.lines) & facts.base_lines_touched(c.path, neighbours=same))
        ]
        if not hits and same:
            hits = [f for f in facts.changed if keep.covers(f)]
        if hits:
            found.append(
                f"{facts.sha[:10]} ({optimization}) touches {', '.join(hits)}: kept {keep.optimization} ({keep.note or keep.where})"
            )
    return found


def _reasons(score: Score, sites: list[Site], lines: LineCounts) -> None:
    """False citations of the refused and already sites, and the refused sites that cite no line (an already
    site stands on its own line)."""
    for site in sites:
        if site.kind == "change":
            continue
        label = f"{site.optimization} {_where(site)}"
        if site.kind == "refused":
            score.refused += 1
            if not citations(site.text, site.path):
                score.unsourced.append(f"{label}: {site.text[:160]}")
        for cited in false_citations(site.text, site.path, lines):
            score.false_reasons.append(f"{label} cites {cited}, which does not exist")


def _score_commit(
    result: Score, facts: CommitFacts, optimization: str, manifest: Manifest, base: Tree
) -> None:
    """One commit's extra files, launch-import failures, overridden choices and `never_edit` files."""
    sha = facts.sha[:10]
    uncovered = tuple(
        f
        for f in _kept_files(facts)
        if not any(
            e.verdict == "change" and e.optimization == optimization and e.covers(f) for e in manifest.expects
        )
    )
    if uncovered:
        result.extra.append(Extra(sha, optimization, uncovered))
    failures, errors = check_imports(facts, optimization, manifest, base)
    result.import_failures += failures
    result.compile_errors += errors
    result.overridden += _overrides(facts, optimization, [e for e in manifest.expects if e.verdict == "keep"])
    never = [f for f in facts.changed if matches_any(f, manifest.never_edit)]
    result.never_edited += [f"{sha} ({optimization}) {f}" for f in never]


def score(manifest: Manifest, run: Run, repo: git.Repo) -> Score:
    """Score perfbot's `run` on `repo` (the materialised snapshot of `manifest`)."""
    result = Score(manifest.name, manifest.source, steps=[s.to_dict() for s in run.steps])
    result.problems += [f"traceback in `{c}`" for c in run.tracebacks]
    result.problems += [f"timed out: `{c}`" for c in run.timeouts]
    if run.steps and run.steps[0].returncode != 0:
        result.problems.append(f"scan failed: {run.steps[0].stderr.strip()[-300:]}")
    base_facts = CommitFacts(repo, run.base, run.base)
    base_tree = Tree(base_facts.tree())
    lines = LineCounts(base_tree.files, lambda path: base_facts.text(path, run.base))
    committed: dict[str, set[str]] = {}
    for commit in run.commits:
        facts = CommitFacts(repo, commit.sha, run.base)
        committed.setdefault(commit.optimization, set()).update(_kept_files(facts))
        _score_commit(result, facts, commit.optimization, manifest, base_tree)
    result.commits = len(run.commits)
    if run.commits:
        head = CommitFacts(repo, run.commits[-1].sha, run.base)
        changed = repo.git.diff("--name-only", run.base, head.sha).splitlines()
        result.new_lint = new_lint(changed, lambda p: head.text(p, run.base), head.text)
    result.judged = [judge(e, run.sites, committed.get(e.optimization, set())) for e in manifest.expects]
    _reasons(result, run.sites, lines)
    dirty = repo.git.status("--porcelain")
    if dirty:
        result.problems.append(f"tree left dirty: {' '.join(dirty.split())[:200]}")
    return result
