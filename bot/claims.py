"""What a commit claims to win, and how that claim stands against what was measured.

A claim is the ``Expected:`` line of a commit's body (where the bot writes the registry's or the plan's
expected win) or, failing that, a percentage or factor in its subject (``perf: faster loader (+10% tokens/s)``).
Its gain is the lowest number it names: ``+15-20% SFT`` claims +15%, ``1.7-2.2x`` claims +70%. A claim of no
gain (``~0%``, ``Defensive; 0% perf``) or of a change stated with a minus or ± sign is not a claimed win.

A claimed win is set against the commit's marginal effect (against the commit measured before it) on the
workloads the claim names, or every workload when it names none, and stands as the best of them:

- ``HELD``: a significant win whose interval reaches the claim;
- ``BELOW CLAIM``: a significant win, but the interval lies below the claim;
- ``INCONCLUSIVE``: no significant change, and the interval still reaches the claim (too noisy to say);
- ``NOT BORNE OUT``: no significant change, and the interval lies below the claim;
- ``REGRESSION``: a significant slowdown;
- ``NOT MEASURED``: the commit was not benchmarked, or too few of its runs succeeded to test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from benchmarks.results import Results
from benchmarks.stats import NO_CHANGE, REGRESSION, WIN
from bot import measurements
from bot.formatting import NOT_MEASURED, effect_evidence

HELD, BELOW, INCONCLUSIVE, NOT_BORNE_OUT, REGRESSED, UNMEASURED = (
    "HELD",
    "BELOW CLAIM",
    "INCONCLUSIVE",
    "NOT BORNE OUT",
    "REGRESSION",
    "NOT MEASURED",
)
_RANK = (HELD, BELOW, INCONCLUSIVE, NOT_BORNE_OUT, REGRESSED, UNMEASURED)
_EXPECTED = re.compile(r"^\s*expected\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_PERCENT = re.compile(r"(?<![\w.])([+±~-])?\s*(\d+(?:\.\d+)?)\s*(?:[-–]\s*\d+(?:\.\d+)?\s*)?%")
_FACTOR = re.compile(
    r"(?<![\w.])([+~-])?(\d+(?:\.\d+)?)\s*(?:[-–]\s*\d+(?:\.\d+)?\s*)?[x×](?!\w)", re.IGNORECASE
)
_PARENTHESES = re.compile(r"\(([^()]*)\)")


@dataclass(frozen=True)
class Claim:
    """A claimed win: the text it was read from and the gain it names (0.15 for +15%)."""

    text: str
    gain: float


def parse_gain(text: str) -> float | None:
    """The lowest gain a claim text names, as a fraction; None when it names none or a signed decrease."""
    percent = _PERCENT.search(text)
    if percent:
        sign, value = percent.group(1), float(percent.group(2))
        return None if sign in ("-", "±") else value / 100.0
    factor = _FACTOR.search(text)
    if factor is None or factor.group(1) == "-":
        return None
    return float(factor.group(2)) - 1.0


def claim_of(message: str) -> Claim | None:
    """The win a commit message claims: its ``Expected:`` line, else its subject; None without a gain > 0."""
    subject, _, body = message.partition("\n")
    expected = _EXPECTED.search(body)
    texts = [expected.group(1)] if expected else []
    texts += [*_PARENTHESES.findall(subject), subject]
    for text in texts:
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
    claimed_gain: float
    observed: str
    status: str


def check_claim(results: Results | None, sha: str, subject: str, claim: Claim) -> ClaimCheck:
    """Set ``claim`` against what ``results`` measured for ``sha`` (see the module docstring)."""

    def checked(observed: str, status: str) -> ClaimCheck:
        return ClaimCheck(sha, subject, claim.text, claim.gain, observed, status)

    if results is None:
        return checked("no benchmark results", UNMEASURED)
    if sha not in {info.sha for info in results.commits}:
        return checked("this commit was not benchmarked", UNMEASURED)
    named = [w for word in re.findall(r"[a-z0-9_]+", claim.text.lower()) for w in _named(results, word)]
    parts, statuses = [], []
    for workload in dict.fromkeys(named) or measurements.workloads(results):
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
    return checked("; ".join(parts), min(statuses, key=_RANK.index))


def _named(results: Results, word: str) -> list[str]:
    """The workloads a word of a claim names exactly (``SFT`` names ``sft`` and ``sft_lora``)."""
    return measurements.matching_workloads(results, word) if len(word) > 1 else []
