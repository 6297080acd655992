"""Golden tests of the reviewer verdict, the results and note comments, and --drop-regressions, on synthetic
results with known samples and real git repositories in tmp_path."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest
from git_repos import make_repo
from markdown_it import MarkdownIt

from benchmarks.results import CommitInfo, Results
from benchmarks.runner import RunRecord
from benchmarks.spec import Workload
from benchmarks.stats import DEFAULT_THRESHOLDS, summarize
from bot.commands import review as review_command
from bot.commands.options import add_bench_arguments
from bot.comments.note import render_note
from bot.comments.results import render_results
from bot.comments.verdict import render_verdict
from bot.conventions import TRAILER_ISSUE, TRAILER_ITEM, TRAILER_OPTIMIZATION, TRAILER_REVERT_OF
from bot.plan import Criterion, Plan, PlanItem, parse_plan
from bot.progress import Progress, Row
from bot.regressions import drop_regressions, slowdowns
from bot.reporting import publish_reports
from bot.review import review, review_range
from bot.review.adherence import items_tally
from bot.review.criteria import check_criteria
from bot.review.verdict import (
    BEHAVIOURAL,
    BEHAVIOURAL_CHANGED,
    BLOCKER,
    CONCERNS,
    FAIL,
    MAJOR,
    MET,
    MINOR,
    NOT_LANDED,
    NOT_MET,
    PASS,
    Adherence,
)
from bot.security import scan_added_lines, scan_python
from bot.status import ItemStatus
from bot.trackers.base import COMMENT_LIMIT, NOTE, PROGRESS, RESULTS, VERDICT
from bot.trackers.local import LocalTracker
from bot.workspace import Workspace, commit_message
from optimizations.registry import registry

PYPROJECT = (
    '[project]\nname = "target"\n\n[tool.ruff]\nline-length = 100\n\n[tool.ruff.lint]\nselect = ["E", "F"]\n'
)
TRAIN = "import sys\n\n\ndef build(workers):\n    return {'workers': workers}\n"  # F401 before the bot came
CONFIG = "beta: 0.1\nepochs: 1\n"
SPREAD = (0.99, 0.995, 1.0, 1.005, 1.01)  # known samples around each centre: 5 repeats, about ±1%
HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"


# --- fixtures -----------------------------------------------------------------------------------------------


@pytest.fixture
def target(tmp_path):
    """A target repository on its bot branch: baseline plus commits C, D and E (one file each)."""
    root = tmp_path / "target"
    make_repo(root, {"pyproject.toml": PYPROJECT, "train.py": TRAIN, "configs/dpo.yaml": CONFIG})
    workspace = Workspace(root)
    base = workspace.start("bot/6-tier-1")
    shas = [
        bot_commit(workspace, "C", "workers", "train.py", TRAIN.replace("workers}", "workers, 'pin': True}")),
        bot_commit(workspace, "D", "liger", "liger.py", "def enable(model):\n    return model\n"),
        bot_commit(workspace, "E", "precompute", "dpo.py", "PRECOMPUTE = True\n"),
    ]
    return workspace, base, shas


def bot_commit(workspace: Workspace, key: str, optimization: str, path: str, text: str) -> str:
    (workspace.root / path).write_text(text)
    trailers = {TRAILER_OPTIMIZATION: optimization, TRAILER_ITEM: key, TRAILER_ISSUE: "6"}
    return workspace.commit([path], commit_message("train", f"{optimization} for {key}", "", "", trailers))


def make_plan(dpo_target: float = 0.20) -> Plan:
    return Plan(
        title="Tier 1 perf wins",
        items=[
            PlanItem("C", 1, "Dataloader workers", "train.py:5", "+10-30% GPU util", ("workers",)),
            PlanItem("D", 1, "Liger kernel", "train.py:5", "+20% throughput", ("liger",)),
            PlanItem("E", 1, "DPO precompute_ref_log_probs", "dpo.py:1", "+30-50% DPO", ("precompute",)),
            PlanItem("F", 1, "Harden the tokenizer shim", "train.py:1", "Defensive"),
            PlanItem(
                "H", 1, "beta: 0.1 → 5.0", "configs/dpo.yaml:1", auto_apply=False, why_not="May destabilize"
            ),
            PlanItem("T2.1", 2, "Liger on ZeRO-3", follow_on=True),
        ],
        criteria=[
            Criterion("+30% combined on SFT", "throughput", 0.30, "sft"),
            Criterion(f"+{dpo_target:.0%} on DPO", "throughput", dpo_target, "dpo"),
            Criterion("loss curves within ±5%", "loss", 0.05),
        ],
    )


def make_progress(base: str, shas: list[str]) -> Progress:
    rows = [
        Row("workers", ["C"], "Dataloader workers", "landed", shas[0], "train.py:5"),
        Row("liger", ["D"], "Liger kernel", "landed", shas[1], "liger.py:1"),
        Row("precompute", ["E"], "DPO precompute", "landed", shas[2], "dpo.py:1"),
        Row("", ["F"], "Harden the tokenizer shim", "needs_human", note="no registered optimization"),
    ]
    return Progress(tier=1, issue=6, branch="bot/6-tier-1", baseline=base, rows=rows)


def synthetic_results(
    commits: list[tuple[str, str, list[str]]],
    throughput: dict[str, list[float]],
    *,
    memory_gb: list[float] | None = None,
    loss: list[float] | None = None,
    gpu: bool = True,
    failed: set[tuple[int, str, int]] = frozenset(),
) -> Results:
    """Results for ``commits`` (sha, subject, plan items; baseline first) whose runs have known samples:
    ``throughput[workload][i]`` × SPREAD tokens/s at commit i, a loss curve scaled by ``loss[i]``."""
    workloads = {
        name: Workload(
            name, f"python train.py --task {name} --steps {{steps}}", steps=20, warmup_steps=2, repeats=5
        )
        for name in throughput
    }
    runs = []
    for repeat, factor in enumerate(SPREAD):
        for name in throughput:
            for index, (sha, _, _) in enumerate(commits):
                if (index, name, repeat) in failed:
                    runs.append(
                        RunRecord(sha, name, repeat, "oom", 9.0, "CUDA out of memory\n" + "x" * 50, None)
                    )
                    continue
                value = throughput[name][index] * factor
                scale = (loss or [1.0] * len(commits))[index]
                metrics = {
                    "tokens_per_s": value,
                    "samples_per_s": value / 256,
                    "mfu": value / 1e5 if gpu else None,
                    "peak_memory_bytes": (memory_gb or [20.0] * len(commits))[index] * 1e9 if gpu else None,
                    "loss": [
                        {"step": s, "tokens_seen": 4096 * s, "loss": scale * (2.5 - s / 20)}
                        for s in range(1, 21)
                    ],
                    "env": {
                        "gpu": "NVIDIA H100 80GB HBM3" if gpu else None,
                        "driver": "550.54.15" if gpu else None,
                        "cuda": "12.8",
                        "torch": "2.8.0",
                        "transformers": "5.5.0",
                        "trl": "0.29.1",
                        "python": "3.11.7",
                        "host": "bench-box",
                    },
                }
                runs.append(RunRecord(sha, name, repeat, "ok", 30.0, "", metrics))
    shas = [sha for sha, _, _ in commits]
    return Results(
        repo="target",
        baseline=shas[0],
        commits=[
            CommitInfo(sha, subject, subject.split()[0] if items else None, items)
            for sha, subject, items in commits
        ],
        workloads={
            name: {
                "primary": w.primary,
                "higher_is_better": True,
                "steps": w.steps,
                "warmup_steps": 2,
                "repeats": 5,
                "command": w.render("gpu", 0),
            }
            for name, w in workloads.items()
        },
        runs=runs,
        summary=summarize(shas, workloads, runs, DEFAULT_THRESHOLDS),
        started_at="2026-04-18T10:00:00+00:00",
        finished_at="2026-04-18T10:40:00+00:00",
        device="NVIDIA H100 80GB HBM3 on bench-box",
        size="gpu",
        seed=0,
        thresholds=asdict(DEFAULT_THRESHOLDS),
    )


def results_for(base: str, shas: list[str], sft: list[float], dpo: list[float], **kwargs) -> Results:
    commits = [(base, "base", [])] + [
        (sha, f"{name} perf(train): change {key}", [key])
        for sha, key, name in zip(shas, "CDE", ("workers", "liger", "precompute"), strict=False)
    ]
    return synthetic_results(commits, {"sft": sft, "dpo": dpo}, **kwargs)


# --- markdown hygiene ---------------------------------------------------------------------------------------


def _cells(line: str) -> int:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return len(re.split(r"(?<!\\)\|", inner))


def assert_clean_markdown(body: str) -> None:
    """Parses as markdown; every table row has the header's cell count; no pipe line falls outside a table;
    under GitHub's comment limit."""
    assert len(body) < COMMENT_LIMIT
    tokens = MarkdownIt("commonmark").enable("table").parse(body)
    lines = body.splitlines()
    in_tables, in_fences = set(), set()
    for token in tokens:
        if token.type == "table_open":
            start, end = token.map
            rows = [line for line in lines[start:end] if line.strip()]
            assert len({_cells(row) for row in rows}) == 1, "\n".join(rows)
            in_tables.update(range(start, end))
        elif token.type == "fence":
            in_fences.update(range(*token.map))
    strays = [
        line
        for number, line in enumerate(lines)
        if line.startswith("|") and number not in in_tables and number not in in_fences
    ]
    assert not strays, strays
    assert body.count("<details>") == body.count("</details>")


