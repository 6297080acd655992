"""``bot scan``: where each registered optimization applies in a repository, and a plan issue rendered from it."""

from __future__ import annotations

import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bot.render import render
from bot.scope import Scope, excluded
from optimizations.program.repository import RepoContext, Site, SiteKinds, SourceCache
from optimizations.program.runs.resolve import EntryRuns, effective_runs
from optimizations.program.runs.settings import BF16
from optimizations.program.shapes import program_shapes
from optimizations.registry import Numerics, OnStep, Optimization, registry


@dataclass
class Finding(SiteKinds):
    """One optimization's sites in the repository."""

    optimization: Optimization
    sites: list[Site]


def scan(
    root: Path, on_step: OnStep | None = None, sources: SourceCache | None = None, scope: Scope | None = None
) -> list[Finding]:
    """Run every registered optimization's ``find`` over the repository's ``scope`` (default: its own, files
    that do not parse left out), each file parsed once for all of them (into ``sources``, when given, for a
    plan to reuse); ``on_step(done, total, optimization_id)`` after each optimization."""
    sources = SourceCache() if sources is None else sources
    scope = Scope.of(root, sources) if scope is None else scope
    optimizations = list(registry().values())
    findings = []
    for done, optimization in enumerate(optimizations, start=1):
        findings.append(Finding(optimization, optimization.find(root, scope.exclude, sources=sources)))
        if on_step is not None:
            on_step(done, len(optimizations), optimization.id)
    return findings


def _keys() -> Iterator[str]:
    """Row keys in order: A to Z, then AA, AB, ..."""
    yield from string.ascii_uppercase
    for first in string.ascii_uppercase:
        for second in string.ascii_uppercase:
            yield first + second


# The optimization whose "already done" sites say the program trains in bf16 (see :func:`trains_in_bf16`).
BF16_TRAINING = "bf16_autocast"


def trains_in_bf16(findings: list[Finding]) -> bool:
    """True when the scan shows the program already trains in bf16 wherever it looked: bf16 autocast finds a
    loop under bf16 autocast, Accelerate, Lightning or DeepSpeed set to bf16, or component configs that all
    build the model in bf16 (torchtune's ``dtype: bf16``), and nothing to change or refused. The run
    configuration (:func:`files_run_in_bf16`) covers what its launches and Trainer configs set."""
    finding = next((f for f in findings if f.optimization.id == BF16_TRAINING), None)
    return finding is not None and bool(finding.already) and not finding.applied and not finding.refused


def files_in_bf16(findings: list[Finding]) -> set[str]:
    """The files whose own set-up already trains in bf16: bf16 autocast reports them done, with nothing there
    to change or refused. A rounding change in such a file is as pure as in a program that trains in bf16
    throughout (Lightning-AI/litgpt: its finetune and pretrain scripts set Fabric's precision to bf16, while a
    tutorial in fp32 keeps the repository as a whole from reading as bf16)."""
    finding = next((f for f in findings if f.optimization.id == BF16_TRAINING), None)
    if finding is None:
        return set()
    return {s.path for s in finding.already} - {s.path for s in (*finding.applied, *finding.refused)}


def files_run_in_bf16(entries: list[EntryRuns]) -> set[str]:
    """The files loaded only by runs that compute in bf16, as their launches, recipes, configs and code set
    it (a ``TrainingArguments(bf16=True)`` script, ``--bf16 True`` in every README command, an accelerate
    config's ``mixed_precision: bf16``): a rounding-level change there rounds no coarser than the run does."""
    bf16 = {path for entry in entries if entry.every_run_in(BF16) for path in entry.files}
    other = {path for entry in entries if not entry.every_run_in(BF16) for path in entry.files}
    return bf16 - other


def _split_by_precision(finding: Finding, in_bf16: set[str]) -> tuple[Finding, Finding]:
    """The finding's changeable sites in files that train in bf16, and those elsewhere."""
    inside = [s for s in finding.applied if s.path in in_bf16]
    return Finding(finding.optimization, inside), Finding(
        finding.optimization, [s for s in finding.applied if s.path not in in_bf16]
    )


