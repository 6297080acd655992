"""Statistics over benchmark runs: medians with confidence intervals, paired effects, precision, loss parity.

Choices, so the numbers can be checked by hand:

- **One value per run**: the workload's primary metric as the run measured it (for throughput, the median over
  its measured steps, :mod:`benchmarks.metrics`). Runs that another tenant disturbed (other processes kept more
  than ``max_host_load`` of the host's CPUs busy while the steps ran) are left out and counted.
- **Median CI** is the distribution-free order-statistic interval: ``[x_(k), x_(n-k+1)]`` with the largest
  ``k`` whose binomial tail ``P(Bin(n, 1/2) <= k-1)`` stays within ``(1 - confidence) / 2``. With few repeats
  the nominal level cannot be reached (n < 6 for 95%); the interval is then ``[min, max]`` and ``level``
  reports the coverage actually achieved (75% for n = 3).
- **Run-to-run CV**: the standard deviation of a commit's values over their mean.
- **Effects** are ratios candidate / reference of the primary metric, estimated on log values and **paired by
  round**: the runner measures every commit once per round, in ABBA order (forward, then reversed), so each
  round gives one log-ratio in which the machine's drift and the position in the round cancel over two rounds.
  The ratio is the geometric mean of the per-round ratios; its interval and p-value are the one-sample t-test
  of the log-ratios (``scipy.stats.ttest_1samp``). With fewer than two complete pairs but at least two values
  on each side, Welch's unpaired test on the logs is used instead (``scipy.stats.ttest_ind``). The interval
  excludes 1 exactly when p < alpha.
- A change is a **win** or a **regression** only when it is significant (p < alpha) *and* at least the
  minimum effect (default 3%) in size; anything else is **no change**. With too few successful runs no test
  is possible and the verdict is **insufficient data**.
- **Precision**: an effect is *precise* when its interval's half-width (the larger side, as a fraction of
  the ratio) is at most the minimum effect, or, when the bench is asked to resolve an effect size R
  (``Thresholds.resolve``), when an interval that wide would detect a change of R 95% of the time
  (:func:`detectable_effect`); the runner adds rounds until every effect is precise or its time budget runs
  out (:func:`benchmarks.results.run_bench`).
- **Loss parity** is compared at equal tokens seen, never at equal steps (packing changes the step count):
  each logged loss is placed at the tokens seen while its steps ran, the curves are interpolated onto a common
  grid over the range every run covers, and the mean loss over the last part of that range is compared with
  the baseline's against the tolerance (default ±5%).
- **Peak memory** is flagged when its median grows by more than the threshold (default 10%).

Failed runs (crashed, OOM, timeout) are excluded from every statistic and counted per status.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from benchmarks.runner import RunRecord
    from benchmarks.spec import Workload
    from benchmarks.status import RunStatus


def _scipy_stats() -> Any:
    """``scipy.stats``, imported on first use: it takes most of a second to import, and commands that run no
    test (``bot apply`` without ``--bench``) never need it."""
    from scipy import stats

    return stats


WIN = "win"
REGRESSION = "regression"
NO_CHANGE = "no change"
INSUFFICIENT = "insufficient data"
PAIRED, UNPAIRED = "paired", "unpaired"

# Metrics whose per-commit medians are reported beside the primary one.
REPORTED_METRICS = {
    "tokens_per_s": ("tokens_per_s",),
    "samples_per_s": ("samples_per_s",),
    "step_time_s": ("step_time_s", "median"),
    "mfu": ("mfu",),
    "achieved_tflops": ("achieved_tflops",),
    "peak_memory_bytes": ("peak_memory_bytes",),
}
PHASES = ("data_wait", "forward", "backward", "optimizer")
LOSS_GRID_POINTS = 64


@dataclass(frozen=True)
class Thresholds:
    """What counts as significant, big enough, precise enough, disturbed, or a regression."""

    confidence: float = 0.95
    alpha: float = 0.05
    min_effect: float = 0.03
    loss_tolerance: float = 0.05
    loss_tail_fraction: float = 0.25
    memory_threshold: float = 0.10
    max_host_load: float = 0.10
    # The change every interval must be narrow enough to detect 95% of the time; None: min_effect wide.
    resolve: float | None = None


DETECTION_POWER = 0.95


def _standard_errors_past_significance(thresholds: Thresholds) -> float:
    """How many interval half-widths past the significance edge an estimate must lie, on average, to clear
    it 95% of the time: z(power) / z(confidence), the half-width being z(confidence) standard errors."""
    normal = statistics.NormalDist()
    return normal.inv_cdf(DETECTION_POWER) / normal.inv_cdf(1 - (1 - thresholds.confidence) / 2)


def detectable_effect(half_width: float, thresholds: Thresholds) -> float:
    """The smallest change that intervals of this half-width name 95% of the time: the estimate must clear
    both the minimum effect and the half-width (significance), with a standard error of about half-width / z."""
    return (
        max(thresholds.min_effect, half_width) + _standard_errors_past_significance(thresholds) * half_width
    )


def precise_half_width(thresholds: Thresholds) -> float:
    """The widest interval that counts as precise: the minimum effect, or with ``resolve`` set, the widest
    whose :func:`detectable_effect` is ``resolve`` (that piecewise-linear function inverted)."""
    if thresholds.resolve is None:
        return thresholds.min_effect
    k = _standard_errors_past_significance(thresholds)
    within_min_effect = (thresholds.resolve - thresholds.min_effect) / k
    return within_min_effect if within_min_effect <= thresholds.min_effect else thresholds.resolve / (1 + k)


DEFAULT_THRESHOLDS = Thresholds()

# --- medians and effects ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MedianCI:
    """A sample median with its order-statistic confidence interval and the coverage it achieves."""

    median: float
    low: float
    high: float
    level: float
    n: int


def median(values: Sequence[float]) -> float:
    """The sample median."""
    if not values:
        raise ValueError("median of no values")
    return statistics.median(values)


def median_ci(values: Sequence[float], confidence: float = 0.95) -> MedianCI:
    """The median and its distribution-free order-statistic interval (see the module docstring)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median_ci of no values")
    half_alpha = (1.0 - confidence) / 2.0
    k = 1
    for candidate in range(2, (n + 1) // 2 + 1):
        if _scipy_stats().binom.cdf(candidate - 1, n, 0.5) > half_alpha:
            break
        k = candidate
    tail = float(_scipy_stats().binom.cdf(k - 1, n, 0.5))
    return MedianCI(
        median=median(ordered),
        low=ordered[k - 1],
        high=ordered[n - k],
        level=max(0.0, 1.0 - 2.0 * tail),
        n=n,
    )


def cv(values: Sequence[float]) -> float | None:
    """Run-to-run coefficient of variation (sample standard deviation / mean); None below two values."""
    return statistics.stdev(values) / statistics.fmean(values) if len(values) >= 2 else None


@dataclass(frozen=True)
class Effect:
    """Ratio candidate / reference (geometric means) with its interval, two-sided p-value and how it was
    estimated: ``paired`` over ``n`` rounds, or ``unpaired`` (Welch) with ``n`` the smaller side."""

    ratio: float
    low: float
    high: float
    p_value: float
    df: float
    method: str
    n: int

    @property
    def half_width(self) -> float:
        """The interval's larger side as a fraction of the ratio: 0.03 for ±3%."""
        return max(self.high / self.ratio, self.ratio / self.low) - 1.0


# Below this sum of variances of log values (a ratio known to 1e-10) the samples are identical but for rounding.
_NO_SPREAD = 1e-20


def _effect(diff: float, spread: float, test: Any, confidence: float, method: str, n: int) -> Effect:
    """The effect of a mean log-difference ``diff`` from a scipy t-test result (``spread``: the sum of the
    sample variances; without any, a difference is certain and none is certainly none)."""
    if spread < _NO_SPREAD:
        return Effect(math.exp(diff), math.exp(diff), math.exp(diff), 0.0 if diff else 1.0, 0.0, method, n)
    result = test()
    interval = result.confidence_interval(confidence)
    return Effect(
        math.exp(diff),
        math.exp(interval.low),
        math.exp(interval.high),
        float(result.pvalue),
        float(result.df),
        method,
        n,
    )


def paired_log_ratio(pairs: Sequence[tuple[float, float]], confidence: float = 0.95) -> Effect:
    """The one-sample t-test of per-round log-ratios: ``pairs`` are (candidate, reference) of one round each."""
    if len(pairs) < 2:
        raise ValueError("a paired test needs at least two pairs")
    if min(min(pair) for pair in pairs) <= 0:
        raise ValueError("effects are ratios of positive values")
    logs = [math.log(c / r) for c, r in pairs]
    return _effect(
        statistics.fmean(logs),
        statistics.variance(logs),
        lambda: _scipy_stats().ttest_1samp(logs, 0.0),
        confidence,
        PAIRED,
        len(pairs),
    )


def welch_log_ratio(
    candidate: Sequence[float], reference: Sequence[float], confidence: float = 0.95
) -> Effect:
    """Welch's t-test on log values: the ratio of geometric means, its CI and the p-value for ratio == 1."""
    if len(candidate) < 2 or len(reference) < 2:
        raise ValueError("Welch's test needs at least two values on each side")
    if min(candidate) <= 0 or min(reference) <= 0:
        raise ValueError("effects are ratios of positive values")
    logs_c = [math.log(v) for v in candidate]
    logs_r = [math.log(v) for v in reference]
    return _effect(
        statistics.fmean(logs_c) - statistics.fmean(logs_r),
        statistics.variance(logs_c) + statistics.variance(logs_r),
        lambda: _scipy_stats().ttest_ind(logs_c, logs_r, equal_var=False),
        confidence,
        UNPAIRED,
        min(len(logs_c), len(logs_r)),
    )


def verdict(effect: Effect, higher_is_better: bool, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> str:
    """``win``/``regression`` when significant and at least the minimum effect, else ``no change``."""
    change = effect.ratio - 1.0
    if effect.p_value >= thresholds.alpha or abs(change) < thresholds.min_effect:
        return NO_CHANGE
    return WIN if (change > 0) == higher_is_better else REGRESSION


def compare(
    candidate: Mapping[int, float],
    reference: Mapping[int, float],
    higher_is_better: bool,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    paired: bool = True,
) -> dict[str, Any]:
    """The effect of candidate over reference, each given as ``{round: value}``, as a JSON-ready dict:
    ``ratio``, ``ci``, ``p_value``, ``df``, ``method``, ``n``, ``half_width``, ``precise`` and ``verdict``.
    ``paired=False`` compares the two groups of values with Welch's test whatever their rounds."""
    pairs = [(candidate[r], reference[r]) for r in sorted(candidate) if r in reference] if paired else []
    if len(pairs) >= 2:
        effect = paired_log_ratio(pairs, thresholds.confidence)
    elif len(candidate) >= 2 and len(reference) >= 2:
        effect = welch_log_ratio(list(candidate.values()), list(reference.values()), thresholds.confidence)
    else:
        ratio = None
        if candidate and reference:
            ratio = math.exp(_mean_log(candidate.values()) - _mean_log(reference.values()))
        return {
            "ratio": ratio,
            "ci": None,
            "p_value": None,
            "df": None,
            "method": None,
            "n": len(pairs),
            "half_width": None,
            "precise": False,
            "verdict": INSUFFICIENT,
        }
    return {
        "ratio": effect.ratio,
        "ci": [effect.low, effect.high],
        "p_value": effect.p_value,
        "df": effect.df,
        "method": effect.method,
        "n": effect.n,
        "half_width": effect.half_width,
        "precise": effect.half_width <= precise_half_width(thresholds),
        "verdict": verdict(effect, higher_is_better, thresholds),
    }


def _mean_log(values: Any) -> float:
    values = list(values)
    return sum(math.log(v) for v in values) / len(values)


# --- loss parity at equal tokens seen and at equal optimizer steps ------------------------------------------

TOKENS, STEPS = "tokens", "steps"  # the axes two runs' losses are compared along


@dataclass(frozen=True)
class LossParity:
    """Mean loss over the last part of the range two sets of runs have in common on ``axis`` (tokens seen, or
    optimizer steps taken), candidate against reference; ``start``..``end`` is that last part."""

    reference_loss: float
    candidate_loss: float
    delta: float
    within_tolerance: bool
    start: float
    end: float
    axis: str = TOKENS

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LossParity:
        """From its JSON form; results written before the steps axis name the range ``tokens_from``/``_to``."""
        data = dict(data)
        if "tokens_from" in data:
            data["start"], data["end"] = data.pop("tokens_from"), data.pop("tokens_to")
        return cls(**data)


def loss_positions(curve: Sequence[Mapping[str, float]], axis: str = TOKENS) -> list[tuple[float, float]]:
    """``(position, loss)`` points for one run's loss log, placed at the tokens seen (``axis=TOKENS``) or the
    optimizer steps taken (``axis=STEPS``) while the loss was computed.

    A record ``{step, tokens_seen, loss}`` holds the mean loss of the steps since the previous record, where
    ``tokens_seen`` counts tokens up to and including its own step. Each of those steps ran on weights that
    had seen the tokens (and taken the steps) before it, so the record sits at the mean of those starting
    points (assuming equal tokens per step within the interval): for a record per step that is exactly the
    tokens seen, or the steps taken, before it.
    """
    points = []
    records = _loss_records(curve)
    previous_step, previous_tokens, steps_taken = 0, 0.0, 0
    for record in records:
        step, tokens = int(record["step"]), float(record["tokens_seen"])
        steps = max(1, step - previous_step)
        if axis == STEPS:
            position = steps_taken + (steps - 1) / 2
        else:
            position = previous_tokens + (tokens - previous_tokens) * (steps - 1) / (2 * steps)
        points.append((position, float(record["loss"])))
        previous_step, previous_tokens, steps_taken = step, tokens, steps_taken + steps
    return points


def tokens_per_step(curve: Sequence[Mapping[str, float]]) -> float | None:
    """The tokens one optimizer step of this run saw on average: its loss log's last ``tokens_seen`` over the
    steps the log spans (counted as :func:`loss_positions` counts them); None without a usable record."""
    records = _loss_records(curve)
    steps, previous = 0, 0
    for record in records:
        steps += max(1, int(record["step"]) - previous)
        previous = int(record["step"])
    seen = float(records[-1]["tokens_seen"]) if records else 0.0
    return seen / steps if seen > 0 else None


def _loss_records(curve: Sequence[Mapping[str, float]]) -> list[Mapping[str, float]]:
    """The records of a loss log with a number for each of step, tokens seen and loss, in step order."""
    return sorted(
        (r for r in curve if all(_is_number(r.get(key)) for key in ("step", "tokens_seen", "loss"))),
        key=lambda r: (r["step"], r["tokens_seen"]),
    )


def _interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear interpolation of sorted points at ``x`` (inside their range)."""
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1] if x >= points[-1][0] else points[0][1]


def loss_parity(
    candidate: Sequence[Sequence[Mapping[str, float]]],
    reference: Sequence[Sequence[Mapping[str, float]]],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    axis: str = TOKENS,
) -> LossParity | None:
    """Compare loss curves (one per run) at equal tokens seen or equal optimizer steps (``axis``); None when
    they do not overlap."""
    runs_c = [p for p in (loss_positions(c, axis) for c in candidate) if len(p) >= 2]
    runs_r = [p for p in (loss_positions(c, axis) for c in reference) if len(p) >= 2]
    if not runs_c or not runs_r:
        return None
    start = max(points[0][0] for points in runs_c + runs_r)
    end = min(points[-1][0] for points in runs_c + runs_r)
    if end <= start:
        return None
    tail_start = end - thresholds.loss_tail_fraction * (end - start)
    grid = [tail_start + (end - tail_start) * i / (LOSS_GRID_POINTS - 1) for i in range(LOSS_GRID_POINTS)]

    def tail_mean(runs: list[list[tuple[float, float]]]) -> float:
        return sum(_interpolate(points, x) for points in runs for x in grid) / (len(runs) * len(grid))

    loss_c, loss_r = tail_mean(runs_c), tail_mean(runs_r)
    delta = (loss_c - loss_r) / abs(loss_r) if loss_r else math.inf
    return LossParity(loss_r, loss_c, delta, abs(delta) <= thresholds.loss_tolerance, tail_start, end, axis)


# --- the summary of a bench run ---------------------------------------------------------------------------


def disturbed(run: RunRecord, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> bool:
    """A successful run while other processes kept more than ``max_host_load`` of the host's CPUs busy."""
    load = (run.metrics or {}).get("host_load_others")
    return run.ok and _is_number(load) and load > thresholds.max_host_load


def summarize(
    commits: Sequence[str],
    workloads: Mapping[str, Workload],
    runs: Sequence[RunRecord],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, dict[str, Any]]:
    """Per workload, per commit (baseline first): primary median + CI and run-to-run CV, paired marginal and
    cumulative effects, reported metric medians, peak-memory change and loss parity against the baseline, and
    whether every effect is precise. JSON-ready."""
    summary = {}
    for name, workload in workloads.items():
        mine = [r for r in runs if r.workload == name]
        ok_runs = {
            sha: [r for r in mine if r.commit == sha and r.ok and not disturbed(r, thresholds)]
            for sha in commits
        }
        failed = {
            sha: dict(Counter(r.status for r in mine if r.commit == sha and not r.ok)) for sha in commits
        }
        entries = {
            sha: _commit_summary(workload, commits, index, ok_runs, failed[sha], thresholds)
            for index, sha in enumerate(commits)
        }
        for sha, entry in entries.items():
            entry["disturbed"] = sum(r.commit == sha and disturbed(r, thresholds) for r in mine)
        summary[name] = {
            "primary": workload.primary,
            "higher_is_better": workload.higher_is_better,
            "rounds": len({r.repeat for r in mine}),
            "imprecise": imprecise(entries),
            "commits": entries,
        }
    return summary


def imprecise(entries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The effects (``<sha> marginal``/``cumulative``) still wider than the minimum effect, among those between
    commits that both ran successfully (disturbed runs count: a quieter round may measure them); an effect no
    further round can measure (a side whose every run failed) is not listed."""
    found = []
    for sha, entry in entries.items():
        for key in ("marginal", "cumulative"):
            effect = entry.get(key)
            if not effect or effect["precise"] or key == "cumulative" and effect == entry.get("marginal"):
                continue
            if all(e["n"] or e.get("disturbed") for e in (entry, entries[effect["against"]])):
                found.append(f"{sha} {key}")
    return found


def _commit_summary(
    workload: Workload,
    commits: Sequence[str],
    index: int,
    ok_runs: Mapping[str, list[RunRecord]],
    failed: dict[RunStatus, int],
    thresholds: Thresholds,
) -> dict[str, Any]:
    sha, baseline = commits[index], commits[0]
    by_round = {c: _values_by_round(ok_runs[c], workload.primary) for c in commits}
    values = list(by_round[sha].values())
    memory = {c: _metric_values(ok_runs[c], ("peak_memory_bytes",), positive=True) for c in commits}
    entry: dict[str, Any] = {
        "n": len(values),
        "failed": failed,
        "missing_primary": len(ok_runs[sha]) - len(values),
        "values": values,
        "median": None,
        "ci": None,
        "ci_level": None,
        "cv": cv(values),
        "marginal": None,
        "cumulative": None,
        "metrics": _reported_medians(ok_runs[sha]),
        "memory": _memory(memory, commits, index, thresholds),
        "loss": None,
        "loss_at_steps": None,
        "tokens_per_step": _median_or_none(
            [
                t
                for t in (tokens_per_step((r.metrics or {}).get("loss") or []) for r in ok_runs[sha])
                if t is not None
            ]
        ),
    }
    if values:
        ci = median_ci(values, thresholds.confidence)
        entry.update(median=ci.median, ci=[ci.low, ci.high], ci_level=ci.level)
    if index > 0:
        previous = commits[index - 1]
        for key, against in (("marginal", previous), ("cumulative", baseline)):
            effect = compare(by_round[sha], by_round[against], workload.higher_is_better, thresholds)
            entry[key] = {"against": against, **effect}
        curves = [(r.metrics or {}).get("loss") or [] for r in ok_runs[sha]]
        reference = [(r.metrics or {}).get("loss") or [] for r in ok_runs[baseline]]
        for key, axis in (("loss", TOKENS), ("loss_at_steps", STEPS)):
            parity = loss_parity(curves, reference, thresholds, axis)
            entry[key] = asdict(parity) if parity else None
    return entry


def _median_or_none(values: Sequence[float]) -> float | None:
    return median(values) if values else None


def _values_by_round(ok_runs: Sequence[RunRecord], metric: str) -> dict[int, float]:
    """``{round: value}`` of the positive, finite values of ``metric``, in round order."""
    return {
        run.repeat: value
        for run in sorted(ok_runs, key=lambda r: r.repeat)
        for value in _metric_values([run], (metric,), positive=True)
    }


def _memory(
    memory: Mapping[str, list[float]], commits: Sequence[str], index: int, thresholds: Thresholds
) -> dict[str, Any]:
    sha = commits[index]
    peak = median(memory[sha]) if memory[sha] else None

    def ratio(other: str) -> float | None:
        return peak / median(memory[other]) if peak is not None and memory[other] else None

    vs_previous = ratio(commits[index - 1]) if index > 0 else None
    vs_baseline = ratio(commits[0]) if index > 0 else None
    limit = 1.0 + thresholds.memory_threshold
    return {
        "peak_bytes": peak,
        "vs_previous": vs_previous,
        "vs_baseline": vs_baseline,
        "regression": vs_previous is not None and vs_previous > limit,
        "cumulative_regression": vs_baseline is not None and vs_baseline > limit,
    }


def _reported_medians(ok_runs: Sequence[RunRecord]) -> dict[str, Any]:
    medians: dict[str, Any] = {}
    for key, path in REPORTED_METRICS.items():
        values = _metric_values(ok_runs, path)
        medians[key] = median(values) if values else None
    phases = {}
    for phase in PHASES:
        shares = _metric_values(ok_runs, ("phases", phase, "share"))
        times = _metric_values(ok_runs, ("phases", phase, "median_ms"))
        phases[phase] = {
            "share": median(shares) if shares else None,
            "median_ms": median(times) if times else None,
        }
    medians["phases"] = phases
    return medians


def _metric_values(ok_runs: Sequence[RunRecord], path: Sequence[str], positive: bool = False) -> list[float]:
    """The finite numbers at ``path`` in each run's metrics (absent or null ones are skipped); ``positive``
    also skips zero and negative ones (effects are ratios)."""
    values = []
    for run in ok_runs:
        value: Any = run.metrics
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if _is_number(value) and (value > 0 or not positive):
            values.append(float(value))
    return values


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