# --- the golden cases ---------------------------------------------------------------------------------------


def test_all_criteria_met_is_pass(target):
    workspace, base, shas = target
    plan, progress = make_plan(), make_progress(base, shas)
    results = results_for(base, shas, sft=[1000, 1200, 1250, 1400], dpo=[500, 510, 515, 650])
    verdict = review(workspace.repo, base, workspace.head, plan=plan, progress=progress, results=results)

    assert verdict.outcome == PASS, verdict.findings
    assert [c.status for c in verdict.criteria] == [MET, MET, MET]
    assert "sft tokens_per_s +40.0%" in verdict.criteria[0].observed
    assert "dpo tokens_per_s +30.0%" in verdict.criteria[1].observed
    assert {a.key: a.status for a in verdict.adherence} == {
        "C": ItemStatus.LANDED.label,
        "D": ItemStatus.LANDED.label,
        "E": ItemStatus.LANDED.label,
        "F": ItemStatus.NEEDS_HUMAN.label,
        "H": BEHAVIOURAL,
    }
    assert "confirmed unchanged" in next(a.note for a in verdict.adherence if a.key == "H")
    assert (verdict.added, verdict.deleted, verdict.files) == (4, 1, ["dpo.py", "liger.py", "train.py"])
    assert verdict.lint_new == 0 and verdict.lint_preexisting == 1  # train.py's old F401 is not the bot's
    assert [f.severity for f in verdict.findings] == [MINOR]  # F needs a human

    body = render_verdict(verdict, plan=plan, progress=progress)
    assert body.startswith(VERDICT) and "**Verdict: PASS**" in body
    results_body = render_results(results, plan=plan, progress=progress)
    assert (
        "+40.0%" in results_body
        and "xychart-beta" in results_body
        and "NVIDIA H100 80GB HBM3" in results_body
    )
    assert "20.0 min (40 runs); sum of run durations" in results_body  # 40 runs × 30 s
    note = render_note(verdict, plan=plan, progress=progress, results=results)
    assert "3 of 3 success criteria met" in note and "Tier 2 follow-on T2.1" in note
    for text in (body, results_body, note):
        assert_clean_markdown(text)


