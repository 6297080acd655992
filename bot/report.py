"""The results, reviewer-verdict and note comments, rendered from the results JSON and the computed verdict.

Every number in these comments comes from a :class:`benchmarks.results.Results` (or from the verdict computed
over git and ruff); a value that was not measured is written as "not measured". Tables are built here from one
header and rows of the same width, so every table keeps its columns; long tables fold into ``<details>``, and a
comment that would pass GitHub's size limit is rendered in a more compact form (and, as a last resort,
truncated at a line boundary with a pointer to the results JSON).

:func:`publish_reports` is what the orchestrator calls once the benchmarks are done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.results import Results
from benchmarks.stats import REGRESSION, WIN
from bot import measures
from bot.measures import NOT_MEASURED
from bot.plan import Plan
from bot.progress import Progress
from bot.redact import redact
from bot.regressions import DropOutcome, Rebench, drop_regressions, reverted_commits
from bot.render import markdown_cell, render
from bot.review import MAJOR, MET, NEEDS_HUMAN, Verdict, review
from bot.tracker import COMMENT_LIMIT, NOTE, PROGRESS, RESULTS, VERDICT, Tracker
from bot.workspace import Workspace

FOLD_ROWS = 12
LOG_TAIL_LINES = 20
# Headroom under GitHub's limit, which is counted here in UTF-8 bytes (never fewer than characters).
SIZE_BUDGET = COMMENT_LIMIT - 512
# Detail levels tried in turn until the comment fits: full, folded without log tails, compact tables.
FULL, FOLDED, COMPACT = 0, 1, 2
APPLIED = {
    "landed": "yes",
    "resumed": "yes (earlier run)",
    "not_applicable": "no: not applicable",
    "failed": "no: failed",
    "needs_human": "no: needs a human",
    "pending": "not run",
    "applying": "not run",
}


@dataclass
class Table:
    """A markdown table: one header, rows of exactly its width (cells already escaped)."""

    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    omitted: int = 0

    def add(self, *cells: str) -> None:
        """Append a row; a row of another width is a bug and raises."""
        if len(cells) != len(self.header):
            raise ValueError(f"row of {len(cells)} cells for a header of {len(self.header)}: {cells}")
        self.rows.append(list(cells))

    @property
    def fold(self) -> bool:
        """Long enough to fold into ``<details>``."""
        return len(self.rows) > FOLD_ROWS


def cell(text: object) -> str:
    """Free text made safe for a table cell."""
    return markdown_cell(text)


def _fence_after(line: str, fence: str) -> str:
    """The code fence open after ``line`` (empty when none), given the one open before it."""
    stripped = line.strip()
    if fence:
        return "" if stripped.startswith(fence) and stripped.strip(fence[0]) == "" else fence
    if stripped.startswith(("```", "~~~")):
        return stripped[: len(stripped) - len(stripped.lstrip(stripped[0]))]
    return ""


def tidy(text: str) -> str:
    """Runs of blank lines outside code fences folded into one (templates leave some behind)."""
    lines, fence, blank = [], "", False
    for line in text.splitlines():
        inside = bool(fence)
        fence = _fence_after(line, fence)
        if not inside and not fence and not line.strip():
            if not blank:
                lines.append("")
            blank = True
            continue
        blank = False
        lines.append(line)
    return "\n".join(lines).strip("\n") + "\n"


def fit(render_at: Callable[[int], str], levels: int) -> str:
    """The first rendering (most detailed first) that fits GitHub's comment limit, else the last truncated.
    Anything shaped like a token or registered as a secret is masked on the way out."""
    body = ""
    for level in range(levels):
        body = tidy(redact(render_at(level)))
        if _size(body) <= SIZE_BUDGET:
            return body
    return truncate(body)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def truncate(body: str, budget: int = SIZE_BUDGET) -> str:
    """Cut at a line boundary under ``budget``, closing an open code fence and ``<details>`` blocks."""
    closing_room = 400
    kept, used, fence, details = [], 0, "", 0
    for line in body.splitlines():
        if used + _size(line) + 1 > budget - closing_room:
            break
        kept.append(line)
        used += _size(line) + 1
        if not fence:
            details += line.count("<details") - line.count("</details>")
        fence = _fence_after(line, fence)
    tail = [fence] if fence else []
    tail += ["", *(["</details>"] * max(details, 0)), ""]
    tail.append("*Truncated to fit GitHub's comment limit; the results JSON holds every number.*")
    return "\n".join(kept + tail) + "\n"


# --- results ----------------------------------------------------------------------------------------------


def _commit_label(info, commit_url: str | None) -> str:
    keys = ", ".join(info.plan_items)
    return measures.commit_link(info.sha, commit_url) + (f" · {cell(keys)}" if keys else "")


def _environment(results: Results) -> list[tuple[str, str]]:
    values: dict[str, list[str]] = {}
    for run in results.runs:
        for key, value in ((run.metrics or {}).get("env") or {}).items():
            if value is not None and str(value) not in values.setdefault(key, []):
                values[key].append(str(value))

    def named(key: str) -> str:
        return " / ".join(values.get(key, [])) or "not recorded"

    libraries = ", ".join(
        f"{name} {' / '.join(values[name])}"
        for name in ("torch", "transformers", "trl", "peft", "accelerate")
        if values.get(name)
    )
    total = sum(run.duration_s for run in results.runs)
    failed = len(results.failed_runs)
    on_gpu = bool(values.get("gpu"))
    spent = (
        f"{measures.duration(total)} ({len(results.runs)} runs"
        + (f", {failed} failed" if failed else "")
        + ")"
    )
    return [
        (
            "GPU",
            f"{named('gpu')} (driver {named('driver')}, CUDA {named('cuda')})"
            if on_gpu
            else "none: CPU runs",
        ),
        ("Host", named("host")),
        ("Libraries", (libraries or "not recorded") + f"; Python {named('python')}"),
        (
            "Baseline → head",
            f"`{measures.short(results.baseline)}` → `{measures.short(measures.head(results))}`"
            f" ({len(results.commits) - 1} commits measured)",
        ),
        ("GPU time spent" if on_gpu else "Compute time spent (CPU)", f"{spent}; sum of run durations"),
        ("Size, seed", f"`{results.size}`, seed {results.seed}"),
        ("When", f"{results.started_at} → {results.finished_at}"),
    ]


def _runs_cell(results: Results, workload: str, sha: str, item: dict) -> str:
    runs = measures.runs_of(results, workload, sha)
    if not runs:
        return "no runs"
    ok = sum(run.ok for run in runs)
    parts = [f"{ok} ok"] + [f"{count} {status}" for status, count in (item.get("failed") or {}).items()]
    if item.get("missing_primary"):
        parts.append(f"{item['missing_primary']} without the metric")
    return ", ".join(parts)


def _memory_cell(item: dict, is_baseline: bool) -> str:
    peak = item.get("memory") or {}
    if peak.get("peak_bytes") is None:
        return NOT_MEASURED
    text = measures.memory(peak["peak_bytes"])
    if not is_baseline and peak.get("vs_baseline") is not None:
        text += f" ({measures.percent(peak['vs_baseline'])}"
        text += " ⚠)" if peak.get("regression") or peak.get("cumulative_regression") else ")"
    return text


def _loss_cell(item: dict, is_baseline: bool, tolerance: float) -> str:
    if is_baseline:
        return "reference" if item.get("median") is not None else NOT_MEASURED
    parity = item.get("loss")
    if not parity:
        return NOT_MEASURED
    return f"{parity['delta']:+.2%} " + ("✓" if abs(parity["delta"]) <= tolerance else "✗")


def _notable(item: dict) -> bool:
    """A row compact tables keep: a significant effect, a failure, or a flag."""
    effects = (item.get("marginal") or {}, item.get("cumulative") or {})
    peak = item.get("memory") or {}
    return (
        any(e.get("verdict") in (WIN, REGRESSION) for e in effects)
        or bool(item.get("failed"))
        or bool(peak.get("regression"))
        or item.get("median") is None
    )


def workload_table(
    results: Results,
    workload: str,
    *,
    tolerance: float,
    reverted: dict[str, str],
    commit_url: str | None,
    compact: bool,
) -> Table:
    """Baseline vs every commit for one workload."""
    metric = measures.primary(results, workload)
    extra = [m for m in ("tokens_per_s", "samples_per_s") if m != metric]
    names = {"tokens_per_s": "tokens/s", "samples_per_s": "samples/s"}
    table = Table(
        ["Commit", "Change", f"{cell(metric)} median [CI]", "vs previous", "vs baseline"]
        + [names[m] for m in extra]
        + ["peak memory", "loss vs baseline", "MFU", "runs"]
    )
    confidence = float(results.thresholds["confidence"])
    last = len(results.commits) - 1
    for index, info in enumerate(results.commits):
        item = measures.entry(results, workload, info.sha) or {}
        if compact and 0 < index < last and not _notable(item):
            table.omitted += 1
            continue
        change = "baseline" if index == 0 else measures.clip(info.subject, 70)
        if info.sha in reverted:
            change += f" (reverted in {measures.short(reverted[info.sha])})"
        metrics = item.get("metrics") or {}
        table.add(
            _commit_label(info, commit_url),
            cell(change),
            measures.median_with_ci(item, confidence),
            "—" if index == 0 else measures.effect(item.get("marginal")),
            "—" if index == 0 else measures.effect(item.get("cumulative")),
            *(measures.number(metrics.get(m)) for m in extra),
            _memory_cell(item, index == 0),
            _loss_cell(item, index == 0, tolerance),
            measures.fraction(metrics.get("mfu")),
            _runs_cell(results, workload, info.sha, item),
        )
    return table


def chart(results: Results, workload: str) -> tuple[str, int]:
    """A mermaid ``xychart-beta`` of the primary median per commit, and how many commits it leaves out
    (those without a measurement)."""
    labels, values, left_out = [], [], 0
    for index, info in enumerate(results.commits):
        median = (measures.entry(results, workload, info.sha) or {}).get("median")
        if median is None:
            left_out += 1
            continue
        keys = "+".join(info.plan_items)
        label = "base" if index == 0 else f"{keys} {measures.short(info.sha)}".strip()
        labels.append(label.replace('"', "'"))
        values.append(float(f"{median:.6g}"))
    if not values:
        return "", left_out
    metric = measures.primary(results, workload).replace('"', "'")
    workload = workload.replace('"', "'")
    top = float(f"{max(values) * 1.1:.3g}")
    quoted = ", ".join(f'"{label}"' for label in labels)
    lines = [
        "xychart-beta",
        f'    title "{workload}: {metric}, median per commit"',
        f"    x-axis [{quoted}]",
        f'    y-axis "{metric}" 0 --> {top:g}',
        f"    bar [{', '.join(f'{value:g}' for value in values)}]",
    ]
    return "\n".join(lines), left_out


def headline(results: Results, workload: str) -> str:
    """``baseline 1,352 → head 1,650 (+22.0% [+18.1%, +26.0%], p=0.002 (win))``."""
    base = measures.entry(results, workload, results.baseline) or {}
    last = measures.entry(results, workload, measures.head(results)) or {}
    cumulative = last.get("cumulative")
    text = f"baseline {measures.number(base.get('median'))} → head {measures.number(last.get('median'))}"
    if cumulative:
        mark = measures.MARKS[cumulative["verdict"]]
        text += f" ({measures.effect_evidence(cumulative)} {mark})"
    return text


@dataclass
class WorkloadView:
    """What the results comment shows for one workload."""

    name: str
    metric: str
    direction: str
    setup: str
    command: str
    headline: str
    table: Table
    chart: str
    chart_left_out: int


def workload_views(
    results: Results, *, tolerance: float, reverted: dict[str, str], commit_url: str | None, compact: bool
) -> list[WorkloadView]:
    """One view per workload of ``results``."""
    views = []
    for name in results.summary:
        spec = results.workloads.get(name, {})
        body, left_out = chart(results, name)
        views.append(
            WorkloadView(
                name=name,
                metric=measures.primary(results, name),
                direction="higher is better"
                if measures.higher_is_better(results, name)
                else "lower is better",
                setup=f"{spec.get('steps', '?')} steps ({spec.get('warmup_steps', '?')} warm-up excluded), "
                f"{spec.get('repeats', '?')} repeats per commit, interleaved",
                command=str(spec.get("command", "")),
                headline=headline(results, name),
                table=workload_table(
                    results,
                    name,
                    tolerance=tolerance,
                    reverted=reverted,
                    commit_url=commit_url,
                    compact=compact,
                ),
                chart=body,
                chart_left_out=left_out,
            )
        )
    return views


def _measured_win(results: Results | None, sha: str, reverted: dict[str, str]) -> str:
    """Each workload's marginal effect of ``sha``, or not measured."""
    shas = [info.sha for info in results.commits] if results else []
    if not sha or sha not in shas:
        return NOT_MEASURED
    parts = []
    for workload in results.summary:
        marginal = (measures.entry(results, workload, sha) or {}).get("marginal")
        parts.append(f"{workload} {measures.effect(marginal, bold=False)}")
    previous = shas[shas.index(sha) - 1]
    after_revert = " (against a commit since reverted)" if previous in reverted else ""
    return cell("; ".join(parts) + after_revert)


