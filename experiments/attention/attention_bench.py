"""Tokens/s of the example's SFT or DPO workload at its baseline and at its tier-1 head with each attention.

On a fresh git copy of ``examples/trainer_repo``: ``bot apply --tier 1``, one check of what the picker chooses
unforced (its log line), then per workload interleaved rounds of the baseline and of the head with
``PERFBOT_ATTENTION`` forcing each implementation, under ``python -m benchmarks.launch`` as ``bot bench``
runs them. The first ``--warmup-rounds`` rounds are discarded. A run that would end past ``--budget-s`` is not
started, so the study ends inside one device call; the table says how many repeats each row has.

Writes to ``--out`` (default ``$OUT``): ``attention.json`` (settings, the picker's choice, every run and the
summary), ``summary.txt`` (the table) and ``logs.tar.gz`` (each run's log and metrics JSON).

    python3 -m experiments.attention.attention_bench --workloads sft [--implementations sdpa,flex_attention]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

PERFBOT = Path(__file__).resolve().parents[2]
EXAMPLE_IGNORE = ("__pycache__", "outputs", ".bot", ".cache")
SCRIPTS = {"sft": "train_sft.py", "dpo": "train_dpo.py"}
RECOMPILE = re.compile(r"Recompiling function (\w+)")
PICKER_CHECK = (
    "import logging, sys; logging.basicConfig(level=logging.INFO, format='%(message)s')\n"
    "from model_loading import load_model\n"
    "print('picked:', load_model(sys.argv[1]).config._attn_implementation)"
)


def main(argv: list[str] | None = None) -> int:
    """Set up the example, measure every workload × variant in rounds, write and print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="sft", help="comma-separated: sft, dpo (about 6 minutes each)")
    parser.add_argument("--implementations", default="sdpa,flex_attention", help="forced at the tier-1 head")
    parser.add_argument("--size", default="gpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup-rounds", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=510.0, help="start no run that would end later")
    parser.add_argument("--out", default=os.environ.get("OUT") or "attention-out")
    args = parser.parse_args(argv)
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="attention-"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PERFBOT), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PERFBOT_EXAMPLE_CACHE": os.environ.get("PERFBOT_EXAMPLE_CACHE", "/tmp/perfbot-example-cache"),
    }
    env.pop("PERFBOT_ATTENTION", None)
    head, baseline = setup(work, env, args.size)
    picker = check_picker(head, env, args.size, work / "logs")
    print(f"picker, unforced: {picker['picked']} ({picker['log']})", flush=True)
    variants = [("baseline", baseline, None)] + [
        (name, head, name) for name in args.implementations.split(",") if name
    ]
    runs: list[dict] = []
    for workload in args.workloads.split(","):
        longest = 0.0
        for round_index in range(args.warmup_rounds + args.repeats):
            for variant, root, forced in variants:
                elapsed = time.monotonic() - started
                if elapsed + max(longest, 60.0) > args.budget_s:
                    print(f"{workload} {variant} round {round_index}: skipped, over --budget-s", flush=True)
                    continue
                run = measure(workload, variant, root, forced, round_index, args, env, work / "logs")
                run["warmup"] = round_index < args.warmup_rounds
                longest = max(longest, run["duration_s"])
                runs.append(run)
                print(
                    f"{elapsed:6.0f}s {workload} {variant:<16} round {round_index}: {run['status']} "
                    f"{_number(run['tokens_per_s'])} tokens/s, {run['attn_implementation']}, "
                    f"recompiles {run['recompiles']}, {run['duration_s']:.0f}s",
                    flush=True,
                )
    summary = summarize(runs, [v[0] for v in variants])
    table = format_table(summary)
    print(table)
    environment = next((r["env"] for r in runs if r.get("env")), {})
    settings = {key: value for key, value in vars(args).items() if key != "out"}
    result = {"settings": settings, "env": environment, "picker": picker, "summary": summary, "runs": runs}
    (out / "attention.json").write_text(json.dumps(result, indent=1))
    (out / "summary.txt").write_text(table + "\n")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as archive:
        archive.add(work / "logs", arcname="logs")
    return 0 if all(r["status"] == "ok" for r in runs) else 1


