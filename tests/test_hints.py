"""Plan items matched by the code their ``File:Line`` hint points at."""

from __future__ import annotations

from git_repos import make_repo

from bot.hints import hinted_lines, match_by_location
from bot.plan import parse_plan
from optimizations.registry import registry

TRAIN = """\
from trl import SFTConfig


def build(out):
    return SFTConfig(
        output_dir=out,
        packing=False,
    )


def unrelated():
    return 1
"""

PLAN = """\
Performance fixes (apply unconditionally; pure speedups)

| # | File:Line | Change | Expected win |
|---|---|---|---|
| A | train.py:5-8 | Make the config faster | +10% |
| B | train.py:12 | Make unrelated() faster | +1% |
| C | missing.py:3 | Something else | ? |
"""


def test_items_are_matched_by_the_sites_their_hints_point_at(tmp_path):
    make_repo(tmp_path, {"train.py": TRAIN})
    optimizations = list(registry().values())
    plan = parse_plan(PLAN, optimizations, "plan")
    assert all(i.needs_human for i in plan.items)  # no words name an optimization

    located = match_by_location(plan, tmp_path, optimizations)
    by_key = {i.key: i for i in located.items}
    assert {"packing", "dataloader_workers"} <= set(by_key["A"].optimizations)
    assert all("train.py:5 is a site of" in r for r in by_key["A"].reasons)
    assert by_key["B"].needs_human and by_key["C"].needs_human  # nothing there, or no such file


def test_hinted_lines_read_ranges():
    [item] = parse_plan(
        "Performance fixes (apply unconditionally; pure speedups)\n\n| # | File:Line | Change | Expected win |\n"
        "|---|---|---|---|\n| A | trainer.py:56-74 (SFTConfig) | x | y |\n",
        registry().values(),
    ).items
    path, lines = hinted_lines(item)
    assert path == "trainer.py" and lines.start == 53 and lines.stop == 78