def _flags(results: Results | None, sha: str, tolerance: float) -> list[str]:
    flags = []
    for workload in results.summary if results else []:
        item = measures.entry(results, workload, sha) or {}
        peak = item.get("memory") or {}
        if peak.get("regression"):
            flags.append(f"{workload} peak memory {measures.percent(peak['vs_previous'])} vs previous")
        parity = item.get("loss")
        if parity and abs(parity["delta"]) > tolerance:
            flags.append(f"{workload} loss {parity['delta']:+.2%} vs baseline (tolerance ±{tolerance:.0%})")
    return flags


def attribution(
    results: Results | None,
    plan: Plan | None,
    progress: Progress | None,
    reverted: dict[str, str],
    tolerance: float,
    commit_url: str | None,
    compact: bool = False,
) -> Table:
    """One row per change: applied?, measured marginal effect per workload, and a note. ``compact`` leaves
    out landed changes with no significant effect and nothing flagged."""
    table = Table(["Change", "Applied", "Measured win (vs previous commit)", "Note"])
    expected = {item.key: item.expected for item in plan.items} if plan else {}
    if progress is not None:
        entries = [(row.keys, row.change, row.status, row.commit, row.note) for row in progress.rows]
    else:
        entries = [
            (info.plan_items, info.optimization or info.subject, "landed", info.sha, "")
            for info in (results.commits[1:] if results else [])
        ]
    for keys, change, status, sha, note in entries:
        if sha in reverted or status == "reverted":
            applied = "reverted" + (
                f" in {measures.commit_link(reverted[sha], commit_url)}" if sha in reverted else ""
            )
        else:
            applied = APPLIED.get(status, status)
            if sha and status in ("landed", "resumed"):
                applied += f" {measures.commit_link(sha, commit_url)}"
        flags = _flags(results, sha, tolerance) if sha else []
        if compact and status in ("landed", "resumed") and not flags and not _significant(results, sha):
            table.omitted += 1
            continue
        notes = [f"{k} expected {expected[k]}" for k in keys if expected.get(k)] + flags
        if note:
            notes.append(note)
        title = f"**{', '.join(keys)}** {change}" if keys else change
        table.add(
            cell(measures.clip(title, 90)),
            applied,
            _measured_win(results, sha, reverted),
            cell(measures.clip("; ".join(notes), 240)) or "—",
        )
    return table


