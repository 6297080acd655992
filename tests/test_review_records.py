"""One results record per bench run, and a review that reads the record of its own range: a tier-2 review never
reads the tier-1 record, a later bench never changes an earlier review's answer, and a claim is judged only on
a workload whose runs loaded the files its commit changed. Real git repositories in tmp_path; the benches run
real processes through the real runner and `bot.benchmarking.benchmark`."""

from __future__ import annotations

import shlex
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from git_repos import make_repo
from test_review_report import synthetic_results

from benchmarks.results import INTERRUPTED, Results
from benchmarks.runner import LocalRunner
from bot.benchmarking import BenchOptions, bench_spec, benchmark, revisions_to_measure
from bot.claims import HELD, NOT_HERE, UNMEASURED
from bot.commands.status import interrupted_bench
from bot.conventions import TRAILER_OPTIMIZATION, TRAILER_TIER
from bot.measurements import results_folder
from bot.review import review_range
from bot.review.verdict import MINOR
from bot.workload_files import executed_files
from bot.workspace import Workspace, commit_message

PYPROJECT = """\
[tool.bot.workloads.loop]
command = "python train.py --steps {steps}"
steps = 5
warmup_steps = 1
repeats = 3
max_repeats = 3
min_time_s = 0
"""

# A training program that writes its own metrics (the runner's launch command is swapped for running it
# directly): throughput SPEED tokens/s within ±0.2%.
TRAIN = """\
import argparse, json, random
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int)
parser.add_argument("--out")
args = parser.parse_args()
SPEED = {speed!r}
loss = [{{"step": s, "tokens_seen": 100 * s, "loss": 3.0 - 0.01 * s}} for s in range(1, args.steps + 1)]
metrics = {{
    "schema": "perfbot.run/v1", "status": "ok", "steps_measured": args.steps, "timing": "host_clock",
    "step_time_s": {{"median": 0.01}}, "tokens_per_s": SPEED * (1 + random.uniform(-0.002, 0.002)),
    "peak_memory_bytes": 1e9, "loss": loss, "env": {{"gpu": "FakeGPU", "host": "testhost"}},
}}
with open(args.out, "w") as out:
    json.dump(metrics, out)
"""


def _direct(job, metrics_path: Path) -> list[str]:
    """Run the workload's script directly: it writes the metrics file itself."""
    return [sys.executable, *shlex.split(job.command)[1:], "--out", str(metrics_path)]


def faster(workspace: Workspace, speed: float, tier: int) -> str:
    """A bot commit of ``tier`` that makes the loop run at ``speed``, claiming +10%."""
    (workspace.root / "train.py").write_text(TRAIN.format(speed=speed))
    trailers = {TRAILER_OPTIMIZATION: f"speed{speed:g}", TRAILER_TIER: str(tier)}
    return workspace.commit(
        ["train.py"], commit_message("train", f"loop at {speed:g}", "+10% tokens/s", "", trailers)
    )


@pytest.fixture
def tiers(tmp_path):
    """Tier 1 (two commits, each +10%) and tier 2 built on it (one more), and a bench of either branch."""
    root = tmp_path / "target"
    make_repo(root, {"pyproject.toml": PYPROJECT, "train.py": TRAIN.format(speed=1000.0)})
    workspace = Workspace(root)
    base = workspace.start("bot/7-tier-1")
    tier1 = [faster(workspace, 1100.0, 1), faster(workspace, 1210.0, 1)]
    base2 = workspace.start("bot/7-tier-2")
    tier2 = [faster(workspace, 1331.0, 2)]
    runner = LocalRunner(root, tmp_path / "bench", gpus=[], launch=_direct)
    spec = bench_spec(root, BenchOptions())

    def bench(branch: str, revisions: list[str] | None = None) -> Path:
        workspace.start(branch)
        return benchmark(
            workspace, spec, revisions or revisions_to_measure(workspace, workspace.baseline()), runner
        )[1]

    return workspace, bench, (base, tier1), (base2, tier2)


def test_a_tier_2_review_never_reads_the_tier_1_record(tiers):
    workspace, bench, (base, tier1), (base2, tier2) = tiers
    tier1_record = bench("bot/7-tier-1")

    workspace.start("bot/7-tier-2")
    unmeasured = review_range(workspace.root)
    assert (unmeasured.base, unmeasured.head) == (base2, tier2[0])
    # the tier-1 record measured this range's baseline (the tier-1 head), but not this range
    assert unmeasured.results_from == "" and unmeasured.measured_head == ""
    assert [(c.sha, c.status, c.observed) for c in unmeasured.claims] == [
        (tier2[0], UNMEASURED, "no benchmark results")
    ]

    tier2_record = bench("bot/7-tier-2")
    assert tier2_record != tier1_record and tier1_record.is_file()
    measured = review_range(workspace.root)
    assert measured.results_from == str(tier2_record)
    assert [(c.sha, c.status) for c in measured.claims] == [(tier2[0], HELD)]
    # `bot review --tier 2` from the tier-1 checkout: the range and the branch are the tier's
    workspace.start("bot/7-tier-1")
    other = review_range(workspace.root, f"{base2}..bot/7-tier-2", branch="bot/7-tier-2")
    assert other.results_from == str(tier2_record)


