"""Statistics over benchmark runs: medians with confidence intervals, effects, significance, loss parity.

Choices, so the numbers can be checked by hand:

- **Median CI** is the distribution-free order-statistic interval: ``[x_(k), x_(n-k+1)]`` with the largest
  ``k`` whose binomial tail ``P(Bin(n, 1/2) <= k-1)`` stays within ``(1 - confidence) / 2``. It needs no seed
  and no distributional assumption. With few repeats the nominal level cannot be reached (n < 6 for 95%);
  the interval is then ``[min, max]`` and ``level`` reports the coverage actually achieved (75% for n = 3).
- **Effects** are ratios candidate / reference of a metric, estimated on log values: the point estimate is
  the ratio of geometric means, the interval and the p-value come from Welch's t-test on the logs (unequal
  variances, Welch–Satterthwaite degrees of freedom). The interval excludes 1 exactly when p < alpha, so the
  two can never disagree. The Student-t CDF is computed here from the regularized incomplete beta function.
- A change is a **win** or a **regression** only when it is significant (p < alpha) *and* at least the
  minimum effect (default 3%) in size; anything else is **no change**. With fewer than two successful runs
  on either side no test is possible and the verdict is **insufficient data**.
- **Loss parity** is compared at equal tokens seen, never at equal steps (packing changes the step count):
  each logged loss is placed at the tokens seen while its steps ran, the curves are interpolated onto a common
  grid over the range every run covers, and the mean loss over the last part of that range is compared with
  the baseline's against the tolerance (default ±5%).
- **Peak memory** is flagged when its median grows by more than the threshold (default 10%).

Failed runs (crashed, OOM, timeout) are excluded from every statistic and counted per status.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.runner import RunRecord
    from benchmarks.spec import Workload

WIN = "win"
REGRESSION = "regression"
NO_CHANGE = "no change"
INSUFFICIENT = "insufficient data"

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
    """What counts as significant, big enough, or a regression."""

    confidence: float = 0.95
    alpha: float = 0.05
    min_effect: float = 0.03
    loss_tolerance: float = 0.05
    loss_tail_fraction: float = 0.25
    memory_threshold: float = 0.10


DEFAULT_THRESHOLDS = Thresholds()

# --- Student-t distribution -------------------------------------------------------------------------------


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """``I_x(a, b)``, by the continued fraction of Numerical Recipes (modified Lentz), for a, b > 0."""
    if a <= 0 or b <= 0:
        raise ValueError(f"a and b must be positive, got a={a}, b={b}")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    max_iterations = 10_000

    def guarded(value: float) -> float:
        return tiny if abs(value) < tiny else value

    c = 1.0
    d = 1.0 / guarded(1.0 - (a + b) * x / (a + 1.0))
    result = d
    for m in range(1, max_iterations + 1):
        m2 = 2 * m
        even = m * (b - m) * x / ((a - 1.0 + m2) * (a + m2))
        d = 1.0 / guarded(1.0 + even * d)
        c = guarded(1.0 + even / c)
        result *= d * c
        odd = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2))
        d = 1.0 / guarded(1.0 + odd * d)
        c = guarded(1.0 + odd / c)
        step = d * c
        result *= step
        if abs(step - 1.0) < 1e-15:
            return result
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def t_sf(t: float, df: float) -> float:
    """Survival function ``P(T > t)`` of Student's t with ``df`` degrees of freedom (df may be fractional)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_cdf(t: float, df: float) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom."""
    return t_sf(-t, df)


