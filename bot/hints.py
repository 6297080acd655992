"""Plan items matched by the code they point at: an item that names no optimization in words, but whose
``File:Line`` hint lands on a site an optimization's scan finds, is matched to that optimization."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from bot.plan import Plan, PlanItem
from optimizations.program.repository import SourceCache
from optimizations.registry import Optimization

NEAR_LINES = 3  # a site this many lines around the hinted line (or range) counts as "there"
_RANGE = re.compile(r":(\d+)(?:\s*-\s*(\d+))?")


def hinted_lines(item: PlanItem) -> tuple[str, range] | None:
    """The file and the lines (``trainer.py:56-74`` → 56..74, widened by :data:`NEAR_LINES`) an item points at."""
    hint = item.target_hint
    if hint is None:
        return None
    path, start = hint
    found = (
        _RANGE.search(item.location[item.location.find(path) + len(path) :])
        if path in item.location
        else None
    )
    end = int(found.group(2)) if found and found.group(2) else start
    return path, range(max(1, start - NEAR_LINES), max(start, end) + NEAR_LINES + 1)


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
        where = hinted_lines(item) if item.needs_human else None
        if where is None or not (Path(root) / where[0]).is_file():
            items.append(item)
            continue
        path, lines = where
        found = [
            (o.id, f"{path}:{site.line} is a site of {o.id} (bot scan)")
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