def _significant(results: Results | None, sha: str) -> bool:
    return any(
        ((measures.entry(results, workload, sha) or {}).get("marginal") or {}).get("verdict")
        in (WIN, REGRESSION)
        for workload in (results.summary if results else [])
    )


def _fence(text: str) -> str:
    longest = max((len(run) for run in text.split("\n") if set(run) == {"`"}), default=0)
    ticks = max(
        3, longest + 1, max((len(part) for part in text.split() if set(part) == {"`"}), default=0) + 1
    )
    return "`" * ticks


def failed_runs(results: Results) -> list[dict[str, str]]:
    """The failed runs with their (redacted) log tails."""
    shown = []
    for run in results.failed_runs:
        tail = "\n".join(redact(run.log_tail).splitlines()[-LOG_TAIL_LINES:]) or "(no output)"
        shown.append(
            {
                "commit": measures.short(run.commit),
                "workload": run.workload,
                "repeat": str(run.repeat),
                "status": run.status,
                "duration": measures.duration(run.duration_s),
                "tail": tail,
                "fence": _fence(tail),
            }
        )
    return shown


def render_results(
    results: Results,
    *,
    plan: Plan | None = None,
    progress: Progress | None = None,
    drop: DropOutcome | None = None,
    reverted: dict[str, str] | None = None,
    commit_url: str | None = None,
    title: str = "",
    results_path: str | None = None,
) -> str:
    """The ``<!-- bot:results v1 -->`` comment."""
    reverted = dict(reverted or {}) | (drop.reverted_by if drop else {})
    tolerance = measures.loss_tolerance(results, plan.loss_tolerance if plan else None)
    thresholds = results.thresholds
    legend = measures.LEGEND.format(alpha=thresholds["alpha"], min_effect=thresholds["min_effect"])

    def render_at(level: int) -> str:
        compact = level >= COMPACT
        remeasured = []
        if drop and drop.results is not None:
            remeasured = workload_views(
                drop.results, tolerance=tolerance, reverted={}, commit_url=commit_url, compact=False
            )
        return render(
            "results.md.j2",
            marker=RESULTS,
            title=title,
            environment=_environment(results),
            workloads=workload_views(
                results, tolerance=tolerance, reverted=reverted, commit_url=commit_url, compact=compact
            ),
            legend=legend,
            thresholds=thresholds,
            tolerance=tolerance,
            attribution=attribution(results, plan, progress, reverted, tolerance, commit_url, compact),
            drop=drop,
            drop_reverted=[
                (
                    measures.commit_link(r.commit, commit_url),
                    measures.commit_link(r.revert, commit_url),
                    cell(measures.clip(r.subject, 80)),
                    r.evidence,
                )
                for r in (drop.reverted if drop else [])
            ],
            drop_kept=[
                (measures.commit_link(sha, commit_url), reason) for sha, reason in (drop.kept if drop else [])
            ],
            remeasured=remeasured,
            remeasured_head=measures.short(measures.head(drop.results)) if remeasured else "",
            failed=failed_runs(results) if level == FULL else [],
            failed_count=len(results.failed_runs),
            fold_all=level >= FOLDED,
            results_path=results_path,
        )

    return fit(render_at, 3)


