"""The corpus table: per program and optimization, the site expected by reading the program, what `bot scan`
found, what `bot apply --tier 1` did, and a verdict comparing the two."""

from __future__ import annotations

from experiments.corpus.corpus import Expect, Outcome, matches

SHOWN = 3  # sites listed per cell; the rest are counted


def _in(site: dict, files: tuple[str, ...]) -> bool:
    return any(matches(site["path"], pattern) for pattern in files)


def _kind(site: dict) -> str:
    return "already" if site["already"] else "change" if site["applicable"] else "refuse"


def verdict(expect: Expect | None, sites: list[dict]) -> str:
    """How perfbot's sites for one optimization compare with what was expected ("" when neither has any)."""
    if expect is None:
        kinds = {_kind(s) for s in sites}
        if "change" in kinds:
            return "✗ changes where no site was expected"
        return f"· {'already' if 'already' in kinds else 'refused'}, no site expected" if kinds else ""
    there = {_kind(s) for s in sites if _in(s, expect.files)}
    if expect.answer in there:
        return "✅ as expected"
    if there:
        said = "changes" if "change" in there else "says already" if "already" in there else "refuses"
        return f"✗ {said} there"
    return "✗ elsewhere only" if sites else "✗ miss"


def _sites_cell(sites: list[dict]) -> str:
    if not sites:
        return "no site"
    parts = []
    for kind, label in (("change", "change"), ("already", "already"), ("refuse", "refused")):
        chosen = [s for s in sites if _kind(s) == kind]
        if not chosen:
            continue
        where = ", ".join(f"{s['path']}:{s['line']}" for s in chosen[:SHOWN])
        more = f" +{len(chosen) - SHOWN}" if len(chosen) > SHOWN else ""
        reason = f" ({_short(chosen[0]['reason'])})" if kind == "refuse" else ""
        parts.append(f"{label} {len(chosen)}: {where}{more}{reason}")
    return "; ".join(parts)


def _short(text: str, limit: int = 140) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _applied_cell(outcome: Outcome, optimization: str, tier: int, sites: list[dict]) -> str:
    if tier != 1:
        return "–"
    rows = [r for r in outcome.applied.get("rows", []) if r["optimization"] == optimization]
    if not rows:
        return "refused rows only (need a human)" if any(_kind(s) == "refuse" for s in sites) else "no row"
    row = rows[0]
    return _short(f"{row['status']}: {row['note']}" if row["note"] else row["status"])


def render(outcomes: list[Outcome], tiers: dict[str, int]) -> str:
    """The markdown table for `outcomes`; `tiers` maps each optimization id to its tier, in registry order.
    Optimizations with neither an expected site nor a site found are left out of a program's rows."""
    lines = [
        "| program | optimization | expected (read by hand) | `bot scan` | `bot apply --tier 1` | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for outcome in outcomes:
        for optimization, tier in tiers.items():
            expect = outcome.program.expected.get(optimization)
            sites = outcome.sites.get(optimization, [])
            judged = verdict(expect, sites)
            if not judged:
                continue
            expected = f"{expect.answer}: {_short(expect.where)}" if expect else "–"
            cells = [
                outcome.program.name,
                f"{optimization} (t{tier})",
                expected,
                _sites_cell(sites),
                _applied_cell(outcome, optimization, tier, sites),
                judged,
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary(outcomes: list[Outcome]) -> str:
    """One line per program: files, seconds per command, exit codes, what the apply changed, and problems."""
    lines = [
        "| program | Python files | scan s | scan --plan s | apply s | exit codes | files changed | problems |"
    ]
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for o in outcomes:
        problems = [*(f"traceback in `{c}`" for c in o.tracebacks), *o.compile_errors, *o.new_lint]
        problems += [f"dirty: {d}" for d in o.dirty]
        cells = [
            o.program.name,
            str(o.files),
            *(f"{s.seconds:.1f}" for s in o.steps),
            " / ".join(str(s.returncode) for s in o.steps),
            str(len(o.changed)),
            _short("; ".join(problems)) or "none",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
