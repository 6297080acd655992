"""Plan items matched by the code: an item that names no optimization in words, but whose ``File:Line`` hint
lands on a site an optimization's scan finds, is matched to that optimization; an item that asks for a
capability in plain words ("fused attention") keeps the optimizations whose scan finds a site in this
repository."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from bot.plan import Plan, PlanItem
from optimizations.program.repository import SourceCache
from optimizations.registry import Optimization

NEAR_LINES = 3  # a site this many lines around the hinted line (or range) counts as "there"
_RANGE = re.compile(r":(\d+)(?:\s*-\s*(\d+))?")


def hinted_lines(item: PlanItem) -> list[tuple[str, range]]:
    """Each file and lines (``trainer.py:56-74`` → 56..74, widened by :data:`NEAR_LINES`) an item points at."""
    found = []
    for path, start in item.target_hints:
        after = item.location.find(f"{path}:{start}")
        span = _RANGE.match(item.location, after + len(path)) if after >= 0 else None
        end = int(span.group(2)) if span and span.group(2) else start
        found.append((path, range(max(1, start - NEAR_LINES), max(start, end) + NEAR_LINES + 1)))
    return found


def match_by_location(
    plan: Plan,
    root: Path,
    optimizations: list[Optimization],
    exclude: tuple[str, ...] = (),
    sources: SourceCache | None = None,
) -> Plan:
    """The plan with every auto-apply item that names no optimization matched to the optimizations whose
    scan finds a changeable site where its hint points (``sources``: the run's parsed files)."""
    items = []
    for item in plan.items:
        where = [(p, lines) for p, lines in hinted_lines(item) if (Path(root) / p).is_file()]
        if not item.needs_human or not where:
            items.append(item)
            continue
        found = [
            (o.id, f"{path}:{site.line} is a site of {o.id} (bot scan)")
            for path, lines in where
            for o in optimizations
            for site in o.find(root, exclude, (path,), sources=sources)
            if site.applicable and site.path == path and site.line in lines
        ]
        found = list(dict(found).items())  # one reason per optimization
        items.append(
            replace(item, optimizations=tuple(i for i, _ in found), reasons=tuple(r for _, r in found))
            if found
            else item
        )
    return replace(plan, items=items)


def choose_by_sites(
    plan: Plan,
    root: Path,
    optimizations: list[Optimization],
    exclude: tuple[str, ...] = (),
    sources: SourceCache | None = None,
) -> Plan:
    """The plan with each item's plain-words alternatives narrowed to those whose scan finds a site here (one
    to change or to propose, or one where the program already does it or chose otherwise): "compile the model"
    is ``compile_model`` for a hand-written loop and ``regional_compile`` for a Trainer. When none finds a site,
    all are kept, and each reports why it has none."""
    known = {o.id: o for o in optimizations}
    found: dict[str, bool] = {}
    items = []
    for item in plan.items:
        if not item.alternatives:
            items.append(item)
            continue
        for i in item.alternatives:
            if i not in found and i in known:
                sites = known[i].find(root, exclude, sources=sources)
                found[i] = any(not site.refused for site in sites)
        dropped = {i for i in item.alternatives if not found.get(i)}
        if dropped == set(item.alternatives):
            items.append(item)
            continue
        kept = [(i, r) for i, r in zip(item.optimizations, item.reasons, strict=True) if i not in dropped]
        items.append(
            replace(
                item,
                optimizations=tuple(i for i, _ in kept),
                reasons=tuple(
                    f"{r}; bot scan finds a site of {i} here" if i in item.alternatives else r
                    for i, r in kept
                ),
                alternatives=tuple(i for i in item.alternatives if i not in dropped),
            )
        )
    return replace(plan, items=items)
