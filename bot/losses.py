"""A commit's loss against the baseline, read under the numerics contracts of the commits up to it.

Loss is compared at equal optimizer steps and at equal tokens seen (:func:`benchmarks.stats.loss_parity`).
Under ``exact`` and ``rounding`` commits the two agree and both are held to the tolerance. A ``dynamics``
commit that changes the tokens an optimizer step sees (packing: several examples per row, so fewer steps per
epoch) moves one of them by design: with more tokens per step, the candidate has taken fewer steps by the time
it has seen the baseline's tokens, so its loss at equal tokens is expected to differ; at equal steps it has seen
at least the baseline's tokens, so its loss there must be no higher than the baseline's (within the
tolerance). That comparison is the one judged; the other is reported with the reason, not as a regression.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from benchmarks.results import Results
from benchmarks.stats import STEPS, TOKENS, LossParity
from bot import measurements
from bot.formatting import delta
from optimizations.registry import Listing, Numerics, listings

STEP_SHIFT = 0.05  # tokens per optimizer step that differ by more than this change what a step is


@dataclass(frozen=True)
class LossReading:
    """One workload's loss at one commit against the baseline: at equal steps and at equal tokens, the change
    in tokens per optimizer step, the ``dynamics`` commits up to it, the axis those are expected to move
    (``expected``, None when none is), whether a judged comparison is outside the tolerance, and why."""

    workload: str
    sha: str
    at_steps: LossParity | None
    at_tokens: LossParity | None
    step_ratio: float | None  # tokens per optimizer step, candidate over baseline
    dynamics: tuple[str, ...]
    expected: str | None
    outside: bool
    explanation: str

    @property
    def moved_as_expected(self) -> bool:
        """The expected axis differs beyond the tolerance while every judged comparison holds."""
        moved = (
            self.at_tokens if self.expected == TOKENS else self.at_steps if self.expected == STEPS else None
        )
        return moved is not None and not moved.within_tolerance and not self.outside

    def evidence(self, tolerance: float) -> list[str]:
        """The two comparisons, the tokens per step and the explanation, one line each."""
        lines = [
            f"{self.workload} loss at equal optimizer steps: {_parity(self.at_steps)}",
            f"{self.workload} loss at equal tokens seen: {_parity(self.at_tokens)}",
        ]
        if self.step_ratio is not None:
            lines.append(f"tokens per optimizer step ×{self.step_ratio:.2f} vs baseline")
        lines.append(f"{self.explanation} (tolerance ±{tolerance:.0%})")
        return lines

    def cell(self, tolerance: float) -> str:
        """A short table cell: both deltas, each marked ✓ (holds), ✗ (outside the tolerance) or ``expected``
        (outside it on the axis a dynamics change is expected to move); one delta, the larger, where a step
        sees the baseline's tokens and the two comparisons are the same one."""
        both = [p for p in (self.at_steps, self.at_tokens) if p is not None]
        if not both:
            return "—"
        if self.expected is None and (self.step_ratio is None or abs(self.step_ratio - 1.0) <= STEP_SHIFT):
            larger = max(both, key=lambda p: abs(p.delta))
            return f"{delta(larger.delta)} {'✗' if self.outside else '✓'}"
        return " · ".join(
            f"{name} {self._mark(parity, axis, tolerance)}"
            for name, parity, axis in (("steps", self.at_steps, STEPS), ("tokens", self.at_tokens, TOKENS))
        )

    def _mark(self, parity: LossParity | None, axis: str, tolerance: float) -> str:
        if parity is None:
            return "—"
        if axis == self.expected:
            mark = "✓" if abs(parity.delta) <= tolerance else "expected"
        else:  # judged: no higher than the baseline where a dynamics change is expected to help it
            within = parity.delta <= tolerance if self.expected else abs(parity.delta) <= tolerance
            mark = "✓" if within else "✗"
        return f"{delta(parity.delta)} {mark}"


@functools.cache
def _listed() -> dict[str, Listing]:
    """The registered optimizations' listings by id, read once per process (each read parses their source)."""
    return {listing.id: listing for listing in listings()}