def test_an_unmet_criterion_is_concerns_naming_it(target):
    workspace, base, shas = target
    plan, progress = make_plan(dpo_target=0.20), make_progress(base, shas)
    results = results_for(base, shas, sft=[1000, 1200, 1250, 1400], dpo=[500, 510, 515, 550])
    verdict = review(workspace.repo, base, workspace.head, plan=plan, progress=progress, results=results)

    assert verdict.outcome == CONCERNS
    assert [c.status for c in verdict.criteria] == [MET, NOT_MET, MET]
    [finding] = [f for f in verdict.findings if f.severity == MAJOR]
    assert finding.title == "Success criterion not met: +20% on DPO"
    assert any("+10.0%" in line for line in finding.evidence)
    note = render_note(verdict, plan=plan, progress=progress, results=results)
    assert "2 of 3 success criteria met" in note and "| +20% on DPO |" in note and "**NOT MET**" in note
    assert_clean_markdown(note)


def test_a_significant_regression_is_concerns_naming_the_commit(target):
    workspace, base, shas = target
    results = results_for(base, shas, sft=[1000, 1400, 700, 1400], dpo=[500, 600, 300, 650])
    assert list(slowdowns(results)) == [shas[1]]
    verdict = review(
        workspace.repo,
        base,
        workspace.head,
        plan=make_plan(),
        progress=make_progress(base, shas),
        results=results,
    )

    assert verdict.outcome == CONCERNS
    [slow] = [f for f in verdict.findings if f.title.startswith("Significant slowdown")]
    assert slow.severity == MAJOR and slow.commit == shas[1] and shas[1][:7] in slow.title
    assert any(
        line.startswith("sft tokens_per_s 700.0 vs 1,400") and "-50.0%" in line for line in slow.evidence
    )