def pure_speedup(optimization: Optimization, in_bf16: bool) -> bool:
    """True when applying it cannot move what the program trains beyond what it already accepts: ``exact``,
    or ``rounding`` in a program that already trains in bf16 (TF32, fused kernels and other kernel orders
    round no coarser than bf16 does)."""
    return optimization.numerics is Numerics.EXACT or (optimization.numerics is Numerics.ROUNDING and in_bf16)


def render_plan(
    root: Path, findings: list[Finding], sources: SourceCache | None = None, scope: Scope | None = None
) -> str:
    """A plan issue in the seed's shape: one table per tier of pure speedups, the changes to what training
    computes in a last tier of their own that the user opts into (:func:`pure_speedup`), changes that need
    restructuring proposed to a person (never applied), refused sites flagged for a human, and what the
    program already does or chose on purpose listed (no item: nothing to apply). ``sources``: the scan's
    parses; ``scope``: the scan's (default: the ``[tool.bot] exclude`` globs alone)."""
    exclude = excluded(root) if scope is None else scope.exclude
    repo = RepoContext(root, exclude, sources=sources)
    shapes = program_shapes(repo)
    entries = effective_runs(repo)
    run_files = files_run_in_bf16(entries)
    in_bf16 = trains_in_bf16(findings) or bool(entries and all(e.every_run_in(BF16) for e in entries))
    bf16_files = files_in_bf16(findings) | run_files
    speedups: dict[int, list[Finding]] = {}
    numerics_changes: list[Finding] = []
    for finding in findings:
        if finding.applied:
            opt = finding.optimization
            if pure_speedup(opt, in_bf16):
                speedups.setdefault(opt.tier, []).append(finding)
            elif opt.numerics is Numerics.ROUNDING:  # pure in the files that train in bf16
                pure, rest = _split_by_precision(finding, bf16_files)
                if pure.applied:
                    speedups.setdefault(opt.tier, []).append(pure)
                if rest.applied:
                    numerics_changes.append(rest)
            else:
                numerics_changes.append(finding)
    keys = _keys()

    def row(finding: Finding) -> dict[str, str]:
        opt = finding.optimization
        return {
            "key": next(keys),
            "location": ", ".join(f"{s.path}:{s.line}" for s in finding.applied),
            "change": f"{opt.title} (opt:{opt.id})",
            "expected": opt.expected_for(shapes),
            "numerics": opt.numerics.shown(opt.numerics_reason),
        }

    tiers = {tier: [row(f) for f in rows] for tier, rows in sorted(speedups.items())}
    opt_in = [row(f) for f in numerics_changes]
    proposals = [
        {
            "key": next(keys),
            "location": s.where,
            "change": f"{s.message} ({finding.optimization.id})",
            "expected": finding.optimization.expected_for(shapes),
            "why": s.reason,
        }
        for finding in findings
        for s in finding.proposals
    ]
    flagged = [
        {"key": next(keys), "location": s.where, "change": s.message, "why": s.reason}
        for finding in findings
        for s in finding.refused
    ]
    already = [
        {"location": s.where, "what": s.message, "optimization": finding.optimization.id}
        for finding in findings
        for s in finding.already
    ]
    kept = [
        {"location": s.where, "what": s.message, "why": s.reason, "optimization": finding.optimization.id}
        for finding in findings
        for s in finding.kept
    ]
    return render(
        "plan.md.j2",
        repo=root.resolve().name,
        tiers=tiers,
        opt_in=opt_in,
        # One past every optimization's default tier: never a tier of pure speedups, whatever the scan found.
        opt_in_tier=1 + max((f.optimization.tier for f in findings), default=0),
        in_bf16=in_bf16,
        proposals=proposals,
        flagged=flagged,
        already=already,
        kept=kept,
    )
