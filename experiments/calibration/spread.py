"""Summarize experiments/calibration/process_spread.sh output: one row per run (tokens/s, median step, forward
median, and the GPU's SM clock, power and utilisation while it ran), then each label's median and run-to-run CV.

Usage: python -m experiments.calibration.spread OUT
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path

from benchmarks.stats import cv

BUSY_PERCENT = 50  # telemetry samples with this GPU utilisation or more count as the run's steps


def telemetry(folder: Path) -> list[dict[str, float | str]]:
    """The nvidia-smi samples: time, SM clock (MHz), power (W), utilisation (%) and throttle reasons."""
    path = folder / "smi.csv"
    if not path.exists():
        return []
    samples = []
    for row in csv.reader(path.read_text().splitlines()):
        fields = [field.strip() for field in row]
        samples.append(
            {
                "time": datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").timestamp(),
                "sm_mhz": float(fields[1].split()[0]),
                "power_w": float(fields[3].split()[0]),
                "throttle": fields[5],
                "util": float(fields[6].split()[0]),
            }
        )
    return samples


def main(out: str) -> None:
    folder = Path(out)
    samples = telemetry(folder)
    by_label: dict[str, list[float]] = {}
    for path in sorted(folder.glob("*-*.json"), key=lambda p: p.stat().st_mtime):
        metrics = json.loads(path.read_text())
        if metrics.get("status") != "ok":
            print(f"{path.stem}: {metrics.get('status')}")
            continue
        by_label.setdefault(path.stem.rsplit("-", 1)[0], []).append(metrics["tokens_per_s"])
        row = (
            f"{path.stem:<14}{metrics['tokens_per_s']:>8.0f} tokens/s  step {metrics['step_time_s']['median']:.3f} s"
            f"  forward {metrics['phases']['forward']['median_ms']:.1f} ms"
        )
        edges = [folder / f"{path.stem}.{edge}" for edge in ("start", "end")]
        busy = []
        if all(edge.exists() for edge in edges):
            start, end = (float(edge.read_text()) for edge in edges)
            busy = [s for s in samples if start <= s["time"] <= end and s["util"] >= BUSY_PERCENT]
        if busy:
            row += (
                f"  SM {statistics.median(s['sm_mhz'] for s in busy):.0f} MHz"
                f"  {statistics.median(s['power_w'] for s in busy):.0f} W"
                f"  util {statistics.median(s['util'] for s in busy):.0f}%"
                f"  throttle {','.join(sorted({str(s['throttle']) for s in busy}))}"
            )
        print(row)
    for label, speeds in by_label.items():
        spread = cv(speeds)
        print(
            f"{label}: {len(speeds)} runs, median {statistics.median(speeds):.0f} tokens/s, "
            f"CV {'–' if spread is None else f'{spread:.1%}'}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