def contracts(results: Results) -> dict[str, tuple[Numerics, str]]:
    """Each measured commit's numerics contract and reason, by sha, from the optimization its trailer names;
    a commit that names none, or one this perfbot does not know, is held to ``exact``."""
    known = _listed()
    found = {}
    for info in results.commits:
        listing = known.get(info.optimization or "")
        found[info.sha] = (listing.numerics, listing.numerics_reason) if listing else (Numerics.EXACT, "")
    return found


def read(results: Results, workload: str, sha: str, tolerance: float) -> LossReading | None:
    """The loss of ``workload`` at ``sha`` against the baseline, judged under the contracts of the commits
    from the first after the baseline to ``sha``; None for the baseline or an unmeasured commit."""
    shas = [info.sha for info in results.commits]
    measured = measurements.measurement(results, workload, sha)
    baseline = measurements.measurement(results, workload, shas[0])
    if measured is None or sha == shas[0] or sha not in shas:
        return None
    contract = contracts(results)
    labels = {info.sha: info.label(False) for info in results.commits}
    dynamics = tuple(
        f"{labels[s]} ({contract[s][1] or Numerics.DYNAMICS.meaning})"
        for s in shas[1 : shas.index(sha) + 1]
        if contract[s][0] is Numerics.DYNAMICS
    )
    ratio = None
    if measured.tokens_per_step and baseline and baseline.tokens_per_step:
        ratio = measured.tokens_per_step / baseline.tokens_per_step
    at_steps, at_tokens = measured.loss_at_steps, measured.loss
    shifted = ratio is not None and abs(ratio - 1.0) > STEP_SHIFT
    if dynamics and shifted:
        assert ratio is not None  # a shift is measured from a ratio
        expected, judged = (TOKENS, at_steps) if ratio > 1 else (STEPS, at_tokens)
        outside = judged is not None and judged.delta > tolerance
        explanation = _dynamics_explanation(dynamics, ratio, expected, outside)
        return LossReading(
            workload, sha, at_steps, at_tokens, ratio, dynamics, expected, outside, explanation
        )
    outside = any(p is not None and abs(p.delta) > tolerance for p in (at_steps, at_tokens))
    if shifted:
        explanation = (
            f"tokens per optimizer step changed ×{ratio:.2f} although no commit up to here declares `dynamics`: "
            "both comparisons are held to the tolerance"
        )
    elif dynamics:
        explanation = (
            f"{'; '.join(dynamics)} declares `dynamics` but leaves the tokens per optimizer step alone, so both "
            "comparisons are held to the tolerance"
        )
    else:
        explanation = (
            "every commit up to here is `exact` or `rounding`: both comparisons are held to the tolerance"
        )
    return LossReading(workload, sha, at_steps, at_tokens, ratio, dynamics, None, outside, explanation)


def _dynamics_explanation(dynamics: tuple[str, ...], ratio: float, expected: str, outside: bool) -> str:
    changed_by = "; ".join(dynamics)
    if expected == TOKENS:
        why = (
            f"each optimizer step sees ×{ratio:.2f} the tokens, so at equal tokens it has taken {1 / ratio:.2f}× "
            "the baseline's steps and its loss differs for that reason; at equal steps it has seen at least the "
            "baseline's tokens, so that is the comparison held to the tolerance (no higher than the baseline)"
        )
    else:
        why = (
            f"each optimizer step sees ×{ratio:.2f} the tokens, so at equal steps it has seen fewer tokens and its "
            "loss differs for that reason; at equal tokens it has taken at least the baseline's steps, so that is "
            "the comparison held to the tolerance (no higher than the baseline)"
        )
    verdict = "and it is not" if outside else "and it holds"
    return f"changes training dynamics: {changed_by}; {why}, {verdict}"


def _parity(parity: LossParity | None) -> str:
    if parity is None:
        return "not measured"
    unit = "tokens" if parity.axis == TOKENS else "steps"
    return (
        f"{parity.candidate_loss:.4g} vs baseline {parity.reference_loss:.4g} ({delta(parity.delta)}, mean over "
        f"{unit} {parity.start:,.0f}–{parity.end:,.0f})"
    )