def t_ppf(p: float, df: float) -> float:
    """The quantile of Student's t: the ``t`` with ``t_cdf(t, df) == p``, by bisection."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    if p == 0.5:
        return 0.0
    high = 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    low = 0.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


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
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no values")
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])


def median_ci(values: Sequence[float], confidence: float = 0.95) -> MedianCI:
    """The median and its distribution-free order-statistic interval (see the module docstring)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median_ci of no values")
    half_alpha = (1.0 - confidence) / 2.0
    k, tail = 1, 0.5**n  # tail = P(Bin(n, 1/2) <= k - 1)
    cumulative = 0.5**n
    for candidate in range(2, (n + 1) // 2 + 1):
        cumulative += math.comb(n, candidate - 1) / 2**n
        if cumulative > half_alpha:
            break
        k, tail = candidate, cumulative
    return MedianCI(
        median=median(ordered),
        low=ordered[k - 1],
        high=ordered[n - k],
        level=max(0.0, 1.0 - 2.0 * tail),
        n=n,
    )


@dataclass(frozen=True)
class Effect:
    """Ratio candidate / reference (geometric means) with its Welch interval and two-sided p-value."""

    ratio: float
    low: float
    high: float
    p_value: float
    df: float


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
    n_c, n_r = len(logs_c), len(logs_r)
    mean_c, mean_r = sum(logs_c) / n_c, sum(logs_r) / n_r
    var_c = sum((v - mean_c) ** 2 for v in logs_c) / (n_c - 1)
    var_r = sum((v - mean_r) ** 2 for v in logs_r) / (n_r - 1)
    diff = mean_c - mean_r
    se2 = var_c / n_c + var_r / n_r
    if se2 == 0.0:  # no noise at all: any difference is certain, none is certainly none
        return Effect(
            math.exp(diff), math.exp(diff), math.exp(diff), 0.0 if diff else 1.0, float(n_c + n_r - 2)
        )
    df = se2**2 / ((var_c / n_c) ** 2 / (n_c - 1) + (var_r / n_r) ** 2 / (n_r - 1))
    se = math.sqrt(se2)
    p_value = min(1.0, 2.0 * t_sf(abs(diff) / se, df))
    margin = t_ppf(1.0 - (1.0 - confidence) / 2.0, df) * se
    return Effect(math.exp(diff), math.exp(diff - margin), math.exp(diff + margin), p_value, df)


def verdict(effect: Effect, higher_is_better: bool, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> str:
    """``win``/``regression`` when significant and at least the minimum effect, else ``no change``."""
    change = effect.ratio - 1.0
    if effect.p_value >= thresholds.alpha or abs(change) < thresholds.min_effect:
        return NO_CHANGE
    return WIN if (change > 0) == higher_is_better else REGRESSION


def compare(
    candidate: Sequence[float],
    reference: Sequence[float],
    higher_is_better: bool,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, Any]:
    """The effect of candidate over reference as a JSON-ready dict with ``ratio``, ``ci``, ``p_value``, ``verdict``."""
    if len(candidate) < 2 or len(reference) < 2:
        ratio = None
        if candidate and reference:
            ratio = math.exp(_mean_log(candidate) - _mean_log(reference))
        return {"ratio": ratio, "ci": None, "p_value": None, "df": None, "verdict": INSUFFICIENT}
    effect = welch_log_ratio(candidate, reference, thresholds.confidence)
    return {
        "ratio": effect.ratio,
        "ci": [effect.low, effect.high],
        "p_value": effect.p_value,
        "df": effect.df,
        "verdict": verdict(effect, higher_is_better, thresholds),
    }


def _mean_log(values: Sequence[float]) -> float:
    return sum(math.log(v) for v in values) / len(values)


# --- loss parity at equal tokens seen ---------------------------------------------------------------------


@dataclass(frozen=True)
class LossParity:
    """Mean loss over the last part of the common tokens-seen range, candidate against reference."""

    reference_loss: float
    candidate_loss: float
    delta: float
    within_tolerance: bool
    tokens_from: float
    tokens_to: float


def loss_positions(curve: Sequence[Mapping[str, float]]) -> list[tuple[float, float]]:
    """``(tokens, loss)`` points for one run's loss log, placed at the tokens seen while the loss was computed.

    A record ``{step, tokens_seen, loss}`` holds the mean loss of the steps since the previous record, where
    ``tokens_seen`` counts tokens up to and including its own step. Each of those steps ran on weights that
    had seen the tokens before it, so the record sits at the mean of those starting points (assuming equal
    tokens per step within the interval): for a record per step that is exactly the tokens seen before it.
    """
    records = sorted(
        (r for r in curve if all(_is_number(r.get(key)) for key in ("step", "tokens_seen", "loss"))),
        key=lambda r: (r["step"], r["tokens_seen"]),
    )
    points = []
    previous_step, previous_tokens = 0, 0.0
    for record in records:
        step, tokens = int(record["step"]), float(record["tokens_seen"])
        steps = max(1, step - previous_step)
        points.append(
            (previous_tokens + (tokens - previous_tokens) * (steps - 1) / (2 * steps), float(record["loss"]))
        )
        previous_step, previous_tokens = step, tokens
    return points


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
) -> LossParity | None:
    """Compare loss curves (one per run) at equal tokens seen; None when they do not overlap."""
    runs_c = [p for p in (loss_positions(c) for c in candidate) if len(p) >= 2]
    runs_r = [p for p in (loss_positions(c) for c in reference) if len(p) >= 2]
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
    return LossParity(loss_r, loss_c, delta, abs(delta) <= thresholds.loss_tolerance, tail_start, end)


# --- the summary of a bench run ---------------------------------------------------------------------------


def summarize(
    commits: Sequence[str],
    workloads: Mapping[str, Workload],
    runs: Sequence[RunRecord],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, dict[str, Any]]:
    """Per workload, per commit (baseline first): primary median + CI, marginal and cumulative effects,
    reported metric medians, peak-memory change and loss parity against the baseline. JSON-ready."""
    summary = {}
    for name, workload in workloads.items():
        ok_runs = {
            sha: [r for r in runs if r.commit == sha and r.workload == name and r.ok] for sha in commits
        }
        failed = {
            sha: dict(Counter(r.status for r in runs if r.commit == sha and r.workload == name and not r.ok))
            for sha in commits
        }
        summary[name] = {
            "primary": workload.primary,
            "higher_is_better": workload.higher_is_better,
            "commits": {
                sha: _commit_summary(workload, commits, index, ok_runs, failed[sha], thresholds)
                for index, sha in enumerate(commits)
            },
        }
    return summary


def _commit_summary(
    workload: Workload,
    commits: Sequence[str],
    index: int,
    ok_runs: Mapping[str, list[RunRecord]],
    failed: dict[str, int],
    thresholds: Thresholds,
) -> dict[str, Any]:
    sha, baseline = commits[index], commits[0]
    values = {c: _metric_values(ok_runs[c], (workload.primary,), positive=True) for c in commits}
    memory = {c: _metric_values(ok_runs[c], ("peak_memory_bytes",), positive=True) for c in commits}
    entry: dict[str, Any] = {
        "n": len(values[sha]),
        "failed": failed,
        "missing_primary": len(ok_runs[sha]) - len(values[sha]),
        "values": values[sha],
        "median": None,
        "ci": None,
        "ci_level": None,
        "marginal": None,
        "cumulative": None,
        "metrics": _reported_medians(ok_runs[sha]),
        "memory": _memory(memory, commits, index, thresholds),
        "loss": None,
    }
    if values[sha]:
        ci = median_ci(values[sha], thresholds.confidence)
        entry.update(median=ci.median, ci=[ci.low, ci.high], ci_level=ci.level)
    if index > 0:
        previous = commits[index - 1]
        for key, against in (("marginal", previous), ("cumulative", baseline)):
            effect = compare(values[sha], values[against], workload.higher_is_better, thresholds)
            entry[key] = {"against": against, **effect}
        parity = loss_parity(
            [r.metrics.get("loss") or [] for r in ok_runs[sha]],
            [r.metrics.get("loss") or [] for r in ok_runs[baseline]],
            thresholds,
        )
        entry["loss"] = asdict(parity) if parity else None
    return entry


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


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
