"""Summarize experiments/host_overhead/run.sh output: per lever, median tokens/s (min–max), vs ``none``,
loss at the last step, peak memory, and the profile's busy fraction, bound and launches per step."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(out: str, *levers: str) -> None:
    folder = Path(out)
    rows, base = [], None
    for lever in levers:
        name = lever.replace(",", "+")
        records = [json.loads(p.read_text()) for p in sorted(folder.glob(f"{name}-*.json"))]
        ok = [r for r in records if r.get("status") == "ok" and r.get("tokens_per_s")]
        speeds = [r["tokens_per_s"] for r in ok]
        median = statistics.median(speeds) if speeds else None
        base = median if lever == "none" else base
        losses = [r["loss"][-1]["loss"] for r in ok if r.get("loss")]
        profile_path = folder / f"profile-{name}" / "profile.json"
        profile = json.loads(profile_path.read_text()) if profile_path.exists() else {}
        rows.append(
            {
                "lever": name,
                "runs": f"{len(ok)}/{len(records)}",
                "tokens_per_s": median,
                "spread": [min(speeds), max(speeds)] if speeds else None,
                "vs_none": median / base - 1 if median and base else None,
                "last_loss": statistics.median(losses) if losses else None,
                "peak_gb": max((r.get("peak_memory_bytes") or 0) for r in ok) / 1e9 if ok else None,
                "busy": profile.get("device_busy_fraction"),
                "bound": profile.get("bound"),
                "launches_per_step": profile.get("launches_per_step"),
            }
        )
    (folder / "summary.json").write_text(json.dumps(rows, indent=1))
    print(
        f"{'lever':<34} {'runs':>5} {'tok/s':>9} {'min-max':>17} {'vs none':>8} {'loss':>7} {'GB':>6} {'busy':>5} {'bound':>7} {'launch':>7}"
    )
    for r in rows:
        spread = f"{r['spread'][0]:,.0f}-{r['spread'][1]:,.0f}" if r["spread"] else "-"
        print(
            f"{r['lever']:<34} {r['runs']:>5} {r['tokens_per_s'] or 0:>9,.0f} {spread:>17} "
            f"{(r['vs_none'] or 0):>+8.1%} {r['last_loss'] or 0:>7.4f} {r['peak_gb'] or 0:>6.1f} "
            f"{(r['busy'] or 0):>5.0%} {r['bound'] or '-':>7} {r['launches_per_step'] or 0:>7.0f}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