def test_a_later_bench_never_changes_an_earlier_reviews_answer(tiers):
    workspace, bench, (base, tier1), _ = tiers
    record = bench("bot/7-tier-1")
    workspace.start("bot/7-tier-1")
    earlier = review_range(workspace.root).to_dict()
    assert earlier["results_from"] == str(record) and earlier["measured_head"] == tier1[1]
    assert [claim["status"] for claim in earlier["claims"]] == [HELD, HELD]

    shorter = bench("bot/7-tier-1", [base, tier1[0]])  # the same branch, another range
    other_tier = bench("bot/7-tier-2")
    assert len({record, shorter, other_tier}) == 3 and all(p.is_file() for p in (record, shorter, other_tier))
    workspace.start("bot/7-tier-1")
    assert review_range(workspace.root).to_dict() == earlier
    assert review_range(workspace.root, f"{base}..{tier1[0]}").results_from == str(shorter)
    assert interrupted_bench(workspace) is None  # the branch's newest record is complete
    cut_short = Results.load(record)
    cut_short.stopping["loop"] = {"reason": INTERRUPTED}
    cut_short.started_at = (datetime.now(UTC) + timedelta(hours=1)).isoformat(timespec="seconds")
    kept = cut_short.save_new(results_folder(workspace.root), "interrupted")
    assert interrupted_bench(workspace) == (
        f"bench interrupted: the 9 measured runs that finished are in {kept}; run bot bench again"
    )
    assert review_range(workspace.root).to_dict() == earlier  # a complete record of the range wins


def test_a_rerun_of_the_same_range_keeps_both_records(tiers):
    workspace, bench, _, _ = tiers
    first = bench("bot/7-tier-1")
    again = bench("bot/7-tier-1")
    assert first != again and first.is_file()
    assert sorted(results_folder(workspace.root).glob("*.json")) == sorted([first, again])
    workspace.start("bot/7-tier-1")
    assert review_range(workspace.root).results_from == str(again)  # the newest of the range


TASKS_TRAIN = """\
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--task")
parser.add_argument("--steps", type=int)
args = parser.parse_args()
if args.task == "dpo":
    from tasks import dpo as task
else:
    from tasks import sft as task
task.train(open(f"configs/{args.task}.yaml").read(), args.steps)
"""
TASK = "def train(config, steps):\n    return {name!r}, config, steps\n"


def test_a_claim_is_not_measured_on_a_workload_that_never_loaded_the_changed_files(tmp_path):
    root = tmp_path / "target"
    files = {
        "train.py": TASKS_TRAIN,
        "tasks/__init__.py": "",
        "tasks/sft.py": TASK.format(name="sft"),
        "tasks/dpo.py": TASK.format(name="dpo"),
        "configs/sft.yaml": "lr: 1e-4\n",
        "configs/dpo.yaml": "beta: 0.1\n",
    }
    make_repo(root, files)
    workspace = Workspace(root)
    base = workspace.start("bot/8-tier-1")
    changes = [
        ("tasks/dpo.py", TASK.format(name="dpo precomputed"), "+30-50% DPO"),
        ("configs/dpo.yaml", "beta: 0.1\nprecompute_ref_log_probs: true\n", "+10% tokens/s"),
        ("tasks/sft.py", TASK.format(name="sft packed"), "+10% tokens/s"),
    ]
    shas = []
    for index, (path, text, expected) in enumerate(changes):
        (root / path).write_text(text)
        message = commit_message(
            "train", f"change {index}", expected, "", {TRAILER_OPTIMIZATION: f"o{index}"}
        )
        shas.append(workspace.commit([path], message))
    # the command alone reaches both tasks' modules: only what its runs loaded tells them apart
    assert {"tasks/sft.py", "tasks/dpo.py"} <= executed_files(root, "python train.py --task sft --steps 20")

    commits = [(base, "base", [])] + [(sha, f"change {i}", []) for i, sha in enumerate(shas)]
    results = synthetic_results(commits, {"sft": [1000.0, 1000.0, 1000.0, 1200.0]}, gpu=False)
    for run in results.runs:  # as the launch wrapper records an SFT run
        run.metrics["files_loaded"] = ["configs/sft.yaml", "tasks/__init__.py", "tasks/sft.py", "train.py"]
    results.branch = "bot/8-tier-1"
    results.save_new(results_folder(root))

    verdict = review_range(root)
    assert [(c.sha, c.status) for c in verdict.claims] == [
        (shas[0], NOT_HERE),
        (shas[1], NOT_HERE),
        (shas[2], HELD),
    ]
    assert verdict.claims[0].observed == "sft: the run executes none of the changed files"
    findings = {f.commit: f for f in verdict.findings if f.category == "claim"}
    assert set(findings) == {shas[0], shas[1]}
    assert all(
        f.severity == MINOR and f.title.startswith("Claimed win not measured here") for f in findings.values()
    )
