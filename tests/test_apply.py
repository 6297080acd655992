"""`bot apply` end to end on throwaway git repositories: commits, resume, and every way it must refuse."""

from __future__ import annotations

from pathlib import Path

import git
import pytest
from git_repos import commit_all, committed_example, make_repo

from bot import apply as apply_module
from bot import sources as sources_module
from bot.cli import main
from bot.plan import parse_plan
from bot.progress import Progress
from bot.status import ItemStatus, finished_headline
from bot.trackers.base import PROGRESS
from bot.trackers.local import LocalTracker
from optimizations.program.repository import FileResult, Site, TransformError
from optimizations.registry import Optimization, registry

TRAIN = """\
from trl import SFTConfig


def build(out):
    return SFTConfig(
        output_dir=out,  # checkpoints
        packing=False,
    )
"""

PLAN = """\
Performance fixes (apply unconditionally; pure speedups)

| # | File:Line | Change | Expected win |
|---|---|---|---|
| C | train.py:5 | Add dataloader_num_workers=4, dataloader_pin_memory=True | +10-30% GPU util |
| F | train.py:1 | Harden the tokenizer shim | Defensive |

Behavioral changes (flag separately; need user approval)

| # | File:Line | Change | Why not auto-apply |
|---|---|---|---|
| H | configs/dpo.yaml:6 | beta 0.1 → 5.0 | May destabilize |
"""


@pytest.fixture
def target(tmp_path):
    root = tmp_path / "target"
    root.mkdir()
    repo = make_repo(root, {"train.py": TRAIN, "PLAN.md": PLAN})
    return root, repo


def state(repo: git.Repo) -> tuple:
    return (repo.head.commit.hexsha, sorted(h.name for h in repo.heads), repo.is_dirty(untracked_files=True))


def test_the_commit_subject_says_what_the_sites_did(tmp_path):
    """Where the repository still allows a transformers without persistent workers, the commit does not claim
    them (lm-sys/FastChat, artidoro/qlora, tloen/alpaca-lora)."""
    root = tmp_path / "target"
    repo = make_repo(root, {"train.py": TRAIN, "PLAN.md": PLAN, "requirements.txt": "transformers>=4.31.0\n"})
    base = repo.head.commit.hexsha
    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 0
    [commit] = list(repo.iter_commits(f"{base}..HEAD"))
    assert commit.summary == "perf(data): dataloader workers with pinned memory"
    assert "dataloader_persistent_workers" not in (root / "train.py").read_text()


def test_apply_commits_once_and_resumes(target, capsys):
    root, repo = target
    base = repo.head.commit.hexsha
    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 0
    assert "\nDone: 1 landed, 1 need a human\n" in capsys.readouterr().out  # no count of nothing
    assert repo.active_branch.name == "bot/plan-tier-1"
    [commit] = list(repo.iter_commits(f"{base}..HEAD"))
    assert commit.summary == "perf(data): dataloader workers with pinned memory and persistent workers"
    # The registry's win, as a claim for a program of this shape; no number in the subject
    assert "\nExpected: +10-30% GPU util (not measured for this shape)\n" in commit.message
    assert "Bot-Optimization: dataloader_workers\nBot-Plan-Item: C\nBot-Issue: plan" in commit.message
    assert commit.author.name == "perfbot"
    assert set(commit.stats.files) == {"train.py"}
    assert "dataloader_num_workers=DATALOADER_WORKERS," in (root / "train.py").read_text()
    assert not repo.is_dirty(untracked_files=True)

    comment = (root / ".bot/issues/plan/progress.md").read_text()
    assert comment.startswith(PROGRESS)
    progress = Progress.from_comment(comment)
    assert progress.baseline == base and progress.head == commit.hexsha
    assert {r.optimization: r.status for r in progress.rows} == {
        "dataloader_workers": "landed",
        "": "needs_human",
    }
    assert "H: beta 0.1 → 5.0" in comment and "needs a human" in comment

    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 0
    assert "\nNothing to do: 1 already on the branch, 1 need a human\n" in capsys.readouterr().out
    assert list(repo.iter_commits(f"{base}..HEAD")) == [commit]
    tracker = LocalTracker(root)
    assert [c.has_marker(PROGRESS) for c in tracker.comments("plan")] == [True]  # edited in place
    assert "landed (earlier run)" in (root / ".bot/issues/plan/progress.md").read_text()


