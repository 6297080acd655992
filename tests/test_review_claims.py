"""Claims held to measurements: what a commit claims, how `bot review` finds the results `bot bench` wrote, and
how a claim, a criterion or a missing measurement moves the verdict."""

from __future__ import annotations

import pytest
from git_repos import make_repo
from test_review_report import synthetic_results

from benchmarks.results import INTERRUPTED, CommitInfo
from benchmarks.spec import Workload
from benchmarks.stats import summarize
from bot.claims import (
    HELD,
    INCONCLUSIVE,
    NOT_BORNE_OUT,
    NOT_HERE,
    REGRESSED,
    UNMEASURED,
    check_claim,
    claim_of,
    parse_gain,
)
from bot.comments.results import render_results
from bot.comments.verdict import render_verdict
from bot.conventions import TRAILER_OPTIMIZATION
from bot.measurements import results_folder
from bot.notes import write_notes
from bot.plan import Criterion, Plan, parse_plan
from bot.review import review_range
from bot.review.criteria import check_criteria
from bot.review.verdict import CONCERNS, MAJOR, MINOR, PASS
from bot.workload_files import executed_files, runs_changes
from bot.workspace import Workspace, commit_message
from optimizations.registry import registry


@pytest.mark.parametrize(
    ("message", "claimed"),
    [
        ("perf(train): swap SDPA for FlashAttention-2 (+15-20% SFT)", ("+15-20% SFT", 0.15)),
        ("perf: no-op (+10% tokens/s)", ("+10% tokens/s", 0.10)),
        ("perf(x): y\n\nPlan item A\n\nExpected: +20% throughput, 60% mem\n\nBot-Optimization: a\n", None),
        ("perf: a (1.7-2.2x SFT)", ("1.7-2.2x SFT", 0.7)),
        ("perf: faster by 12%", ("perf: faster by 12%", 0.12)),
        ("perf: tokenizer shim (Defensive; 0% perf)", None),
        ("fix: turn Liger off on LoRA (-2x regression)", None),
        ("fix: memory (-16% runtime)", None),
        ("refactor: nothing measured", None),
    ],
)
def test_a_claim_is_the_expected_line_or_a_number_in_the_subject(message, claimed):
    claim = claim_of(message)
    if "Expected:" in message:
        assert (claim.text, claim.gain) == ("+20% throughput, 60% mem", 0.20)
        return
    assert (None if claim is None else (claim.text, claim.gain)) == claimed


def test_bot_commits_keep_unmeasured_numbers_out_of_the_subject():
    message = commit_message(
        "train", "Liger kernel", "+20% throughput", "Plan item D", {TRAILER_OPTIMIZATION: "x"}
    )
    subject, body = message.split("\n", 1)
    assert subject == "perf(train): Liger kernel" and parse_gain(subject) is None
    assert "\nExpected: +20% throughput (not measured here)\n" in body
    assert claim_of(message).gain == 0.20


def test_a_label_says_baseline_only_for_the_first_revision_measured():
    plain = CommitInfo("a" * 40, "perf: sleep 10% of every step (+10% tokens/s)")
    bot = CommitInfo("b" * 40, "perf(train): Liger kernel", optimization="liger")
    assert plain.label(first=True) == "baseline"
    assert plain.label(first=False) == "perf: sleep 10% of every step (+10% tokens/s)"
    assert bot.label(first=False) == "liger"


@pytest.fixture
def planted(tmp_path):
    """A branch with the issue's commits: a no-op, a slowdown and a real speed-up, all claiming a win."""
    root = tmp_path / "target"
    make_repo(root, {"train.py": "STEPS = 1\n"})
    workspace = Workspace(root)
    base = workspace.start("bot/plan-tier-1")
    shas = []
    for index, (subject, body) in enumerate(
        [
            ("perf(train): no-op (+10% tokens/s)", ""),
            ("perf(train): sleep 10% of every step (+10% tokens/s)", ""),
            ("perf(train): fused AdamW", "Expected: +15% tokens/s (not measured here)"),
        ]
    ):
        (root / "train.py").write_text(f"STEPS = {index + 2}\n")
        message = f"{subject}\n\n{body}\n\n{TRAILER_OPTIMIZATION}: opt{index}\n"
        shas.append(workspace.commit(["train.py"], message))
    commits = [(base, "base", [])] + [(sha, f"change {i}", []) for i, sha in enumerate(shas)]
    results = synthetic_results(commits, {"loop": [1000.0, 1000.0, 909.0, 1200.0]}, gpu=False)
    return workspace, base, shas, results