# --- verdict ----------------------------------------------------------------------------------------------


def verdict_tables(verdict: Verdict, commit_url: str | None) -> tuple[Table, Table, Table]:
    """Plan adherence, success criteria and per-commit tables of a verdict."""
    adherence = Table(["Item", "Change", "Status", "Commits", "Notes"])
    for row in verdict.adherence:
        adherence.add(
            cell(row.key),
            cell(measures.clip(row.change, 90)),
            cell(row.status),
            ", ".join(measures.commit_link(sha, commit_url) for sha in row.commits) or "—",
            cell(measures.clip(row.note, 160)) or "—",
        )
    criteria = Table(["Criterion", "Target", "Observed", "Status"])
    for check in verdict.criteria:
        mark = "✅" if check.status == MET else "❌" if check.status == "NOT MET" else "❔"
        criteria.add(cell(check.text), cell(check.target), cell(check.observed), f"{mark} {check.status}")
    commits = Table(["Commit", "Subject", "+/−", "Files", "New lint errors", "Security"])
    for reviewed in verdict.commits:
        hits = reviewed.security
        security = "clean" if not hits else ", ".join(sorted({hit.kind for hit in hits}))
        commits.add(
            measures.commit_link(reviewed.sha, commit_url),
            cell(measures.clip(reviewed.subject, 70)),
            f"+{reviewed.added} / −{reviewed.deleted}",
            str(len(reviewed.files)),
            str(len(reviewed.lint)) if not verdict.lint_error else NOT_MEASURED,
            cell(security),
        )
    return adherence, criteria, commits


