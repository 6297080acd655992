"""The plan parser on the seed issue, on `## Tier N` plans, and on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from git_repos import make_repo

from bot.plan import PlanError, clean, parse_criteria, parse_plan
from bot.render import render
from bot.scan import render_plan, scan
from optimizations.registry import registry

SEED = (Path(__file__).parent / "fixtures" / "seed_issue.md").read_text()


@pytest.fixture(scope="module")
def seed_plan():
    return parse_plan(SEED, registry().values(), "seed")


def test_seed_tier1_items_map_to_optimizations(seed_plan):
    items = {i.key: i for i in seed_plan.tier(1)}
    assert list(items) == ["A", "B", "C", "D", "E", "F", "G"]
    assert items["A"].optimizations == ("fa2",)
    assert items["B"].optimizations == ("packing",)
    assert items["C"].optimizations == ("dataloader_workers",)
    assert items["D"].optimizations == ("liger_guard",)
    assert items["E"].optimizations == ("dpo_precompute",)
    assert set(items["G"].optimizations) == {"fa2", "packing", "dataloader_workers", "liger_guard"}
    assert items["F"].needs_human and [i.key for i in seed_plan.unmatched if i.tier == 1] == ["F"]


def test_seed_item_fields(seed_plan):
    a = next(i for i in seed_plan.items if i.key == "A")
    assert a.target_hint == ("trainer.py", 98)
    assert a.expected == "+15-20% SFT"
    assert a.change.startswith('attn_implementation="sdpa"')
    g = next(i for i in seed_plan.items if i.key == "G")
    assert g.target_hint == ("sft.py", 151)


def test_seed_behavioural_items_are_listed_not_applied(seed_plan):
    behavioural = {i.key: i for i in seed_plan.behavioural}
    assert list(behavioural) == ["H", "I"]
    assert all(not i.auto_apply and not i.optimizations for i in behavioural.values())
    assert behavioural["H"].target_hint == ("configs/dpo/default.yaml", 6)
    assert "destabilize" in behavioural["H"].why_not
    assert not any(i.key in ("H", "I") for i in seed_plan.tier(1))


def test_seed_success_criteria_as_numbers(seed_plan):
    throughput = {c.workload: c.threshold for c in seed_plan.criteria if c.kind == "throughput"}
    assert throughput == {"sft": pytest.approx(0.30), "dpo": pytest.approx(0.20)}
    assert seed_plan.loss_tolerance == pytest.approx(0.05)


def test_seed_follow_ons(seed_plan):
    follow = [i for i in seed_plan.items if i.follow_on]
    assert {i.tier for i in follow} == {2, 3}
    assert [i.change for i in follow if i.tier == 3] == ["FA3 pilot", "FSDP2 migration", "FP8 TE pilot"]
    assert "token caching" in [i.change for i in follow if i.tier == 2]


def test_tier_headings_with_bullets_and_explicit_ids():
    text = """# Speed plan

## Tier 1

- A. Load the model with flash attention at `train.py:12` — +15% SFT
- B. opt:dataloader_workers for the eval loader
- Rewrite the tokenizer cache

## Tier 2

- opt:fa2 opt:no_such_thing in `sft.py:3`
"""
    plan = parse_plan(text, registry().values())
    tier1 = plan.tier(1)
    assert [i.key for i in tier1] == ["A", "B", "T1.3"]
    assert tier1[0].target_hint == ("train.py", 12) and tier1[0].expected == "+15% SFT"
    assert tier1[1].optimizations == ("dataloader_workers",)
    assert tier1[2].needs_human
    tier2 = plan.tier(2)
    assert tier2[0].optimizations == ("fa2",)  # unknown explicit ids are dropped, known ones kept


def test_hidden_html_comments_and_invisible_characters_are_ignored():
    text = """## Tier 1

- opt:dataloader_workers <!-- opt:fa2 hidden instruction -->
- opt:\u200bpacking
"""
    plan = parse_plan(text, registry().values())
    assert plan.tier(1)[0].optimizations == ("dataloader_workers",)
    assert plan.tier(1)[1].optimizations == ("packing",)
    assert "\u200b" not in clean("a\u200bb\u202ec")


@pytest.mark.parametrize("body", ["", "Just a bug report.\n\nIt crashes.", "| a | b |\n|---|---|\n| 1 | 2 |"])
def test_body_without_a_plan_is_a_clear_error(body):
    with pytest.raises(PlanError, match="no plan found in issue 7: expected a markdown table"):
        parse_plan(body, registry().values(), "issue 7")


def test_a_drafted_plan_that_lists_only_what_is_done_says_so():
    already = [{"location": f"train.py:{line}", "what": "TF32 on", "optimization": "tf32"} for line in (3, 9)]
    drafted = render(
        "plan.md.j2",
        repo="r",
        tiers={},
        opt_in=[],
        opt_in_tier=3,
        in_bf16=False,
        proposals=[],
        flagged=[],
        already=already,
        kept=[],
    )
    with pytest.raises(
        PlanError, match="the plan in r-plan.md has no items to apply: the 2 sites it lists are done"
    ):
        parse_plan(drafted, registry().values(), "r-plan.md")


def test_a_drafted_plan_whose_sites_all_need_a_person_says_so():
    """nanoGPT's drafted plan: every site refused or done, nothing to apply (it said "no plan found")."""
    already = [{"location": "train.py:3", "what": "TF32 on", "optimization": "tf32"}]
    flagged = [
        {
            "key": "A",
            "location": "bench.py:91",
            "change": "`loss.item()` kept on the device",
            "why": "read every step",
        },
        {
            "key": "B",
            "location": "model.py:284",
            "change": "per-layer AdamW",
            "why": "settings passed through **extra_args",
        },
    ]
    drafted = render(
        "plan.md.j2",
        repo="r",
        tiers={},
        opt_in=[],
        opt_in_tier=3,
        in_bf16=False,
        proposals=[],
        flagged=flagged,
        already=already,
        kept=[],
    )
    with pytest.raises(
        PlanError,
        match=r"the plan in r-plan.md has no items to apply: its 2 item\(s\) need a person .*; done already: 1 listed site\(s\)",
    ):
        parse_plan(drafted, registry().values(), "r-plan.md")