def test_drop_regressions_reverts_remeasures_and_runs_twice_without_duplicates(target):
    workspace, base, shas = target
    plan, progress = make_plan(), make_progress(base, shas)
    tracker = LocalTracker(workspace.root)
    results = results_for(base, shas, sft=[1000, 1400, 700, 1400], dpo=[500, 600, 300, 650])
    measured: list[list[str]] = []

    def rebench(revs: list[str]) -> Results:
        measured.append(revs)
        return synthetic_results(
            [(revs[0], "base", []), (revs[1], "revert: liger", [])], {"sft": [1000, 2000], "dpo": [500, 1300]}
        )

    reports = publish_reports(tracker, 6, plan, progress, results, workspace, drop=True, rebench=rebench)

    head = workspace.repo.head.commit
    assert head.parents[0].hexsha == shas[2] and workspace.repo.is_ancestor(shas[1], head)  # history kept
    assert (
        f"This reverts commit {shas[1]}." in head.message
        and f"{TRAILER_REVERT_OF}: {shas[1]}" in head.message
    )
    assert "sft tokens_per_s 700.0 vs 1,400 at the commit before (-50.0%" in head.message
    assert not (workspace.root / "liger.py").exists()
    assert measured == [[base, head.hexsha]]
    assert [(r.commit, r.revert) for r in reports.drop.reverted] == [(shas[1], head.hexsha)]
    assert progress.row("liger").status == "reverted" and head.hexsha[:7] in progress.row("liger").note
    [slow] = [f for f in reports.verdict.findings if f.title.startswith("Significant slowdown")]
    assert slow.severity == MINOR and f"reverted in `{head.hexsha[:7]}`" in slow.title
    assert reports.verdict.measured_head == head.hexsha
    assert "+100.0%" in reports.verdict.criteria[0].observed  # criteria judged on the re-measured head
    assert reports.verdict.outcome == PASS, reports.verdict.findings
    assert "reverted by a new commit" in reports.results_body and "Head re-measured" in reports.results_body
    assert "reverted in" in reports.note_body
    for text in (reports.results_body, reports.verdict_body, reports.note_body):
        assert_clean_markdown(text)

    again = publish_reports(tracker, 6, plan, progress, results, workspace, drop=True, rebench=rebench)
    assert workspace.repo.head.commit == head  # nothing reverted twice
    assert measured == [[base, head.hexsha]] * 2  # the stale results stop before the head: measured again
    assert again.drop.kept == [(shas[1], f"already reverted in {head.hexsha[:7]}")]
    bodies = [c.body for c in tracker.comments(6)]
    assert len(bodies) == 4
    assert sorted(body.splitlines()[0] for body in bodies) == sorted([RESULTS, VERDICT, NOTE, PROGRESS])
    assert (
        Progress.from_comment(next(b for b in bodies if b.startswith(PROGRESS))).row("liger").status
        == "reverted"
    )


def test_a_trade_off_is_not_reverted(target):
    workspace, base, shas = target
    results = results_for(base, shas, sft=[1000, 1000, 700, 700], dpo=[500, 500, 900, 900])
    reports = publish_reports(
        LocalTracker(workspace.root),
        6,
        make_plan(),
        make_progress(base, shas),
        results,
        workspace,
        drop=True,
        rebench=lambda revs: pytest.fail("nothing to re-measure"),
    )
    assert workspace.head == shas[2] and reports.drop.reverted == []
    assert reports.drop.kept == [(shas[1], "a trade-off: also a significant win on dpo")]
    assert reports.verdict.outcome == CONCERNS