def setup(work: Path, env: dict[str, str], size: str) -> tuple[Path, Path]:
    """A git copy of the example with its tier-1 branch checked out, a worktree of its baseline, the model built."""
    head = work / "example"
    shutil.copytree(
        PERFBOT / "examples" / "trainer_repo", head, ignore=shutil.ignore_patterns(*EXAMPLE_IGNORE)
    )
    identity = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    for command in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", *identity, "commit", "-qm", "example trainer"],
    ):
        subprocess.run(command, cwd=head, env=env, check=True)
    # `bot apply` exits 1 when a plan item is left to a human; the branch's commits are what counts.
    subprocess.run(
        [sys.executable, "-m", "bot.cli", "apply", "--tier", "1"],
        cwd=head,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    commits = subprocess.run(
        ["git", "log", "--format=%h %s", "main..HEAD"], cwd=head, text=True, capture_output=True, check=True
    ).stdout
    if not (head / "_perfbot_attention.py").exists():
        raise SystemExit(f"bot apply --tier 1 did not vendor the attention picker; its commits:\n{commits}")
    print(commits, flush=True)
    for command in (
        ["git", "worktree", "add", "-q", str(work / "baseline"), "main"],
        [sys.executable, "-c", f"from model_loading import ensure_model; ensure_model({size!r})"],
    ):
        subprocess.run(command, cwd=head, env=env, check=True)
    return head, work / "baseline"


def check_picker(head: Path, env: dict[str, str], size: str, logs: Path) -> dict[str, str]:
    """What the vendored picker chooses on this machine, unforced, and the line it logs."""
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", PICKER_CHECK, size],
        cwd=head,
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    (logs / "picker.log").write_text(done.stdout + done.stderr)
    lines = (done.stdout + done.stderr).splitlines()
    return {
        "picked": next((line.split(": ", 1)[1] for line in lines if line.startswith("picked: ")), "failed"),
        "log": next((line for line in lines if line.startswith("attention: ")), "no decision logged"),
        "duration_s": round(time.monotonic() - started, 1),
    }


def measure(
    workload: str,
    variant: str,
    root: Path,
    forced: str | None,
    round_index: int,
    args: argparse.Namespace,
    env: dict[str, str],
    logs: Path,
) -> dict:
    """One run under ``benchmarks.launch``: its metrics, condensed, with the recompilations its log reports."""
    name = f"{workload}-{variant}-{round_index}"
    metrics_path = logs / f"{name}.json"
    command = [
        sys.executable,
        "-m",
        "benchmarks.launch",
        "--out",
        str(metrics_path),
        "--warmup-steps",
        str(args.warmup_steps),
        "--",
        sys.executable,
        SCRIPTS[workload],
        "--size",
        args.size,
        "--max-steps",
        str(args.steps),
        "--seed",
        "42",
    ]
    run_env = {**env, "TORCH_LOGS": "recompiles"}
    if forced:
        run_env["PERFBOT_ATTENTION"] = forced
    started = time.monotonic()
    with open(logs / f"{name}.log", "w") as log:
        try:
            subprocess.run(command, cwd=root, env=run_env, stdout=log, stderr=subprocess.STDOUT, timeout=300)
        except subprocess.TimeoutExpired:
            pass
    duration = time.monotonic() - started
    record = json.loads(metrics_path.read_text()) if metrics_path.exists() else {"status": "timeout"}
    recompiled = RECOMPILE.findall((logs / f"{name}.log").read_text(errors="replace"))
    return {
        "workload": workload,
        "variant": variant,
        "round": round_index,
        "status": record.get("status"),
        "error": record.get("error"),
        "duration_s": round(duration, 1),
        "tokens_per_s": record.get("tokens_per_s"),
        "peak_memory_bytes": record.get("peak_memory_bytes"),
        "attn_implementation": record.get("attn_implementation"),
        "recompiles": {function: recompiled.count(function) for function in sorted(set(recompiled))},
        "loss": [entry["loss"] for entry in record.get("loss", [])],
        "env": record.get("env"),
    }


def summarize(runs: list[dict], variants: list[str]) -> list[dict]:
    """Per workload and variant over the measured rounds: median tokens/s and range, the change against the
    baseline and against the first head variant, peak memory, and the largest loss gap to the first head variant
    at equal steps (same seed, data and packing)."""
    rows = []
    for workload in dict.fromkeys(r["workload"] for r in runs):
        measured = {
            v: [r for r in runs if r["workload"] == workload and r["variant"] == v and not r["warmup"]]
            for v in variants
        }
        ok = {v: [r for r in rs if r["status"] == "ok" and r["tokens_per_s"]] for v, rs in measured.items()}
        medians = {
            v: statistics.median(r["tokens_per_s"] for r in rs) if rs else None for v, rs in ok.items()
        }
        reference = variants[1] if len(variants) > 1 else variants[0]
        for variant in variants:
            speeds = [r["tokens_per_s"] for r in ok[variant]]
            peak = max((r["peak_memory_bytes"] or 0 for r in ok[variant]), default=0)
            head = variant != variants[0]
            rows.append(
                {
                    "workload": workload,
                    "variant": variant,
                    "runs": f"{len(ok[variant])}/{len(measured[variant])}",
                    "attn_implementation": sorted({str(r["attn_implementation"]) for r in ok[variant]}),
                    "tokens_per_s": medians[variant],
                    "range": [min(speeds), max(speeds)] if speeds else None,
                    "vs_baseline": _change(medians[variant], medians[variants[0]]),
                    f"vs_{reference}": _change(medians[variant], medians[reference]),
                    "peak_memory_gb": peak / 1e9 if peak else None,
                    f"loss_gap_vs_{reference}": _loss_gap(ok[variant], ok[reference]) if head else None,
                    "recompiles": ok[variant][0]["recompiles"] if ok[variant] else None,
                }
            )
    return rows


def _change(value: float | None, reference: float | None) -> float | None:
    return value / reference - 1 if value and reference else None


def _loss_gap(runs: list[dict], reference: list[dict]) -> float | None:
    """The largest relative loss difference at equal steps between the first run of each (None if unknown)."""
    if not runs or not reference or len(runs[0]["loss"]) != len(reference[0]["loss"]):
        return None
    pairs = [(a, b) for a, b in zip(runs[0]["loss"], reference[0]["loss"], strict=True) if a and b]
    return max((abs(a - b) / abs(b) for a, b in pairs), default=None)


def _number(value: float | None, spec: str = ",.0f") -> str:
    return format(value, spec) if value is not None else "n/a"


def _percent(value: float | None, spec: str = "+.1f") -> str:
    return f"{format(value * 100, spec)}%" if value is not None else "–"


def format_table(rows: list[dict]) -> str:
    """The summary as a Markdown table."""
    if not rows:
        return "no runs"
    reference = next((key[3:] for key in rows[0] if key.startswith("vs_") and key != "vs_baseline"), "")
    lines = [
        f"| workload | variant | runs | attention | tokens/s median [min–max] | vs baseline | vs {reference} "
        f"| peak memory | loss gap vs {reference} | recompiles (first run) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        spread = f" [{_number(row['range'][0])}–{_number(row['range'][1])}]" if row["range"] else ""
        recompiles = ", ".join(f"{k} {v}" for k, v in (row["recompiles"] or {}).items()) or "none"
        lines.append(
            f"| {row['workload']} | {row['variant']} | {row['runs']} | {', '.join(row['attn_implementation'])} "
            f"| {_number(row['tokens_per_s'])}{spread} | {_percent(row['vs_baseline'])} "
            f"| {_percent(row[f'vs_{reference}'])} | {_number(row['peak_memory_gb'], '.2f')} GB "
            f"| {_percent(row[f'loss_gap_vs_{reference}'], '.2f')} | {recompiles} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
