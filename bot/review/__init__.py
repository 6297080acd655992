"""The reviewer verdict: computed from the commits, ruff and the bench results, never typed by hand.

For a commit range it checks plan adherence (each plan item's status, with its commits), lints the Python
files each commit touched (:mod:`bot.lint`: only errors the commit introduced count), measures the diff of
each commit, sweeps the added lines for credentials and risky code (:mod:`bot.security`), checks the plan's
success criteria against the measured numbers, sets each commit's claimed win against its measured effect
(:mod:`bot.claims`), and lists measured regressions. Any new lint error or a credential → FAIL; a criterion
not met or not measured, a claimed win not measured, measured as a regression or contradicted by its interval,
a regression, a failed transform or benchmark, or risky code → CONCERNS; else PASS.

Without results given, :func:`review_range` uses the results file under ``.bot/results/`` (``bot bench``
writes one per run) of the range it reviews: one with the range's baseline that measured its bot commits and
its head, of the reviewed branch (:func:`bot.measurements.find_results`). Without one, the claims and criteria
are not measured: another range's or tier's numbers never stand in.

The verdict and its findings are :mod:`bot.review.verdict`; the evidence comes from :mod:`~bot.review.commits`
(diff, lint, security), :mod:`~bot.review.adherence` (the plan items), :mod:`~bot.review.criteria` (the success
criteria) and :mod:`~bot.review.measured` (claims and regressions against the results).
"""

from __future__ import annotations

from pathlib import Path

import git

from benchmarks.results import Results
from bot import history, measurements
from bot.errors import BadInput
from bot.formatting import short
from bot.notes import read_note
from bot.plan import Plan
from bot.progress import Progress
from bot.review.adherence import items_tally, plan_adherence
from bot.review.commits import commit_findings, review_commits
from bot.review.criteria import check_criteria, criteria_findings
from bot.review.measured import claim_findings, measured_findings, review_claims
from bot.review.verdict import MINOR, SEVERITY_ORDER, Adherence, Finding, Verdict, outcome
from bot.workspace import Workspace


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
    reverted = history.reverted_commits(repo, f"{base}..{head}")
    tier = tier if tier is not None else (progress.tier if progress else None)
    adherence: list[Adherence] = []
    if plan is not None:
        adherence, found = plan_adherence(repo, base, head, plan, progress, reviews, reverted, tier)
        findings += found
    measured = final_results or results
    checks = check_criteria(plan, measured, adherence, tier)
    findings += criteria_findings(checks)
    claims = review_claims(repo, reviews, results)
    findings += claim_findings(claims, reverted)
    tolerance = plan.loss_tolerance if plan else None
    if results is not None:
        findings += measured_findings(results, measurements.loss_tolerance(results, tolerance), reverted)
        measured_shas = {info.sha for info in results.commits}
        unmeasured = [r for r in reviews if r.optimization and r.sha not in measured_shas]
        if unmeasured:
            findings.append(
                Finding(
                    MINOR,
                    "regression",
                    "Commits in the range were not benchmarked",
                    tuple(f"`{short(r.sha)}` {r.subject}" for r in unmeasured),
                    "Run `bot bench` on the range to measure them",
                )
            )
    if measured is not None and measurements.head(measured) != head:
        findings.append(
            Finding(
                MINOR,
                "criterion",
                f"The numbers speak for `{short(measurements.head(measured))}`, "
                f"not the reviewed head `{short(head)}`",
                (f"the last benchmarked commit is {measurements.head(measured)}",),
                "Benchmark the head (`bot bench BASE HEAD`) so the criteria are judged on what ships",
            )
        )
    if final_results is not None:
        findings += measured_findings(
            final_results, measurements.loss_tolerance(final_results, tolerance), {}, remeasured=True
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
        measured_head=measurements.head(measured) if measured else "",
        lint_error=lint_error,
        claims=claims,
        tier=tier,
        items=items_tally(adherence),
    )


def resolve_range(workspace: Workspace, rev_range: str | None) -> tuple[str, str]:
    """``BASE..HEAD``, ``BASE..`` or ``..HEAD``, one ``REV`` (that commit alone), or the current bot branch's
    baseline..HEAD when None."""
    repo = workspace.repo
    try:
        if not rev_range:
            if workspace.baseline() == workspace.head:
                raise BadInput(f"HEAD of {workspace.root} carries no bot commits; pass a RANGE (BASE..HEAD)")
            return workspace.baseline(), workspace.head
        if "..." in rev_range:
            raise BadInput(f"{rev_range}: a symmetric difference is not a review range; write BASE..HEAD")
        if ".." in rev_range:
            left, right = rev_range.split("..", 1)
            return repo.commit(left or "HEAD").hexsha, repo.commit(right or "HEAD").hexsha
        commit = repo.commit(rev_range)
        return history.parent_of(commit), commit.hexsha
    except (git.BadName, ValueError) as error:
        raise BadInput(f"{rev_range}: not a commit range in {workspace.root} ({error})") from error


def review_range(
    repo_path: str | Path,
    rev_range: str | None = None,
    plan: Plan | None = None,
    results: Results | None = None,
    progress: Progress | None = None,
    tier: int | None = None,
    branch: str | None = None,
) -> Verdict:
    """``bot review``: the verdict on a commit range of the repository at ``repo_path``. ``branch`` is the
    branch (the tier) the range is of, whose results alone may speak for it; without a range, the branch
    checked out."""
    workspace = Workspace(repo_path)
    repo = workspace.repo
    base, head = resolve_range(workspace, rev_range)
    if base == history.EMPTY_TREE:
        raise BadInput(f"{rev_range} is a root commit; review a range that starts after it")
    if rev_range is None and branch is None and not repo.head.is_detached:
        branch = workspace.branch
    found = None
    if results is None:
        measured = [base, *(c.sha for c in history.bot_commits(repo, base, head))]
        shas = measured if measured[-1] == head else [*measured, head]
        found = measurements.find_results(workspace.root, shas, branch)
        results = found[0] if found else None
    verdict = review(repo, base, head, plan=plan, progress=progress, results=results, tier=tier)
    if found:
        verdict.results_from = str(found[1])
    elif results is None and (note := read_note(repo, head)):
        verdict.findings.append(
            Finding(
                MINOR,
                "criterion",
                f"`{short(head)}` has a perfbot note, but no results file under .bot/results measured the range",
                tuple(note.splitlines()),
                "Run `bot bench` in this checkout (or pass `--results`) so the review can check the numbers",
            )
        )
    return verdict
