"""Summary of ``experiments/ddp_scaling/ddp_on_gpu.sh`` output folders: 1-GPU against 2-GPU (DDP) SFT
throughput per commit.

Each folder is one call of the script: ``roles.json`` maps the full sha of each commit of that call to its role
(``baseline``, ``tier-1 head``, ``ddp_static_graph``; shas differ between calls, roles do not) and
``runs.tar.gz`` holds ``runs/<sha12>-<workload>-r<repeat>/metrics.json`` (plus ``log.txt`` and, where the run
logged it, ``ddp_check.txt``) for every run. Runs of all folders are grouped by (workload, role). Warm-up runs
(negative repeat) are dropped (the not-ok ones are named); measured runs that are not ``ok`` (the status in the results JSON of the folder when it
lists the run, else the one in ``metrics.json``; no ``metrics.json`` at all: ``no metrics``) are listed as
failures and left out of every statistic.

Per group: n, the median of ``tokens_per_s`` with its min–max, the median of ``step_time_s.median``, the
median of ``allreduce_wait.median_ms`` (rank 0's un-hidden DDP all-reduce wait, absent on one GPU), the
largest ``peak_memory_bytes`` (GB = 1e9 bytes) and the median ``mfu``. Then Welch's t-test on log tokens/s
(:func:`benchmarks.stats.compare`, higher is better) for the tier-1 head against the baseline on every workload
and for ddp_static_graph against the tier-1 head on ``sft_ddp``; and the scaling efficiency per role, median
2-GPU tokens/s / (2 × median 1-GPU tokens/s), where ddp_static_graph's 1-GPU figure is the tier-1 head's (the
transform does nothing on one GPU). Last, a markdown table for ``benchmarks/RESULTS.md``.

Usage: ``python3 -m experiments.ddp_scaling.ddp_summary DIR [DIR ...] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.stats import compare, median
from benchmarks.status import RunStatus

ONE_GPU, TWO_GPUS = "sft", "sft_ddp"
BASELINE, TIER1, DDP = "baseline", "tier-1 head", "ddp_static_graph"
ROLES = (BASELINE, TIER1, DDP)
WORKLOADS = (ONE_GPU, TWO_GPUS)
# (workload, candidate role, reference role) of each significance test
COMPARISONS = ((ONE_GPU, TIER1, BASELINE), (TWO_GPUS, TIER1, BASELINE), (TWO_GPUS, DDP, TIER1))
ARCHIVE = "runs.tar.gz"
KEY = re.compile(r"(?P<sha12>[0-9a-f]{12})-(?P<workload>.+)-r(?P<repeat>-?\d+)")


@dataclass
class Run:
    """One run from an archive: where it came from, its role and its metrics (None when it wrote none)."""

    folder: str
    key: str
    sha: str
    role: str
    workload: str
    repeat: int
    status: str
    metrics: dict[str, Any] | None
    ddp_check: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Finished and measured."""
        return self.status == RunStatus.OK and self.metrics is not None


def load_runs(folder: Path | str) -> list[Run]:
    """Every run in ``folder/runs.tar.gz``, with its role from ``folder/roles.json`` (warm-ups included)."""
    folder = Path(folder)
    roles: dict[str, str] = json.loads((folder / "roles.json").read_text(encoding="utf-8"))
    statuses = _runner_statuses(folder)
    archive = folder / ARCHIVE
    if not archive.exists():
        return []
    members: dict[str, dict[str, bytes]] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if not member.isfile() or len(parts) < 2 or not KEY.fullmatch(parts[-2]):
                continue
            handle = tar.extractfile(member)
            if handle is not None:
                members.setdefault(parts[-2], {})[parts[-1]] = handle.read()
    runs = []
    for key, files in sorted(members.items()):
        match = KEY.fullmatch(key)
        assert match is not None
        sha12, workload, repeat = match["sha12"], match["workload"], int(match["repeat"])
        sha = next((full for full in roles if full.startswith(sha12)), sha12)
        metrics = _json_or_none(files.get("metrics.json"))
        status = statuses.get((sha, workload, repeat))
        if status is None:
            status = str(metrics.get("status")) if metrics is not None else "no metrics"
        check = files.get("ddp_check.txt", b"").decode("utf-8", errors="replace")
        runs.append(
            Run(
                folder=str(folder),
                key=key,
                sha=sha,
                role=roles.get(sha, f"unknown {sha12}"),
                workload=workload,
                repeat=repeat,
                status=status,
                metrics=metrics,
                ddp_check=[line.strip() for line in check.splitlines() if line.strip()],
            )
        )
    return runs


def _runner_statuses(folder: Path) -> dict[tuple[str, str, int], str]:
    """The runner's status of each run listed in the folder's results JSONs (a bench that finished)."""
    statuses = {}
    for path in sorted(folder.glob("*.json")):
        data = _json_or_none(path.read_bytes())
        if data is None or not str(data.get("schema", "")).startswith("perfbot.results/"):
            continue
        for run in data.get("runs") or []:
            statuses[(run["commit"], run["workload"], int(run["repeat"]))] = run["status"]
    return statuses