def test_dirty_tree_is_refused_and_nothing_changes(target, capsys):
    root, repo = target
    (root / "train.py").write_text(TRAIN + "# local edit\n")
    before = state(repo)
    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 2
    assert "uncommitted changes (train.py)" in capsys.readouterr().err
    assert state(repo) == before


def test_an_unparseable_target_file_is_skipped_and_named(target, capsys):
    root, repo = target
    (root / "broken.py").write_text("def f(:\n    pass\n")
    commit_all(repo, "broken")
    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 0
    err = capsys.readouterr().err
    assert "bot: skipped broken.py:1: cannot parse" in err and "exclude" in err
    assert repo.head.commit.message.startswith("perf(") and "broken.py" not in repo.head.commit.stats.files


def test_detached_head_is_refused(target, capsys):
    root, repo = target
    repo.git.checkout("-q", "--detach")
    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 2
    assert "detached" in capsys.readouterr().err


def test_malformed_plan_is_refused(target, tmp_path, capsys):
    root, repo = target
    bad = tmp_path / "bad.md"
    bad.write_text("We should make training faster somehow.\n")
    before = state(repo)
    assert main(["apply", "--tier", "1", "--repo", str(root), "--plan", str(bad)]) == 2
    assert "no plan found in bad.md" in capsys.readouterr().err
    assert state(repo) == before


def test_unknown_option_is_bad_input(capsys):
    assert main(["apply", "--tier", "1", "--frobnicate"]) == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err


class _Explodes(Optimization):
    id = "explodes"
    title = "a transform with a bug"
    tier = 1
    expected = "none"
    summary = "raises half-way through after editing a file"
    keywords = ("explode",)

    def transform_source(self, source, path, ctx):
        return FileResult(source + "\nx = 1\n")

    def dry_run(self, root, exclude=(), focus=(), **_):
        (Path(root) / "train.py").write_text("half-applied")
        (Path(root) / "new_file.py").write_text("")
        raise TransformError("boom")


def test_failing_transform_leaves_no_commit_and_the_run_goes_on(target, monkeypatch):
    root, repo = target
    known = {"explodes": _Explodes(), **registry()}
    monkeypatch.setattr(apply_module, "registry", lambda: known)
    plan = parse_plan("## Tier 1\n\n- opt:explodes\n- opt:dataloader_workers\n", known.values(), "plan")
    base = repo.head.commit.hexsha
    result = apply_module.TierRun.prepare(root, plan, 1).run(LocalTracker(root), "t")
    assert result.exit_code == 1
    rows = {r.optimization: r for r in result.progress.rows}
    assert rows["explodes"].status == "failed" and "boom" in rows["explodes"].note
    assert rows["dataloader_workers"].status == "landed"
    assert len(list(repo.iter_commits(f"{base}..HEAD"))) == 1
    assert not repo.is_dirty(untracked_files=True) and not (root / "new_file.py").exists()


class _Interrupted(_Explodes):
    id = "interrupted"
    summary = "stopped by Ctrl-C after editing a file"
    keywords = ("interrupt",)

    def dry_run(self, root, exclude=(), focus=(), **_):
        (Path(root) / "train.py").write_text("half-applied")
        (Path(root) / "new_file.py").write_text("")
        raise KeyboardInterrupt


