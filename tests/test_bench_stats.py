"""Benchmark statistics on synthetic samples whose answer is known."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from benchmarks.runner import RunRecord
from benchmarks.spec import Workload
from benchmarks.stats import (
    DEFAULT_THRESHOLDS,
    INSUFFICIENT,
    NO_CHANGE,
    PAIRED,
    REGRESSION,
    UNPAIRED,
    WIN,
    Thresholds,
    compare,
    cv,
    detectable_effect,
    loss_parity,
    median_ci,
    paired_log_ratio,
    precise_half_width,
    summarize,
    welch_log_ratio,
)


def _noisy(center: float, sigma: float, n: int, rng: random.Random) -> list[float]:
    return [center * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def _rounds(values: list[float]) -> dict[int, float]:
    return dict(enumerate(values))


def _drifting(ratio: float, rounds: int, rng: random.Random, drift: float = 0.3, noise: float = 0.01):
    """A reference and a candidate measured once per round on a machine whose speed drifts by ``drift``
    from round to round (the same for both commits of a round) with ``noise`` of its own per run."""
    levels = [1000 * math.exp(rng.gauss(0.0, drift)) for _ in range(rounds)]
    reference = [level * math.exp(rng.gauss(0.0, noise)) for level in levels]
    candidate = [level * ratio * math.exp(rng.gauss(0.0, noise)) for level in levels]
    return _rounds(candidate), _rounds(reference)


# --- paired and unpaired tests ----------------------------------------------------------------------------


def test_pairs_by_round_see_through_drift_that_hides_the_effect_from_an_unpaired_test():
    rng = random.Random(11)
    candidate, reference = _drifting(0.91, 8, rng)
    paired = compare(candidate, reference, higher_is_better=True)
    assert paired["method"] == PAIRED and paired["n"] == 8 and paired["df"] == 7
    assert paired["verdict"] == REGRESSION
    assert paired["ci"][0] < 0.91 < paired["ci"][1] and paired["precise"]
    unpaired = welch_log_ratio(list(candidate.values()), list(reference.values()))
    assert unpaired.method == UNPAIRED and unpaired.p_value > 0.05  # the drift swamps it


def test_paired_matches_a_one_sample_t_test_on_the_log_ratios():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    pairs = [(v * 1.04 * math.exp(rng.gauss(0, 0.02)), v) for v in _noisy(100, 0.2, 6, rng)]
    ours = paired_log_ratio(pairs)
    logs = [math.log(c / r) for c, r in pairs]
    theirs = scipy_stats.ttest_1samp(logs, 0.0)
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9)
    margin = scipy_stats.t.ppf(0.975, 5) * scipy_stats.sem(logs)
    assert math.log(ours.high / ours.ratio) == pytest.approx(margin, rel=1e-9)
    assert ours.ratio == pytest.approx(math.exp(sum(logs) / 6))


def test_rounds_without_a_pair_fall_back_to_welch():
    result = compare({0: 110.0, 2: 111.0}, {1: 100.0, 3: 101.0}, True)
    assert result["method"] == UNPAIRED and result["verdict"] == WIN
    groups = compare({0: 110.0, 1: 111.0}, {0: 100.0, 1: 101.0}, True, paired=False)  # pairs, ignored
    assert groups["method"] == UNPAIRED and groups["df"] != 1


# --- significance, the minimum effect and precision -------------------------------------------------------


def test_a_ten_percent_speedup_is_a_win_every_time():
    rng = random.Random(0)
    covered = 0
    for _ in range(100):
        reference, candidate = _noisy(1000, 0.01, 5, rng), _noisy(1100, 0.01, 5, rng)
        result = compare(_rounds(candidate), _rounds(reference), higher_is_better=True)
        assert result["verdict"] == WIN
        assert result["ratio"] == pytest.approx(1.10, abs=0.02)
        covered += result["ci"][0] < 1.10 < result["ci"][1]
    assert covered >= 88  # a 95% interval


def test_direction_follows_higher_is_better():
    rng = random.Random(1)
    reference, slower = _rounds(_noisy(1000, 0.01, 5, rng)), _rounds(_noisy(900, 0.01, 5, rng))
    assert compare(slower, reference, higher_is_better=True)["verdict"] == REGRESSION
    # the same samples read as step times: 10% less is a win
    assert compare(slower, reference, higher_is_better=False)["verdict"] == WIN


def test_pure_noise_is_almost_never_a_change():
    rng = random.Random(2)
    trials = 300
    called = sum(
        compare(_rounds(_noisy(1000, 0.02, 5, rng)), _rounds(_noisy(1000, 0.02, 5, rng)), True)["verdict"]
        != NO_CHANGE
        for _ in range(trials)
    )
    assert called / trials < 0.02


def test_the_test_alone_is_calibrated_and_the_minimum_effect_guards_it():
    rng = random.Random(3)
    trials = 400
    p_values = [
        paired_log_ratio(list(zip(_noisy(1, 0.05, 6, rng), _noisy(1, 0.05, 6, rng), strict=True))).p_value
        for _ in range(trials)
    ]
    rate = sum(p < 0.05 for p in p_values) / trials
    assert 0.02 < rate < 0.09  # nominal 5%
    # a real 1% change measured very precisely is significant but below the minimum effect
    tiny = compare(_rounds(_noisy(1010, 0.0005, 6, rng)), _rounds(_noisy(1000, 0.0005, 6, rng)), True)
    assert tiny["p_value"] < 0.001
    assert tiny["verdict"] == NO_CHANGE
    precise = Thresholds(min_effect=0.005)
    assert (
        compare(_rounds(_noisy(1010, 0.0005, 6, rng)), _rounds(_noisy(1000, 0.0005, 6, rng)), True, precise)[
            "verdict"
        ]
        == WIN
    )


def test_an_interval_is_precise_once_its_half_width_is_within_the_minimum_effect():
    rng = random.Random(12)
    wide = compare(*_drifting(1.0, 3, rng, drift=0.0, noise=0.06), True)
    narrow = compare(*_drifting(1.0, 12, rng, drift=0.0, noise=0.01), True)
    assert wide["half_width"] > 0.03 and not wide["precise"]
    assert narrow["half_width"] <= 0.03 and narrow["precise"]
    assert narrow["half_width"] == pytest.approx(
        max(narrow["ci"][1] / narrow["ratio"], narrow["ratio"] / narrow["ci"][0]) - 1
    )


def test_fewer_than_two_runs_is_insufficient_data():
    result = compare({0: 1100.0}, {0: 1000.0, 1: 1001.0}, True)
    assert result["verdict"] == INSUFFICIENT and not result["precise"]
    assert result["p_value"] is None
    assert result["ratio"] == pytest.approx(1100 / math.sqrt(1000 * 1001))
    assert compare({}, {0: 1000.0, 1: 1001.0}, True)["ratio"] is None


def test_noise_free_samples_decide_without_dividing_by_zero():
    assert compare({0: 110.0, 1: 110.0}, {0: 100.0, 1: 100.0}, True)["verdict"] == WIN
    assert compare({0: 100.0, 1: 100.0}, {0: 100.0, 1: 100.0}, True)["verdict"] == NO_CHANGE


def test_cv_is_the_run_to_run_spread():
    assert cv([90.0, 110.0]) == pytest.approx(math.sqrt(200) / 100)
    assert cv([100.0]) is None


# --- median confidence interval ---------------------------------------------------------------------------


def test_median_ci_covers_the_true_median_as_often_as_it_claims():
    rng = random.Random(4)
    true_median = 1000.0  # median of a lognormal centred on 1000
    for n, claimed in ((10, 0.9785), (3, 0.75)):
        hits = 0
        for _ in range(600):
            ci = median_ci(_noisy(true_median, 0.1, n, rng))
            hits += ci.low <= true_median <= ci.high
        assert ci.level == pytest.approx(claimed, abs=1e-4)
        assert abs(hits / 600 - claimed) < 0.05


def test_median_ci_brackets_the_median_and_narrows_with_more_data():
    rng = random.Random(5)
    small, large = median_ci(_noisy(50, 0.1, 8, rng)), median_ci(_noisy(50, 0.1, 200, rng))
    for ci in (small, large):
        assert ci.low <= ci.median <= ci.high
        assert ci.level >= 0.95
    assert (large.high - large.low) < (small.high - small.low)
    assert median_ci([3.0]).level == 0.0


# --- loss parity at equal tokens seen ---------------------------------------------------------------------


def _loss(tokens_before: float) -> float:
    return 2.0 + 3.0 * math.exp(-tokens_before / 20_000)


def _curve(tokens_per_step: int, steps: int, log_every: int, scale: float, rng: random.Random) -> list[dict]:
    """A loss log as a trainer writes it: the mean loss of the last ``log_every`` steps, with tokens seen."""
    records, window = [], []
    for step in range(1, steps + 1):
        window.append(_loss((step - 1) * tokens_per_step) * scale * (1 + rng.gauss(0, 0.01)))
        if step % log_every == 0:
            records.append(
                {"step": step, "tokens_seen": step * tokens_per_step, "loss": sum(window) / len(window)}
            )
            window = []
    return records


def test_packing_with_a_quarter_of_the_steps_keeps_loss_parity():
    rng = random.Random(6)
    unpacked = [_curve(1_000, 120, 5, 1.0, rng) for _ in range(2)]
    packed = [_curve(4_000, 30, 1, 1.0, rng) for _ in range(2)]
    parity = loss_parity(packed, unpacked)
    assert parity is not None
    assert parity.within_tolerance
    assert abs(parity.delta) < 0.01
    # at equal *steps* the packed run would look far better: parity must not be read that way
    assert packed[0][-1]["loss"] < 0.9 * unpacked[0][29 // 5]["loss"]


def test_a_ten_percent_higher_loss_fails_parity():
    rng = random.Random(7)
    baseline = [_curve(1_000, 120, 5, 1.0, rng)]
    worse = [_curve(4_000, 30, 1, 1.10, rng)]
    parity = loss_parity(worse, baseline)
    assert parity is not None
    assert not parity.within_tolerance
    assert parity.delta == pytest.approx(0.10, abs=0.015)
    assert loss_parity(worse, baseline, Thresholds(loss_tolerance=0.15)).within_tolerance


def test_loss_parity_is_judged_on_the_tokens_every_run_covers():
    rng = random.Random(8)
    long_run = [_curve(1_000, 120, 1, 1.0, rng)]
    stopped_early = [_curve(1_000, 40, 1, 1.0, rng)]
    parity = loss_parity(stopped_early, long_run)
    assert parity is not None and parity.within_tolerance
    assert parity.end == pytest.approx(39_000)  # the last step of the short run started there
    assert parity.start == pytest.approx(39_000 * 0.75)
    one_record = [[{"step": 1, "tokens_seen": 1_000, "loss": 5.0}]]
    assert loss_parity(one_record, long_run) is None
    assert loss_parity([[]], long_run) is None


# --- the summary ------------------------------------------------------------------------------------------


def _run(commit: str, repeat: int, status: str = "ok", **metrics) -> RunRecord:
    return RunRecord(
        commit, "sft", repeat, status, 1.0, "", {"status": status, **metrics} if metrics else None
    )


def test_summary_counts_failures_flags_memory_and_chains_effects():
    rng = random.Random(8)
    workload = Workload(name="sft", command="python train.py", steps=10, repeats=4)
    curve = _curve(1_000, 40, 1, 1.0, rng)
    runs = []
    for repeat in range(4):
        for sha, speed, memory in (("a", 1000, 10e9), ("b", 1200, 16e9), ("c", 1200, 16e9)):
            speed *= 1 + rng.gauss(0, 0.005)
            runs.append(_run(sha, repeat, tokens_per_s=speed, peak_memory_bytes=memory, loss=curve))
    runs.append(_run("c", 4, status="oom"))
    runs.append(_run("c", 5, status="timeout"))
    summary = summarize(["a", "b", "c"], {"sft": workload}, runs)["sft"]
    a, b, c = (summary["commits"][sha] for sha in "abc")
    assert a["marginal"] is None and a["cumulative"] is None
    assert b["marginal"]["verdict"] == WIN and b["marginal"]["against"] == "a"
    assert c["marginal"]["verdict"] == NO_CHANGE and c["marginal"]["against"] == "b"
    assert c["cumulative"]["verdict"] == WIN and c["cumulative"]["ratio"] == pytest.approx(1.2, abs=0.02)
    assert c["n"] == 4 and c["failed"] == {"oom": 1, "timeout": 1}
    assert b["memory"]["regression"] and b["memory"]["cumulative_regression"]
    assert not c["memory"]["regression"] and c["memory"]["cumulative_regression"]
    assert b["loss"]["within_tolerance"]
    assert a["ci"][0] <= a["median"] <= a["ci"][1]
    assert b["metrics"]["tokens_per_s"] == pytest.approx(b["median"])


def test_summary_of_a_commit_with_no_successful_run():
    workload = Workload(name="sft", command="python train.py", steps=10, repeats=2)
    runs = [
        _run("a", 0, tokens_per_s=100.0),
        _run("a", 1, tokens_per_s=101.0),
        _run("b", 0, status="crashed"),
    ]
    entry = summarize(["a", "b"], {"sft": workload}, runs)["sft"]["commits"]["b"]
    assert entry["median"] is None and entry["n"] == 0
    assert entry["failed"] == {"crashed": 1}
    assert entry["cumulative"]["verdict"] == INSUFFICIENT and entry["cumulative"]["ratio"] is None
    assert entry["loss"] is None


def test_disturbed_runs_are_left_out_counted_and_worth_another_round():
    workload = Workload(name="sft", command="python train.py", steps=10, repeats=3)
    runs = []
    for repeat in range(3):
        runs.append(_run("a", repeat, tokens_per_s=1000.0 + repeat, host_load_others=0.05))
        load = 0.6 if repeat == 1 else 0.1  # another tenant kept 60% of the CPUs busy in round 1
        runs.append(
            _run("b", repeat, tokens_per_s={0: 1100.0, 1: 400.0, 2: 1180.0}[repeat], host_load_others=load)
        )
        runs.append(_run("c", repeat, host_load_others=0.9))  # every run disturbed
        runs.append(_run("d", repeat, status="crashed"))
    summary = summarize(["a", "b", "c", "d"], {"sft": workload}, runs)["sft"]
    b, c, d = (summary["commits"][sha] for sha in "bcd")
    assert (b["n"], b["disturbed"], b["values"]) == (2, 1, [1100.0, 1180.0])
    assert b["marginal"]["n"] == 2 and b["marginal"]["verdict"] == NO_CHANGE  # one degree of freedom
    assert b["cv"] == pytest.approx(cv([1100.0, 1180.0]))
    assert (c["n"], c["disturbed"], d["n"], d["disturbed"]) == (0, 3, 0, 0)
    # c could still be measured in a quieter round; d never ran, so no round can help
    assert summary["imprecise"] == [
        f"{sha} {key}" for sha, key in (("b", "marginal"), ("c", "marginal"), ("c", "cumulative"))
    ]
    assert summary["rounds"] == 3


@pytest.mark.parametrize("resolve", [0.04, 0.05, 0.08, 0.20])
def test_the_precise_width_for_a_resolution_detects_exactly_that_change(resolve):
    thresholds = replace(DEFAULT_THRESHOLDS, resolve=resolve)
    width = precise_half_width(thresholds)
    assert detectable_effect(width, thresholds) == pytest.approx(resolve)
    assert detectable_effect(width * 1.01, thresholds) > resolve  # the widest such interval, not just one
    assert precise_half_width(DEFAULT_THRESHOLDS) == DEFAULT_THRESHOLDS.min_effect  # nothing asked: ±3%