def _json_or_none(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _field(metrics: dict[str, Any], *path: str) -> float | None:
    value: Any = metrics
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _median_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def group_stats(runs: Sequence[Run]) -> dict[str, Any]:
    """Statistics of one (workload, role) group's ok runs (see the module docstring)."""
    metrics = [run.metrics for run in runs if run.ok and run.metrics is not None]
    tokens = [t for t in (_field(m, "tokens_per_s") for m in metrics) if t is not None]
    peaks = [p for p in (_field(m, "peak_memory_bytes") for m in metrics) if p is not None]
    mfu = _median_of([_field(m, "mfu") for m in metrics])
    return {
        "n": len(tokens),
        "shas": sorted({run.sha[:7] for run in runs}),
        "tokens_per_s": tokens,
        "median_tokens_per_s": _median_of(tokens),
        "min_tokens_per_s": min(tokens) if tokens else None,
        "max_tokens_per_s": max(tokens) if tokens else None,
        "median_step_s": _median_of([_field(m, "step_time_s", "median") for m in metrics]),
        "median_allreduce_wait_ms": _median_of([_field(m, "allreduce_wait", "median_ms") for m in metrics]),
        "max_peak_memory_gb": max(peaks) / 1e9 if peaks else None,
        "median_mfu": mfu,
        "world_sizes": sorted({int(m.get("world_size") or 1) for m in metrics}),
        "ddp_check": sorted({line for run in runs if run.ok for line in run.ddp_check}),
    }


def summarize(runs: Sequence[Run]) -> dict[str, Any]:
    """Groups, failures, Welch tests and scaling efficiencies of runs from any number of folders."""
    measured = [run for run in runs if run.repeat >= 0]
    by_group: dict[tuple[str, str], list[Run]] = {}
    for run in measured:
        by_group.setdefault((run.workload, run.role), []).append(run)
    order = {name: index for index, name in enumerate(WORKLOADS)}
    role_order = {name: index for index, name in enumerate(ROLES)}
    keys = sorted(by_group, key=lambda k: (order.get(k[0], len(order)), k[0], role_order.get(k[1], 9), k[1]))
    groups = [{"workload": w, "role": r, **group_stats(by_group[(w, r)])} for w, r in keys]
    stats = {(g["workload"], g["role"]): g for g in groups}
    comparisons = []
    for workload, candidate, reference in COMPARISONS:
        if (workload, candidate) in stats and (workload, reference) in stats:
            effect = compare(
                dict(enumerate(stats[(workload, candidate)]["tokens_per_s"])),
                dict(enumerate(stats[(workload, reference)]["tokens_per_s"])),
                higher_is_better=True,
                paired=False,
            )
            comparisons.append(
                {"workload": workload, "candidate": candidate, "reference": reference, **effect}
            )
    efficiency = {}
    for role in ROLES:
        one = stats.get((ONE_GPU, TIER1 if role == DDP else role), {}).get("median_tokens_per_s")
        two = stats.get((TWO_GPUS, role), {}).get("median_tokens_per_s")
        if two is not None or one is not None:
            efficiency[role] = {
                "one_gpu_tokens_per_s": one,
                "two_gpu_tokens_per_s": two,
                "efficiency": two / (2 * one) if one and two is not None else None,
            }
    failures = [_failure(run) for run in measured if not run.ok]
    return {
        "groups": groups,
        "failures": failures,
        "warmup_runs_dropped": len(runs) - len(measured),
        "warmup_failures": [_failure(run) for run in runs if run.repeat < 0 and not run.ok],
        "comparisons": comparisons,
        "efficiency": efficiency,
    }


def _failure(run: Run) -> dict[str, Any]:
    return {
        "folder": run.folder,
        "key": run.key,
        "role": run.role,
        "status": run.status,
        "error": (run.metrics or {}).get("error"),
    }


def dpo_checks(folders: Sequence[Path | str]) -> list[dict[str, str]]:
    """The last line of each folder's ``dpo_ddp.log`` (the script writes the DPO check's exit status there)."""
    checks = []
    for folder in folders:
        log = Path(folder) / "dpo_ddp.log"
        if log.exists():
            lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            checks.append({"folder": str(folder), "result": lines[-1] if lines else "(empty log)"})
    return checks


def _num(value: float | None, digits: int = 0, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}" + (f" {unit}" if unit else "")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.2f}%"


def _change(comparison: dict[str, Any] | None) -> str:
    if comparison is None or comparison["ratio"] is None:
        return ""
    text = f"{(comparison['ratio'] - 1) * 100:+.1f}% vs {comparison['reference']}"
    if comparison["p_value"] is not None:
        text += f", p={comparison['p_value']:.2g}"
    return f" ({text})"


def markdown_table(summary: dict[str, Any]) -> str:
    """The RESULTS.md table: one row per role, 1-GPU and 2-GPU medians, efficiency and the 2-GPU details."""
    stats = {(g["workload"], g["role"]): g for g in summary["groups"]}
    tests = {(c["workload"], c["candidate"]): c for c in summary["comparisons"]}
    lines = [
        "| commit | 1 GPU tokens/s (n, min–max) | 2 GPUs tokens/s (n, min–max) | efficiency | median step "
        "(2 GPUs) | un-hidden all-reduce wait, rank 0 | peak memory (2 GPUs) | MFU (2 GPUs) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for role in ROLES:
        one, two = stats.get((ONE_GPU, role)), stats.get((TWO_GPUS, role))
        if one is None and two is None:
            continue
        shas = sorted({sha for g in (one, two) if g for sha in g["shas"]})
        name = ("+ " if role == DDP else "") + role + " " + " / ".join(f"`{sha}`" for sha in shas)

        def cell(group: dict[str, Any] | None, workload: str, role: str = role) -> str:
            if group is None or group["n"] == 0:
                return "(no-op on 1 GPU)" if role == DDP and workload == ONE_GPU else "n/a"
            spread = f"{_num(group['min_tokens_per_s'])}–{_num(group['max_tokens_per_s'])}"
            return (
                f"{_num(group['median_tokens_per_s'])} (n={group['n']}, {spread})"
                f"{_change(tests.get((workload, role)))}"
            )

        efficiency = (summary["efficiency"].get(role) or {}).get("efficiency")
        wait = two["median_allreduce_wait_ms"] if two else None
        peak = two["max_peak_memory_gb"] if two else None
        lines.append(
            f"| {name} | {cell(one, ONE_GPU)} | {cell(two, TWO_GPUS)} | {_num(efficiency, 2)} | "
            f"{_num(two['median_step_s'] if two else None, 3, 's')} | {_num(wait, 1, 'ms')} | {_num(peak, 2, 'GB')} | "
            f"{_pct(two['median_mfu'] if two else None)} |"
        )
    return "\n".join(lines)


def render(summary: dict[str, Any]) -> str:
    """The summary as text: groups, failures, tests, efficiencies, DPO checks and the markdown table."""
    lines = [f"warm-up runs dropped: {summary['warmup_runs_dropped']}"]
    if summary["warmup_failures"]:
        lines[0] += (
            " (not ok: " + ", ".join(f"{f['key']} {f['status']}" for f in summary["warmup_failures"]) + ")"
        )
    for g in summary["groups"]:
        lines.append(
            f"{g['workload']:<8} {g['role']:<17} n={g['n']} tokens/s median {_num(g['median_tokens_per_s'])} "
            f"[{_num(g['min_tokens_per_s'])}–{_num(g['max_tokens_per_s'])}] step {_num(g['median_step_s'], 4, 's')} "
            f"all-reduce wait {_num(g['median_allreduce_wait_ms'], 2, 'ms')} peak {_num(g['max_peak_memory_gb'], 2, 'GB')} "
            f"MFU {_pct(g['median_mfu'])} world size {','.join(map(str, g['world_sizes'])) or 'n/a'} "
            f"({', '.join(g['shas'])})"
        )
        lines.extend(f"    {line}" for line in g["ddp_check"])
    if summary["failures"]:
        lines.append("failed runs (left out):")
        for f in summary["failures"]:
            error = f": {f['error'][:200]}" if f["error"] else ""
            lines.append(f"  {f['key']} ({f['role']}, {f['folder']}): {f['status']}{error}")
    else:
        lines.append("failed runs: none")
    for c in summary["comparisons"]:
        ratio = "n/a" if c["ratio"] is None else f"{(c['ratio'] - 1) * 100:+.1f}%"
        ci = (
            ""
            if c["ci"] is None
            else f" 95% CI [{(c['ci'][0] - 1) * 100:+.1f}%, {(c['ci'][1] - 1) * 100:+.1f}%]"
        )
        p = "" if c["p_value"] is None else f" p={c['p_value']:.3g}"
        lines.append(
            f"Welch {c['workload']}: {c['candidate']} vs {c['reference']}: {ratio}{ci}{p} {c['verdict']}"
        )
    for role, e in summary["efficiency"].items():
        source = " (1-GPU figure: tier-1 head)" if role == DDP else ""
        if e["efficiency"] is None:
            missing = "1-GPU" if e["one_gpu_tokens_per_s"] is None else "2-GPU"
            lines.append(f"scaling efficiency {role}: n/a (no {missing} median){source}")
            continue
        lines.append(
            f"scaling efficiency {role}: {_num(e['two_gpu_tokens_per_s'])} / (2 x {_num(e['one_gpu_tokens_per_s'])})"
            f" = {_num(e['efficiency'], 3)}{source}"
        )
    for check in summary.get("dpo_checks", []):
        lines.append(f"DPO under DDP ({check['folder']}): {check['result']}")
    if summary["groups"]:
        lines.extend(["", summary["markdown"]])
    else:
        lines.append("no measured runs")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: summarise the folders, print text or (``--json``) JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "folders", nargs="+", type=Path, help="ddp_on_gpu.sh output folders ($OUT of each call)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    runs = [run for folder in args.folders for run in load_runs(folder)]
    summary = summarize(runs)
    summary["dpo_checks"] = dpo_checks(args.folders)
    summary["markdown"] = markdown_table(summary)
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