def test_ctrl_c_mid_transform_stops_with_a_clean_tree_and_exit_130(target, monkeypatch, capsys):
    root, repo = target
    known = {**registry(), "interrupted": _Interrupted()}
    for module in (apply_module, sources_module):
        monkeypatch.setattr(module, "registry", lambda: known)
    plan = root / "plan.md"
    plan.write_text("## Tier 1\n\n- opt:dataloader_workers\n- opt:interrupted\n")
    commit_all(repo, "plan")
    assert main(["apply", "--tier", "1", "--repo", str(root), "--plan", str(plan)]) == 130
    assert capsys.readouterr().err.strip().endswith("bot: interrupted")
    assert repo.head.commit.message.startswith("perf(")  # the item before the interrupt stays committed
    assert not repo.is_dirty(untracked_files=True) and not (root / "new_file.py").exists()


def test_status_prints_the_progress_comment_of_the_work_branch(target, capsys):
    root, repo = target
    assert main(["status", "--repo", str(root)]) == 2  # on main: not a work branch
    assert "bot/<issue>-tier-<n>" in capsys.readouterr().err
    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 0
    capsys.readouterr()
    assert main(["status", "--repo", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tier 1 · branch bot/plan-tier-1") and "dataloader_workers" in out
    assert "progress comment: " in out and '"rows"' not in out  # the JSON state stays in the comment


TWO_TIERS = """\
## Tier 1

- opt:dataloader_workers

## Tier 2

- opt:packing
"""

PACKING_TRAIN = """\
from trl import SFTConfig


def build(out, max_length):
    return SFTConfig(output_dir=out, max_length=max_length, packing=False)
"""


def test_each_tier_keeps_its_own_state_and_baseline(tmp_path, capsys):
    root = tmp_path / "tiers"
    root.mkdir()
    repo = make_repo(root, {"train.py": PACKING_TRAIN, "PLAN.md": TWO_TIERS})
    main_sha = repo.head.commit.hexsha
    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 0
    tier1_head = repo.head.commit.hexsha
    assert main(["apply", "--tier", "2", "--repo", str(root)]) == 0  # built on the tier-1 branch
    capsys.readouterr()

    comment = LocalTracker(root).comments("plan")
    [progress_comment] = [c for c in comment if c.has_marker(PROGRESS)]
    tier1, tier2 = (
        Progress.from_comment(progress_comment.body, 1),
        Progress.from_comment(progress_comment.body, 2),
    )
    assert (tier1.branch, tier1.baseline) == ("bot/plan-tier-1", main_sha)
    assert (tier2.branch, tier2.baseline) == ("bot/plan-tier-2", tier1_head)
    assert [r.optimization for r in tier2.rows] == ["packing"]
    assert "Tier 1 (branch <code>bot/plan-tier-1</code>)" in progress_comment.body

    assert main(["status", "--repo", str(root)]) == 0
    assert capsys.readouterr().out.startswith(f"tier 2 · branch bot/plan-tier-2 (baseline {tier1_head[:10]}")
    repo.heads["bot/plan-tier-1"].checkout()
    assert main(["status", "--repo", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith(f"tier 1 · branch bot/plan-tier-1 (baseline {main_sha[:10]}") and "packing" not in out
    )
    repo.heads["bot/plan-tier-2"].checkout()
    assert main(["apply", "--tier", "2", "--repo", str(root)]) == 0  # a re-run resumes on the same baseline
    assert "baseline " + tier1_head[:10] in capsys.readouterr().out


class _AlreadyOn(_Explodes):
    id = "already_on"
    summary = "finds its setting already on in train.py"
    keywords = ("already",)

    def transform_source(self, source, path, ctx, *, sites_only=False):
        line = source.splitlines().index("        packing=False,") + 1
        return FileResult(source, [Site(path, line, self.id, "setting on already", False, already=True)])

    dry_run = Optimization.dry_run


def test_an_optimization_the_code_already_does_is_its_own_state(target, monkeypatch, capsys):
    root, repo = target
    known = {**registry(), "already_on": _AlreadyOn()}
    for module in (apply_module, sources_module):
        monkeypatch.setattr(module, "registry", lambda: known)
    plan = root / "plan.md"
    plan.write_text("## Tier 1\n\n- opt:already_on\n- opt:dataloader_workers\n")
    commit_all(repo, "plan")
    base = repo.head.commit.hexsha
    assert main(["apply", "--tier", "1", "--repo", str(root), "--plan", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "✔ already" in out and "train.py:7 setting on already" in out
    assert "\nDone: 1 landed, 1 already done\n" in out
    assert len(list(repo.iter_commits(f"{base}..HEAD"))) == 1  # dataloader_workers only
    progress = (root / ".bot" / "issues" / "plan" / "progress.md").read_text()
    assert "| ✔ already |" in progress and "| ➖ not applicable |" not in progress


def test_a_hint_is_a_preference_not_a_filter(target, capsys):
    """A row whose File:Line names a file with no site of its optimization (here a helper module) still lands where the scan finds the site, and the row says the hint did not match; a hint at
    the right file with the wrong folder prefix finds it as it is."""
    root, repo = target
    (root / "util.py").write_text("def helper():\n    return 1\n")
    plan = root / "plan.md"
    plan.write_text(
        "Performance fixes (apply unconditionally; pure speedups)\n\n"
        "| # | File:Line | Change | Expected win |\n|---|---|---|---|\n"
        "| A | util.py:1 | Add dataloader_num_workers=4 | +5% |\n"
        "| B | src/pkg/train.py:6 | Turn on sample packing (opt:packing) | +50% |\n"
    )
    commit_all(repo, "plan")
    assert main(["apply", "--tier", "1", "--repo", str(root), "--plan", str(plan)]) == 0
    out = capsys.readouterr().out
    workers = next(line for line in out.splitlines() if "dataloader_workers" in line)
    assert "✅ landed" in workers
    assert "the plan points at util.py, which holds no site of dataloader_workers" in workers
    assert "bot scan finds it in train.py" in workers
    packing = next(line for line in out.splitlines() if line.startswith("B "))
    assert "✅ landed" in packing and "holds no site" not in packing
    message = repo.git.log("-1", "--format=%B", "--grep=dataloader")
    assert "the plan points at util.py" in message


def test_each_commit_claims_its_optimizations_own_win_once(tmp_path):
    """Every commit's Expected line is the registry's win for its optimization (as a claim for the repository's
    program shapes), whether its plan row has one item or several, and says once that it was not measured."""
    root = tmp_path / "example"
    repo = committed_example(root)
    base = repo.head.commit.hexsha
    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 0
    known = registry()
    commits = list(repo.iter_commits(f"{base}..HEAD"))
    assert {len(c.trailers_dict["Bot-Plan-Item"][0].split(", ")) for c in commits} == {1, 2}  # both kinds
    for commit in commits:
        [optimization] = commit.trailers_dict["Bot-Optimization"]
        [line] = [text for text in commit.message.splitlines() if text.startswith("Expected: ")]
        assert line.startswith(f"Expected: {known[optimization].expected} ("), line
        assert line.count("not measured") == 1, line


@pytest.mark.parametrize(
    ("statuses", "benchmarked", "headline"),
    [
        (["landed", "resumed", "failed"], False, "Done: 2 landed, 1 failed"),
        (["resumed", "already", "resumed"], False, "Nothing to do: all 3 items are already on the branch"),
        (["resumed"], False, "Nothing to do: the one item is already on the branch"),
        (["not_applicable", "needs_human"], False, "Nothing to do: 1 not applicable, 1 need a human"),
        (
            ["resumed", "resumed"],
            True,
            "Benchmarked; nothing new to commit: all 2 items are already on the branch",
        ),
    ],
)
def test_a_finished_run_says_what_it_did_without_counting_nothing(statuses, benchmarked, headline):
    assert finished_headline(map(ItemStatus, statuses), benchmarked) == headline
