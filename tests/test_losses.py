"""Loss at equal steps and at equal tokens, read under each commit's numerics contract (bot.losses)."""

from __future__ import annotations

import math

import pytest

from benchmarks.results import CommitInfo, Results
from benchmarks.runner import RunRecord
from benchmarks.spec import Workload
from benchmarks.stats import (
    DEFAULT_THRESHOLDS,
    STEPS,
    TOKENS,
    LossParity,
    loss_positions,
    summarize,
    tokens_per_step,
)
from bot import losses
from bot.review.measured import measured_findings
from bot.review.verdict import MAJOR, MINOR

TOLERANCE = DEFAULT_THRESHOLDS.loss_tolerance


def curve(tokens_per_step: int, steps: int = 60, scale: float = 1.0) -> list[dict]:
    """A per-step loss log (0-based steps, as benchmarks.metrics writes it) whose loss falls with the optimizer
    steps taken, faster when each step sees more tokens (less gradient noise), the way real runs do."""
    rate = math.sqrt(tokens_per_step / 1_000)
    return [
        {"step": s, "tokens_seen": (s + 1) * tokens_per_step, "loss": scale * (2 + 8 / (1 + s * rate / 10))}
        for s in range(steps)
    ]


def results(*commits: tuple[str | None, list[dict]]) -> Results:
    """Two runs per commit (baseline first), each with the given loss log."""
    shas = [f"{index:040x}" for index in range(len(commits))]
    runs = [
        RunRecord(sha, "sft", repeat, "ok", 10.0, "", {"tokens_per_s": 1_000.0 + repeat, "loss": log})
        for repeat in range(2)
        for sha, (_, log) in zip(shas, commits, strict=True)
    ]
    workload = Workload("sft", "python train.py --steps {steps}", steps=60)
    return Results(
        repo="target",
        baseline=shas[0],
        commits=[
            CommitInfo(sha, f"perf: {name or 'baseline'}", name)
            for sha, (name, _) in zip(shas, commits, strict=True)
        ],
        workloads={"sft": {"primary": "tokens_per_s", "higher_is_better": True}},
        runs=runs,
        summary=summarize(shas, {"sft": workload}, runs),
        started_at="",
        finished_at="",
        device="test",
        size="tiny",
        seed=0,
        thresholds={"loss_tolerance": TOLERANCE, "memory_threshold": 0.1},
    )


def test_the_steps_axis_counts_the_steps_before_each_record():
    every_fifth = [{"step": s, "tokens_seen": 100 * s, "loss": 1.0} for s in (5, 10, 15)]
    assert [x for x, _ in loss_positions(every_fifth, STEPS)] == [2.0, 7.0, 12.0]
    assert tokens_per_step(every_fifth) == pytest.approx(100)
    assert tokens_per_step(curve(4_000)) == pytest.approx(4_000)
    assert tokens_per_step([]) is None


def test_results_written_before_the_steps_axis_still_load():
    old = {"reference_loss": 2.0, "candidate_loss": 2.1, "delta": 0.05, "within_tolerance": True}
    parity = LossParity.from_dict({**old, "tokens_from": 10.0, "tokens_to": 20.0})
    assert (parity.start, parity.end, parity.axis) == (10.0, 20.0, TOKENS)


def test_packing_moves_the_loss_at_equal_tokens_and_says_why():
    measured = results((None, curve(1_000)), ("packing", curve(4_000)))
    packed = measured.commits[1].sha
    reading = losses.read(measured, "sft", packed, TOLERANCE)
    assert reading.step_ratio == pytest.approx(4.0)
    assert reading.expected == TOKENS
    assert reading.at_tokens.delta > TOLERANCE  # a quarter of the steps at equal tokens: a higher loss
    assert reading.at_steps.delta < 0  # four times the tokens per step: no higher at equal steps
    assert not reading.outside and reading.moved_as_expected
    assert "expected" in reading.cell(TOLERANCE) and "✗" not in reading.cell(TOLERANCE)
    findings = measured_findings(measured, TOLERANCE, {})
    assert [f.severity for f in findings] == [MINOR]
    assert findings[0].category == "loss"
    text = " ".join(findings[0].evidence)
    assert "packing" in text and "0.25× the baseline's steps" in text and "equal steps" in text


def test_the_same_loss_change_from_an_exact_commit_is_a_regression():
    measured = results((None, curve(1_000)), ("dataloader_workers", curve(4_000)))
    reading = losses.read(measured, "sft", measured.commits[1].sha, TOLERANCE)
    assert reading.expected is None and reading.outside
    assert "no commit up to here declares `dynamics`" in reading.explanation
    findings = measured_findings(measured, TOLERANCE, {})
    assert [(f.severity, f.title.split(" at ")[0]) for f in findings] == [
        (MAJOR, "Loss outside the tolerance")
    ]


def test_packing_worse_at_equal_steps_is_a_regression():
    measured = results((None, curve(1_000)), ("packing", curve(4_000, scale=1.6)))
    reading = losses.read(measured, "sft", measured.commits[1].sha, TOLERANCE)
    assert reading.expected == TOKENS and reading.outside
    assert reading.at_steps.delta > TOLERANCE
    assert reading.explanation.endswith("and it is not")
    assert [f.severity for f in measured_findings(measured, TOLERANCE, {})] == [MAJOR]


def test_a_dynamics_change_that_keeps_the_step_is_held_to_the_tolerance_both_ways():
    same_step = results((None, curve(1_000)), ("vocab_padding", curve(1_000, scale=1.1)))
    reading = losses.read(same_step, "sft", same_step.commits[1].sha, TOLERANCE)
    assert reading.expected is None and reading.outside
    assert reading.dynamics and "vocab_padding" in reading.dynamics[0]
    fine = results((None, curve(1_000)), ("vocab_padding", curve(1_000, scale=1.01)))
    assert not losses.read(fine, "sft", fine.commits[1].sha, TOLERANCE).outside


def test_commits_after_packing_inherit_its_explanation_once():
    measured = results((None, curve(1_000)), ("packing", curve(4_000)), ("tf32", curve(4_000)))
    head = losses.read(measured, "sft", measured.commits[2].sha, TOLERANCE)
    assert head.expected == TOKENS and not head.outside
    findings = measured_findings(measured, TOLERANCE, {})
    assert [f.commit for f in findings] == [measured.commits[1].sha]  # said at packing, not again at tf32
