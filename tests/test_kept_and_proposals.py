"""Issue #51 items 5 and 6: a setting the program chose on purpose is kept, never overridden, and a change that
needs restructuring is proposed to a person, never committed; the plan, the scan and the progress comment say so
with the site."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from git_repos import make_repo

from bot.cli import main
from bot.commands import scan as scan_command
from bot.plan import parse_plan
from bot.progress import Progress, Row
from bot.scan import render_plan, scan
from bot.status import ItemStatus, finished_headline
from optimizations.program.choices import commented, compile_turned_off, custom_masks
from optimizations.program.repository import RepoContext, Site, SourceCache
from optimizations.registry import get, registry

KEPT = Site(
    "train.py", 8, "fa2", 'from_pretrained: attn_implementation="eager"', False, "a comment", kept=True
)
PROPOSAL = Site(
    "train.py", 12, "steady_bookkeeping", "SFTTrainer(...)", False, "a monkeypatch", proposal=True
)

# A Trainer program with a deliberate eager attention and a trainer wrap that needs restructuring.
TRAINER_PROGRAM = """\
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


def main(path, data):
    model = AutoModelForCausalLM.from_pretrained(
        path,
        # eager: our probe reads the attention weights
        attn_implementation="eager",
        dtype=torch.bfloat16,
    )
    args = TrainingArguments(output_dir="out", dataloader_num_workers=0)  # no workers: the dataset is an open file that must not be forked
    Trainer(model=model, args=args, train_dataset=data).train()


if __name__ == "__main__":
    main("m", None)
