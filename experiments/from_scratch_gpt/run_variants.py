"""Train each exported variant of examples/gpt_loop (``variants.sh``) at the GPU size, one after the other,
same seed and data; report tokens/s after warm-up and the loss at every logged step against the baseline.

python3 experiments/from_scratch_gpt/run_variants.py DIR --steps 200 --out $OUT/from_scratch_gpt.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

LINE = re.compile(r"^step (\d+): loss ([\d.]+), ([\d.]+) ms/step$", re.MULTILINE)
TOKENS_PER_STEP = 12 * 1024  # the "gpu" size: batch 12, block 1024


def train(directory: Path, steps: int, interval: int, seed: int) -> dict:
    """One run: ``{step: (loss, ms/step over the interval ending there)}``."""
    command = [sys.executable, "train.py", "--size", "gpu", "--max-steps", str(steps)]
    command += ["--log-interval", str(interval), "--seed", str(seed)]
    result = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"{directory.name} failed:\n{result.stderr[-3000:]}")
    return {int(s): (float(loss), float(ms)) for s, loss, ms in LINE.findall(result.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("variants", type=Path)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--interval", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=50, help="steps left out of the tokens/s median")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = {}
    for directory in sorted(p for p in args.variants.iterdir() if p.is_dir()):
        logged = train(directory, args.steps, args.interval, args.seed)
        steady = [ms for step, (_, ms) in logged.items() if step > args.warmup]
        runs[directory.name] = {
            "tokens_per_s": TOKENS_PER_STEP * 1000 / statistics.median(steady),
            "ms_per_step_min_max": [min(steady), max(steady)],
            "loss": {step: loss for step, (loss, _) in logged.items()},
        }
        late = [loss for step, (loss, _) in logged.items() if step > args.steps // 2]
        runs[directory.name]["mean_loss_second_half"] = statistics.mean(late)
        print(directory.name, f"{runs[directory.name]['tokens_per_s']:.0f} tokens/s", flush=True)
    names = list(runs)
    base = runs[names[0]]
    print(
        "\n| variant | tokens/s | × baseline | × previous | mean loss, 2nd half | max abs loss diff vs baseline |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for previous, name in zip([names[0], *names], names, strict=False):
        run = runs[name]
        diff = max(abs(run["loss"][s] - base["loss"][s]) for s in base["loss"])
        print(
            f"| {name} | {run['tokens_per_s']:.0f} | {run['tokens_per_s'] / base['tokens_per_s']:.2f} | "
            f"{run['tokens_per_s'] / runs[previous]['tokens_per_s']:.2f} | {run['mean_loss_second_half']:.4f} | {diff:.4f} |"
        )
    if args.out:
        args.out.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
