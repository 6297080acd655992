"""Plan items matched by the code their ``File:Line`` hint points at."""

from __future__ import annotations

from git_repos import make_repo

from bot.hints import choose_by_sites, hinted_lines, match_by_location
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
    [(path, lines)] = hinted_lines(item)
    assert path == "trainer.py" and lines.start == 53 and lines.stop == 78


def test_a_row_naming_several_files_points_at_each():
    [item] = parse_plan(
        "Performance fixes (apply unconditionally; pure speedups)\n\n| # | File:Line | Change | Expected win |\n"
        "|---|---|---|---|\n| A | trainer.py:302-322 and trainer.py:545-563, sft.py:151 | x | y |\n",
        registry().values(),
    ).items
    assert item.target_hints == (("trainer.py", 302), ("trainer.py", 545), ("sft.py", 151))
    assert [(p, w.start, w.stop) for p, w in hinted_lines(item)] == [
        ("trainer.py", 299, 326),
        ("trainer.py", 542, 567),
        ("sft.py", 148, 155),
    ]


LOOP = """\
import torch


def main(model, loader):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_plain_words_keep_the_alternatives_this_repository_has_a_site_for(tmp_path):
    """ "Compile the model" names compile_model and regional_compile; a hand-written loop with no Trainer has
    a site for the first only. Where neither has a site, both stay, to say why."""
    make_repo(tmp_path, {"loop.py": LOOP})
    optimizations = list(registry().values())
    plan = parse_plan("## Tier 1\n\n- Compile the model\n- Use fused attention\n", optimizations, "plan")
    before = {i.change: i for i in plan.items}
    assert set(before["Compile the model"].alternatives) == {"compile_model", "regional_compile"}
    assert set(before["Use fused attention"].alternatives) == {"fa2", "sdpa"}

    chosen = {i.change: i for i in choose_by_sites(plan, tmp_path, optimizations).items}
    assert chosen["Compile the model"].optimizations == ("compile_model",)
    assert "bot scan finds a site of compile_model here" in chosen["Compile the model"].reasons[0]
    assert set(chosen["Use fused attention"].optimizations) == {"fa2", "sdpa"}  # no attention here at all


def test_a_keyword_that_names_one_alternative_keeps_the_others_out():
    plan = parse_plan("## Tier 1\n\n- Flash attention via attn_implementation\n", registry().values(), "plan")
    [item] = plan.items
    assert item.optimizations == ("fa2",) and item.alternatives == ()
