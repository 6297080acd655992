"""``bot scan``: where each registered optimization applies in a repository, and a plan issue rendered from it."""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

from bot.render import render
from bot.scope import excluded, preflight
from optimizations.program.repository import Site, SiteKinds, SourceCache
from optimizations.registry import OnStep, Optimization, registry


@dataclass
class Finding(SiteKinds):
    """One optimization's sites in the repository."""

    optimization: Optimization
    sites: list[Site]


def scan(root: Path, on_step: OnStep | None = None) -> list[Finding]:
    """Run every registered optimization's ``find`` over the repository (which must parse), each file parsed
    once for all of them; ``on_step(done, total, optimization_id)`` after each optimization."""
    exclude = excluded(root)
    sources = SourceCache()
    preflight(root, exclude, sources)
    optimizations = list(registry().values())
    findings = []
    for done, optimization in enumerate(optimizations, start=1):
        findings.append(Finding(optimization, optimization.find(root, exclude, sources=sources)))
        if on_step is not None:
            on_step(done, len(optimizations), optimization.id)
    return findings


def _keys():
    yield from string.ascii_uppercase
    for first in string.ascii_uppercase:
        for second in string.ascii_uppercase:
            yield first + second


def render_plan(root: Path, findings: list[Finding]) -> str:
    """A plan issue in the seed's shape: one table per tier, refused sites flagged for a human, and what the
    program already does listed (no item: nothing to apply)."""
    keys = _keys()
    tiers: dict[int, list[dict]] = {}
    for finding in findings:
        if finding.applied:
            opt = finding.optimization
            tiers.setdefault(opt.tier, []).append(
                {
                    "key": next(keys),
                    "location": ", ".join(f"{s.path}:{s.line}" for s in finding.applied),
                    "change": f"{opt.title} (opt:{opt.id})",
                    "expected": opt.expected,
                }
            )
    flagged = [
        {"key": next(keys), "location": f"{s.path}:{s.line}", "change": s.message, "why": s.reason}
        for finding in findings
        for s in finding.refused
    ]
    already = [
        {"location": f"{s.path}:{s.line}", "what": s.message, "optimization": finding.optimization.id}
        for finding in findings
        for s in finding.already
    ]
    return render(
        "plan.md.j2",
        repo=root.resolve().name,
        tiers=dict(sorted(tiers.items())),
        flagged=flagged,
        already=already,
    )