def saved(results, workspace, branch=None, label=""):
    """Keep ``results`` as `bot bench` keeps a run of ``branch`` (default: the one checked out)."""
    results.branch = branch or workspace.branch
    return results.save_new(results_folder(workspace.root), label)


def test_review_after_bench_uses_the_results_file_and_sets_each_claim_against_it(planted):
    workspace, base, shas, results = planted
    saved_path = saved(results, workspace)
    verdict = review_range(workspace.root)  # no --results: the file bench wrote is found
    assert verdict.results_from == str(saved_path) and verdict.measured_head == shas[2]
    assert [(c.sha, c.status) for c in verdict.claims] == [
        (shas[0], NOT_BORNE_OUT),  # measured +0.0%, its interval far below +10%
        (shas[1], REGRESSED),
        (shas[2], HELD),  # +32% against the slowdown before it
    ]
    claims = {f.commit: f for f in verdict.findings if f.category == "claim"}
    assert set(claims) == {shas[0], shas[1]} and {f.severity for f in claims.values()} == {MAJOR}
    assert claims[shas[0]].evidence[0] == "claimed: +10% tokens/s"
    assert verdict.outcome == CONCERNS
    body = render_verdict(verdict)
    assert "### Claimed wins against measurements" in body and "1 of 3 held" in body
    assert f"(results: `{saved_path}`)" in body
    table = render_results(results, claims=verdict.claims)
    assert "+10% tokens/s: REGRESSION" in table and "+15% tokens/s (not measured here): HELD" in table


def test_review_prefers_a_complete_bench_to_a_newer_interrupted_one(planted):
    workspace, base, shas, results = planted
    complete = saved(results, workspace)
    results.stopping = {"loop": {"reason": INTERRUPTED, "rounds": 2}}
    results.started_at = "2026-04-18T11:00:00+00:00"
    interrupted = saved(results, workspace, label="interrupted")
    assert review_range(workspace.root).results_from == str(complete)
    assert "interrupted (Ctrl-C or SIGTERM): only the runs that finished before it count" in render_results(
        results
    )
    complete.unlink()  # the interrupted runs are better than nothing
    assert review_range(workspace.root).results_from == str(interrupted)


def test_a_noisy_measurement_leaves_a_claim_inconclusive(planted):
    workspace, base, shas, results = planted
    for run in results.runs:  # the no-op's rounds scatter by ±10%: nothing can be said either way
        if run.commit == shas[0]:
            run.metrics["tokens_per_s"] *= (0.95, 1.10, 0.98, 1.12, 0.96)[run.repeat]
    specs = {name: Workload(name, w["command"], steps=w["steps"]) for name, w in results.workloads.items()}
    results.summary = summarize([c.sha for c in results.commits], specs, results.runs)
    marginal = results.summary["loop"]["commits"][shas[0]]["marginal"]
    assert marginal["verdict"] == "no change" and marginal["ci"][1] > 1.10
    saved(results, workspace)
    verdict = review_range(workspace.root)
    assert verdict.claims[0].status == INCONCLUSIVE
    finding = next(f for f in verdict.findings if f.commit == shas[0] and f.category == "claim")
    assert finding.severity == MINOR and finding.title.startswith("Claimed win neither shown nor ruled out")


def test_without_any_measurement_no_criterion_or_claim_can_pass(planted):
    workspace, base, shas, results = planted
    plan = Plan(
        "p",
        [],
        [
            Criterion("+30% on the loop", "throughput", 0.30, "loop"),
            Criterion("no crashes", "stability"),
            Criterion("uploads work", "manual"),
        ],
    )
    verdict = review_range(workspace.root, plan=plan)
    assert verdict.results_from == "" and verdict.measured_head == ""
    assert {c.status for c in verdict.claims} == {UNMEASURED}
    criteria = {f.title: f.severity for f in verdict.findings if f.category == "criterion"}
    assert criteria == {
        "Success criterion not measured: +30% on the loop": MAJOR,
        "Success criterion not measured: no crashes": MAJOR,
        "Success criterion to check by hand: uploads work": MINOR,
    }
    assert verdict.outcome == CONCERNS != PASS
    assert "none found for this range" in render_verdict(verdict)

    write_notes(workspace.repo, results)  # measured once, but the results file is gone
    noted = review_range(workspace.root, plan=plan)
    note = next(f for f in noted.findings if "has a perfbot note" in f.title)
    assert note.severity == MINOR and any("loop: tokens_per_s" in line for line in note.evidence)