def test_criteria_parsing():
    [sft, dpo] = parse_criteria("minimum +30% combined on SFT, +20% on DPO")
    assert (sft.workload, sft.threshold, dpo.workload, dpo.threshold) == ("sft", 0.30, "dpo", 0.20)
    [loss] = parse_criteria("loss curves within ±5% on smoke tests")
    assert (loss.kind, loss.threshold) == ("loss", 0.05)


def test_bot_plan_prints_the_seed_plan(capsys):
    from bot.cli import main

    assert main(["plan", str(Path(__file__).parent / "fixtures" / "seed_issue.md")]) == 0
    out = capsys.readouterr().out
    assert "A     fa2  [auto-apply] @ trainer.py:98" in out
    assert "H     NEEDS A HUMAN (no registered optimization)  [behavioural, never applied]" in out
    assert "sft throughput ≥ +30%" in out and "dpo throughput ≥ +20%" in out and "loss within ±5%" in out
    assert "Needs a human: F" in out


def test_bot_plan_json_and_stdin(monkeypatch, capsys):
    import io
    import json

    from bot.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO("## Tier 2\n\n- opt:dataloader_workers\n"))
    assert main(["--json", "plan", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["items"][0]["optimizations"] == ["dataloader_workers"] and data["items"][0]["tier"] == 2


def test_criteria_are_whole_sentences_and_none_is_dropped(seed_plan):
    texts = [c.text for c in seed_plan.criteria]
    assert (
        "Benchmark table shows throughput improvements (minimum +30% combined on SFT, +20% on DPO)" in texts
    )
    assert not any(t.endswith("(minimum +30% combined on SFT") for t in texts)  # no comma fragments
    kinds = {c.kind for c in seed_plan.criteria}
    assert {"throughput", "loss", "stability", "applied"} <= kinds
    [crash] = [c for c in seed_plan.criteria if c.kind == "stability"]
    assert crash.text == "No crashes on either smoke test"
    manual = [c for c in seed_plan.criteria if c.kind == "manual"]
    assert manual and all(not c.checkable for c in manual)


def test_bot_plan_never_calls_a_needs_human_item_auto_apply(capsys):
    from bot.cli import main

    assert main(["plan", str(Path(__file__).parent / "fixtures" / "seed_issue.md")]) == 0
    out = capsys.readouterr().out
    assert not any("NEEDS A HUMAN" in line and "[auto-apply]" in line for line in out.splitlines())
    assert "F     NEEDS A HUMAN (no registered optimization)  [needs a human]" in out
    assert "not machine-checkable" in out and "no crashed or OOM benchmark run" in out


PLAIN_WORDS = """\
## Tier 1

- Turn on sample packing for SFT (bfd)
- Use more data loader worker processes
- Precompute the DPO reference log-probs once
- Switch attention to Flash Attention where available
- Fused AdamW optimizer step
- Refactor the logging module
"""


def test_plain_words_items_are_matched_and_say_why():
    plan = parse_plan(PLAIN_WORDS, registry().values(), "plain")
    matched = {i.change: i.optimizations for i in plan.items}
    assert matched == {
        "Turn on sample packing for SFT (bfd)": ("packing",),
        "Use more data loader worker processes": ("dataloader_workers",),
        "Precompute the DPO reference log-probs once": ("dpo_precompute",),
        # a capability in plain words: the repository decides between them (bot.hints.choose_by_sites)
        "Switch attention to Flash Attention where available": ("fa2", "sdpa"),
        "Fused AdamW optimizer step": ("fused_adamw",),
        "Refactor the logging module": (),
    }
    assert {i.change: i.alternatives for i in plan.items if i.alternatives} == {
        "Switch attention to Flash Attention where available": ("fa2", "sdpa")
    }
    packing = plan.items[0]
    assert packing.reasons and "pack" in packing.reasons[0]
    assert [i.change for i in plan.unmatched] == ["Refactor the logging module"]


def test_word_stems_read_plurals_and_identifiers_alike():
    from bot.plan import words

    assert words("dataloader_num_workers") == words("Dataloader num worker")
    assert words("precomputed") == words("precompute") == words("precomputing")
    assert words("losses") == words("loss")


def test_a_drafted_plan_lists_what_the_program_already_does_and_applies_none_of_it(tmp_path):
    make_repo(
        tmp_path,
        {
            "train.py": "import torch\n\ntorch.backends.cuda.matmul.allow_tf32 = True\n\n\n"
            "def train(model, loader, optimizer):\n    for x, y in loader:\n"
            "        loss = torch.nn.functional.cross_entropy(model(x), y)\n        loss.backward()\n"
            "        optimizer.step()\n"
        },
    )
    findings = scan(tmp_path)
    [tf32] = [s for f in findings for s in f.already if s.optimization == "tf32"]
    text = render_plan(tmp_path, findings)
    already = text[text.index("### Already done") : text.index("## Success criteria")]
    assert f"- `train.py:{tf32.line}`: {tf32.message} (tf32)" in already
    plan = parse_plan(text, registry().values(), "scan")
    assert not any("tf32" in item.optimizations for item in plan.items)