def render_verdict(
    verdict: Verdict,
    *,
    plan: Plan | None = None,
    progress: Progress | None = None,
    commit_url: str | None = None,
    title: str = "",
) -> str:
    """The ``<!-- bot:reviewer-verdict v1 -->`` comment."""
    adherence, criteria, commits = verdict_tables(verdict, commit_url)
    title = title or _title(plan, progress)

    def render_at(level: int) -> str:
        return render(
            "verdict.md.j2",
            marker=VERDICT,
            title=title,
            verdict=verdict,
            range_text=f"{measures.commit_link(verdict.base, commit_url)}..{measures.commit_link(verdict.head, commit_url)}",
            adherence=adherence,
            criteria=criteria,
            commits=commits,
            findings=verdict.findings,
            fold_all=level >= FOLDED,
            evidence_lines=None if level == FULL else 3,
        )

    return fit(render_at, 2)


# --- note -------------------------------------------------------------------------------------------------


def render_note(
    verdict: Verdict,
    *,
    plan: Plan | None = None,
    progress: Progress | None = None,
    results: Results | None = None,
    drop: DropOutcome | None = None,
    reverted: dict[str, str] | None = None,
    commit_url: str | None = None,
    title: str = "",
) -> str:
    """The ``<!-- bot:note v1 -->`` comment: the honest bottom line."""
    final = drop.results if drop and drop.results is not None else results
    reverted = dict(reverted or {}) | (drop.reverted_by if drop else {})
    criteria = Table(["Criterion", "Observed", "Target", "Status"])
    for check in verdict.criteria:
        criteria.add(cell(check.text), cell(check.observed), cell(check.target), f"**{check.status}**")
    shipped, unchanged, follow_ups = [], [], []
    rows = progress.rows if progress else []
    for row in rows:
        keys = ", ".join(row.keys)
        label = f"**{keys}** {row.change}" if keys else row.change
        if row.commit and (row.commit in reverted or row.status == "reverted"):
            by = reverted.get(row.commit)
            unchanged.append(
                f"{label}: reverted"
                + (f" in {measures.commit_link(by, commit_url)}" if by else "")
                + f" after a measured slowdown ({_measured_win(results, row.commit, {})})"
            )
        elif row.status in ("landed", "resumed"):
            effect = _shipped_effect(results, row.commit, reverted)
            shipped.append(f"{label} ({measures.commit_link(row.commit, commit_url)}): {effect}")
        elif row.status == "not_applicable":
            unchanged.append(f"{label}: not applicable ({measures.clip(row.note or 'no site found', 240)})")
        elif row.status == "failed":
            unchanged.append(f"{label}: the transform failed ({measures.clip(row.note, 240)})")
            follow_ups.append(f"Fix or apply by hand: {label} ({measures.clip(row.note, 240)})")
        elif row.status == "needs_human":
            follow_ups.append(
                f"Needs a human: {label}" + (f" ({measures.clip(row.note, 240)})" if row.note else "")
            )
    if not rows:
        for info in results.commits[1:] if results else []:
            if info.sha not in reverted:
                shipped.append(
                    f"{cell(info.subject)} ({measures.commit_link(info.sha, commit_url)}): "
                    f"{_shipped_effect(results, info.sha, reverted)}"
                )
    for item in plan.behavioural if plan else []:
        unchanged.append(
            f"**{item.key}** {item.change}: behavioural, left unchanged"
            + (f" ({item.why_not})" if item.why_not else "")
        )
        follow_ups.append(
            f"Decide on behavioural item **{item.key}**: {item.change}"
            + (f" — {item.why_not}" if item.why_not else "")
        )
    for row in verdict.adherence:
        if row.status == NEEDS_HUMAN and not any(row.key in r.keys for r in rows):
            follow_ups.append(f"Needs a human: **{row.key}** {row.change}")
    for sha, reason in drop.kept if drop else []:
        follow_ups.append(f"Slowdown kept at {measures.commit_link(sha, commit_url)}: {reason}")
    for check in verdict.criteria:
        if check.status != MET:
            follow_ups.append(f"Criterion {check.status.lower()}: {check.text} (observed: {check.observed})")
    for item in plan.items if plan else []:
        if item.follow_on:
            opts = ", ".join(f"`{o}`" for o in item.optimizations) or "no registered optimization yet"
            follow_ups.append(f"Tier {item.tier} follow-on {item.key}: {item.change} ({opts})")
    regressions = [f.title for f in verdict.findings if f.category == "regression" and f.severity == MAJOR]
    met = sum(check.status == MET for check in verdict.criteria)
    summary = f"**{verdict.outcome}**"
    if verdict.criteria:
        summary += f" — {met} of {len(verdict.criteria)} success criteria met"
    summary += f"; {len(shipped)} change(s) shipped"
    if reverted:
        summary += f", {len(reverted)} reverted for a measured slowdown"
    if final is not None and drop and drop.results is not None:
        summary += "; numbers for the head are from its re-measurement after the reverts"
    return fit(
        lambda level: render(
            "note.md.j2",
            marker=NOTE,
            title=title or _title(plan, progress),
            summary=summary,
            criteria=criteria,
            shipped=shipped,
            regressions=regressions,
            unchanged=unchanged,
            follow_ups=list(dict.fromkeys(follow_ups)),
            head_lines=[f"`{w}` {headline(final, w)}" for w in final.summary] if final else [],
            rebench_error=drop.rebench_error if drop else "",
            fold_all=level >= FOLDED,
        ),
        2,
    )


