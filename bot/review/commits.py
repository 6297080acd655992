"""What each commit of the range shows on its own: its diff size, the ruff errors it introduced in the Python
files it touched (:mod:`bot.lint`), credentials and risky code on its added lines (:mod:`bot.security`); and the
findings they make."""

from __future__ import annotations

import git

from bot import history
from bot.claims import claim_of
from bot.conventions import TRAILER_REVERT_OF
from bot.formatting import clip, short
from bot.lint import PYTHON_SUFFIXES, Touched, new_lint
from bot.review.verdict import BLOCKER, MAJOR, CommitReview, Finding
from bot.security import scan_added_lines, scan_message, scan_python

LINT_EVIDENCE_LINES = 10  # new ruff errors a finding quotes; the rest are counted


def review_commits(repo: git.Repo, base: str, head: str) -> tuple[list[CommitReview], str]:
    """Diff size, new lint errors and security hits of every commit in ``base..head``; and a lint error text
    when ruff could not run."""
    reviews, touched, added_by_file = [], [], {}
    for commit in repo.iter_commits(f"{base}..{head}", reverse=True):
        parent = history.parent_of(commit)
        info = history.commit_info(commit)
        review = CommitReview(
            sha=commit.hexsha,
            subject=info.subject,
            optimization=info.optimization,
            plan_items=tuple(info.plan_items),
            revert_of=history.trailer(commit, TRAILER_REVERT_OF),
            claim=claim_of(_message(commit)),
            security=scan_message(commit.message),
        )
        hunks = history.hunks(repo, parent, commit.hexsha)
        for change in history.changed_files(repo, parent, commit.hexsha):
            review.files.append(change.path)
            review.added += change.added
            review.deleted += change.deleted
            lines = hunks[change.path].added if change.path in hunks else {}
            added_by_file[(commit.hexsha, change.path)] = lines
            review.security.extend(scan_added_lines(change.path, lines))
            if change.path.endswith(PYTHON_SUFFIXES):
                touched.append(Touched(commit.hexsha, parent, change.path, change.old_path or change.path))
        reviews.append(review)
    specs = [f"{t.sha}:{t.path}" for t in touched] + [f"{t.parent}:{t.old_path}" for t in touched]
    blobs = history.read_blobs(repo, list(dict.fromkeys(specs)))
    touched = [  # deleted files are not linted; files the commit added have no old version
        Touched(t.sha, t.parent, t.path, t.old_path if f"{t.parent}:{t.old_path}" in blobs else None)
        for t in touched
        if f"{t.sha}:{t.path}" in blobs
    ]
    by_sha = {r.sha: r for r in reviews}
    for t in touched:
        source = blobs[f"{t.sha}:{t.path}"].decode("utf-8", "replace")
        by_sha[t.sha].security.extend(scan_python(t.path, source, added_by_file[(t.sha, t.path)]))
    try:
        linted = new_lint(repo, touched, {key: set(lines) for key, lines in added_by_file.items()})
    except RuntimeError as error:
        return reviews, str(error)
    for t, (new, before) in linted.items():
        by_sha[t.sha].lint.extend(new)
        by_sha[t.sha].preexisting_lint += before
    return reviews, ""


def _message(commit: git.Commit) -> str:
    message = commit.message
    return message if isinstance(message, str) else message.decode("utf-8", "replace")


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
                "Make ruff able to check the touched files (the evidence says what stopped it; "
                "`ruff check` on them by hand shows the same), then run `bot review` again",
            )
        )
    for review in reviews:
        label = f"`{short(review.sha)}` ({clip(review.subject, 60)})"
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