def test_the_file_that_measured_the_range_wins_over_newer_ones_of_other_ranges(planted):
    workspace, base, shas, results = planted
    full = saved(results, workspace)
    commits = [(base, "base", []), (shas[0], "c", [])]
    partial = synthetic_results(commits, {"loop": [1000.0, 1000.0]}, gpu=False)
    partial.started_at = "2026-04-18T11:00:00+00:00"
    shorter = saved(partial, workspace)
    assert review_range(workspace.root).results_from == str(full)  # only the full one measured the head
    # both measured this shorter range whole: the one that measured exactly it speaks for it
    assert review_range(workspace.root, f"{base}..{shas[0]}").results_from == str(shorter)
    results.started_at = "2026-04-18T12:00:00+00:00"
    again = saved(results, workspace)  # the branch benched again: never over the earlier file
    assert full.is_file() and again != full and review_range(workspace.root).results_from == str(again)
    assert review_range(workspace.root, f"{base}..{shas[0]}").results_from == str(shorter)


@pytest.mark.parametrize(
    ("expected", "kind", "gain"),
    [
        (
            "-10-40% step time where host-to-device copies are exposed (not measured here)",
            "step time",
            0.1 / 0.9,
        ),
        ("+10-30% GPU util (not measured for this shape)", "GPU util", None),
        ("up to 2-3x float32 matmul throughput on Ampere+; changes float32 rounding", "other", None),
        ("fewer kernel launches in a host-bound step; compiling takes seconds", "other", None),
        ("adapter casts (CPU profile: 46% fewer elements cast per step)", "other", None),
        ("+100-180% SFT tokens/s", "throughput", 1.0),
    ],
)
def test_every_expected_line_is_read_as_a_claim_of_its_kind(expected, kind, gain):
    claim = claim_of(f"perf(x): y\n\nExpected: {expected}\n\nBot-Optimization: a\n")
    assert claim.kind == kind and claim.gain == pytest.approx(gain)


def test_a_claim_is_judged_only_on_workloads_that_run_the_changed_files(tmp_path):
    root = tmp_path / "target"
    files = {
        "loop.py": "import helpers\n\nhelpers.step()\n",
        "helpers.py": "def step():\n    return 1\n",
        "sft_train.py": "PACKING = True\n",
    }
    make_repo(root, files)
    commands = {"loop": "python loop.py --steps 3", "sft": "python sft_train.py"}
    executed = {name: executed_files(root, command) for name, command in commands.items()}
    assert executed == {"loop": {"loop.py", "helpers.py"}, "sft": {"sft_train.py"}}
    assert runs_changes(commands, ["sft_train.py", "configs/a.yaml"], executed) == {
        "loop": False,
        "sft": True,
    }
    assert runs_changes(commands, ["helpers.py"], executed) == {"loop": True, "sft": False}

    claim = claim_of("perf(train): packing\n\nExpected: +15% tokens/s\n")
    check = check_claim(None, "a" * 40, "perf(train): packing", claim, {"loop": False})
    assert check.status == UNMEASURED  # no results: not measured at all
    gpu = claim_of("perf(data): workers\n\nExpected: +10-30% GPU util\n")
    assert check_claim(None, "a" * 40, "perf(data): workers", gpu).status == NOT_HERE


def test_a_plans_criteria_belong_to_the_tier_its_title_names():
    text = "# Tier 1 wins\n\n## Tier 1\n\n- opt:tf32\n\n## Success criteria\n\n- All code changes applied\n"
    plan = parse_plan(text, registry().values(), "plan")
    assert [c.tier for c in plan.criteria] == [1]
    assert check_criteria(plan, None, [], tier=2) == [] and len(check_criteria(plan, None, [], tier=1)) == 1
    untitled = parse_plan(text.replace("# Tier 1 wins", "# Wins"), registry().values(), "plan")
    assert len(check_criteria(untitled, None, [], tier=2)) == 1  # no tier named: every tier's
