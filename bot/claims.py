"""What a commit claims to win, and how that claim stands against what was measured.

A claim is the ``Expected:`` line of a commit's body (where the bot writes the registry's or the plan's
expected win) or, failing that, a percentage or factor in its subject (``perf: faster loader (+10% tokens/s)``).
Every ``Expected:`` line is read as a claim of one kind, from the words beside its number:

- ``throughput`` (tokens/s, samples/s, a workload's name, or nothing said): its gain is the lowest number it
  names: ``+15-20% SFT`` claims +15%, ``1.7-2.2x`` claims +70%;
- ``step time`` (``-10-40% step time``): a shorter step, claimed as the throughput gain it means (-10% step
  time is +11.1% tokens/s);
- ``GPU util``: the benchmark measures tokens/s, not utilisation, so it is never judged on them;
- ``other``: a number about a part of the step (``46% fewer elements cast``, ``2-3x float32 matmul
  throughput``) or no number at all: read and listed, not judged.

A claim of no gain (``~0%``, ``Defensive; 0% perf``) or of a change stated with a minus or ± sign (other than a
shorter step time) is not a claimed win.

A claimed win is set against the commit's marginal effect (against the commit measured before it) on the
workloads the claim names, or every workload when it names none, and only on workloads whose run executes a
file the commit changed; it stands as the best of them:

- ``HELD``: a significant win whose interval reaches the claim;
- ``BELOW CLAIM``: a significant win, but the interval lies below the claim;
- ``INCONCLUSIVE``: no significant change, and the interval still reaches the claim (too noisy to say);
- ``NOT BORNE OUT``: no significant change, and the interval lies below the claim;
- ``REGRESSION``: a significant slowdown;
- ``NOT MEASURED``: the commit was not benchmarked, or too few of its runs succeeded to test;
- ``NOT MEASURED HERE``: no benchmarked workload runs the changed files, or the claim is of GPU utilisation;
- ``NOT CHECKABLE``: the claim names no number the benchmark measures.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from benchmarks.results import Results
from benchmarks.stats import NO_CHANGE, REGRESSION, WIN
from bot import measurements
from bot.formatting import NOT_MEASURED, effect_evidence

HELD, BELOW, INCONCLUSIVE, NOT_BORNE_OUT, REGRESSED, UNMEASURED, NOT_HERE, UNCHECKABLE = (
    "HELD",
    "BELOW CLAIM",
    "INCONCLUSIVE",
    "NOT BORNE OUT",
    "REGRESSION",
    "NOT MEASURED",
    "NOT MEASURED HERE",
    "NOT CHECKABLE",
)
_RANK = (HELD, BELOW, INCONCLUSIVE, NOT_BORNE_OUT, REGRESSED, UNMEASURED, NOT_HERE, UNCHECKABLE)
THROUGHPUT, STEP_TIME, GPU_UTIL, OTHER = "throughput", "step time", "GPU util", "other"
_EXPECTED = re.compile(r"^\s*expected\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_PERCENT = re.compile(r"(?<![\w.])([+±~-])?\s*(\d+(?:\.\d+)?)\s*(?:[-–]\s*\d+(?:\.\d+)?\s*)?%")
_FACTOR = re.compile(
    r"(?<![\w.])([+~-])?(\d+(?:\.\d+)?)\s*(?:[-–]\s*\d+(?:\.\d+)?\s*)?[x×](?!\w)", re.IGNORECASE
)
_PARENTHESES = re.compile(r"\(([^()]*)\)")
_CLAUSES = re.compile(r"[;()]")
_KIND_WORDS = (
    (GPU_UTIL, re.compile(r"\bgpu[\s-]*util|\butili[sz]ation\b", re.IGNORECASE)),
    (STEP_TIME, re.compile(r"\bstep[\s-]*time\b|\btime per step\b", re.IGNORECASE)),
    (OTHER, re.compile(r"\bfewer\b|\bmatmul|\bkernel launches\b|\belements\b", re.IGNORECASE)),
)


@dataclass(frozen=True)
class Claim:
    """A claim: the text it was read from, its kind, and the throughput gain it names (0.15 for +15%; for a
    shorter step time, the gain that means; None where the claim names no number the benchmark measures)."""

    text: str
    gain: float | None
    kind: str = THROUGHPUT


def _kind(clause: str) -> str:
    return next((kind for kind, words in _KIND_WORDS if words.search(clause)), THROUGHPUT)


def _number(text: str) -> tuple[str | None, float, bool] | None:
    """The first percentage (else factor) in ``text``: its sign, value as a fraction of change, and whether it
    was a percentage."""
    percent = _PERCENT.search(text)
    if percent:
        return percent.group(1), float(percent.group(2)) / 100.0, True
    factor = _FACTOR.search(text)
    if factor:
        return factor.group(1), float(factor.group(2)) - 1.0, False
    return None


def parse_gain(text: str) -> float | None:
    """The lowest throughput gain a claim text names, as a fraction; None when it names none or a signed
    decrease (a shorter step time is the gain it means)."""
    claim = read_claim(text)
    return claim.gain if claim is not None and claim.kind in (THROUGHPUT, STEP_TIME) else None


def read_claim(text: str) -> Claim | None:
    """The claim in one text, from its first clause that names a number: None for a decrease or no number."""
    readings: list[Claim | None] = []
    for clause in _CLAUSES.split(text):
        number = _number(clause)
        if number is None:
            continue
        sign, value, percent = number
        kind = _kind(clause)
        if kind == STEP_TIME and sign == "-" and percent and value < 1:
            readings.append(Claim(text.strip(), value / (1.0 - value), STEP_TIME))
        elif sign in ("-", "±"):
            readings.append(None)
        elif kind == THROUGHPUT:
            readings.append(Claim(text.strip(), value, THROUGHPUT))
        else:
            readings.append(Claim(text.strip(), None, kind))
    judged = [r for r in readings if r is not None and r.gain is not None]
    return judged[0] if judged else next(iter(readings), None)


def claim_of(message: str) -> Claim | None:
    """What a commit message claims: its ``Expected:`` line (read whatever its kind; a line naming no number
    is a claim nothing can check), else its subject; None without a gain > 0."""
    subject, _, body = message.partition("\n")
    expected = _EXPECTED.search(body)
    if expected:
        claim = read_claim(expected.group(1))
        if claim is None and _number(expected.group(1)) is None:
            return Claim(expected.group(1).strip(), None, OTHER)
        return claim if claim is None or claim.gain is None or claim.gain > 0 else None
    for text in [*_PARENTHESES.findall(subject), subject]:
        gain = parse_gain(text)
        if gain is not None:
            return Claim(text.strip(), gain) if gain > 0 else None
    return None


@dataclass(frozen=True)
class ClaimCheck:
    """A commit's claimed win against its measured marginal effect."""

    sha: str
    subject: str
    claim: str
    claimed_gain: float | None
    observed: str
    status: str
    kind: str = THROUGHPUT