"""


def _parsed(tmp_path: Path, text: str):
    return RepoContext(tmp_path).sources.parse("train.py", text)


def _sites(tmp_path: Path, optimization: str, text: str) -> list[Site]:
    (tmp_path / "train.py").write_text(text)
    return get(optimization).transform_source(text, "train.py", RepoContext(tmp_path)).sites


def test_a_site_is_one_kind_and_says_which():
    assert (KEPT.kind, PROPOSAL.kind) == ("kept", "proposal")
    assert not KEPT.refused and not PROPOSAL.refused and not KEPT.applicable
    assert KEPT.describe().endswith("[kept: chosen on purpose (train.py:8): a comment]")
    assert PROPOSAL.describe().endswith("[proposal for a person: a monkeypatch]")
    with pytest.raises(ValueError, match="one of changed, already, kept or proposed"):
        Site("a.py", 1, "x", "m", False, already=True, kept=True)


@pytest.mark.parametrize(
    ("text", "line", "found"),
    [
        ('f(x="eager")  # flash breaks here\n', 1, 1),
        ('# we need eager for the weights\nf(x="eager")\n', 2, 1),
        ('# Load the model\nf(x="eager")\n', 2, None),  # a section title, no reason
        ('f(x="eager")  # type: ignore[arg-type]\n', 1, None),  # a tool's directive
        ('f(a,  # because of the cache\n  x="eager")\n', 2, None),  # another argument's comment
        ('# eager, on purpose\n\n# Load\nf(x="eager")\n', 4, None),  # past a blank line: out of reach
    ],
)
def test_a_comment_in_reach_gives_a_reason(tmp_path, text, line, found):
    choice = commented(_parsed(tmp_path, text), line, ("eager",))
    assert (choice.line if choice else None) == found


def test_custom_masks_and_compile_switches_are_read_from_the_code(tmp_path):
    assert custom_masks(_parsed(tmp_path, "m = torch.block_diag(*blocks)\n")).line == 1
    assert custom_masks(_parsed(tmp_path, "if attention_mask.dim() == 4:\n    pass\n")) is not None
    assert custom_masks(_parsed(tmp_path, "m = causal_mask(x)\n")) is None
    off = compile_turned_off(
        _parsed(tmp_path, "cfg = Config(\n    # dynamo hangs on our op\n    compile=False,\n)\n")
    )
    assert off is not None and off.line == 3 and "dynamo hangs" in off.evidence
    assert compile_turned_off(_parsed(tmp_path, "cfg = Config(compile=False)\n")) is None  # no reason given


def test_an_explicit_attention_without_a_reason_is_still_picked(tmp_path):
    """A title comment above, or a Gemma 2 checkpoint with sdpa (the family needs eager, not sdpa): changed."""
    titled = (
        "import torch\nfrom transformers import AutoModelForCausalLM\n\n\ndef load(p):\n    # Load the model\n"
        '    return AutoModelForCausalLM.from_pretrained(p, attn_implementation="sdpa", dtype=torch.bfloat16)\n'
    )
    assert [s.kind for s in _sites(tmp_path, "fa2", titled)] == ["change"]
    gemma_sdpa = titled.replace("(p,", '("google/gemma-2-9b",')
    assert [s.kind for s in _sites(tmp_path, "fa2", gemma_sdpa)] == ["change"]
    gemma_eager = gemma_sdpa.replace('"sdpa"', '"eager"')
    [site] = _sites(tmp_path, "fa2", gemma_eager)
    assert site.kind == "kept" and "Gemma 2 and 3" in site.reason and site.line == 7


def test_attention_weights_read_keep_eager(tmp_path):
    text = (
        "import torch\nfrom transformers import AutoModelForCausalLM\n\n\ndef load(p):\n"
        '    m = AutoModelForCausalLM.from_pretrained(p, attn_implementation="eager", dtype=torch.bfloat16)\n'
        "    return m(torch.ones(1, 1), output_attentions=True)\n"
    )
    [site] = _sites(tmp_path, "fa2", text)
    assert site.kind == "kept" and "output_attentions=True" in site.reason


def test_no_workers_without_a_reason_get_workers(tmp_path):
    text = (
        "from torch.utils.data import DataLoader\n\n\ndef main(ds):\n    # build the loader\n"
        "    return DataLoader(ds, num_workers=0)\n\n\nif __name__ == '__main__':\n    main(None)\n"
    )
    assert [s.kind for s in _sites(tmp_path, "dataloader_workers", text)] == ["change"]


def test_scan_and_plan_show_kept_sites_and_proposals_with_their_place(tmp_path, capsys):
    make_repo(tmp_path, {"train.py": TRAINER_PROGRAM})
    sources = SourceCache()
    findings = scan(tmp_path, sources=sources)
    by_id = {f.optimization.id: f for f in findings}
    assert [s.where for s in by_id["fa2"].kept] == ["train.py:10"]
    assert [s.where for s in by_id["dataloader_workers"].kept] == ["train.py:13"]
    assert [s.where for s in by_id["steady_bookkeeping"].proposals] == ["train.py:14"]
    assert not by_id["steady_bookkeeping"].applied

    plan = render_plan(tmp_path, findings, sources)
    proposals = plan.partition("### Proposals for a person")[2].partition("\n### ")[0]
    assert "| train.py:14 |" in proposals and registry()["steady_bookkeeping"].expected in proposals
    assert "monkeypatch of library internals" in proposals
    kept = plan.partition("### Kept: chosen on purpose")[2].partition("\n## ")[0]
    assert (
        "kept: chosen on purpose (`train.py:10`)" in kept
        and "kept: chosen on purpose (`train.py:13`)" in kept
    )
    assert "train.py:10" not in plan.partition("### Refused sites")[2].partition("\n### ")[0]

    parsed = parse_plan(plan, registry().values())
    [item] = [i for i in parsed.items if "steady_bookkeeping" in i.change]
    assert item.proposal and not item.auto_apply and item in parsed.proposals
    assert item not in parsed.behavioural and item.location == "train.py:14"

    scan_command.run(argparse.Namespace(path=str(tmp_path), plan=False, explain=False, json=True))
    listed = json.loads(capsys.readouterr().out)
    assert [(s["line"], s["kept"]) for s in listed["fa2"]] == [(10, True)]
    assert [(s["line"], s["proposal"]) for s in listed["steady_bookkeeping"]] == [(14, True)]


def test_apply_commits_neither_a_kept_site_nor_a_proposal(tmp_path, capsys):
    plan_text = "## Tier 1\n\n- opt:steady_bookkeeping\n- opt:dataloader_workers\n"
    repo = make_repo(tmp_path, {"train.py": TRAINER_PROGRAM, "plan.md": plan_text})
    plan = tmp_path / "plan.md"
    base = repo.head.commit.hexsha
    assert main(["apply", "--tier", "1", "--repo", str(tmp_path), "--plan", str(plan)]) == 0
    assert list(repo.iter_commits(f"{base}..HEAD")) == []
    out = capsys.readouterr().out
    assert "Nothing to do: 1 kept on purpose, 1 proposed to a person" in out
    assert "proposal for a person (not committed): train.py:14: Trainer(...)" in out
    progress = (tmp_path / ".bot" / "issues" / "plan" / "progress.md").read_text()
    assert "| 💡 proposal for a person |" in progress and "| ✋ kept (chosen on purpose) |" in progress
    assert "kept: chosen on purpose (train.py:13)" in progress
    listed = progress.partition("**Proposals for a person (not committed: each needs restructuring)**")[2]
    assert "- train.py:14: Trainer(...)" in listed and "— expected" in listed and "not committed:" in listed
    [state] = Progress.all_from_comment(progress)
    assert state.proposals and state.row("steady_bookkeeping").status is ItemStatus.PROPOSED


def test_a_proposal_row_renders_as_such_and_reads_back():
    progress = Progress(tier=2, issue=51, branch="bot/51-tier-2", baseline="a" * 40)
    progress.rows = [Row("steady_bookkeeping", ["A"], "bookkeeping", ItemStatus.PROPOSED, note="train.py:14")]
    progress.proposals = [
        "train.py:14: SFTTrainer(...) (steady_bookkeeping) — expected ~3%; not committed: why"
    ]
    body = progress.render()
    assert "💡 proposal for a person" in body and "**Proposals for a person" in body
    assert Progress.from_comment(body).proposals == progress.proposals
    assert finished_headline([ItemStatus.PROPOSED, ItemStatus.KEPT], benchmarked=False) == (
        "Nothing to do: 1 kept on purpose, 1 proposed to a person"
    )