def test_a_conflicting_revert_is_undone_and_left_to_a_human(target):
    workspace, base, shas = target
    later = bot_commit(
        workspace, "E", "precompute", "liger.py", "def enable(model):\n    return model.half()\n"
    )
    commits = [(base, "base", []), (shas[0], "C", ["C"]), (shas[1], "D", ["D"]), (shas[2], "E", ["E"])]
    commits.append((later, "E2", ["E"]))
    results = synthetic_results(commits, {"sft": [1000, 1000, 600, 600, 600]})
    outcome = drop_regressions(workspace, results, lambda revs: pytest.fail("nothing was reverted"))
    assert outcome.reverted == [] and outcome.kept[0][0] == shas[1]
    assert outcome.kept[0][1].startswith("the revert conflicts with later commits")
    assert workspace.head == later and not workspace.repo.is_dirty(untracked_files=True)
    assert not (Path(workspace.repo.git_dir) / "REVERT_HEAD").exists()


def test_a_new_ruff_error_fails_naming_the_commit(target):
    workspace, base, shas = target
    bad = bot_commit(
        workspace, "F", "shim", "shim.py", "import os\n\n\ndef shim():\n    return undefined_name\n"
    )
    verdict = review(workspace.repo, base, workspace.head, plan=make_plan())
    assert verdict.outcome == FAIL
    [lint] = [f for f in verdict.findings if f.category == "lint"]
    assert lint.severity == BLOCKER and lint.commit == bad
    assert lint.evidence == (
        "shim.py:1:8 F401 `os` imported but unused",
        "shim.py:5:12 F821 Undefined name `undefined_name`",
    )
    assert "1 can be fixed automatically" in lint.fix
    body = render_verdict(verdict)
    assert "FAIL, 2 new error(s)" in body
    assert_clean_markdown(body)


def test_ruff_reads_the_targets_own_config_at_each_commit(target):
    workspace, base, _ = target
    relaxed = PYPROJECT.replace('select = ["E", "F"]', 'select = ["E", "F"]\nignore = ["F401"]')
    bot_commit(workspace, "F", "config", "pyproject.toml", relaxed)
    bot_commit(workspace, "F", "shim", "shim.py", "import os\n")
    verdict = review(workspace.repo, base, workspace.head)
    assert verdict.lint_new == 0 and verdict.outcome == PASS
    verdict = review(workspace.repo, workspace.repo.commit("HEAD~1").hexsha, workspace.head)
    assert verdict.lint_new == 0  # the config of the commit under review, not of the working tree


def test_a_planted_credential_fails_without_repeating_it(target):
    workspace, base, _ = target
    planted = bot_commit(workspace, "F", "shim", "settings.py", f'HUB_TOKEN = "{HF_TOKEN}"\n')
    verdict = review(workspace.repo, base, workspace.head)
    assert verdict.outcome == FAIL
    [found] = [f for f in verdict.findings if f.category == "security"]
    assert found.severity == BLOCKER and found.commit == planted
    assert found.evidence == ("settings.py:1 Hugging Face token `hf_A… (37 characters)`",)
    body = render_verdict(verdict)
    assert HF_TOKEN not in body and HF_TOKEN[:12] not in body


def test_a_changed_behavioural_line_is_concerns(target):
    workspace, base, _ = target
    changed = bot_commit(workspace, "E", "precompute", "configs/dpo.yaml", CONFIG.replace("0.1", "5.0"))
    verdict = review(workspace.repo, base, workspace.head, plan=make_plan())
    assert next(a for a in verdict.adherence if a.key == "H").status == BEHAVIOURAL_CHANGED
    [finding] = [f for f in verdict.findings if "Behavioural item H" in f.title]
    assert finding.severity == MAJOR and changed[:7] in finding.evidence[1]
    assert verdict.outcome == CONCERNS


# --- security sweep ---------------------------------------------------------------------------------------