def check_claim(
    results: Results | None,
    sha: str,
    subject: str,
    claim: Claim,
    runs_changes: Mapping[str, bool] | None = None,
) -> ClaimCheck:
    """Set ``claim`` against what ``results`` measured for ``sha`` (see the module docstring);
    ``runs_changes`` says, per workload, whether its run executes a file the commit changed (a workload
    missing from it is taken to)."""

    def checked(observed: str, status: str) -> ClaimCheck:
        return ClaimCheck(sha, subject, claim.text, claim.gain, observed, status, claim.kind)

    if claim.kind == GPU_UTIL:
        return checked("GPU utilisation is not what the benchmark measures (tokens/s)", NOT_HERE)
    if claim.gain is None:
        return checked("names no throughput or step-time number the benchmark measures", UNCHECKABLE)
    if results is None:
        return checked("no benchmark results", UNMEASURED)
    if sha not in {info.sha for info in results.commits}:
        return checked("this commit was not benchmarked", UNMEASURED)
    named = [w for word in re.findall(r"[a-z0-9_]+", claim.text.lower()) for w in _named(results, word)]
    workloads = list(dict.fromkeys(named) or measurements.workloads(results))
    running = [w for w in workloads if (runs_changes or {}).get(w, True)]
    if not running:
        return checked(f"{', '.join(workloads)}: the run executes none of the changed files", NOT_HERE)
    parts, statuses = [], []
    for workload in running:
        measured = measurements.measurement(results, workload, sha)
        marginal = measured.marginal if measured else None
        metric = measurements.primary(results, workload)
        if marginal is None or marginal.ratio is None or marginal.ci is None:
            parts.append(f"{workload} {metric}: {NOT_MEASURED}")
            statuses.append(UNMEASURED)
            continue
        better = measurements.higher_is_better(results, workload)
        reach = max(measurements.gain(bound, better) for bound in marginal.ci)
        if marginal.verdict == REGRESSION:
            status = REGRESSED
        elif marginal.verdict == WIN:
            status = HELD if reach >= claim.gain else BELOW
        elif marginal.verdict == NO_CHANGE:
            status = INCONCLUSIVE if reach >= claim.gain else NOT_BORNE_OUT
        else:
            status = UNMEASURED
        parts.append(f"{workload} {metric} {effect_evidence(marginal)}")
        statuses.append(status)
    skipped = [w for w in workloads if w not in running]
    if skipped:
        parts.append(f"{', '.join(skipped)}: {NOT_HERE.lower()} (the run executes none of the changed files)")
    return checked("; ".join(parts), min(statuses, key=_RANK.index))


def _named(results: Results, word: str) -> list[str]:
    """The workloads a word of a claim names exactly (``SFT`` names ``sft`` and ``sft_lora``)."""
    return measurements.matching_workloads(results, word) if len(word) > 1 else []