def _shipped_effect(results: Results | None, sha: str, reverted: dict[str, str]) -> str:
    """``measured win: …`` when a workload won significantly, else no significant change, or not measured."""
    if results is None or sha not in {info.sha for info in results.commits}:
        return NOT_MEASURED
    marginals = [(measures.entry(results, w, sha) or {}).get("marginal") or {} for w in results.summary]
    measured = _measured_win(results, sha, reverted)
    if any(m.get("verdict") == WIN for m in marginals):
        return f"measured win ({measured})"
    if all(m.get("ratio") is None for m in marginals):
        return NOT_MEASURED
    return f"no significant win measured ({measured})"


def _title(plan: Plan | None, progress: Progress | None) -> str:
    if progress is not None:
        return f"tier {progress.tier}" + (f" · {progress.issue_label}" if progress.issue else "")
    return plan.title if plan else ""


# --- the whole flow ---------------------------------------------------------------------------------------


@dataclass
class Reports:
    """What :func:`publish_reports` posted and decided."""

    verdict: Verdict
    results_body: str
    verdict_body: str
    note_body: str
    drop: DropOutcome | None

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


def publish_reports(
    tracker: Tracker,
    issue: int | str,
    plan: Plan | None,
    progress: Progress | None,
    results: Results,
    workspace: Workspace,
    *,
    commit_url: str | None = None,
    drop: bool = False,
    rebench: Rebench | None = None,
    results_path: str | None = None,
) -> Reports:
    """After the benchmarks: optionally drop regressions, review ``baseline..HEAD``, and upsert the results,
    reviewer-verdict and note comments (and the progress comment when rows changed). Safe to run again: each
    comment is edited in place through its marker, and a commit reverted earlier is not reverted twice."""
    base = progress.baseline if progress else results.baseline
    if drop and rebench is None:
        raise ValueError("drop_regressions needs a rebench callable to measure the head again")
    outcome = drop_regressions(workspace, results, rebench, progress, issue) if drop else None
    reverted = reverted_commits(workspace.repo, f"{base}..HEAD")
    changed = bool(outcome and outcome.reverted)
    for row in progress.rows if progress else []:
        if row.commit in reverted and row.status != "reverted":
            row.status, changed = "reverted", True
            row.note = f"reverted in {measures.short(reverted[row.commit])}" + (
                f"; {row.note}" if row.note else ""
            )
    verdict = review(
        workspace.repo,
        base,
        workspace.head,
        plan=plan,
        progress=progress,
        results=results,
        final_results=outcome.results if outcome else None,
        tier=progress.tier if progress else None,
    )
    title = _title(plan, progress)
    results_body = render_results(
        results,
        plan=plan,
        progress=progress,
        drop=outcome,
        reverted=reverted,
        commit_url=commit_url,
        title=title,
        results_path=results_path,
    )
    verdict_body = render_verdict(verdict, plan=plan, progress=progress, commit_url=commit_url, title=title)
    note_body = render_note(
        verdict,
        plan=plan,
        progress=progress,
        results=results,
        drop=outcome,
        reverted=reverted,
        commit_url=commit_url,
        title=title,
    )
    tracker.upsert_comment(issue, RESULTS, results_body)
    tracker.upsert_comment(issue, VERDICT, verdict_body)
    tracker.upsert_comment(issue, NOTE, note_body)
    if progress is not None and changed:
        progress.head = workspace.head
        tracker.upsert_comment(issue, PROGRESS, progress.render(commit_url))
    return Reports(verdict, results_body, verdict_body, note_body, outcome)