def test_security_sweep_reads_the_syntax_tree_through_import_aliases():
    source = (
        "import subprocess as sp\n"
        "from os import system as run_it\n"
        "from huggingface_hub import hf_hub_download as fetch\n"
        "import requests\n"
        "from transformers import AutoModel\n"
        "\n"
        "def go(name):\n"
        "    sp.run(f'ls {name}', shell=True)\n"
        "    sp.run(['ls', name])\n"
        "    run_it('rm -rf ' + name)\n"
        "    eval(name)\n"
        "    fetch('org/model', 'weights.bin')\n"
        "    requests.get('https://example.com/data.json')\n"
        "    AutoModel.from_pretrained('https://example.com/model')\n"
        "    AutoModel.from_pretrained('org/model')\n"
    )
    hits = scan_python("x.py", source, range(1, 16))
    assert [(hit.line, hit.kind) for hit in hits] == [
        (8, "shell"),
        (10, "shell"),
        (11, "eval/exec"),
        (12, "network download"),
        (13, "network download"),
        (14, "network download"),
    ]
    assert "interpolated" in hits[0].detail and hits[1].detail == "`os.system()` with an interpolated command"
    assert scan_python("x.py", source, [9, 15]) == []  # only calls on added lines count


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("token = 'ghp_" + "a1B2" * 9 + "'", "GitHub token"),
        ("AWS_KEY = 'AKIA" + "ABCDEFGHIJKLMNOP" + "'", "AWS access key id"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "private key"),
        ('db = connect(password="hunter2!")', "password literal"),
        ('"api_key": "sk-live-1234"', "password literal"),
    ],
)
def test_credential_shapes(line, kind):
    [hit] = scan_added_lines("f", {3: line})
    assert hit.blocking and hit.detail.startswith(kind) and hit.line == 3


@pytest.mark.parametrize(
    "line",
    ['password = os.environ["DB_PASSWORD"]', 'password=""', "hf_hub_download(repo_id)", 'token="${TOKEN}"'],
)
def test_no_credential_where_there_is_none(line):
    assert scan_added_lines("f", {1: line}) == []


# --- hygiene at scale ---------------------------------------------------------------------------------------


def test_sixty_commits_by_three_workloads_fit_and_keep_their_tables(tmp_path):
    root = tmp_path / "big"
    make_repo(root, {"pyproject.toml": PYPROJECT})
    workspace = Workspace(root)
    base = workspace.start("bot/big-tier-1")
    keys = [f"K{i}" for i in range(60)]
    shas = [
        bot_commit(workspace, key, f"opt{i}", f"mod{i}.py", f"VALUE = {i}\n") for i, key in enumerate(keys)
    ]
    commits = [(base, "base", [])] + [
        (sha, f"opt{i} perf(train): a long descriptive subject line for change {i} | with a pipe", [keys[i]])
        for i, sha in enumerate(shas)
    ]
    throughput = {name: [1000.0 * (1 + 0.01 * (i % 7)) for i in range(61)] for name in ("sft", "dpo", "loop")}
    failed = {(i, "loop", 0) for i in range(1, 61, 5)}
    results = synthetic_results(
        commits, throughput, memory_gb=[20 + (i % 3) for i in range(61)], failed=failed
    )
    plan = Plan(
        "big",
        [PlanItem(k, 1, f"change {k}", optimizations=(f"opt{i}",)) for i, k in enumerate(keys)],
        [Criterion("+30% on SFT", "throughput", 0.3, "sft")],
    )
    progress = Progress(
        1,
        "big",
        "bot/big-tier-1",
        base,
        rows=[
            Row(f"opt{i}", [k], f"change {k}", "landed", shas[i], "x.py:1 " * 30) for i, k in enumerate(keys)
        ],
    )
    tracker = LocalTracker(root)
    reports = publish_reports(tracker, "big", plan, progress, results, workspace)

    assert len(reports.verdict.commits) == 60
    for body in (reports.results_body, reports.verdict_body, reports.note_body):
        assert_clean_markdown(body)
        assert len(body) < COMMENT_LIMIT
    assert "<details><summary>All 61 measured commits of sft</summary>" in reports.results_body
    assert "Failed runs (12)" in reports.results_body
    publish_reports(tracker, "big", plan, progress, results, workspace)
    assert len(tracker.comments("big")) == 3


def test_an_oversized_results_comment_is_compacted_not_cut(target):
    workspace, base, shas = target
    many = [(base, "base", [])] + [
        (f"{i:040x}", f"change {i} " + "words " * 20, [f"K{i}"]) for i in range(1, 160)
    ]
    throughput = {
        name: [1000.0 + (300 if i % 40 == 1 else 0) for i in range(160)] for name in ("a", "b", "c")
    }
    body = render_results(synthetic_results(many, throughput, gpu=False))
    assert_clean_markdown(body)
    assert "left out to fit the comment" in body and "Truncated" not in body
    assert "Compute time spent (CPU)" in body and "not measured" in body  # no memory or MFU on CPU


# --- bot review on its own ----------------------------------------------------------------------------------


def test_bot_review_on_a_range_with_a_results_file(target, tmp_path, capsys):
    workspace, base, shas = target
    results = results_for(base, shas, sft=[1000, 1200, 1250, 1400], dpo=[500, 510, 515, 650])
    path = results.save(tmp_path / "results.json")
    plan_file = tmp_path / "PLAN.md"
    plan_file.write_text(
        "Performance fixes (apply unconditionally; pure speedups)\n\n"
        "| # | File:Line | Change | Expected win |\n|---|---|---|---|\n"
        "| C | train.py:5 | Add dataloader_num_workers=4 | +10% |\n\n"
        "Success criteria\n\n- Benchmark table shows throughput improvements (minimum +30% combined on SFT, +20% on DPO)\n"
    )
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    review_command.add_arguments(parser)

    args = parser.parse_args(
        [
            f"{base}..HEAD",
            "--repo",
            str(workspace.root),
            "--plan",
            str(plan_file),
            "--results",
            str(path),
            "--post",
        ]
    )
    assert review_command.run(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(VERDICT) and "**Verdict: PASS**" in out and "2 of 2 met" in out
    assert LocalTracker(workspace.root).comments("plan")[0].body == out

    args = parser.parse_args(["--json", shas[1], "--repo", str(workspace.root)])
    assert review_command.run(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["sha"] for c in data["commits"]] == [shas[1]] and data["outcome"] == PASS

    assert [
        c.sha for c in review_range(workspace.root).commits
    ] == shas  # default: baseline..HEAD of the branch
    path.write_text("{}")
    with pytest.raises(Exception, match="not a readable results file"):
        review_command.run(parser.parse_args(["--repo", str(workspace.root), "--results", str(path)]))


def test_results_say_not_measured_for_failed_and_missing_numbers(target):
    workspace, base, shas = target
    results = results_for(
        base,
        shas,
        sft=[1000, 1200, 1250, 1400],
        dpo=[500, 510, 515, 650],
        failed={(3, "dpo", r) for r in range(5)},
    )
    body = render_results(results)
    dpo_table = body.split("### Workload `dpo`")[1]
    head_row = next(line for line in dpo_table.splitlines() if line.startswith(f"| `{shas[2][:7]}`"))
    assert head_row.count("not measured") >= 6 and "0 ok, 5 oom" in head_row
    assert "Failed runs (5)" in body and "CUDA out of memory" in body
    verdict = review(workspace.repo, base, workspace.head, plan=make_plan(), results=results)
    assert next(c for c in verdict.criteria if "DPO" in c.text).status == "NOT MEASURED"
    assert any(f.title.startswith("Benchmark runs failed") for f in verdict.findings)
    assert verdict.outcome == CONCERNS
    assert_clean_markdown(body)


def test_results_json_round_trip_renders_the_same(target, tmp_path):
    workspace, base, shas = target
    results = results_for(base, shas, sft=[1000, 1200, 1250, 1400], dpo=[500, 510, 515, 650])
    again = Results.load(results.save(Path(tmp_path) / "r.json"))
    assert render_results(again) == render_results(results)


def test_drop_regressions_option():
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    assert parser.parse_args(["--drop-regressions"]).drop_regressions is True
    assert parser.parse_args([]).drop_regressions is False


def test_an_item_the_code_already_did_meets_all_changes_applied():
    plan = parse_plan(
        "## Tier 1\n\n- opt:tf32\n- opt:fused_adamw\n\n## Success criteria\n\n- All code changes applied\n",
        registry().values(),
        "plan",
    )
    landed = Adherence("T1.1", "tf32", ItemStatus.LANDED.label)
    already = Adherence("T1.2", "fused", ItemStatus.ALREADY.label)
    failed = Adherence("T1.2", "fused", ItemStatus.NOT_APPLICABLE.label)
    [check] = check_criteria(plan, None, [landed, already])
    assert (check.status, check.observed) == (MET, "all 2 landed (1 already done before)")
    [check] = check_criteria(plan, None, [landed, failed])
    assert check.status == NOT_MET and check.observed.startswith("1 of 2 landed")


def test_the_items_count_names_only_what_is_there():
    """``bot review``'s count of the plan items reads as ``bot status``'s: no zeros, and nothing dangling when
    no item landed."""
    landed = Adherence("A", "packing", ItemStatus.LANDED.label)
    missing = Adherence("B", "workers", NOT_LANDED)
    assert items_tally([landed, missing, missing]) == "1 landed, 2 not landed"
    assert items_tally([missing, missing]) == "2 not landed"
